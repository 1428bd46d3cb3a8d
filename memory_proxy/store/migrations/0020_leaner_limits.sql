-- 0020_leaner_limits: limits_admit and limits_spent in fewer statements, the same rules (0018). Every admitted request
-- ran about ten statements per subject; with generous limits on key, user and model a memory turn cost 1.3-2.8 ms
-- more server CPU (benchmarks.relay --with-limits). Now: the minute's requests and tokens read in one scan; expired
-- leases are not counted (maintenance deletes them, store/limits.py forget_old_usage) instead of deleted on every
-- admission; steps older than the minute deleted only when a new step begins (once in 10 s per subject).
-- The last minute's requests and tokens of one subject, in one scan: every 10-second step the 60 s before `p_now`
-- touch, each whole (0018's rule, kept here alone; limits_rate now reads it too).
CREATE FUNCTION limits_minute(p_kind text, p_subject text, p_now timestamptz,
                              OUT minute_requests float8, OUT minute_tokens float8)
    LANGUAGE sql STABLE
AS $$
    SELECT coalesce(sum(requests), 0)::float8, coalesce(sum(tokens), 0)::float8
      FROM limit_usage
     WHERE kind = p_kind AND subject = p_subject AND span = 'm' AND start > p_now - interval '70 seconds'
$$;

CREATE OR REPLACE FUNCTION limits_rate(p_kind text, p_subject text, p_now timestamptz, p_tokens boolean)
    RETURNS float8
    LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_tokens THEN minute_tokens ELSE minute_requests END FROM limits_minute(p_kind, p_subject, p_now)
$$;

CREATE OR REPLACE FUNCTION limits_admit(p_kinds text[], p_subjects text[], p_rpm integer[], p_tpm bigint[],
                                        p_concurrent integer[], p_daily bigint[], p_request uuid, p_lease_s integer)
    RETURNS TABLE (admitted boolean, kind text, subject text, which text, retry_after float8)
    LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    now_ timestamptz := clock_timestamp();
    step_ timestamptz := limits_step(now_);
    day_ timestamptz := date_trunc('day', now_ AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    requests_ float8;
    tokens_ float8;
    spent bigint;
    held integer;
    fresh boolean;
BEGIN
    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
        -- one subject at a time across every replica, until this transaction ends
        PERFORM pg_advisory_xact_lock(hashtextextended('limits:' || p_kinds[i] || ':' || p_subjects[i], 0));
        IF p_rpm[i] IS NOT NULL OR p_tpm[i] IS NOT NULL THEN
            SELECT m.minute_requests, m.minute_tokens INTO requests_, tokens_
              FROM limits_minute(p_kinds[i], p_subjects[i], now_) m;
            IF requests_ + 1 > p_rpm[i] THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'rpm', limits_wait(p_kinds[i], p_subjects[i], now_);
                RETURN;
            END IF;
            IF tokens_ >= p_tpm[i] THEN
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
            IF held >= p_concurrent[i] THEN
                RETURN QUERY SELECT false, p_kinds[i], p_subjects[i], 'concurrent', 1.0::float8;
                RETURN;
            END IF;
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(array_length(p_kinds, 1), 0) LOOP
        WITH counted AS (
            INSERT INTO limit_usage AS u (kind, subject, span, start, requests)
            VALUES (p_kinds[i], p_subjects[i], 'm', step_, 1), (p_kinds[i], p_subjects[i], 'd', day_, 1)
            ON CONFLICT (kind, subject, span, start) DO UPDATE SET requests = u.requests + 1
            RETURNING u.span, u.requests)
        SELECT bool_or(span = 'm' AND requests = 1) INTO fresh FROM counted;
        IF fresh THEN  -- a new step: the ones the minute has left are never read again
            DELETE FROM limit_usage u WHERE u.kind = p_kinds[i] AND u.subject = p_subjects[i] AND u.span = 'm'
                                        AND u.start <= now_ - interval '70 seconds';
        END IF;
        IF p_concurrent[i] IS NOT NULL THEN
            INSERT INTO limit_leases VALUES (p_kinds[i], p_subjects[i], p_request, now_ + make_interval(secs => p_lease_s))
            ON CONFLICT DO NOTHING;
        END IF;
    END LOOP;
    RETURN QUERY SELECT true, NULL::text, NULL::text, NULL::text, 0.0::float8;
END
$$;
