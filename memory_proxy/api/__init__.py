"""The management API under /api/v1 and the memory page at /memories/ (docs/MANAGEMENT.md, docs/TEAMS.md).

- memory_routes.py: a user's memories (list, search, get, create, edit, pin, delete, history, restore), export,
  erasure, and the page (`browser/`: static files, no build step);
- team_routes.py: teams and their members; team_memory_routes.py: a team's memories and proposals, the same
  handlers with the team as the holder;
- input_bounds.py: what the API accepts (bodies, parameters, cursors, sizes), checked before anything costly;
- export_format.py: the one export format, written by the API and the CLI and read back by `memories import`.
"""
