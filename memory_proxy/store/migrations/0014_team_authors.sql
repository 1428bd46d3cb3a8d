-- 0014_team_authors: who wrote a team's memory, and who changed it (docs/TEAMS.md).
--
-- A team's memory is held by 'team:<id>' (0013), but a person taught it and people change it. Both columns
-- default to the transaction's acting member, `memory_proxy.actor` (set by memory_proxy/store/scope.py for the
-- team routes of the management API; empty, so NULL, everywhere else): a link made then is that member's
-- (its `author`), an audit row written then names them (its `actor`). A user's own rows leave both NULL.
-- Erasure keeps a team's memories for the team and makes them nobody's (both columns set to NULL).
ALTER TABLE users_vectors ADD COLUMN author text DEFAULT nullif(current_setting('memory_proxy.actor', true), '');
ALTER TABLE memory_updates ADD COLUMN actor text DEFAULT nullif(current_setting('memory_proxy.actor', true), '');
-- "What did this user write in teams": export and erasure.
CREATE INDEX users_vectors_author ON users_vectors (author) WHERE author IS NOT NULL;
CREATE INDEX memory_updates_actor ON memory_updates (actor) WHERE actor IS NOT NULL;
