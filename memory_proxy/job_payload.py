"""A formation job's payload: what a chat turn hands the formation worker, as a typed, versioned record.

The chat turn writes it (chat/turn.formation_payload), the outbox holds it (spool files are JSON), the queue
stores it (`memory_jobs.payload`, jsonb) and the worker reads it (formation/steps.py). `to_json` writes the
current version; `from_json` reads every version that may still wait in a queue, a spool file or a dead job:

- version 1 (no `version` key): the earlier messages as "user: …" / "assistant: …" strings;
- version 2: the earlier messages as {"role", "content"} objects;
- version 3: also the memories the chat model stored with `remember` in the turn, and the turn's model.

A done job's payload is `{}` (its chat text is dropped once formed): it reads as an empty payload. A payload
of a newer version than this code knows is refused (ValueError): the job fails and waits, retryable, for
a worker that reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

VERSION = 3


@dataclass(frozen=True, slots=True)
class Message:
    """One earlier message of the conversation, for reference: `role` is "user" or "assistant"."""

    role: str
    content: str

    def line(self) -> str:
        return f"{self.role}: {self.content}"


@dataclass(frozen=True, slots=True)
class Retrieved:
    """A memory injected into the turn: extraction does not learn it again."""

    id: str
    content: str


@dataclass(frozen=True, slots=True)
class Remembered:
    """A memory the chat model stored with the `remember` tool in the turn: formation does not store it
    again, and never replaces or retires it on the memory LLM's reading of the same words."""

    id: str
    content: str


@dataclass(frozen=True, slots=True)
class FormationPayload:
    user_message: str  # the user's part of the last message
    context: tuple[Message, ...] = ()  # the earlier messages, oldest first
    retrieved: tuple[Retrieved, ...] = ()
    assistant_reply: str = ""
    remembered: tuple[Remembered, ...] = ()
    model: str = ""  # the turn's model, as the client asked for it ("": not known)
    version: int = VERSION  # of the JSON form `to_json` writes

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "user_message": self.user_message,
                "context": [{"role": m.role, "content": m.content} for m in self.context],
                "retrieved": [{"id": m.id, "content": m.content} for m in self.retrieved],
                "assistant_reply": self.assistant_reply,
                "remembered": [{"id": m.id, "content": m.content} for m in self.remembered],
                "model": self.model}

    @classmethod
    def from_json(cls, data: Any) -> FormationPayload:
        """Any version's JSON form; ValueError or TypeError for one this code cannot read."""
        if not isinstance(data, Mapping):
            raise TypeError(f"a formation payload is a JSON object, not {type(data).__name__}")
        version = data.get("version", 1)
        if not isinstance(version, int) or not 1 <= version <= VERSION:
            raise ValueError(f"formation payload version {version!r}: this code reads versions 1 to {VERSION}")
        context = data.get("context") or []
        return cls(user_message=str(data.get("user_message") or ""),
                   context=tuple(_message_v1(m) if version == 1 else _message(m) for m in context),
                   retrieved=tuple(Retrieved(*_memory(m)) for m in data.get("retrieved") or []
                                   if isinstance(m, Mapping)),
                   assistant_reply=str(data.get("assistant_reply") or ""),
                   remembered=tuple(Remembered(*_memory(m)) for m in data.get("remembered") or []
                                    if isinstance(m, Mapping)),
                   model=str(data.get("model") or ""))

    def earlier(self, role: str) -> list[str]:
        """The contents of the earlier messages of `role`, oldest first."""
        return [m.content for m in self.context if m.role == role]


def _memory(raw: Mapping[str, Any]) -> tuple[str, str]:
    """A memory's (id, content), as `retrieved` and `remembered` hold it."""
    return str(raw.get("id", "")), str(raw.get("content", ""))


def _message(raw: Any) -> Message:
    if not isinstance(raw, Mapping):
        raise TypeError(f"a context message is a JSON object, not {type(raw).__name__}")
    return Message(str(raw.get("role", "")), str(raw.get("content", "")))


def _message_v1(line: str) -> Message:
    """A version-1 context line, "role: content" (role is "user" or "assistant")."""
    role, _, content = str(line).partition(": ")
    return Message(role, content)
