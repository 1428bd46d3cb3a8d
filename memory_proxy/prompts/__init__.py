"""Prompt templates, the Markdown files beside this module: each starts with a comment listing its variables."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

PROMPTS = resources.files(__package__)  # in the package, checkout or wheel alike


@cache
def load_prompt(name: str) -> str:
    """A template without its leading variables comment."""
    text = (PROMPTS / name).read_text(encoding="utf-8")
    if text.startswith("<!--"):
        text = text.split("-->", 1)[1]
    return text.strip("\n")


def render(name: str, **variables: str) -> str:
    """Fill `{name}` placeholders in one pass, so a value containing braces is never re-expanded."""
    template = load_prompt(name)
    return re.sub(r"\{(\w+)\}", lambda m: variables.get(m.group(1), m.group(0)), template)
