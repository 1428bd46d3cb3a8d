"""LOG_MEMORY_TEXT=false: what keeps the text of facts, turns and model replies out of every log line.

Fact text reaches a line by two roads. Our `memory_decision` lines list facts: each is logged by its length.
And free text that someone else formed — an exception's message, a traceback, a library's own line —
may quote what it was handed: pydantic quotes the start and end of an unreadable model reply, instructor
logs that error, an SDK's HTTP error quotes the server's error body (which may echo the prompt), a
database error's DETAIL quotes the row. So the rule, one for every line:

- our own fields are kept (event names, ids, counts, lengths, reasons: values our code chose);
- an `error` field keeps only the exception type name it starts with (`ValueError: …` → `ValueError`);
  any other text there is withheld;
- a traceback keeps its frames (code, file, line) and each exception's type, not its message;
- a library's line keeps its logger, level and the format string of its message (the library's own words:
  the values formatted into it are dropped); a message that came preformatted (an f-string: anything may
  be in it) is withheld whole.

Rule-based on purpose: whether a message quotes a user is not decidable from the text, so what could be
someone else's words is dropped, and only our own fields and a library's constant words are kept.
"""

from __future__ import annotations

import logging
import re
import sys
import traceback
from typing import Any

WITHHELD = "(withheld: LOG_MEMORY_TEXT=false)"
FREE_TEXT_FIELDS = ("error", "exception")  # where our lines put exception text
_TYPE_NAME = re.compile(r"[A-Za-z_][\w.]*(?=: |:$|\(|$)")  # "KeyError: …", "KeyError(…)", "KeyError"


def facts_as_lengths(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """A `memory_decision` line keeps its facts' actions, ids and lengths, not their text."""
    for key in ("decisions", "dropped"):
        if isinstance(event.get(key), list):
            event[key] = [{**item, "fact": len(item["fact"])} if isinstance(item, dict) and
                          isinstance(item.get("fact"), str) else item for item in event[key]]
    return event


def foreign_text_withheld(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    """Exception text, tracebacks and libraries' messages reduced as the module docstring says. Runs before
    structlog's `format_exc_info`, on our lines and on the stdlib records routed through ProcessorFormatter."""
    record = event.get("_record")
    if event.get("_from_structlog") is False and isinstance(record, logging.LogRecord):
        template = str(record.msg)
        event["event"] = template if template != event.get("event") else WITHHELD
    for key in FREE_TEXT_FIELDS:
        if isinstance(event.get(key), str):
            event[key] = type_name_of(event[key])
    exc = _exception_of(event.pop("exc_info", None))
    if exc is not None:
        event["exception"] = traceback_without_messages(exc)
    return event


def type_name_of(text: str) -> str:
    """The exception type name `text` starts with, else WITHHELD."""
    match = _TYPE_NAME.match(text)
    return match.group(0) if match else WITHHELD


def traceback_without_messages(exc: BaseException) -> str:
    """Python's traceback layout, each exception of the chain shown by its type only."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = "".join(traceback.format_tb(current.__traceback__))
        kind = type(current)
        parts.append(f"Traceback (most recent call last):\n{frames}{kind.__module__}.{kind.__qualname__}: {WITHHELD}")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n\nThe above exception led to the following one:\n\n".join(reversed(parts))


def _exception_of(exc_info: Any) -> BaseException | None:
    """structlog's `exc_info` forms: an exception, a sys.exc_info() tuple, or True (the one being handled)."""
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple) and len(exc_info) == 3:
        return exc_info[1] if isinstance(exc_info[1], BaseException) else None
    return sys.exc_info()[1] if exc_info else None
