"""`python -m memory_proxy`: the `memory-proxy` command (memory_proxy/cli)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
