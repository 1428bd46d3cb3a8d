"""`python -m proxy`: the `memory-proxy` command (proxy/cli)."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
