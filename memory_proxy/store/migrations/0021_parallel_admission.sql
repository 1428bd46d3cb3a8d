-- 0021_parallel_admission: requests of one subject admitted side by side while it is far from its limits, exactly
-- as before near them. 0018 locked each subject alone for the admission's transaction, so every request of a key,
-- a user or a model waited in line (benchmarks.relay --with-limits: +14.6 ms TTFT p50 at 16 at once).
--
-- Why a shared lock is still exact far from a limit: no more transactions than `max_connections` run on this
-- server at once, whichever replica or pooler sent them, so no more admissions than that are ever uncommitted
-- (invisible to the others' counts). An admission under the shared lock is admitted only when the count it read
-- plus `max_connections` is within the limit: take the last admission (by the moment it read) of any set admitted
-- together; every other either committed before that read (counted in it) or was in flight then (at most
-- `max_connections`, itself included), so the set stays within the limit. Near a limit (or for a limit that is
-- never that far) the lock is exclusive: it waits for every shared holder to commit, as 0018's did. A request that
-- finds, under the shared lock, that a subject has come near returns 'near' and is admitted again under the
-- exclusive one (store/limits.py).

-- The UTC day `p_now` falls in (the span of a daily budget).
CREATE FUNCTION limits_day(p_now timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE
AS $$ SELECT date_trunc('day', p_now AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$;

-- Requests and tokens counted in each subject's step and day. The rows are locked in one order, (kind, subject,
-- span), by every transaction that counts, so that two counting the same subjects never wait for each other in
-- a circle (admissions no longer take turns, and a request's end counts its tokens into the same rows). True when
-- a step began with this request (its first).
CREATE FUNCTION limits_count(p_kinds text[], p_subjects text[], p_now timestamptz, p_requests integer,
                             p_tokens bigint) RETURNS boolean
    LANGUAGE sql
AS $$
    WITH counted AS (
        INSERT INTO limit_usage AS u (kind, subject, span, start, requests, tokens)
        SELECT k, s, span, CASE span WHEN 'm' THEN limits_step(p_now) ELSE limits_day(p_now) END, p_requests, p_tokens
          FROM unnest(p_kinds, p_subjects) AS t(k, s), (VALUES ('d'::"char"), ('m'::"char")) AS spans(span)
         ORDER BY k, s, span
        ON CONFLICT (kind, subject, span, start)
        DO UPDATE SET requests = u.requests + excluded.requests, tokens = u.tokens + excluded.tokens
        RETURNING u.span, u.requests)
    SELECT coalesce(bool_or(span = 'm' AND requests = 1), false) AND p_requests = 1 FROM counted
$$;

CREATE OR REPLACE FUNCTION limits_spent(p_kinds text[], p_subjects text[], p_request uuid, p_tokens bigint) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    IF p_tokens > 0 THEN
        PERFORM limits_count(p_kinds, p_subjects, clock_timestamp(), 0, p_tokens);
    END IF;
    IF p_request IS NOT NULL THEN
        DELETE FROM limit_leases l USING unnest(p_kinds, p_subjects) AS t(k, s)
         WHERE l.kind = t.k AND l.subject = t.s AND l.request = p_request;
    END IF;
END
$$;

DROP FUNCTION limits_admit(text[], text[], integer[], bigint[], integer[], bigint[], uuid, integer);
CREATE FUNCTION limits_admit(p_kinds text[], p_subjects text[], p_rpm integer[], p_tpm bigint[],
                             p_concurrent integer[], p_daily bigint[], p_request uuid, p_lease_s integer,
                             p_exclusive boolean DEFAULT false)
    RETURNS TABLE (admitted boolean, kind text, subject text, which text, retry_after float8)
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    step_ timestamptz := limits_step(now_);
    day_ timestamptz := limits_day(now_);
    crowd integer := current_setting('max_connections')::integer;  -- at most this many admissions uncommitted
    alone boolean;
    requests_ float8;
    tokens_ float8;
    spent bigint;
    held integer;
    fresh boolean;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
        -- in the same order in every transaction (key, user, model), so none waits for another in a circle
        alone := p_exclusive OR coalesce(p_rpm[i] <= crowd, false) OR coalesce(p_concurrent[i] <= crowd, false);
        IF alone THEN
            PERFORM pg_advisory_xact_lock(hashtextextended('limits:' || p_kinds[i] || ':' || p_subjects[i], 0));
        ELSE
            PERFORM pg_advisory_xact_lock_shared(hashtextextended('limits:' || p_kinds[i] || ':' || p_subjects[i], 0));
        END IF;
        IF p_rpm[i] IS NOT NULL OR p_tpm[i] IS NOT NULL THEN
            SELECT m.minute_requests, m.minute_tokens INTO requests_, tokens_
              FROM limits_minute(p_kinds[i], p_subjects[i], now_) m;
            IF requests_ + 1 > p_rpm[i] AND alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'rpm', limits_wait(p_kinds[i], p_subjects[i], now_);
                RETURN;
            END IF;
            IF requests_ + crowd > p_rpm[i] AND NOT alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'near', 0.0::float8;
                RETURN;
            END IF;
            IF tokens_ >= p_tpm[i] THEN  -- tokens are counted after the fact: no lock makes this check exact
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
            SELECT count(*) INTO held FROM limit_leases l
             WHERE l.kind = p_kinds[i] AND l.subject = p_subjects[i] AND l.expires_at > now_;
            IF held >= p_concurrent[i] AND alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'concurrent', 1.0::float8;
                RETURN;
            END IF;
            IF held + crowd > p_concurrent[i] AND NOT alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'near', 0.0::float8;
                RETURN;
            END IF;
        END IF;
    END LOOP;
    fresh := limits_count(p_kinds, p_subjects, now_, 1, 0);
    IF fresh THEN  -- a new step of some subject: the ones the minute has left are never read again
        DELETE FROM limit_usage u USING unnest(p_kinds, p_subjects) AS t(k, s)
         WHERE u.kind = t.k AND u.subject = t.s AND u.span = 'm' AND u.start <= now_ - interval '70 seconds';
    END IF;
    INSERT INTO limit_leases
    SELECT k, s, p_request, now_ + make_interval(secs => p_lease_s)
      FROM unnest(p_kinds, p_subjects, p_concurrent) AS t(k, s, c) WHERE c IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN QUERY SELECT true, NULL::text, NULL::text, NULL::text, 0.0::float8;
END
$$;
