-- 0021_parallel_admission: requests of one subject admitted side by side while it is far from its limits, and far
-- enough, a handful at a time; exactly as before near them. 0018 locked each subject alone for every admission,
-- so all requests of a key, a user or a model waited in line (benchmarks.relay --with-limits: +14.6 ms TTFT p50
-- at 16 at once), and each paid two calls of PostgreSQL.
--
-- Why a shared lock is still exact far from a limit: no more transactions than `max_connections` run on this
-- server at once, whichever replica or pooler sent them, so no more admissions than that are ever uncommitted
-- (invisible to the others' counts), each counting at most 8 requests (itself and its reserve, below). An
-- admission under the shared lock is admitted only when the count it read plus 8 × `max_connections` is within
-- the limit: take the last admission (by the moment it read) of any set admitted together; every other either
-- committed before that read (counted in it) or was in flight then (at most `max_connections`, itself included,
-- each adding at most 8), so the set stays within the limit. Near a limit (or
-- for a limit that is never that far) the lock is exclusive: it waits for every shared holder to commit, as
-- 0018's did. A request that finds, under the shared lock, that a subject has come near returns 'near' and is
-- admitted again under the exclusive one (store/limits.py).
--
-- A reserve: an admission under the shared lock may count up to 7 requests more in this 10-second step,
-- and hold places at once for them in its process's block lease (`limit_leases.places`, request = the process's
-- block id): that process then admits up to that many more without asking (limits/reserve.py) until the step
-- ends, and gives back the places it no longer uses every second. What a reserve counts and does not use is
-- counted all the same: it can only refuse more, never admit more.

ALTER TABLE limit_leases ADD COLUMN places integer NOT NULL DEFAULT 1 CHECK (places >= 0);

-- The UTC day `p_now` falls in (the span of a daily budget).
CREATE FUNCTION limits_day(p_now timestamptz) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE
AS $$ SELECT date_trunc('day', p_now AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' $$;

-- Requests and tokens counted in each subject's step and day. The rows are locked in one order, (kind, subject,
-- span), by every transaction that counts, so that two counting the same subjects never wait for each other in
-- a circle (admissions no longer take turns, and a request's end counts its tokens into the same rows). True when
-- a step of some subject began with this count.
CREATE FUNCTION limits_count(p_kinds text[], p_subjects text[], p_now timestamptz, p_requests integer,
                             p_tokens bigint[]) RETURNS boolean
    LANGUAGE sql
AS $$
    WITH counted AS (
        INSERT INTO limit_usage AS u (kind, subject, span, start, requests, tokens)
        SELECT k, s, span, CASE span WHEN 'm' THEN limits_step(p_now) ELSE limits_day(p_now) END, p_requests, n
          FROM unnest(p_kinds, p_subjects, p_tokens) AS t(k, s, n), (VALUES ('d'::"char"), ('m'::"char")) AS spans(span)
         WHERE p_requests > 0 OR n > 0
         ORDER BY k, s, span
        ON CONFLICT (kind, subject, span, start)
        DO UPDATE SET requests = u.requests + excluded.requests, tokens = u.tokens + excluded.tokens
        RETURNING u.span, u.requests)
    SELECT coalesce(bool_or(span = 'm' AND requests = p_requests), false) AND p_requests > 0 FROM counted
$$;

CREATE OR REPLACE FUNCTION limits_spent(p_kinds text[], p_subjects text[], p_request uuid, p_tokens bigint) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    IF p_tokens > 0 THEN
        PERFORM limits_count(p_kinds, p_subjects, clock_timestamp(), 0, array_fill(p_tokens, ARRAY[cardinality(p_kinds)]));
    END IF;
    IF p_request IS NOT NULL THEN
        DELETE FROM limit_leases l USING unnest(p_kinds, p_subjects) AS t(k, s)
         WHERE l.kind = t.k AND l.subject = t.s AND l.request = p_request;
    END IF;
END
$$;

-- A process's reserves settled (every second): the tokens its requests spent since (each subject's own), and each
-- subject's block lease set to the places its requests hold now (none: the block deleted).
CREATE FUNCTION limits_settle(p_kinds text[], p_subjects text[], p_tokens bigint[], p_block uuid, p_places integer[],
                              p_lease_s integer) RETURNS void
    LANGUAGE plpgsql
AS $$
DECLARE
    now_ timestamptz := clock_timestamp();
BEGIN
    PERFORM limits_count(p_kinds, p_subjects, now_, 0, p_tokens);
    UPDATE limit_leases l SET places = t.n, expires_at = now_ + make_interval(secs => p_lease_s)
      FROM unnest(p_kinds, p_subjects, p_places) AS t(k, s, n)
     WHERE l.kind = t.k AND l.subject = t.s AND l.request = p_block AND t.n > 0;
    DELETE FROM limit_leases l USING unnest(p_kinds, p_subjects, p_places) AS t(k, s, n)
     WHERE l.kind = t.k AND l.subject = t.s AND l.request = p_block AND t.n = 0;
END
$$;

DROP FUNCTION limits_admit(text[], text[], integer[], bigint[], integer[], bigint[], uuid, integer);
-- Admit one request (see 0018): (admitted, kind, subject, which, retry_after) as before, and `spare`, the requests
-- reserved beside it (0 unless `p_spare` was asked and every subject is far enough), and `step_left`, the seconds
-- they may be used in. With a reserve the request holds its place in the block `p_block` (grown to `p_in_use`,
-- the places its process holds now, plus this one and the spare ones), else a lease of its own.
CREATE FUNCTION limits_admit(p_kinds text[], p_subjects text[], p_rpm integer[], p_tpm bigint[],
                             p_concurrent integer[], p_daily bigint[], p_request uuid, p_lease_s integer,
                             p_exclusive boolean DEFAULT false, p_spare integer DEFAULT 0, p_block uuid DEFAULT NULL,
                             p_in_use integer[] DEFAULT NULL)
    RETURNS TABLE (admitted boolean, kind text, subject text, which text, retry_after float8, spare integer,
                   step_left float8)
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    step_ timestamptz := limits_step(now_);
    day_ timestamptz := limits_day(now_);
    most constant integer := 8;  -- requests (and places) one admission counts at most: itself and its reserve
    crowd integer := current_setting('max_connections')::integer * most;  -- at most this many counted, uncommitted
    adds integer := least(1 + greatest(p_spare, 0), most);
    alone boolean;
    reserve boolean := p_spare > 0 AND p_block IS NOT NULL AND NOT p_exclusive;
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
        reserve := reserve AND NOT alone;
        IF p_rpm[i] IS NOT NULL OR p_tpm[i] IS NOT NULL THEN
            SELECT m.minute_requests, m.minute_tokens INTO requests_, tokens_
              FROM limits_minute(p_kinds[i], p_subjects[i], now_) m;
            IF requests_ + 1 > p_rpm[i] AND alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'rpm', limits_wait(p_kinds[i], p_subjects[i], now_),
                                    0, 0.0::float8;
                RETURN;
            END IF;
            IF requests_ + crowd > p_rpm[i] AND NOT alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'near', 0.0::float8, 0, 0.0::float8;
                RETURN;
            END IF;
            IF tokens_ >= p_tpm[i] THEN  -- tokens are counted after the fact: no lock makes this check exact
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'tpm', limits_wait(p_kinds[i], p_subjects[i], now_),
                                    0, 0.0::float8;
                RETURN;
            END IF;
            -- a reserve only under a limit of tokens as large as the one on requests must be, while half of it is
            -- still to spend (the tokens of requests admitted without asking are counted within a second of
            -- their end, and checked at the next request that asks)
            reserve := reserve AND coalesce(p_tpm[i] >= crowd AND tokens_ * 2 < p_tpm[i], true);
        END IF;
        IF p_daily[i] IS NOT NULL THEN
            SELECT u.tokens INTO spent FROM limit_usage u
             WHERE u.kind = p_kinds[i] AND u.subject = p_subjects[i] AND u.span = 'd' AND u.start = day_;
            IF coalesce(spent, 0) >= p_daily[i] THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'daily_tokens',
                                    greatest(1, extract(epoch FROM day_ + interval '1 day' - now_))::float8, 0, 0.0::float8;
                RETURN;
            END IF;
            reserve := reserve AND p_daily[i] >= crowd AND coalesce(spent, 0) * 2 < p_daily[i];
        END IF;
        IF p_concurrent[i] IS NOT NULL THEN
            SELECT coalesce(sum(l.places), 0) INTO held FROM limit_leases l
             WHERE l.kind = p_kinds[i] AND l.subject = p_subjects[i] AND l.expires_at > now_;
            IF held >= p_concurrent[i] AND alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'concurrent', 1.0::float8, 0, 0.0::float8;
                RETURN;
            END IF;
            IF held + crowd > p_concurrent[i] AND NOT alone THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'near', 0.0::float8, 0, 0.0::float8;
                RETURN;
            END IF;
        END IF;
    END LOOP;
    IF NOT reserve THEN
        adds := 1;
    END IF;
    fresh := limits_count(p_kinds, p_subjects, now_, adds, array_fill(0::bigint, ARRAY[cardinality(p_kinds)]));
    IF fresh THEN  -- a new step of some subject: the ones the minute has left are never read again
        DELETE FROM limit_usage u USING unnest(p_kinds, p_subjects) AS t(k, s)
         WHERE u.kind = t.k AND u.subject = t.s AND u.span = 'm' AND u.start <= now_ - interval '70 seconds';
    END IF;
    IF reserve THEN
        INSERT INTO limit_leases AS l (kind, subject, request, expires_at, places)
        SELECT k, s, p_block, now_ + make_interval(secs => p_lease_s), u + adds
          FROM unnest(p_kinds, p_subjects, p_concurrent, p_in_use) AS t(k, s, c, u) WHERE c IS NOT NULL
        ON CONFLICT (kind, subject, request)
        DO UPDATE SET places = greatest(l.places, excluded.places), expires_at = excluded.expires_at;
    ELSE
        INSERT INTO limit_leases (kind, subject, request, expires_at)
        SELECT k, s, p_request, now_ + make_interval(secs => p_lease_s)
          FROM unnest(p_kinds, p_subjects, p_concurrent) AS t(k, s, c) WHERE c IS NOT NULL
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN QUERY SELECT true, NULL::text, NULL::text, NULL::text, 0.0::float8, adds - 1,
                        extract(epoch FROM step_ + interval '10 seconds' - now_)::float8;
END
$$;
