"""benchmarks/formation_cost.py: the figures it reports come from the formation calls the proxy really made."""

import json
from pathlib import Path

import pytest

from tests.support.servers import run_benchmark

pytestmark = pytest.mark.slow


def test_each_turns_calls_and_tokens_are_counted(database_url: str, tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    run = run_benchmark("formation_cost", "--only", "one-bun,change-bun-node", "--database-url", database_url,
                        "--out", str(out))
    assert run.returncode == 0, run.stderr[-4000:]
    figures = json.loads(out.read_text())
    assert (figures["users"], figures["turns"], figures["errors"]) == (2, 3, 0)
    # one-bun: an extraction; change-bun-node: an extraction, then one with a relate and its check
    assert figures["per_call"]["extract"]["calls"] >= 3 and figures["per_call"]["relate"]["calls"] >= 1
    assert figures["per_turn"]["calls"]["max"] >= 3 and figures["per_turn"]["prompt_tokens"]["mean"] > 1000
    assert "| calls |" in run.stdout
