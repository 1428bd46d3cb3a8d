"""Calls of our memory tools that a model wrote as text instead of as `tool_calls`.

Small models behind servers that parse calls out of tagged text often write the call itself as their answer,
`{"name": "search_memory", "arguments": {"query": "…"}}` with no `<tool_call>` tags, so the server's parser
passes it on as content; a chat template that shows the call with doubled braces gets them copied (the case
seen: docs/TOOLS.md, "Calls written as text"). Relayed, the user would read that JSON as the answer. Such a reply
is read here as the call it spells, but only in a form that leaves no doubt: the reply *starts* with one or
more JSON objects naming one of the tools offered this round, each optionally inside `<tool_call>` tags or a
code fence; whatever the model wrote after its calls is dropped (it answers again once it has the results).
Anything else is the model's text and is relayed as it is.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

_OPEN, _CLOSE, _FENCE = "<tool_call>", "</tool_call>", "```"
_NAME_KEY = re.compile(r'\{\s*"name"\s*:')
_NAMED = re.compile(r'\{\s*"name"\s*:\s*"([^"]*)"')  # the name given, once its closing quote came
_NAME_KEY_PREFIX = re.compile(r'\{\s*(?:"(?:n(?:a(?:m(?:e(?:"\s*)?)?)?)?)?)?$')  # `{"name":` cut anywhere
_DECODER = json.JSONDecoder()


def _unwrapped(text: str) -> str | None:
    """`text` without a leading code fence line and `<tool_call>` tag; None while a wrapper is still incomplete."""
    rest = text.lstrip()
    if rest.startswith(_FENCE):
        if "\n" not in rest:
            return None
        rest = rest.split("\n", 1)[1].lstrip()
    elif _FENCE.startswith(rest) and rest:
        return None
    if rest.startswith(_OPEN):
        return rest[len(_OPEN):].lstrip()
    return None if rest and _OPEN.startswith(rest) else rest


def may_be_written_call(text: str, names: tuple[str, ...]) -> bool:
    """Whether a reply that begins with `text` may still turn out to be a written call of one of `names` (so it
    is held): a JSON answer whose "name" is something else is text as soon as that name is read."""
    rest = _unwrapped(text)
    if rest is None or not rest:
        return True
    rest = rest[1:] if rest.startswith("{{") else rest
    if named := _NAMED.match(rest):
        return named.group(1) in names
    return bool(_NAME_KEY.match(rest) or _NAME_KEY_PREFIX.match(rest))


def written_calls(text: str, names: tuple[str, ...]) -> list[dict[str, Any]]:
    """The calls a whole reply spells, as `tool_calls` entries (with fresh ids), or [] when it is text."""
    calls: list[dict[str, Any]] = []
    rest: str | None = text.strip()
    while rest and (body := _unwrapped(rest)):
        if body.startswith("{{"):  # the template's doubled braces copied: every brace, or only the outer ones
            body = body.replace("{{", "{").replace("}}", "}")
        try:
            value, end = _DECODER.raw_decode(body)
        except ValueError:
            break
        if not isinstance(value, dict) or value.get("name") not in names:
            break
        arguments = value.get("arguments", {})
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function", "function": {
            "name": value["name"],
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)}})
        rest = body[end:].lstrip()
        for closing in (_CLOSE, _FENCE):
            rest = rest.removeprefix(closing).lstrip()
    return calls
