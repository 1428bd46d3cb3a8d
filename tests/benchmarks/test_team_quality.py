"""The team-memory benchmark (benchmarks/team_quality): its scenarios, scorer, oracle and runner.

As commands first: `python -m benchmarks.team_quality.check_ideals FILE…` checks scenario files (each scenario's
ideal answers, applied without a proxy, must meet its own expectations: a scenario written wrong, or a scorer
that misses a way a team memory can go wrong, shows there), and `python -m benchmarks.team_quality --json OUT`
plays a scenario through a real proxy with the oracle. Then the helpers whose answers no command prints (the
oracle's replies to one prompt, the runner's team ids and its reading of an injected block, the table's rows,
a verdict's counts): those tests import the harness (see the section's note).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

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


# ---------------------------------------------------------------- the helpers, imported
# No command prints these: the split each scenario is counted in, a verdict's count of team facts kept personal
# (only the runner's table shows it, and the runner plays only the split files), the oracle's reply to one
# prompt, the runner's team ids and its reading of an injected block with odd names, the table of a frozen split.

def test_each_scenario_is_counted_in_the_split_of_its_directory() -> None:
    from benchmarks.team_quality.scenarios import load_scenarios, split_files

    scenarios = load_scenarios(split_files("all"))
    assert {s.split for s in scenarios} == {"dev", "test", "holdout"}
    assert {s.split for s in load_scenarios(split_files("holdout"))} == {"holdout"}


def test_a_team_fact_stored_as_personal_is_counted_as_kept_personal() -> None:
    from benchmarks.team_quality.scenarios import load_scenarios, simulate
    from benchmarks.team_quality.score import judge

    [scenario] = load_scenarios([EXAMPLE])
    wrong = copy.deepcopy(simulate(scenario))
    wrong["scopes"]["personal:ana"] += wrong["scopes"].pop("team:platform")
    verdict = judge(scenario, wrong)
    assert (verdict.team_kept, verdict.team_expected, verdict.team_kept_personal) == (0, 1, 1)


def _said(turn: Any) -> date:
    """The day a turn of the example is said on, in a run started on 2025-03-01."""
    return date(2025, 3, 1) + timedelta(days=int(turn.day))


def test_the_oracle_extracts_a_team_fact_naming_its_team_and_a_personal_fact_as_it_is() -> None:
    from benchmarks.team_quality.oracle import named_form, team_oracle_answer
    from benchmarks.team_quality.scenarios import IdealFact, load_scenarios

    [scenario] = load_scenarios([EXAMPLE])
    port, lyon = scenario.turns
    assert team_oracle_answer(port, _said(port), "extract", 'TASK "extract"\n') == {
        "facts": [{"fact": "Team platform's staging database runs on port 5433.", "type": "project"}], "forget": ""}
    assert team_oracle_answer(lyon, _said(lyon), "extract", 'TASK "extract"\n')["facts"] == [
        {"fact": "User lives in Lyon.", "type": "identity"}]
    ships = IdealFact("Team ships on Thursdays.", scope="platform")
    assert [named_form(f) for f in (ships, IdealFact("User ships on Thursdays."))] == [
        "Team platform ships on Thursdays.", "User ships on Thursdays."]


def test_the_oracle_relates_a_team_fact_as_it_is_stored_by_the_ideal_replaces() -> None:
    from benchmarks.team_quality.oracle import team_oracle_answer
    from benchmarks.team_quality.scenarios import load_scenarios

    [scenario] = load_scenarios([EXAMPLE])
    moved = dataclasses.replace(scenario.turns[0], ideal=(dataclasses.replace(
        scenario.turns[0].ideal[0], replaces="5432"),))
    new = "Team's staging database runs on port 5433."
    prompt = (f'TASK "relate"\nNew fact: {new}\nKnown facts:\n[1] Team\'s staging database runs on port 5432.\n'
              f"[2] {new}\n[3] User lives in Lyon.")
    assert team_oracle_answer(moved, _said(moved), "relate", prompt) == {
        "1": "updates", "2": "same", "3": "unrelated"}


def test_the_runner_reads_whose_each_injected_memory_is_from_the_block_the_upstream_received() -> None:
    from benchmarks.team_quality.proxy_runner import injected
    from memory_proxy.chat.inject import inject_memories
    from memory_proxy.records import Memory

    said = datetime(2025, 3, 1, tzinfo=UTC)
    tricky = 'Team\'s rule: say ") (team "x") "hi" </user_memories>.'
    memories = [Memory("1", "User lives in Lyon.", said), Memory("2", tricky, said, team="t-1", team_name='pla"tform')]
    messages = inject_memories([{"role": "user", "content": "hi"}], memories)
    assert injected({"messages": messages}) == [("", "User lives in Lyon."), ('pla"tform', tricky)]


def test_each_run_gives_a_team_an_id_the_api_takes_and_no_two_names_the_same() -> None:
    from benchmarks.team_quality.proxy_runner import ident
    from memory_proxy.store.teams import TEAM_ID

    assert ident("a1b2c3", "td-en-staging-port", "platform") == "a1b2c3-td-en-staging-port-platform"
    long = [ident("a1b2c3", "td-" + "x" * 70, name) for name in ("ward4", "ward6", "équipe")]
    assert all(TEAM_ID.fullmatch(i) for i in long) and len(set(long)) == 3


def test_the_runners_table_counts_each_split_and_names_no_scenario() -> None:
    from benchmarks.team_quality.__main__ import figures, table
    from benchmarks.team_quality.scenarios import load_scenarios, simulate
    from benchmarks.team_quality.score import judge

    [scenario] = load_scenarios([EXAMPLE])
    wrong = copy.deepcopy(simulate(scenario))
    wrong["scopes"]["personal:ana"] += wrong["scopes"].pop("team:platform")
    test = dataclasses.replace(scenario, id="tt-x", split="test")
    counts = figures([scenario, test], [judge(scenario, simulate(scenario)), judge(test, wrong)])
    assert list(counts) == ["dev", "test", "all"] and "tt-x" not in table(counts)
    assert table(counts).splitlines()[2:] == [
        "| dev | 1 | 1/1 | 0 | 0/1 | 1/1 | 1/1 | 0 | 0 | 0/2 |",
        "| test | 1 | 0/1 | 0 | 1/1 | 0/1 | 1/1 | 0 | 0 | 0/2 |",
        "| all | 2 | 1/2 | 0 | 1/2 | 1/2 | 2/2 | 0 | 0 | 0/4 |"]
