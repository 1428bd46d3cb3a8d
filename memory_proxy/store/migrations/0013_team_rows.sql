-- 0013_team_rows: a team's memories are seen by its current members, and by nobody else (docs/TEAMS.md).
--
-- A team memory is held by the principal 'team:<team id>' in the memory tables' user_id (a user id can never
-- start with 'team:': memory_proxy/auth.py refuses it wherever an id comes in). The policies of 0004 and 0007
-- gain one case: a row of 'team:<id>' is visible to, and writable by, a scope whose user is a member of that
-- team now. Membership is read from team_members once per statement (an uncorrelated sub-SELECT becomes an
-- InitPlan, as the settings are), so a removal holds from the next statement on, on every server that has it.
-- Who may change a team memory (editors) and which facts may (team-scope ones) is the application's rule;
-- this one is who can see or touch a team's rows at all.
-- memory_jobs stays personal: a job is one user's chat text.
DO $$
DECLARE
    me   CONSTANT text := '(SELECT nullif(current_setting(''memory_proxy.user_id'', true), ''''))';
    rule text;
    t    text;
BEGIN
    rule := format('user_id = %1$s'
                   ' OR (SELECT current_setting(''memory_proxy.all_users'', true)) = ''on'''
                   ' OR user_id = ANY (ARRAY(SELECT ''team:'' || m.team_id FROM team_members m'
                   ' WHERE m.user_id = %1$s))', me);
    FOREACH t IN ARRAY ARRAY['users_vectors', 'memory_updates', 'memory_terms', 'memory_lexicon',
                             'memory_term_stats'] LOOP
        EXECUTE format('DROP POLICY user_rows ON %I', t);
        EXECUTE format('CREATE POLICY user_rows ON %I USING (%s) WITH CHECK (%s)', t, rule, rule);
    END LOOP;
END
$$;
