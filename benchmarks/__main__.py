"""Every benchmark in one command, each printing its table: ``python -m benchmarks [--quick]``.

relay (a/b/c/d side by side), retrieval (database only; 100k vectors, or 30k with --quick; 1M with
``python -m benchmarks.retrieval --sizes 1000000``), formation throughput and queue depth. The 10-minute
memory soak is separate: ``python -m benchmarks.soak``. Figures and their reading: docs/BENCHMARKS.md.
"""

from __future__ import annotations

import sys

from . import formation, relay, retrieval


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    relay.main(["--quick"] if quick else [])
    retrieval.main(["--quick"] if quick else ["--sizes", "100000"])
    formation.main(["--jobs", "200", "--seconds", "10"] if quick else [])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
