"""Check scenario files before they are used: each scenario's ideal answers, applied by `simulate` without
any proxy, must meet its own expectations (`score.judge`).

python -m benchmarks.team_quality.check_ideals FILE…   (prints each failing scenario; exit 1 if any)
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from .scenarios import load_scenarios, simulate
from .score import judge


def main(argv: list[str]) -> int:
    scenarios = load_scenarios([Path(a) for a in argv])
    bad = 0
    for scenario in scenarios:
        verdict = judge(scenario, simulate(scenario))
        if not verdict.passed:
            bad += 1
            print(f"- {scenario.id}: " + "; ".join(verdict.failures))
    langs = Counter(s.lang for s in scenarios)
    print(f"{len(scenarios)} scenarios ({', '.join(f'{k} {v}' for k, v in sorted(langs.items()))}), "
          f"{bad} whose ideal answers fail their own expectations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
