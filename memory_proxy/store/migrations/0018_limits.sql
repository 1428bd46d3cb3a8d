-- 0018_limits: fair use, shared by every replica (memory_proxy/limits/, docs/LIMITS.md). Limits per API key (by its
-- fingerprint, never the key), per user and per model: requests and tokens per minute, requests at once, tokens
-- a day. The usage they are checked against lives here, so that three replicas enforce one limit, exactly: a
-- request is admitted by one call of limits_admit, which locks each of its subjects for its transaction, checks
-- every limit, and only then counts the request (all subjects or none).

-- What an operator set for one subject ('*': every subject of that kind without a row of its own). NULL: no limit.
CREATE TABLE limits (
    kind text NOT NULL CHECK (kind IN ('key', 'user', 'model')),
    subject text NOT NULL CHECK (length(subject) BETWEEN 1 AND 255),
    rpm integer CHECK (rpm > 0),
    tpm bigint CHECK (tpm > 0),
    concurrent integer CHECK (concurrent > 0),
    daily_tokens bigint CHECK (daily_tokens > 0),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, subject)
);

-- Requests and tokens per subject and 10-second step ('m', for the sliding minute; a step older than 70 s is
-- deleted as the next is written) or UTC day ('d'), `start` the window's first instant.
CREATE TABLE limit_usage (
    kind text NOT NULL,
    subject text NOT NULL,
    span "char" NOT NULL CHECK (span IN ('m', 'd')),
    start timestamptz NOT NULL,
    requests integer NOT NULL DEFAULT 0,
    tokens bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, subject, span, start)
);

-- Requests in flight, for the limits on requests at once; each until its end, or its lease's expiry when the
-- replica that held it died.
CREATE TABLE limit_leases (
    kind text NOT NULL,
    subject text NOT NULL,
    request uuid NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (kind, subject, request)
);

-- The 10-second step `p_now` falls in.
CREATE FUNCTION limits_step(p_now timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE
AS $$ SELECT to_timestamp(floor(extract(epoch FROM p_now) / 10) * 10) $$;

-- Requests (or tokens) of the last minute: every step any second of the 60 s before `p_now` falls in, each whole
-- until its last second has left them (so a limit is never passed in any 60 s; a step counts up to 10 s longer
-- than a minute). A share of the step the minute cuts (the usual sliding-window estimate) would let a burst in
-- that step count again at a discount: with steps of a minute, 132 admitted of 120 at a minute's turn;
-- of 10 s, 422 of 300 in 57 s (benchmarks.cluster fair_use).
CREATE FUNCTION limits_rate(p_kind text, p_subject text, p_now timestamptz, p_tokens boolean) RETURNS float8
    LANGUAGE sql STABLE
AS $$
    SELECT coalesce(sum(CASE WHEN p_tokens THEN tokens ELSE requests END), 0)::float8
      FROM limit_usage
     WHERE kind = p_kind AND subject = p_subject AND span = 'm' AND start > p_now - interval '70 seconds'
$$;

-- Seconds until the oldest step counted in the last minute has left it.
CREATE FUNCTION limits_wait(p_kind text, p_subject text, p_now timestamptz) RETURNS float8
    LANGUAGE sql STABLE
AS $$
    SELECT greatest(1, extract(epoch FROM min(start) + interval '70 seconds' - p_now))::float8
      FROM limit_usage
     WHERE kind = p_kind AND subject = p_subject AND span = 'm' AND start > p_now - interval '70 seconds'
$$;

-- Admit one request of these subjects under these limits (arrays of one length, a NULL limit none): the first limit
-- it would pass as (admitted false, kind, subject, which limit, seconds to wait); else counted, its leases taken
-- (where a limit on requests at once applies), and (true, …).
CREATE FUNCTION limits_admit(p_kinds text[], p_subjects text[], p_rpm integer[], p_tpm bigint[],
                             p_concurrent integer[], p_daily bigint[], p_request uuid, p_lease_s integer)
    RETURNS TABLE (admitted boolean, kind text, subject text, which text, retry_after float8)
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    step_ timestamptz := limits_step(now_);
    day_ timestamptz := date_trunc('day', now_ AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    rate float8;
    spent bigint;
    held integer;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
        -- one subject at a time across every replica, until this transaction ends
        PERFORM pg_advisory_xact_lock(hashtextextended('limits:' || p_kinds[i] || ':' || p_subjects[i], 0));
        IF p_rpm[i] IS NOT NULL THEN
            rate := limits_rate(p_kinds[i], p_subjects[i], now_, false);
            IF rate + 1 > p_rpm[i] THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'rpm', limits_wait(p_kinds[i], p_subjects[i], now_);
                RETURN;
            END IF;
        END IF;
        IF p_tpm[i] IS NOT NULL THEN
            rate := limits_rate(p_kinds[i], p_subjects[i], now_, true);
            IF rate >= p_tpm[i] THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'tpm', limits_wait(p_kinds[i], p_subjects[i], now_);
                RETURN;
            END IF;
        END IF;
        IF p_daily[i] IS NOT NULL THEN
            SELECT u.tokens INTO spent FROM limit_usage u
             WHERE u.kind = p_kinds[i] AND u.subject = p_subjects[i] AND u.span = 'd' AND u.start = day_;
            IF coalesce(spent, 0) >= p_daily[i] THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'daily_tokens',
                                    greatest(1, extract(epoch FROM day_ + interval '1 day' - now_))::float8;
                RETURN;
            END IF;
        END IF;
        IF p_concurrent[i] IS NOT NULL THEN
            DELETE FROM limit_leases l WHERE l.kind = p_kinds[i] AND l.subject = p_subjects[i] AND l.expires_at < now_;
            SELECT count(*) INTO held FROM limit_leases l WHERE l.kind = p_kinds[i] AND l.subject = p_subjects[i];
            IF held >= p_concurrent[i] THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'concurrent', 1.0::float8;
                RETURN;
            END IF;
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
        INSERT INTO limit_usage AS u (kind, subject, span, start, requests)
        VALUES (p_kinds[i], p_subjects[i], 'm', step_, 1), (p_kinds[i], p_subjects[i], 'd', day_, 1)
        ON CONFLICT (kind, subject, span, start) DO UPDATE SET requests = u.requests + 1;
        DELETE FROM limit_usage u WHERE u.kind = p_kinds[i] AND u.subject = p_subjects[i] AND u.span = 'm'
                                    AND u.start <= now_ - interval '70 seconds';
        IF p_concurrent[i] IS NOT NULL THEN
            INSERT INTO limit_leases VALUES (p_kinds[i], p_subjects[i], p_request, now_ + make_interval(secs => p_lease_s))
            ON CONFLICT DO NOTHING;
        END IF;
    END LOOP;
    RETURN QUERY SELECT true, NULL::text, NULL::text, NULL::text, 0.0::float8;
END
$$;

-- What an admitted request cost, counted when it ends: its tokens (in this minute and today), its leases given back.
-- Also a user's memory work (formation jobs), with no request behind it.
CREATE FUNCTION limits_spent(p_kinds text[], p_subjects text[], p_request uuid, p_tokens bigint) RETURNS void
    LANGUAGE plpgsql
AS $$
DECLARE
    now_ timestamptz := clock_timestamp();
BEGIN
    IF p_tokens > 0 THEN
        INSERT INTO limit_usage AS u (kind, subject, span, start, tokens)
        SELECT k, s, span, CASE span WHEN 'm' THEN limits_step(now_)
                                     ELSE date_trunc('day', now_ AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' END, p_tokens
          FROM unnest(p_kinds, p_subjects) AS t(k, s), (VALUES ('m'::"char"), ('d'::"char")) AS spans(span)
        ON CONFLICT (kind, subject, span, start) DO UPDATE SET tokens = u.tokens + excluded.tokens;
    END IF;
    IF p_request IS NOT NULL THEN
        DELETE FROM limit_leases l USING unnest(p_kinds, p_subjects) AS t(k, s)
         WHERE l.kind = t.k AND l.subject = t.s AND l.request = p_request;
    END IF;
END
$$;
