-- 0008_memory_changed: tell every proxy when a user's memories change, so that the per-user index it
-- keeps in memory (memory_proxy/memory/index.py) is dropped and read again: PostgreSQL stays the source of truth.
--
-- NOTIFY memory_changed, payload md5(user_id) (a fixed 32 characters: a user id longer than NOTIFY's
-- 8,000-byte payload limit must never make a write fail). Delivered at commit, once per user and
-- transaction (PostgreSQL folds identical notifications). Only what the index holds fires it: a link
-- added, removed or changed in what search reads (active or not, pinned, identity, words, model, code).
-- The use counts written every second (access_count, last_accessed_at) do not: they would drop every
-- chatting user's index every second; the proxy counts its own uses in its index instead.

CREATE FUNCTION memory_changed_link() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('memory_changed', md5(CASE WHEN TG_OP = 'DELETE' THEN OLD.user_id ELSE NEW.user_id END));
    IF TG_OP = 'UPDATE' AND NEW.user_id IS DISTINCT FROM OLD.user_id THEN
        PERFORM pg_notify('memory_changed', md5(OLD.user_id));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_changed AFTER INSERT OR DELETE
    OR UPDATE OF user_id, vector_id, superseded_at, pinned, identity, search_text, embedding_model, embedding_bq
    ON users_vectors FOR EACH ROW EXECUTE FUNCTION memory_changed_link();

-- A fact itself is meant to be immutable, but re-embedding replaces its vector (store/embeddings.py) and
-- an operator may fix one by hand: every user who holds it hears of it.
CREATE FUNCTION memory_changed_vector() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('memory_changed', md5(uv.user_id)) FROM users_vectors uv WHERE uv.vector_id = NEW.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER memory_changed AFTER UPDATE OF content, embedding, embedding_model, memory_type, stated_at, expires_at
    ON vectors FOR EACH ROW EXECUTE FUNCTION memory_changed_vector();
