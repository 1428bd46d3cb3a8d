-- 0003_search_candidates: retrieval that stays fast for a user with 10,000 memories in a 1M-vector table.
--
-- A 1024-d vector is 4 KB, stored out of line (TOAST): scoring every one of a user's memories costs a heap
-- fetch and ~4 TOAST reads each (300 ms at 10,000 memories, benchmarks/retrieval.py). So each link also
-- carries its vector's model and 1-bit-per-dimension code (binary_quantize: 128 bytes at 1024-d), in a
-- covering index: the user's nearest candidates by Hamming distance come from an index-only scan, and
-- only those are re-ranked by the exact cosine of their full vectors. Vectors are immutable, so the copy
-- never drifts. A user with no more memories than the candidate count gets the exact answer.
--
-- The full vectors move inline (STORAGE MAIN: out of line only if a row cannot fit a page, e.g. 3072-d):
-- re-ranking a candidate then reads one heap page instead of a TOAST index probe and ~3 chunks
-- (~20 buffers). The price is disk: one 1024-d memory per 8 KB page, ~8 GB per million memories
-- instead of ~4.5 GB. Existing rows are rewritten so that they move too.
ALTER TABLE vectors ALTER COLUMN embedding SET STORAGE MAIN;
UPDATE vectors SET embedding = embedding::real[]::vector;

ALTER TABLE users_vectors ADD COLUMN embedding_model text, ADD COLUMN embedding_bq bit varying;
UPDATE users_vectors uv SET embedding_model = v.embedding_model, embedding_bq = binary_quantize(v.embedding)
  FROM vectors v WHERE v.id = uv.vector_id;
ALTER TABLE users_vectors ALTER COLUMN embedding_model SET NOT NULL, ALTER COLUMN embedding_bq SET NOT NULL;
CREATE INDEX users_vectors_search ON users_vectors (user_id, embedding_model) INCLUDE (vector_id, embedding_bq);

-- The user's `n` links of `model` nearest to `query_bq` by Hamming distance (codes of another length,
-- i.e. another dimension under the same model name, sort last instead of raising).
-- Bitmap scans are off inside: the planner estimates a user's row count from the average user and then
-- prefers a bitmap heap scan, which visits one heap page per memory (30 ms at 10,000 memories) where
-- the index-only scan reads ~250 index pages.
CREATE FUNCTION memory_candidates(user_id text, model text, query_bq bit, n integer)
    RETURNS SETOF text
    LANGUAGE sql STABLE PARALLEL SAFE ROWS 100
    SET enable_bitmapscan = off
AS $$
    SELECT uv.vector_id FROM users_vectors uv
    WHERE uv.user_id = memory_candidates.user_id AND uv.embedding_model = memory_candidates.model
    ORDER BY CASE WHEN length(uv.embedding_bq) = length(query_bq) THEN uv.embedding_bq <~> query_bq END
    LIMIT n
$$;
