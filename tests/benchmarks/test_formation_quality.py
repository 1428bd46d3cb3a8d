"""benchmarks/formation_quality run as its command: what it is told on its command line reaches the proxy it runs.
(Its runs with the oracle and the scripted fake on the development and CI users test formation itself: they are in
tests/formation/test_steps.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.data import SCENARIOS
from tests.support.servers import run_benchmark

pytestmark = pytest.mark.slow


def test_a_setting_given_with_set_reaches_the_proxy_of_the_run(database_url: str, tmp_path: Path) -> None:
    """`--set NAME=VALUE` is how a setting is tried on dev before it is built in (a frequency penalty was). The
    proxy of the run says its memory LLM model at start: the one given with --set, over the runner's own."""
    run = run_benchmark("formation_quality", "--users", str(SCENARIOS / "users.toml"), "--only", "one-bun",
                        "--set", "MEMORY_LLM_MODEL=model-set-by-the-test", "--set", "FORMATION_NEIGHBORS=8",
                        "--database-url", database_url, "--out", str(tmp_path))
    assert run.returncode == 0, run.stderr[-4000:]
    [user] = json.loads((tmp_path / "verdicts.json").read_text())["memory-proxy"]
    assert user["user"] == "one-bun" and user["failures"] == []
    lines = [json.loads(line) for line in (tmp_path / "proxy.log").read_text().splitlines() if line.startswith("{")]
    [started] = [line for line in lines if line.get("event") == "started"]
    assert started["memory_llm"] == "openai:model-set-by-the-test"


def test_a_setting_without_a_value_is_refused_before_anything_runs(tmp_path: Path) -> None:
    refused = run_benchmark("formation_quality", "--set", "no-equals-sign", "--out", str(tmp_path / "out"))
    assert refused.returncode == 2 and "expected NAME=VALUE" in refused.stderr
    assert not (tmp_path / "out").exists()
