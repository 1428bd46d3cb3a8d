-- 0002_formation: what background memory formation needs.

-- The one definition of "the same text": case, surrounding spaces and final punctuation ignored,
-- inner whitespace collapsed. Used by the unique guard below, so parallel jobs cannot create twins.
CREATE FUNCTION memory_key(content text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN md5(regexp_replace(lower(btrim(content, E' \t\r\n.!')), '\s+', ' ', 'g'));

ALTER TABLE vectors ADD COLUMN content_key text GENERATED ALWAYS AS (memory_key(content)) STORED;

-- When the user made the statement (flip-flop rule: only a strictly newer statement replaces).
ALTER TABLE vectors ADD COLUMN stated_at timestamptz;
UPDATE vectors SET stated_at = created_at;
ALTER TABLE vectors ALTER COLUMN stated_at SET NOT NULL, ALTER COLUMN stated_at SET DEFAULT now();

-- Exact-duplicate guard: one user never holds two memories with the same key.
ALTER TABLE users_vectors ADD COLUMN content_key text;
UPDATE users_vectors uv SET content_key = v.content_key FROM vectors v WHERE v.id = uv.vector_id;
DELETE FROM users_vectors a USING users_vectors b
 WHERE a.user_id = b.user_id AND a.content_key = b.content_key
   AND (a.created_at, a.vector_id) > (b.created_at, b.vector_id);
ALTER TABLE users_vectors ALTER COLUMN content_key SET NOT NULL;
CREATE UNIQUE INDEX users_vectors_user_content ON users_vectors (user_id, content_key);

-- Cold start (seed 001 §4.5): global memories, seen by users who have fewer than 5 of their own.
CREATE TABLE global_vectors (
    vector_id  text PRIMARY KEY REFERENCES vectors (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Durable formation jobs, claimed with FOR UPDATE SKIP LOCKED.
-- queued → running → done; on failure back to queued (run_after = backoff) until max attempts → dead.
-- A running job whose lease expired (its worker died) is queued again by the next claim.
CREATE TABLE memory_jobs (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      text NOT NULL,
    payload      jsonb NOT NULL,
    said_at      timestamptz NOT NULL,
    status       text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'dead')),
    attempts     integer NOT NULL DEFAULT 0,
    run_after    timestamptz NOT NULL DEFAULT now(),
    locked_by    text,
    locked_until timestamptz,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz
);
CREATE INDEX memory_jobs_ready ON memory_jobs (run_after, id) WHERE status = 'queued';
CREATE INDEX memory_jobs_running ON memory_jobs (locked_until) WHERE status = 'running';
CREATE INDEX memory_jobs_user ON memory_jobs (user_id);
