-- 0012_teams: teams and their members (memory_proxy/store/teams.py, docs/TEAMS.md).
--
-- A team is a set of users who share a memory scope. Its id is what names it everywhere (an OpenWebUI
-- group id when mirrored, else chosen by the operator); its name and what it is about are shown to people
-- and, later, to the memory LLM that decides whether a fact is the team's.
-- A member's role: 'member' (reads the team's memories) or 'editor' (may also change and delete them).
--
-- No row-level security on these two tables: they hold who belongs where, not memory text, and the
-- policies of the memory tables read team_members to decide what a member sees. Managing them is an
-- operator's act (admin API, CLI); the app role may read and write them like api_keys.
CREATE TABLE teams (
    id         text PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    name       text NOT NULL CHECK (name <> '' AND length(name) <= 100),
    about      text NOT NULL DEFAULT '' CHECK (length(about) <= 500),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE team_members (
    team_id  text NOT NULL REFERENCES teams (id) ON DELETE CASCADE,
    user_id  text NOT NULL CHECK (user_id <> ''),
    role     text NOT NULL DEFAULT 'member' CHECK (role IN ('member', 'editor')),
    -- made from the user's OpenWebUI groups (USER_GROUPS_HEADER): kept exactly as the groups each chat turn
    -- names; an operator's membership (false) is never removed by them
    mirrored boolean NOT NULL DEFAULT false,
    added_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (team_id, user_id)
);
-- "Which teams is this user in": read on every memory turn of a user in teams.
CREATE INDEX team_members_user ON team_members (user_id, team_id);

DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'memory_proxy_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON teams, team_members TO memory_proxy_app;
    END IF;
END
$$;
