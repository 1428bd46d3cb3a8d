"""What memory means: how a turn's memories are found and ranked, and how facts are formed.

- retrieve.py (both tiers for a turn, within its time budget; from index.py, the users' memories held in
  this process and searched by user_index.py, else store/search.py) → rank.py (score, floor, MMR) → uses.py (batched use counts);
  lexemes.py: a query's words as PostgreSQL analyzes them; embed.py / local_embed.py: the embedders;
- formation.py (every rule of what gets stored) with evidence.py, heuristics.py, extract.py (the one LLM
  call, via llm.py), resolve.py (add / supersede / retire), content.py (a memory's text: one rule);
- maintain.py (scheduled expiry, merges, pruning), reembed.py (after the embedding model changes),
  document.py (the text a memory is embedded as).
SQL is in store/; this package calls it and never the other way round.
"""
