-- 0016_mirrored_teams: a team made by the group mirror is marked as such, and the mirror reaches no other team
-- (memory_proxy/store/teams.py mirror_groups, docs/TEAMS.md).
--
-- Before, a mirrored group id named any team: whoever could set the groups header joined an operator's team by
-- naming its id. Now the mirror makes and keeps memberships only in teams it made itself (`mirrored`); an
-- operator's team is the operator's alone, whatever id it has.
ALTER TABLE teams ADD COLUMN mirrored boolean NOT NULL DEFAULT false;

-- The teams the mirror made so far: named by their id, about nothing, and every member put there by the mirror.
UPDATE teams t SET mirrored = true
 WHERE t.name = t.id AND t.about = ''
   AND EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = t.id)
   AND NOT EXISTS (SELECT 1 FROM team_members m WHERE m.team_id = t.id AND NOT m.mirrored);

-- Memberships the mirror put into an operator's team: not the operator's, so gone.
DELETE FROM team_members m USING teams t WHERE m.team_id = t.id AND m.mirrored AND NOT t.mirrored;
