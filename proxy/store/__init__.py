"""SQL only: connection pool and migrations (database.py), memories (memories.py).

Every function takes a connection or pool; nothing here knows about HTTP or LLMs.
"""
