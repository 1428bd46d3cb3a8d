"""memory-proxy: an OpenAI-compatible chat proxy with long-term per-user memory."""

import os

# numpy's BLAS would run each small product (a user's vectors × the query, retrieval/indexes.py) on every core
# and spin while waiting: 3× the CPU for the same answer on a server whose cores serve requests and
# PostgreSQL. One thread; set before numpy is first imported (an operator's own value wins).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
