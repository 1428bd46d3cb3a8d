"""Reading the proxy's formation prompts as the memory LLM receives them: which call a request is, the
user's message it carries, and the numbered known facts it lists."""

from __future__ import annotations

import re
from typing import Any

from memory_proxy.prompts import load_prompt

TASK = re.compile(r'^TASK "(\w+)"', re.MULTILINE)
MESSAGE = re.compile(r"<message>\n(.*?)\n</message>", re.DOTALL)
KNOWN = re.compile(r"^\[(\d+)\] (.*)$", re.MULTILINE)
NEW_FACT = re.compile(r"^New fact: (.*)$", re.MULTILINE)


def task_prompt(messages: list[dict[str, Any]]) -> str:
    """The user message that names a formation call's task (a re-ask appends messages after it)."""
    return next((str(m.get("content")) for m in messages
                 if m.get("role") == "user" and TASK.search(str(m.get("content", "")))), "")


def call_purpose(messages: list[dict[str, Any]]) -> str | None:
    """Which formation call a request is ("extract", "relate", "forget", "check", "provenance"): the task
    its user message names under the memory prompt; None for anything else (a chat turn)."""
    system = next((str(m.get("content")) for m in messages if m.get("role") == "system"), "")
    task = TASK.search(task_prompt(messages))  # the first line: the user's message comes after it
    return task.group(1) if task and load_prompt("memory.md") in system else None


def said_message(text: str) -> str | None:
    """The user's message between `<message>` tags in a prompt, or None when it holds none."""
    match = MESSAGE.search(text)
    return match.group(1) if match else None


def numbered(text: str) -> list[tuple[str, str]]:
    """The numbered lines (`[n] text`) of a prompt, in order: the known facts, or a message's parts."""
    return KNOWN.findall(text)


def known_facts(prompt: str) -> list[str]:
    """The known facts listed in a formation prompt, in their numbered order."""
    return [text for _, text in numbered(prompt.split("Message:", 1)[0])]


def new_fact(prompt: str) -> str:
    """The fact a relate or check call asks about (its `New fact:` line), or ""."""
    match = NEW_FACT.search(prompt)
    return match.group(1) if match else ""
