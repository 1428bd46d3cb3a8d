"""The team-memory benchmark's format and scorer (benchmarks/team_quality): ideal answers meet their own
expectations, and the scorer sees each way a team memory can go wrong."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from benchmarks.team_quality.scenarios import SPLITS, load_scenarios, simulate, split_files
from benchmarks.team_quality.score import judge

EXAMPLE = SPLITS["dev"] / "example.toml"


def test_every_scenario_of_both_splits_loads_and_its_ideal_answers_meet_its_expectations() -> None:
    scenarios = load_scenarios(split_files("all"))
    assert scenarios and all(judge(s, simulate(s)).passed for s in scenarios)


def test_a_personal_fact_in_a_team_is_counted_as_wrongly_shared() -> None:
    [scenario] = load_scenarios([EXAMPLE])
    result = simulate(scenario)
    assert result["scopes"]["personal:ana"] == ["User lives in Lyon."]
    wrong = copy.deepcopy(result)
    wrong["scopes"]["team:platform"].append(wrong["scopes"].pop("personal:ana")[0])
    verdict = judge(scenario, wrong)
    assert verdict.wrongly_shared == ["User lives in Lyon."] and verdict.personal_kept == 0 and not verdict.passed


def test_a_team_fact_stored_as_personal_is_counted_as_kept_personal() -> None:
    [scenario] = load_scenarios([EXAMPLE])
    wrong = copy.deepcopy(simulate(scenario))
    wrong["scopes"]["personal:ana"] += wrong["scopes"].pop("team:platform")
    verdict = judge(scenario, wrong)
    assert (verdict.team_kept, verdict.team_expected, verdict.team_kept_personal) == (0, 1, 1)


def test_a_removed_member_is_shown_nothing_of_the_team_and_without_the_removal_the_probe_fails() -> None:
    [scenario] = load_scenarios([EXAMPLE])
    assert simulate(scenario)["injected"][0] == []  # ben, the day after his removal
    kept_on = dataclasses.replace(scenario, changes=())
    verdict = judge(kept_on, simulate(kept_on))
    assert verdict.failures == ["probe 1 (ben) injected /5433/"] and verdict.probe_failures == 1


@pytest.mark.parametrize(("members", "problem"), [('["ben"]', "ana is not in platform"),
                                                    ('["ben", "carl"]', "editor ana is no member")])
def test_a_scenario_that_contradicts_its_teams_is_refused_when_loaded(tmp_path: Path, members: str,
                                                                      problem: str) -> None:
    text = EXAMPLE.read_text(encoding="utf-8").replace('members = ["ana", "ben"]', f"members = {members}")
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
        load_scenarios([path])
