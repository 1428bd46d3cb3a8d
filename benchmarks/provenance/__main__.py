"""python -m benchmarks.provenance --split dev|test [--show]: leaks and losses of own_words().

Scores proxy.memory.evidence.own_words(message).text, the text the memory model sees as the user's own.
--show prints the failing rows and is refused for test: that split is read as counts only.
"""

from __future__ import annotations

import argparse
import json

from benchmarks.provenance import SPLITS, score, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.provenance", description=__doc__)
    parser.add_argument("--split", choices=SPLITS, default="dev")
    parser.add_argument("--show", action="store_true", help="print the failing rows (dev only)")
    args = parser.parse_args(argv)
    if args.show and args.split != "dev":
        parser.error("--show reads rows case by case, which is for dev only; test is read as counts")
    from proxy.memory.evidence import own_words  # imported here: the corpus loads without the proxy

    result = score(lambda message: own_words(message).text, args.split)
    print(table(result))
    for failure in result["failures"] if args.show else []:
        print(json.dumps(failure, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
