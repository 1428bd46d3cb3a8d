"""Questions about the user as a whole ("what do you know about me?", issue 51): asked of the proxy after the feed
`model`, answered from the user's profile (memory_proxy/retrieval/about_user.py: their newest facts first) as
shipped — system `profile` — and, beside it, from similarity search alone (`profile_search`: the embedder's
decision turned off in this process). A reply is scored by how many of the conversation's answers about the user
(LoCoMo's questions of categories 1–4, each answer's words as scoring.holds_answer finds them) it holds, and how
many of them reached the model.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from memory_proxy.retrieval import about_user

from ..formation_quality.locomo import found
from .conversations import Conversation, Question
from .scoring import holds_answer

SYSTEMS = ("profile", "profile_search")
ASKED = ("What do you know about me?", "Tell me about myself.", "What have I told you about my life so far?")


def asking(conversation: Conversation) -> Conversation:
    """The conversation with the questions about the user as a whole instead of LoCoMo's."""
    return replace(conversation, questions=[Question(q, "", 0, ()) for q in ASKED])


@contextlib.contextmanager
def answered_by(system: str) -> Iterator[None]:
    """For `profile_search`, no question is taken for one about the user as a whole while the questions run."""
    calibrated = dict(about_user.CALIBRATED)
    if system == "profile_search":
        about_user.CALIBRATED.clear()
    try:
        yield
    finally:
        about_user.CALIBRATED.update(calibrated)


def lines(directory: Path, conversation: Conversation) -> list[str]:
    """The table's rows: per system and question, the answers the reply holds and those that reached the model."""
    facts = [q for q in conversation.questions if q.category != 5]
    rows = []
    for system in SYSTEMS:
        path = directory / f"{system}.json"
        if not path.exists():
            continue
        for reply in json.loads(path.read_text())["replies"]:
            held = sum(holds_answer(reply["text"], q.answer, q.category) for q in facts)
            reached = sum(found(q.answer, reply["given"]) for q in facts)
            rows.append(f"| {system} | {ASKED[reply['question']]} | {held}/{len(facts)} | {reached}/{len(facts)} | "
                        f"{reply['prompt_tokens']} |")
    if not rows:
        return []
    return ["\nquestions about the user as a whole: the answers about the user the reply holds\n",
            "| system | asked | answers in the reply | answers that reached the model | prompt tokens |",
            "|---|---|---|---|---|", *rows]
