"""A memory's text (memory_proxy/formation/memory_text.py): one rule for every way in, and the same "same text" as SQL."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from memory_proxy.formation.memory_text import MAX_MEMORY_BYTES, memory_content, same_text_key

SAME_TEXT_CASES = [
    "User likes tea.", "  user LIKES tea!!  ", "User\tlikes\n\ntea", "...User likes tea", "User likes tea. ",
    "Straße in München", "ÉCOLE normale!", "tea\u00a0time", "emoji 🍵.", "a.b.c", "!!!", "",
]  # not "İstanbul": Python lower-cases İ to i + a combining dot, the database's locale may not


@pytest.mark.parametrize("text", SAME_TEXT_CASES)
async def test_same_text_key_is_the_databases_memory_key(db: Any, text: str) -> None:
    row = await (await db.execute("SELECT memory_key(%s)", [text])).fetchone()
    assert hashlib.md5(same_text_key(text).encode()).hexdigest() == row[0]


def test_texts_that_differ_only_in_case_spacing_and_end_marks_are_the_same() -> None:
    assert len({same_text_key(t) for t in SAME_TEXT_CASES[:5]}) == 1
    assert same_text_key("User likes tea.") != same_text_key("User likes coffee.")


def test_content_collapses_spaces_redacts_and_says_why_it_cannot_be_stored() -> None:
    content = memory_content("  My   API key is sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0" + " ")
    assert content.text == "My API key is [REDACTED: api_key]" and content.secrets == ("api_key",)
    assert memory_content("   ").problem == "the memory text is empty"
    assert memory_content("x" * (MAX_MEMORY_BYTES + 1)).problem == f"the memory text is over {MAX_MEMORY_BYTES} bytes"
    assert memory_content("a\x00b").problem == "the memory text holds NUL or a lone surrogate"
    assert memory_content("User likes tea.").problem is None
