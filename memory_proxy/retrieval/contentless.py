"""A cheap text check that saves work without any model call.

`contentless(text)`: no word at all, or only acknowledgements and greetings ("ok", "thanks", "yes please",
"merci"). Selective retrieval skips the query tier for such a turn (the always-on tier is still
injected), and formation makes no LLM call for it (FORMATION_SKIP_TRIVIAL). It decides nothing about
meaning beyond "there is nothing here": a message with any other word goes to the model, in any language,
so a word missing from the list costs one LLM call, never a fact. The list is mostly English, with the
commonest thanks of a few other languages.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)?", re.UNICODE)
_ACKNOWLEDGEMENTS = frozenset("""
ok okay k kk sure yes yeah yep yup no nope nah thanks thank thx ty cheers great cool nice good fine
perfect awesome alright right got it understood continue go on please more again hi hello hey bye
goodbye morning evening night lol haha wow hmm hm ah oh merci danke gracias grazie obrigado bien
super thumbs up you too welcome
""".split())  # noqa: SIM905 - word lists read better as text


def words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def contentless(text: str) -> bool:
    """Nothing to search for or learn from: no word at all, or only acknowledgements and greetings."""
    found = words(text)
    return not found or all(w in _ACKNOWLEDGEMENTS for w in found)
