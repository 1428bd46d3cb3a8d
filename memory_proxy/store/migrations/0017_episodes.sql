-- 0017_episodes: the user's own words of a chat turn kept as memories of their own kind, `episode` (EPISODES,
-- memory_proxy/formation/episodes.py), searched beside the facts but never compared with them, nor counted with them.
ALTER TABLE vectors DROP CONSTRAINT vectors_memory_type_check,
    ADD CONSTRAINT vectors_memory_type_check
        CHECK (memory_type IN ('identity', 'preference', 'relationship', 'project', 'context', 'temporary', 'episode'));

-- A link carries whether it is an episode, as it carries whether it is an identity (0007; a vector's kind never
-- changes: set once, when linked): the caps count facts and episodes apart without reading the vectors.
ALTER TABLE users_vectors ADD COLUMN episode boolean NOT NULL DEFAULT false;
CREATE OR REPLACE FUNCTION users_vectors_identity() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    SELECT memory_type = 'identity', memory_type = 'episode' INTO NEW.identity, NEW.episode
      FROM vectors WHERE id = NEW.vector_id;
    NEW.identity := coalesce(NEW.identity, false);
    NEW.episode := coalesce(NEW.episode, false);
    RETURN NEW;
END
$$;
