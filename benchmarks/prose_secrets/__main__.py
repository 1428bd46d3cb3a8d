"""Score memory_proxy.redact on the prose-secrets corpus: ``python -m benchmarks.prose_secrets --split test``.

Prints counts per language and the totals, never a row's text; ``--show-misses`` (dev only) adds the rows the
detector got wrong, with its output.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import Row, score


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.prose_secrets", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--split", choices=("dev", "test"), default="dev")
    parser.add_argument("--show-misses", action="store_true", help="print the missed rows (dev only)")
    args = parser.parse_args(argv)
    if args.show_misses and args.split != "dev":
        parser.error("--show-misses works on dev only: test is run for counts, never read case by case")

    from memory_proxy.redact import redact

    misses: list[tuple[Row, str]] = []
    counts = score(lambda text: redact(text).text, args.split, misses if args.show_misses else None)
    print(f"prose secrets, split {args.split}")
    print(f"{'lang':<6}{'caught':>16}{'%':>7}{'changed':>16}{'%':>7}")
    for lang in [*sorted(k for k in counts if k != "all"), "all"]:
        c = counts[lang]
        caught = 100 * c["caught"] / c["positives"] if c["positives"] else 0.0
        changed = 100 * c["changed"] / c["negatives"] if c["negatives"] else 0.0
        print(
            f"{lang:<6}{c['caught']:>7} of {c['positives']:<5}{caught:>6.1f}%"
            f"{c['changed']:>7} of {c['negatives']:<5}{changed:>6.1f}%"
        )
    for row, output in misses:
        print(
            json.dumps(
                {"id": row["id"], "kind": row["kind"], "text": row["text"], "output": output},
                ensure_ascii=False,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
