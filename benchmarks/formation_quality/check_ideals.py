"""Check a scenario file before it is used: each user's ideal answers, applied by `scenarios.simulate` without
any proxy, must meet that user's own expectations (`score.judge`)."""

from __future__ import annotations

import sys
from pathlib import Path

from .scenarios import load_users, simulate
from .score import judge


def main(argv: list[str]) -> int:
    """python -m benchmarks.formation_quality.check_ideals FILE…: load, and judge each user's ideal answers
    against its own expectations (`inject` taken against every active memory). Prints failures; exit 1."""
    bad = 0
    users = load_users([Path(a) for a in argv])
    for user in users:
        verdict = judge(user, simulate(user))
        if not verdict.passed:
            bad += 1
            print(f"- {user.id}: " + "; ".join(verdict.failures))
    print(f"{len(users)} users, {bad} whose ideal answers fail their own expectations")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
