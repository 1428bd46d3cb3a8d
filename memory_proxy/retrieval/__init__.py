"""How a turn's memories are found and ranked (docs/RETRIEVAL.md).

- retrieve.py: both tiers for a turn within its time budget, from this process's index or one SQL statement
  (store/search.py), each memory confirmed still active before it is injected;
- indexes.py: the users' and teams' memories held in this process, kept fresh by `LISTEN memory_changed`;
  user_index.py: one holder's memories in numpy, searched by the SQL statement's rules (store/scoring.py);
- rank.py: relevance, recency and use, the minimum score, MMR; use_counts.py: uses written in batches;
- lexemes.py: a query's words as PostgreSQL analyzes them; late_interaction.py: the third arm of the fusion with
  the local embedder; contentless.py: a message with no words to search by.
"""
