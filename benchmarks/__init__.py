"""Performance measurement harness for memory-proxy (run from the repo root: python -m benchmarks.relay)."""
