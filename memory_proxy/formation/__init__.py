"""How a chat turn becomes memories, after the reply (docs/FORMATION.md).

- worker.py: claims queued jobs, runs each to done, retried or dead, and runs maintenance on its schedule;
- steps.py: every step of one job, in order; each step's rules live in the module it names:
  evidence.py (the user's own words, grounding), provenance.py (an optional model check of which parts are
  theirs), extract.py (the extraction call), memory_text.py (a memory's text: one rule for every way in),
  team_facts.py (whose a fact is: the user's or a team's), resolve.py (what a fact does to the memories it meets,
  and what a forget request names), then write.py (the decisions stored in one transaction with the job's end);
- memory_llm.py: the memory LLM behind one structured-output call;
- maintain.py: expiry, merges and pruning over all users, on the worker's schedule.
"""
