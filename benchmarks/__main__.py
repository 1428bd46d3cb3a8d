"""Every benchmark in one command, each printing its table: ``python -m benchmarks [--quick]``.

relay (a/b/c/d side by side), retrieval (database only; 100k vectors, or 30k with --quick; 1M with
``python -m benchmarks.retrieval --sizes 1000000``), formation throughput and queue depth. The 10-minute
memory soak is separate: ``python -m benchmarks.soak``. Figures and their reading: docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys

from . import formation, relay, retrieval


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (~4 min instead of ~25)")
    quick = parser.parse_args(argv).quick
    relay.main(["--quick"] if quick else [])
    retrieval.main(["--quick"] if quick else ["--sizes", "100000"])
    formation.main(["--jobs", "200", "--seconds", "10"] if quick else [])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
