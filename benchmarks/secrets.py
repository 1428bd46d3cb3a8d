"""Secret detectors measured on a corpus we did not write: `python -m benchmarks.secrets [--split test]`.

The corpus is benchmarks/secrets_corpus/ (the test cases a maintained rule set publishes for each of its
rules: secrets.jsonl must be caught, lookalikes.jsonl must stay; its README says where they come from).
Detectors, side by side on the same lines:
- `proxy`: what the proxy runs before anything is stored or sent to the memory LLM (proxy/redact.py);
- `betterleaks`: PyPI `pybetterleaks` (the Betterleaks rules, by the gitleaks authors), if installed
  (`pip install pybetterleaks`).
A secret line counts as caught when the detector changes (redacts) or flags it; a look-alike counts as a
false redaction when it is changed or flagged. `--split test` prints counts only: that split is not read
case by case by whoever tunes the detectors. `--show-missed` lists the dev split's misses.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from proxy.redact import redact

CORPUS = Path(__file__).parent / "secrets_corpus"


def load(name: str, split: str) -> list[dict[str, str]]:
    rows = [json.loads(line) for line in (CORPUS / name).read_text(encoding="utf-8").splitlines() if line]
    return [r for r in rows if split == "all" or r["split"] == split]


def detectors() -> dict[str, Callable[[str], bool]]:
    found: dict[str, Callable[[str], bool]] = {"proxy": lambda text: redact(text).redacted}
    try:
        from pybetterleaks import scan_text  # type: ignore[import-not-found]
    except ImportError:
        return found
    found["betterleaks"] = lambda text: bool(scan_text(text).findings)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", default="dev", choices=["dev", "test", "all"])
    parser.add_argument("--show-missed", action="store_true", help="the dev split's misses, by detector")
    args = parser.parse_args()
    secrets, lookalikes = load("secrets.jsonl", args.split), load("lookalikes.jsonl", args.split)
    print(f"{args.split}: {len(secrets)} secrets of {len({r['rule'] for r in secrets})} rules, "
          f"{len(lookalikes)} look-alikes\n")
    print("| detector | secrets caught | rules with every sample caught | look-alikes redacted | ms / line |")
    print("|---|---|---|---|---|")
    for name, flags in detectors().items():
        started = time.perf_counter()
        caught = [flags(r["text"]) for r in secrets]
        false = [flags(r["text"]) for r in lookalikes]
        ms = (time.perf_counter() - started) * 1000 / max(len(secrets) + len(lookalikes), 1)
        rules = {r["rule"] for r in secrets}
        whole = {r["rule"] for r, c in zip(secrets, caught, strict=True) if not c}
        print(f"| {name} | {sum(caught)}/{len(secrets)} ({100 * sum(caught) / max(len(secrets), 1):.1f} %) | "
              f"{len(rules - whole)}/{len(rules)} | {sum(false)}/{len(lookalikes)} | {ms:.2f} |")
        if args.show_missed and args.split == "dev":
            for r, c in zip(secrets, caught, strict=True):
                if not c:
                    print(f"  missed by {name}: {r['rule']}: {r['text'][:120]!r}")


if __name__ == "__main__":
    main()
