"""Secret detectors measured on corpora we did not write: `python -m benchmarks.secrets [--split test]`.

Secrets: benchmarks/secrets_corpus/secrets.jsonl, the test cases a maintained rule set (Betterleaks) publishes
for each of its rules. Look-alikes that must stay, by source:
- `betterleaks`: the same rule set's published false positives (credential-shaped on purpose);
- `django`: Django's translated messages about passwords, in 90 locales (tools/django_words.py);
- `technical`: git hashes, UUIDs, digests, versions, phone and product numbers from public sources
  (benchmarks/lookalike_corpus/, when built).
Detectors, side by side on the same lines:
- `proxy`: what the proxy runs before anything is stored or sent to the memory LLM (memory_proxy/redact/);
- `proxy-own-rules`: the same without Betterleaks (memory_proxy/redact/betterleaks.py): our patterns and Kingfisher's catalog;
- `betterleaks`: the whole Betterleaks rule set alone (PyPI `pybetterleaks`).
A secret line counts as caught when the detector changes (redacts) or flags it; a look-alike counts as a false
redaction when it is changed or flagged. `--split test` prints counts only: that split is not read case by case
by whoever tunes the detectors. `--show-missed` lists the dev split's misses.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from pybetterleaks import scan_text

from memory_proxy.redact import redact

ROOT = Path(__file__).parent
LOOKALIKES = {"betterleaks": ROOT / "secrets_corpus" / "lookalikes.jsonl",
              "django": ROOT / "secrets_corpus" / "django_lookalikes.jsonl",
              "technical": ROOT / "lookalike_corpus" / "lookalikes.jsonl"}


def load(path: Path, split: str) -> list[dict[str, str]]:
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [r for r in rows if split == "all" or r["split"] == split]


DETECTORS: dict[str, Callable[[str], bool]] = {
    "proxy": lambda text: redact(text).redacted,
    "proxy-own-rules": lambda text: redact(text, found=[]).redacted,
    "betterleaks": lambda text: bool(scan_text(text).findings),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", default="dev", choices=["dev", "test", "all"])
    parser.add_argument("--show-missed", action="store_true", help="the dev split's misses, by detector")
    args = parser.parse_args()
    secrets = load(ROOT / "secrets_corpus" / "secrets.jsonl", args.split)
    lookalikes = {name: load(path, args.split) for name, path in LOOKALIKES.items()}
    print(f"{args.split}: {len(secrets)} secrets of {len({r['rule'] for r in secrets})} rules; look-alikes: "
          + ", ".join(f"{len(rows)} {name}" for name, rows in lookalikes.items()) + "\n")
    print("| detector | secrets caught | rules with every sample caught | "
          + " | ".join(f"{name} look-alikes changed" for name in lookalikes) + " | ms / secret line |")
    print("|---|---|---|" + "---|" * len(lookalikes) + "---|")
    for name, flags in DETECTORS.items():
        started = time.perf_counter()
        caught = [flags(r["text"]) for r in secrets]
        ms = (time.perf_counter() - started) * 1000 / max(len(secrets), 1)
        false = {source: sum(flags(r["text"]) for r in rows) for source, rows in lookalikes.items()}
        rules = {r["rule"] for r in secrets}
        missed = {r["rule"] for r, c in zip(secrets, caught, strict=True) if not c}
        print(f"| {name} | {sum(caught)}/{len(secrets)} ({100 * sum(caught) / max(len(secrets), 1):.1f} %) | "
              f"{len(rules - missed)}/{len(rules)} | "
              + " | ".join(f"{n}/{len(lookalikes[s])} ({100 * n / max(len(lookalikes[s]), 1):.1f} %)"
                           for s, n in false.items()) + f" | {ms:.2f} |")
        if args.show_missed and args.split == "dev":
            for r, c in zip(secrets, caught, strict=True):
                if not c:
                    print(f"  missed by {name}: {r['rule']}: {r['text'][:120]!r}")


if __name__ == "__main__":
    main()
