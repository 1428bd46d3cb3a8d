"""benchmarks/answers run as its command: `--report` scores the results found on disk (replies written here by
hand: every one empty of the answers, then every one holding them all), for LoCoMo's questions and for the
questions about the user as a whole."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.support.data import ROOT
from tests.support.servers import run_benchmark

LOCOMO = ROOT / "benchmarks" / "locomo" / "locomo10.json"
QUESTIONS = 21  # conv-26:4: the first four sessions' questions of categories 1, 3 and 4 about the user


def reply(i: int, text: str) -> dict[str, object]:
    return {"question": i, "text": text, "given": [text], "requests": 1, "prompt_tokens": 100,
            "completion_tokens": 10, "seconds": 1.0, "first_token_s": 0.1, "error": ""}


def report(out: Path, text: str) -> str:
    directory = out / "conv-26:4"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "both.json").write_text(json.dumps(
        {"system": "both", "feed": "model", "replies": [reply(i, text) for i in range(QUESTIONS)]}))
    (directory / "profile.json").write_text(json.dumps({"system": "profile", "replies": [reply(0, text)]}))
    run = run_benchmark("answers", "--report", str(out), "--cases", "conv-26:4")
    assert run.returncode == 0, run.stderr[-4000:]
    return run.stdout


def test_the_report_counts_the_replies_that_hold_the_answer(tmp_path: Path) -> None:
    conversation = next(c for c in json.loads(LOCOMO.read_text()) if c["sample_id"] == "conv-26")
    every_answer = " ".join(str(q["answer"]) for q in conversation["qa"] if "answer" in q)

    nothing = report(tmp_path / "none", "I'm sorry, I don't know.")
    assert f"conv-26:4: {QUESTIONS} questions" in nothing
    assert re.search(rf"^\| both \| \*\*0/{QUESTIONS}\*\*", nothing, re.M)
    assert re.search(rf"^\| profile \| What do you know about me\? \| 0/{QUESTIONS} \| 0/{QUESTIONS} \|", nothing, re.M)

    everything = report(tmp_path / "all", every_answer)
    assert re.search(rf"^\| both \| \*\*{QUESTIONS}/{QUESTIONS}\*\*", everything, re.M)
    assert re.search(rf"^\| profile \| What do you know about me\? \| {QUESTIONS}/{QUESTIONS} \|", everything, re.M)
