"""The team-memory benchmark (benchmarks/team_quality): its scenarios, scorer, oracle and runner.

As commands first: `python -m benchmarks.team_quality.check_ideals FILE…` checks scenario files (each scenario's
ideal answers, applied without a proxy, must meet its own expectations: a scenario written wrong, or a scorer
that misses a way a team memory can go wrong, shows there), and `python -m benchmarks.team_quality --json OUT`
plays a scenario through a real proxy with the oracle. The helpers whose answers no run prints (the oracle's
replies to one prompt, the runner's team ids and its reading of an injected block, the table's rows, a verdict's
counts) are checked by the harness's own `python -m benchmarks.team_quality.self_check`, run here as a command.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.data import ROOT
from tests.support.servers import run_benchmark

HERE = ROOT / "benchmarks" / "team_quality"
EXAMPLE = HERE / "dev" / "example.toml"  # the README's example: a team fact, a personal fact, a removal
LYON = 'ideal = [{ fact = "User lives in Lyon.", type = "identity" }]'


def check_ideals(*files: Path) -> tuple[int, dict[str, list[str]], str]:
    """`check_ideals` on `files`: its exit status, the failures of each failing scenario, its output."""
    run = run_benchmark("team_quality.check_ideals", *map(str, files), timeout=120)
    failing = {m[1]: m[2].split("; ") for m in re.finditer(r"^- (\S+): (.*)$", run.stdout, re.MULTILINE)}
    return run.returncode, failing, run.stdout + run.stderr


def example_with(tmp_path: Path, old: str, new: str) -> Path:
    """The example scenario with one piece of its text replaced."""
    text = EXAMPLE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "changed.toml"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


# ---------------------------------------------------------------- as commands

@pytest.mark.parametrize("split", ["dev", "test", "holdout"])
def test_every_scenario_of_every_split_loads_and_its_ideal_answers_meet_its_expectations(split: str) -> None:
    status, failing, output = check_ideals(*sorted((HERE / split).glob("*.toml")))
    assert status == 0 and failing == {}, output
    counted = re.search(r"^(\d+) scenarios .*, 0 whose ideal answers fail their own expectations$", output, re.MULTILINE)
    assert counted and int(counted[1]) >= 1, output


def test_a_personal_fact_in_a_team_is_counted_as_wrongly_shared(tmp_path: Path) -> None:
    """Ana's home written into the team's memory (as a team fact must read: "Team's …"), not into hers."""
    shared = example_with(tmp_path, LYON, 'ideal = [{ fact = "Team\'s Ana lives in Lyon.", scope = "platform", '
                                          'type = "identity" }]')
    status, failing, output = check_ideals(shared)
    assert status == 1, output
    assert failing == {"td-en-staging-port": ["missing in personal ana: /lyon/",
                                              "personal fact in a team: \"Team's Ana lives in Lyon.\""]}, output


def test_a_removed_member_is_shown_nothing_of_the_team_and_without_the_removal_the_probe_fails(
        tmp_path: Path) -> None:
    status, failing, output = check_ideals(EXAMPLE)  # ben, the day after his removal: shown nothing
    assert status == 0 and failing == {}, output
    kept_on = example_with(tmp_path, 'remove = "ben"', 'add = "carl"')  # no removal: ben stays a member
    status, failing, output = check_ideals(kept_on)
    assert status == 1 and failing == {"td-en-staging-port": ["probe 1 (ben) injected /5433/"]}, output


@pytest.mark.parametrize(("members", "problem"), [('["ben"]', "ana is not in platform"),
                                                    ('["ben", "carl"]', "editor ana is no member")])
def test_a_scenario_that_contradicts_its_teams_is_refused_when_loaded(tmp_path: Path, members: str,
                                                                      problem: str) -> None:
    status, failing, output = check_ideals(example_with(tmp_path, 'members = ["ana", "ben"]', f"members = {members}"))
    assert status != 0 and failing == {} and "ValueError" in output and problem in output, output


@pytest.mark.slow
def test_the_oracle_run_of_the_example_keeps_each_fact_in_its_scope_and_shows_it_to_members_only(
        database_url: str, tmp_path: Path) -> None:
    """The whole harness on the README's example: the oracle's answers through a real proxy (a team fact named
    for its team, a personal one as it is), the team created under an id the API takes, each probe's injected
    block read back with whose each memory is, and the figures and table."""
    out = tmp_path / "run.json"
    run = run_benchmark("team_quality", "--llm", "oracle", "--only", "td-en-staging-port",
                        "--database-url", database_url, "--json", str(out))
    assert run.returncode == 0, run.stderr[-4000:]
    saved = json.loads(out.read_text())
    assert saved["settings"] == {"TEAM_FACTS": "auto"} and saved["figures"]["dev"]["passed"] == 1
    [example] = saved["dev"]
    assert example["failures"] == [] and example["errors"] == []
    assert example["scopes"]["team:platform"] == ["Team's staging database runs on port 5433."]
    assert example["scopes"]["personal:ana"] == ["User lives in Lyon."]
    assert example["injected"] == [[], ["User lives in Lyon.", "Team's staging database runs on port 5433."]]
    assert example["injected_teams"] == [[], ["", "platform"]]  # ben after his removal; ana, the team's marked
    assert "| dev | 1 | 1/1 | 0 | 0/1 | 1/1 | 1/1 | 0 | 0 | 0/2 |" in run.stdout.splitlines()


# ---------------------------------------------------------------- the harness's own checks

def test_the_harness_checks_of_its_helpers_pass() -> None:
    """The helpers whose answers no run prints (the split each scenario is counted in, a verdict's team facts kept
    personal, the oracle's reply to one prompt, the runner's team ids and its reading of an injected block, the
    table of a frozen split) are checked by the harness itself: `python -m benchmarks.team_quality.self_check`."""
    run = run_benchmark("team_quality.self_check", timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "self_check: 7 checks passed"
