-- 0005_memory_quality: hybrid search, kinds of memory with decay and expiry, per-user use and pins, and
-- history instead of destruction.

-- What a fact is (shared by every user who holds it): its kind, how important and how certain the
-- extraction LLM rated it, when it expires (stated_at + the kind's TTL; NULL: never), and its words for
-- full-text search. 'english' stems and drops English stop words; other languages still match on their
-- unstemmed words. Memories from before this migration are preferences: no expiry, slow decay.
ALTER TABLE vectors
    ADD COLUMN memory_type text NOT NULL DEFAULT 'preference'
        CHECK (memory_type IN ('identity', 'preference', 'relationship', 'project', 'context', 'temporary')),
    ADD COLUMN importance smallint CHECK (importance BETWEEN 1 AND 10),
    ADD COLUMN confidence real CHECK (confidence BETWEEN 0 AND 1),
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN search_text tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED;
CREATE INDEX vectors_search_text ON vectors USING gin (search_text);
-- The per-memory size limit (2 KB, memory_proxy/memory/extract.py MAX_MEMORY_BYTES) holds for every path that
-- stores one; NOT VALID leaves any older, longer row alone.
ALTER TABLE vectors ADD CONSTRAINT vectors_content_size CHECK (octet_length(content) <= 2048) NOT VALID;

-- What a user does with a fact (per link): pin it (never decays, never expires, always injected), how
-- often and when it was last injected, and whether it was superseded. A superseded link stays, so the
-- user's history stays readable (memory_updates says why and by what); retrieval reads active links only.
ALTER TABLE users_vectors
    ADD COLUMN pinned boolean NOT NULL DEFAULT false,
    ADD COLUMN access_count integer NOT NULL DEFAULT 0,
    ADD COLUMN last_accessed_at timestamptz,
    ADD COLUMN superseded_by text REFERENCES vectors (id) ON DELETE SET NULL,
    ADD COLUMN superseded_at timestamptz,
    ADD COLUMN search_text tsvector;

-- Each link carries a copy of its fact's words (vectors are immutable, so it never drifts), as it
-- carries the binary code since 0003: the full-text arm then reads only the user's own small link rows
-- through the per-user index. The GIN index on vectors.search_text serves text filters over known rows;
-- retrieval never uses it, because a GIN over every user's memories cannot be narrowed to one user
-- (btree_gin is not in every PostgreSQL we run on) and for a common word it matched every user's rows:
-- 54 ms p50 for a user with 1,000 memories in a 100k table, against a few ms for the per-user scan.
UPDATE users_vectors uv SET search_text = v.search_text FROM vectors v WHERE v.id = uv.vector_id;
ALTER TABLE users_vectors ALTER COLUMN search_text SET NOT NULL;

-- The exact-duplicate guard and the search index cover active links only.
DROP INDEX users_vectors_user_content;
CREATE UNIQUE INDEX users_vectors_user_content ON users_vectors (user_id, content_key) WHERE superseded_at IS NULL;
DROP INDEX users_vectors_search;
CREATE INDEX users_vectors_search ON users_vectors (user_id, embedding_model) INCLUDE (vector_id, embedding_bq)
    WHERE superseded_at IS NULL;
CREATE INDEX users_vectors_recent ON users_vectors (user_id, created_at DESC) WHERE superseded_at IS NULL;

-- What each audit row records: replace, refine (formation), restore (undo), merge, expire, prune
-- (maintenance), edit, delete (management).
ALTER TABLE memory_updates ADD COLUMN action text NOT NULL DEFAULT 'replace';

CREATE OR REPLACE FUNCTION memory_candidates(user_id text, model text, query_bq bit, n integer)
    RETURNS SETOF text
    LANGUAGE sql STABLE PARALLEL SAFE ROWS 100
    SET enable_bitmapscan = off
AS $$
    SELECT uv.vector_id FROM users_vectors uv
    WHERE uv.user_id = memory_candidates.user_id AND uv.embedding_model = memory_candidates.model
      AND uv.superseded_at IS NULL
    ORDER BY CASE WHEN length(uv.embedding_bq) = length(query_bq) THEN uv.embedding_bq <~> query_bq END
    LIMIT n
$$;

-- The lexemes of a query joined by OR, as a tsquery (plainto_tsquery would AND them: a chat message
-- rarely shares every word with a memory). Lexemes are quoted, so no character can form tsquery syntax.
-- NULL when the query has no lexeme (it then matches nothing).
CREATE FUNCTION memory_text_query(query text) RETURNS tsquery
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN (SELECT CASE WHEN lexemes = '' THEN NULL ELSE lexemes::tsquery END FROM (
        SELECT array_to_string(ARRAY(
            SELECT quote_literal(lexeme) FROM unnest(tsvector_to_array(to_tsvector('english', query))) lexeme
        ), ' | ') AS lexemes) q);
