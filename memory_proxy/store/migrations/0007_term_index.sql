-- 0007_term_index: a per-user inverted index for the full-text arm (memory_proxy/store/search.py), and the
-- always-on tier read from an index.
--
-- Until now the arm read every active link of the user whose tsvector matched any query word, newest
-- first, and unnested each one to count document frequencies: a word held by every one of a user's
-- 10,000 memories scored all 10,000 rows (35 ms). Here each active link's words are posted once, at
-- write time, so that a search reads only the postings of its query words (an index-only scan keyed by
-- user and word), and the document frequencies and the user's totals are kept as counters: a word most
-- of the user's memories hold is known, and dropped, before any posting is read.
--
--   memory_terms       (user, word, memory) → tf (the word's count in the memory), dl (its word count)
--   memory_lexicon     (user, word) → df, the user's active memories holding it
--   memory_term_stats  user → active memories, their total words (N and avgdl of BM25)
--
-- Kept by triggers on users_vectors, so no write path can forget them: a link that becomes active posts
-- its words, one that stops being active (superseded, retired, erased) withdraws them. Each trigger
-- first locks the user's stats row, so transactions that change one user's links queue there instead
-- of taking lexicon rows in different orders (no deadlock). The tables hold users' words: same row-level
-- security as users_vectors (0004), and an erase leaves nothing (counters at 0 are deleted).

-- The always-on tier (pinned and identity memories) read every user's link joined to its vector to find
-- the identity ones: 10,000 vector pages for a user with 10,000 memories, on every chat turn. A link now
-- carries whether its fact is an identity (a vector's kind never changes: set once, when linked) and a
-- partial index holds the always-on links alone.
ALTER TABLE users_vectors ADD COLUMN identity boolean NOT NULL DEFAULT false;
UPDATE users_vectors uv SET identity = true FROM vectors v WHERE v.id = uv.vector_id AND v.memory_type = 'identity';
CREATE INDEX users_vectors_always_on ON users_vectors (user_id) WHERE superseded_at IS NULL AND (pinned OR identity);
CREATE FUNCTION users_vectors_identity() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    NEW.identity := coalesce((SELECT memory_type = 'identity' FROM vectors WHERE id = NEW.vector_id), false);
    RETURN NEW;
END
$$;
CREATE TRIGGER users_vectors_identity BEFORE INSERT ON users_vectors
    FOR EACH ROW EXECUTE FUNCTION users_vectors_identity();

CREATE TABLE memory_terms (
    user_id   text NOT NULL,
    lexeme    text NOT NULL,
    vector_id text NOT NULL,
    tf        integer NOT NULL,
    dl        integer NOT NULL,
    PRIMARY KEY (user_id, lexeme, vector_id) INCLUDE (tf, dl)
);
CREATE TABLE memory_lexicon (
    user_id text NOT NULL,
    lexeme  text NOT NULL,
    df      integer NOT NULL,
    PRIMARY KEY (user_id, lexeme) INCLUDE (df)
);
CREATE TABLE memory_term_stats (
    user_id  text PRIMARY KEY,
    memories integer NOT NULL,
    words    bigint NOT NULL
);

CREATE FUNCTION memory_terms_post(link users_vectors, sign integer) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO memory_term_stats AS s (user_id, memories, words)
    VALUES (link.user_id, sign, sign * length(link.search_text))
    ON CONFLICT (user_id) DO UPDATE SET memories = s.memories + sign, words = s.words + sign * length(link.search_text);
    IF sign > 0 THEN
        INSERT INTO memory_terms (user_id, lexeme, vector_id, tf, dl)
        SELECT link.user_id, w.lexeme, link.vector_id, greatest(cardinality(w.positions), 1), length(link.search_text)
        FROM unnest(link.search_text) w
        ON CONFLICT DO NOTHING;
    ELSE
        DELETE FROM memory_terms WHERE user_id = link.user_id AND vector_id = link.vector_id
            AND lexeme = ANY(tsvector_to_array(link.search_text));
    END IF;
    INSERT INTO memory_lexicon AS l (user_id, lexeme, df)
    SELECT link.user_id, w, sign FROM unnest(tsvector_to_array(link.search_text)) w ORDER BY w
    ON CONFLICT (user_id, lexeme) DO UPDATE SET df = l.df + sign;
    IF sign < 0 THEN
        DELETE FROM memory_lexicon WHERE user_id = link.user_id AND df <= 0
            AND lexeme = ANY(tsvector_to_array(link.search_text));
        DELETE FROM memory_term_stats WHERE user_id = link.user_id AND memories <= 0;
    END IF;
END
$$;

CREATE FUNCTION memory_terms_follow() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.superseded_at IS NULL
       AND (TG_OP = 'DELETE' OR NEW.superseded_at IS NOT NULL OR NEW.search_text IS DISTINCT FROM OLD.search_text) THEN
        PERFORM memory_terms_post(OLD, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.superseded_at IS NULL
       AND (TG_OP = 'INSERT' OR OLD.superseded_at IS NOT NULL OR NEW.search_text IS DISTINCT FROM OLD.search_text) THEN
        PERFORM memory_terms_post(NEW, 1);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER memory_terms_follow AFTER INSERT OR DELETE OR UPDATE OF superseded_at, search_text ON users_vectors
    FOR EACH ROW EXECUTE FUNCTION memory_terms_follow();

-- The links already active.
INSERT INTO memory_terms (user_id, lexeme, vector_id, tf, dl)
SELECT uv.user_id, w.lexeme, uv.vector_id, greatest(cardinality(w.positions), 1), length(uv.search_text)
FROM users_vectors uv, unnest(uv.search_text) w WHERE uv.superseded_at IS NULL;
INSERT INTO memory_lexicon (user_id, lexeme, df)
SELECT user_id, lexeme, count(*) FROM memory_terms GROUP BY user_id, lexeme;
INSERT INTO memory_term_stats (user_id, memories, words)
SELECT user_id, count(*), sum(length(search_text)) FROM users_vectors WHERE superseded_at IS NULL GROUP BY user_id;

-- Row-level security as for users_vectors (0004).
ALTER TABLE memory_terms ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_lexicon ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_term_stats ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY user_rows ON memory_terms
    USING (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
           OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on')
    WITH CHECK (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
                OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on');
CREATE POLICY user_rows ON memory_lexicon
    USING (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
           OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on')
    WITH CHECK (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
                OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on');
CREATE POLICY user_rows ON memory_term_stats
    USING (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
           OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on')
    WITH CHECK (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
                OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on');

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'memory_proxy_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON memory_terms, memory_lexicon, memory_term_stats TO memory_proxy_app;
    END IF;
END
$$;
