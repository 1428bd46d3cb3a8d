-- 0015_team_proposals: TEAM_FACTS=review keeps a team's fact apart until an editor accepts it (docs/TEAMS.md).
--
-- A proposal is what formation would have written to the team: the fact as the scope call wrote it about the
-- team, its vector, and what the relate step decided (add, or replace / refine one of the team's memories). It
-- is held by the team's principal, 'team:<id>', and sits under the same row-level policy as the memory tables
-- (0013): seen and written by the team's current members only. Accepting applies it and deletes it;
-- rejecting deletes it. Who may do either (editors) is the application's rule.
CREATE TABLE team_proposals (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id         text NOT NULL CHECK (user_id LIKE 'team:%'),
    proposed_by     text NOT NULL,
    content         text NOT NULL,
    memory_type     text NOT NULL,
    embedding       vector NOT NULL,
    embedding_model text NOT NULL,
    action          text NOT NULL CHECK (action IN ('add', 'replace', 'refine')),
    replaces        text,
    reason          text NOT NULL DEFAULT '',
    stated_at       timestamptz NOT NULL,
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX team_proposals_holder ON team_proposals (user_id, id);
-- A member's erasure: the proposals made from their words go with them.
CREATE INDEX team_proposals_proposer ON team_proposals (proposed_by);

ALTER TABLE team_proposals ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
DO $$
DECLARE
    me   CONSTANT text := '(SELECT nullif(current_setting(''memory_proxy.user_id'', true), ''''))';
    rule text;
BEGIN
    rule := format('user_id = %1$s'
                   ' OR (SELECT current_setting(''memory_proxy.all_users'', true)) = ''on'''
                   ' OR user_id = ANY (ARRAY(SELECT ''team:'' || m.team_id FROM team_members m'
                   ' WHERE m.user_id = %1$s))', me);
    EXECUTE format('CREATE POLICY user_rows ON team_proposals USING (%s) WITH CHECK (%s)', rule, rule);
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'memory_proxy_app') THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON team_proposals TO memory_proxy_app;
    END IF;
END
$$;
