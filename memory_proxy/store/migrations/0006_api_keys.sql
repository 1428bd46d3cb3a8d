-- 0006_api_keys: per-user API keys for the management API (memory_proxy/store/keys.py, docs/MANAGEMENT.md).
--
-- A key is shown once, at creation; only its SHA-256 digest is stored. The secret is
-- `mpk_<id>_<random>`: the id finds the row, the digest is then compared in constant time.
-- user_id NULL: an admin key (acts for any user, like PROXY_API_KEYS); else the key acts only as that user.
-- No row-level security: a key is a credential, not a user's memory data, and it is looked up before
-- any user is known. Revoked keys stay (revoked_at) so that `keys list` shows what was revoked and when.
CREATE TABLE api_keys (
    id         text PRIMARY KEY,
    user_id    text CHECK (user_id <> ''),
    key_hash   bytea NOT NULL,
    label      text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- 0004's default privileges already cover this table when the same user migrates; granted explicitly
-- anyway (an operator may migrate as another user), only where the role exists.
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'memory_proxy_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON api_keys TO memory_proxy_app;
    END IF;
END
$$;
