-- 0004_row_level_security: isolation in depth. Every query already filters by user; row-level security
-- makes PostgreSQL enforce it too, so that a query that forgets (or botches) its user filter still sees
-- and writes only one user's rows.
--
-- Scope: per transaction, set by memory_proxy/store/scope.py with set_config(..., is_local => true):
--   memory_proxy.user_id   = the user     → that user's rows only (reads, and the rows a write creates)
--   memory_proxy.all_users = 'on'         → every row: job claim and lease upkeep, gauges, operator
--                                           commands, migrations (migrate() sets it for its session)
--   neither                               → no row at all: fail closed. After a scoped transaction a
--                                           placeholder setting reads '' (not NULL), hence the nullif.
-- Each setting is read once per statement (an uncorrelated sub-SELECT becomes an InitPlan), not once
-- per row: retrieval filters up to 10,000 index tuples of one user through this policy.
--
-- Tables with a user_id get the policy: users_vectors (the links: retrieval reads only through them),
-- memory_updates (audit) and memory_jobs (chat text waiting for formation). Exempt, on purpose:
--   vectors         no owner: a vector may be shared by several users, and what a user holds is
--                   exactly their links. A policy would need a semi-join on users_vectors for every
--                   row (on the re-rank path of every search) and would break insert-then-link. Vector
--                   ids are random UUIDs, reached only through a user's links (memory_candidates).
--   global_vectors  shared by design (cold-start memories every new user sees).
--   schema_migrations  no user data.
-- A future table holding user data must get the same three statements.
--
-- FORCE: the policy also binds the tables' owner (the user that runs migrations, often the one the app
-- connects as). It never binds a superuser or a BYPASSRLS role, and the embedded PostgreSQL connects as
-- the superuser `postgres`: so the app's pool drops to the role below (SET ROLE in make_pool's
-- configure, only when the connecting user would bypass RLS and the role exists).
ALTER TABLE users_vectors ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_updates ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE memory_jobs ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

-- One policy for every command: USING filters what is read, updated and deleted; WITH CHECK refuses a
-- new or updated row of another user (an INSERT or UPDATE for someone else raises, it is not dropped).
CREATE POLICY user_rows ON users_vectors
    USING (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
           OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on')
    WITH CHECK (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
                OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on');
CREATE POLICY user_rows ON memory_updates
    USING (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
           OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on')
    WITH CHECK (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
                OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on');
CREATE POLICY user_rows ON memory_jobs
    USING (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
           OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on')
    WITH CHECK (user_id = (SELECT nullif(current_setting('memory_proxy.user_id', true), ''))
                OR (SELECT current_setting('memory_proxy.all_users', true)) = 'on');

-- The role the app's pool runs as when it connects as a superuser or BYPASSRLS user: NOLOGIN (only
-- reachable by SET ROLE), not superuser, no BYPASSRLS, no CREATEROLE. Roles are cluster-wide: another
-- database of the same cluster may have created it already, possibly at this very moment (hence
-- unique_violation). A migrating user without CREATEROLE skips it with a NOTICE; then the DATABASE_URL
-- user must itself be neither superuser nor BYPASSRLS, or row-level security is not enforced (make_pool
-- logs a warning). The grants below run only where the role exists: an operator who wants the role
-- anyway creates it before migrating.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'memory_proxy_app') THEN
        BEGIN
            CREATE ROLE memory_proxy_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'memory_proxy_app not created (% may not create roles): the DATABASE_URL user must '
                             'be neither superuser nor BYPASSRLS for row-level security to apply', current_user;
            WHEN duplicate_object OR unique_violation THEN
                NULL;  -- created concurrently by the migration of another database
        END;
    END IF;
END
$$;

-- What the app needs, and no more: rows of its five tables (not schema_migrations, no DDL, no TRUNCATE),
-- the identity sequence of memory_jobs, and our SQL functions (memory_key, memory_candidates; PUBLIC has
-- EXECUTE by default, granted anyway in case an operator revoked it). Default privileges give the same
-- to objects later migrations create, when they run as this same user. Membership lets a BYPASSRLS
-- (non-superuser) user SET ROLE to it; a superuser needs none, any other user never switches.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'memory_proxy_app') THEN
        RETURN;
    END IF;
    IF NOT has_schema_privilege('memory_proxy_app', current_schema(), 'USAGE') THEN
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO memory_proxy_app', current_schema());
    END IF;
    GRANT SELECT, INSERT, UPDATE, DELETE
        ON vectors, users_vectors, memory_updates, global_vectors, memory_jobs TO memory_proxy_app;
    GRANT USAGE, SELECT ON SEQUENCE memory_jobs_id_seq TO memory_proxy_app;
    GRANT EXECUTE ON FUNCTION memory_key(text), memory_candidates(text, text, bit, integer) TO memory_proxy_app;
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES'
                   ' TO memory_proxy_app', current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT USAGE, SELECT ON SEQUENCES TO memory_proxy_app',
                   current_schema());
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT EXECUTE ON FUNCTIONS TO memory_proxy_app',
                   current_schema());
    IF (SELECT rolbypassrls AND NOT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, 'memory_proxy_app',
                           CASE WHEN current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END)
    THEN
        BEGIN
            EXECUTE format('GRANT memory_proxy_app TO %I', current_user);
        EXCEPTION WHEN insufficient_privilege OR invalid_grant_operation THEN
            RAISE NOTICE '% cannot be granted memory_proxy_app: it must not be BYPASSRLS', current_user;
        END;
    END IF;
END
$$;
