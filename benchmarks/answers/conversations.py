"""LoCoMo conversations as a user of the proxy lives them: sessions of chat turns, then questions about themself.

Speaker A is the user: each of their messages is one chat turn, said at its session's date and time; speaker B's
messages that follow it are the assistant's reply. A session is one chat (OpenWebUI sends the chat so far with every
turn). The questions are the conversation's QA whose evidence lies wholly in speaker A's messages, every category;
speaker A's name becomes "I"/"my" (the user asks about themself). Category 5 (adversarial) asks about something
that was never said of whom it names: the right reply says so.

The oracle memory model (a ceiling: benchmarks/formation_quality/scripted.OracleScript) answers a turn's extraction
with LoCoMo's own session observations about speaker A that cite that turn, "Caroline …" written "User …".
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..formation_quality.locomo import LOCOMO
from ..formation_quality.scenarios import IdealFact, Turn

SPLITS_FILE = Path(__file__).parent / "splits.toml"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass(frozen=True)
class Message:
    dia_id: str
    speaker: str
    text: str


@dataclass(frozen=True)
class Session:
    number: int
    at: datetime
    messages: list[Message]

    def turns(self, user: str) -> list[tuple[Message, str]]:
        """The user's messages, each with the other speaker's reply that follows it ("" when none does)."""
        out: list[tuple[Message, str]] = []
        for message in self.messages:
            if message.speaker == user:
                out.append((message, ""))
            elif out:
                out[-1] = (out[-1][0], f"{out[-1][1]} {message.text}".strip())
        return out


@dataclass(frozen=True)
class Question:
    asked: str  # as the user asks it (their name as "I")
    answer: str  # LoCoMo's; for category 5 the answer someone misled would give
    category: int
    evidence: tuple[str, ...]


@dataclass
class Conversation:
    id: str  # LoCoMo's sample_id, e.g. conv-26
    user: str  # speaker A
    other: str  # speaker B
    sessions: list[Session]
    questions: list[Question]
    observations: dict[str, list[str]] = field(default_factory=dict)  # dia_id -> LoCoMo's facts about the user

    @property
    def ends(self) -> datetime:
        return self.sessions[-1].at

    def oracle_turn(self, message: Message, reply: str) -> Turn:
        """The turn as the oracle memory model knows it: its ideal facts are LoCoMo's observations citing it."""
        facts = tuple(IdealFact(fact) for fact in self.observations.get(message.dia_id, ()))
        return Turn(day=0, user=message.text, assistant=reply or "OK.", ideal=facts)

    def transcript(self) -> str:
        """The whole conversation as text, each session under its date (the whole-context baseline)."""
        return "\n\n".join(f"[{s.at:%-d %B %Y, %H:%M}]\n" + "\n".join(f"{m.speaker}: {m.text}" for m in s.messages)
                           for s in self.sessions)


def _date(value: str) -> datetime:
    return datetime.strptime(value, "%I:%M %p on %d %B, %Y")


def _text(message: dict[str, str]) -> str:
    caption = message.get("blip_caption")
    return message["text"] + (f" [shares a photo: {caption}]" if caption else "")


def as_user(question: str, name: str) -> str:
    """The question as the named speaker asks it: "What did Caroline research?" -> "What did I research?"."""
    question = re.sub(rf"\b{re.escape(name)}'s\b", "my", question)
    return re.sub(rf"\b{re.escape(name)}\b", "I", question)


def _user_facts(text: str, name: str) -> str:
    return re.sub(rf"\b{re.escape(name)}'s\b", "User's", re.sub(rf"\b{re.escape(name)}\b", "User", text))


def load(conv_id: str) -> Conversation:
    raw = next(c for c in json.loads(LOCOMO.read_text()) if c["sample_id"] == conv_id)
    talk = raw["conversation"]
    user, other = talk["speaker_a"], talk["speaker_b"]
    sessions = []
    number = 1
    while f"session_{number}" in talk:
        messages = [Message(m["dia_id"], m["speaker"], _text(m)) for m in talk[f"session_{number}"]]
        sessions.append(Session(number, _date(talk[f"session_{number}_date_time"]), messages))
        number += 1
    spoken_by = {m.dia_id: m.speaker for s in sessions for m in s.messages}
    questions = [Question(as_user(q["question"], user), str(q.get("answer", q.get("adversarial_answer", ""))),
                          int(q["category"]), tuple(q["evidence"]))
                 for q in raw["qa"] if q.get("evidence") and all(spoken_by.get(e) == user for e in q["evidence"])]
    observations: dict[str, list[str]] = {}
    for session in raw.get("observation", {}).values():
        for fact, cited in session.get(user, []):
            for dia_id in [cited] if isinstance(cited, str) else cited:
                observations.setdefault(str(dia_id).strip(), []).append(_user_facts(fact, user))
    return Conversation(conv_id, user, other, sessions, questions, observations)


def split(name: str) -> list[str]:
    """The conversations of a split of splits.toml (dev or test)."""
    return list(tomllib.loads(SPLITS_FILE.read_text())[name]["conversations"])


def case(name: str) -> Conversation:
    """A conversation of the benchmark: "conv-26", whole; "conv-26:4", its first 4 sessions and only the questions of
    categories 1, 3 and 4 about them (the 21 questions every earlier figure on conv-26 used, and the issue's target)."""
    conv_id, _, sessions = name.partition(":")
    conversation = load(conv_id)
    if not sessions:
        return conversation
    kept = conversation.sessions[:int(sessions)]
    said = {m.dia_id for s in kept for m in s.messages}
    questions = [q for q in conversation.questions if q.category in (1, 3, 4) and set(q.evidence) <= said]
    return Conversation(name, conversation.user, conversation.other, kept, questions, conversation.observations)
