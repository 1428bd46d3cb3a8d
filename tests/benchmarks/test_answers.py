"""benchmarks/answers: the cases it asks (the frozen splits, the questions as the user asks them), how a reply is
scored, and the report it prints from results on disk (run as its command: `--report`)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.answers.conversations import as_user, case, split
from benchmarks.answers.profile import ASKED
from benchmarks.answers.scoring import f1, holds_answer
from tests.support.servers import run_benchmark


def test_the_splits_are_the_frozen_ones_and_conv_26_4_is_the_21_questions_of_every_earlier_figure() -> None:
    assert split("dev") == ["conv-26"] and split("test") == ["conv-30", "conv-49", "conv-50"]
    short = case("conv-26:4")
    assert len(short.sessions) == 4 and len(short.questions) == 21
    assert {q.category for q in short.questions} <= {1, 3, 4}
    assert all(q.evidence and all(e.startswith(("D1:", "D2:", "D3:", "D4:")) for e in q.evidence)
               for q in short.questions)
    assert as_user("What did Caroline research?", "Caroline") == "What did I research?"
    assert as_user("Where is Caroline's home?", "Caroline") == "Where is my home?"


def test_a_reply_holds_an_answer_by_its_words_and_an_adversarial_one_by_saying_it_was_not_said() -> None:
    assert holds_answer("You researched adoption agencies last May.", "Adoption agencies", 4)
    assert not holds_answer("You researched gardening.", "Adoption agencies", 4)
    assert holds_answer("That was never mentioned in our conversations.", "a red bike", 5)
    assert not holds_answer("You bought a red bike.", "a red bike", 5)
    assert f1("adoption agencies", "Adoption agencies", 4) == 1.0
    assert f1("pottery, camping", "camping, pottery, painting", 1) == 2 / 3  # multi-hop: the mean over parts


def test_the_report_scores_the_results_found_on_disk(tmp_path: Path) -> None:
    conversation = case("conv-26:4")
    directory = tmp_path / "conv-26:4"
    directory.mkdir()
    right = [conversation.questions[i].answer for i in range(3)]

    def reply(i: int, text: str) -> dict[str, object]:
        return {"question": i, "text": text, "given": [text], "requests": 1, "prompt_tokens": 100,
                "completion_tokens": 10, "seconds": 1.0, "first_token_s": 0.1, "error": ""}

    replies = [reply(i, right[i] if i < 3 else "I don't know.") for i in range(len(conversation.questions))]
    (directory / "both.json").write_text(json.dumps({"system": "both", "feed": "model", "replies": replies}))
    told = " ".join(right)
    (directory / "profile.json").write_text(json.dumps({"system": "profile", "replies": [
        reply(0, told), *(reply(i, "Nothing.") for i in range(1, len(ASKED)))]}))
    run = run_benchmark("answers", "--report", str(tmp_path), "--cases", "conv-26:4")
    assert run.returncode == 0, run.stderr[-4000:]
    [row] = [line for line in run.stdout.splitlines() if line.startswith("| both |")]
    assert "**3/21**" in row
    [profile] = [line for line in run.stdout.splitlines() if line.startswith(f"| profile | {ASKED[0]} |")]
    held = sum(holds_answer(told, q.answer, q.category) for q in conversation.questions)
    assert held >= 3 and f"| {held}/21 | {held}/21 |" in profile
