"""Performance measurement harness for memory-proxy (run from the repo root: python -m benchmarks.relay)."""

import memory_proxy  # noqa: F401 - first: it sets numpy's BLAS threads before numpy is imported, as the server runs
