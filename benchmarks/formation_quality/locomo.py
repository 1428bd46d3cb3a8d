"""LoCoMo through formation: a public conversation, fed turn by turn, and what each system injects for its QA.

    python -m benchmarks.formation_quality.locomo write --out DIR [--conv 0] [--sessions 4]
    python -m benchmarks.formation_quality --users DIR/locomo-26.toml --llm URL --peer mem0 --out DIR/formed
    python -m benchmarks.formation_quality --users DIR/locomo-26-raw.toml --llm oracle --out DIR/raw
    python -m benchmarks.formation_quality.locomo score DIR   # the table

Our own scenario users are written by us; LoCoMo (snap-research, CC BY-NC 4.0, benchmarks/locomo/) is
not. `write` turns the first `--sessions` sessions of one conversation into one scenario user:
speaker A is the user (each of their messages one turn, on its session's day), speaker B's reply is the
assistant's. The questions are the conversation's QA of categories 1, 3 and 4 (multi-hop, open-domain,
single-hop) whose evidence lies in speaker A's messages of those sessions; temporal (2) and adversarial
(5) questions are left out, since their answers are dates and absences that a word match cannot score.
The speaker's name in a question becomes "I"/"my" ("What did Caroline research?" → "What did I
research?"): the user asks about themself, as a user of the proxy would.

Three systems answer the same questions, each with what it would put before the model:
- memory-proxy: the memories formed from the turns (the real path: chat turns, jobs, worker), injected
  for the question;
- mem0: its `search(question, top_k=10)` over the memories its `add` formed from the same turns;
- raw turns: no formation at all; every message of both speakers stored as a memory ("Caroline: …",
  seeded through the API) and injected for the question by the proxy's own retrieval — plain retrieval
  over raw turns (the LoCoMo paper's setting).

`score` gives the share of questions whose answer is found in what was injected: at least half of the
answer's content words (three letters or more, not a stop word, compared on their first five letters)
appear there. A word match is lenient to paraphrase only as far as the first five letters go; it reads
no meaning, and favours raw turns, which keep the speakers' own words.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
LOCOMO = HERE.parent / "locomo" / "locomo10.json"
CATEGORIES = (1, 3, 4)
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("""the and for with that this from was were are has have had her his him she they them their
its not but she's he's about into onto over than then there what when where which who whom why how did
does do you your our out also just very some any all can could would should will one two""".split())  # noqa: SIM905


def _date(value: str) -> datetime:
    return datetime.strptime(value, "%I:%M %p on %d %B, %Y")


def _toml(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string or list is a TOML one


def _as_user(question: str, name: str) -> str:
    return re.sub(rf"\b{re.escape(name)}\b", "I", re.sub(rf"\b{re.escape(name)}'s\b", "my", question))


def write(out: Path, conv_index: int, sessions: int) -> None:
    conv = json.loads(LOCOMO.read_text())[conv_index]
    talk = conv["conversation"]
    a = talk["speaker_a"]
    first = _date(talk["session_1_date_time"])
    turns: list[dict[str, Any]] = []
    raw: list[str] = []
    spoken_by: dict[str, str] = {}
    last_day = 0.0
    for n in range(1, sessions + 1):
        day = (_date(talk[f"session_{n}_date_time"]) - first).total_seconds() / 86400
        last_day = day
        for message in talk[f"session_{n}"]:
            spoken_by[message["dia_id"]] = message["speaker"]
            text = message["text"] + (f" [image: {message['blip_caption']}]" if message.get("blip_caption") else "")
            raw.append(f"{message['speaker']}: {text}")
            if message["speaker"] == a:
                turns.append({"day": round(day, 4), "user": text, "assistant": ""})
            elif turns and turns[-1]["day"] == round(day, 4):
                turns[-1]["assistant"] = (turns[-1]["assistant"] + " " + text).strip()
    qa = [q for q in conv["qa"] if q.get("category") in CATEGORIES and q.get("evidence")
          and all(spoken_by.get(e) == a for e in q["evidence"])]
    questions = [_as_user(q["question"], a) for q in qa]
    tag = conv["sample_id"].removeprefix("conv-")
    probe_day = round(last_day + 1, 4)
    head = f'category = "locomo"\nlang = "en"\nquestions = {_toml(questions)}\n'
    probe = f'[user.probe]\nday = {probe_day}\nuser = {_toml(questions[0])}\n'
    body = "".join(f"[[user.turn]]\nday = {t['day']}\nuser = {_toml(t['user'])}\n"
                   f"assistant = {_toml(t['assistant'] or 'OK.')}\n" for t in turns)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"locomo-{tag}.toml").write_text(f'[[user]]\nid = "locomo-{tag}"\n{head}{body}{probe}')
    seeds = ", ".join(_toml(r) for r in raw)
    (out / f"locomo-{tag}-raw.toml").write_text(
        f'[[user]]\nid = "locomo-{tag}-raw"\n{head}seed = [{seeds}]\n[[user.turn]]\nday = 0\nuser = "ok"\n{probe}')
    (out / f"locomo-{tag}-qa.json").write_text(json.dumps(
        [{"question": q, "asked": asked, "answer": str(item["answer"]), "category": item["category"]}
         for q, asked, item in zip([i["question"] for i in qa], questions, qa, strict=True)], indent=1))
    print(f"{len(turns)} turns of {a} in {sessions} sessions, {len(raw)} raw messages, {len(qa)} questions -> {out}")


def _stems(text: str) -> set[str]:
    return {w[:5] for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP}


def found(answer: str, injected: list[str]) -> bool:
    """At least half of the answer's content words are in the injected texts (first five letters)."""
    wanted, there = _stems(answer), _stems(" ".join(injected))
    return bool(wanted) and len(wanted & there) * 2 >= len(wanted)


def score(directory: Path) -> str:
    qa_files = sorted(directory.glob("locomo-*-qa.json"))
    lines = ["| system | questions | answer found in what it injects | memories injected per question (mean) |",
             "|---|---|---|---|"]
    for qa_file in qa_files:
        qa = json.loads(qa_file.read_text())
        tag = qa_file.name.removesuffix("-qa.json")
        for result_file in sorted(directory.glob("*/*.json")):
            result = json.loads(result_file.read_text())
            users = {u["id"]: u for u in result.get("users", [])} if isinstance(result, dict) else {}
            for user_id, label in ((tag, result.get("system", "?")), (f"{tag}-raw", "raw turns (proxy retrieval)")):
                user = users.get(user_id)
                if not user or len(user.get("asked", [])) != len(qa):
                    continue
                hits = sum(found(item["answer"], asked) for item, asked in zip(qa, user["asked"], strict=True))
                mean = sum(len(a) for a in user["asked"]) / len(qa)
                lines.append(f"| {label} ({tag}) | {len(qa)} | {hits}/{len(qa)} ({100 * hits / len(qa):.0f} %) "
                             f"| {mean:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation_quality.locomo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write", help="write the scenario users and the questions")
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--conv", type=int, default=0, help="index in locomo10.json (default 0: conv-26)")
    w.add_argument("--sessions", type=int, default=4, help="the first N sessions (default 4)")
    s = sub.add_parser("score", help="the table, from the runs' result files under DIR")
    s.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    if args.command == "write":
        write(args.out, args.conv, args.sessions)
    else:
        print(score(args.directory))


if __name__ == "__main__":
    sys.exit(main())
