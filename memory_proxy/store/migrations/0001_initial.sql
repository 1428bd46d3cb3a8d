-- 0001_initial: the three tables of seed 001 §2.1, with the columns a real store needs.
-- Deviation from the seed: the embedding column is `embedding` (not `values`, an SQL keyword) and has
-- no fixed dimension, because the dimension belongs to a model (mistral-embed: 1024, MiniLM: 384);
-- `embedding_model` records the model of every vector and searches only compare vectors of one model.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE vectors (
    id              text PRIMARY KEY,
    embedding       vector NOT NULL,
    embedding_model text NOT NULL,
    content         text NOT NULL CHECK (content <> ''),
    metadata        jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Which user sees which memory. A vector may be shared by many users; unlinking hides it from one
-- user only. Retrieval relies solely on these links.
CREATE TABLE users_vectors (
    user_id    text NOT NULL CHECK (user_id <> ''),
    vector_id  text NOT NULL REFERENCES vectors (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, vector_id)
);
CREATE INDEX users_vectors_vector_id ON users_vectors (vector_id);

-- Audit only: which memory superseded which, for whom and why. Never read by retrieval.
CREATE TABLE memory_updates (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       text NOT NULL,
    old_vector_id text REFERENCES vectors (id) ON DELETE SET NULL,
    new_vector_id text REFERENCES vectors (id) ON DELETE SET NULL,
    reason        text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX memory_updates_user ON memory_updates (user_id, created_at);
