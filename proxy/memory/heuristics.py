"""Cheap text heuristics that save work without any model call.

- `contentless(query)`: selective retrieval (seed 003). "ok", "thanks", "yes please" carry nothing to
  search for: the query tier is skipped (the always-on tier is still injected).
- `trivial_turn(user_message)`: the quality filter of formation (seed 000). A turn that cannot hold a
  fact about the user is skipped before the extraction LLM: an acknowledgement or greeting, or a
  message without any first-person word ("What is the capital of
  France?", "Write a haiku about autumn"): facts about the user are stated in the first person
  ("I moved to Berlin", "my daughter…", "je suis…"). First-person words are listed for English,
  French, German, Spanish, Italian, Portuguese and Dutch; a message in another language is never
  judged trivial by that rule (better an LLM call than a lost fact).
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
_FIRST_PERSON = frozenset("""
i i'm im i've i'd i'll me my mine myself we we're we've our ours us ourselves
je j' j'ai j'aime moi mon ma mes nous notre nos
ich mich mir mein meine meinen meinem meiner wir uns unser unsere
yo me mi mis conmigo nosotros nosotras nuestro nuestra
io mi mio mia miei mie noi nostro nostra
eu meu minha meus minhas nós nosso nossa
ik mij mijn wij ons onze
""".split())  # noqa: SIM905 - word lists read better as text
_LATIN = re.compile(r"^[\x00-\x7f\u00c0-\u024f\u2018\u2019]*$")  # scripts the pronoun lists cover


def words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in _WORD.findall(text)]


def contentless(query: str) -> bool:
    """Nothing to search for: no word at all, or only acknowledgements and greetings."""
    found = words(query)
    return not found or all(w in _ACKNOWLEDGEMENTS for w in found)


def in_first_person(text: str) -> bool:
    """Has a first-person word ("I", "my", "je", "ich"…), or is in a script whose words we do not list."""
    if not _LATIN.match(text):
        return True  # a language whose first-person words we do not list: assume it may
    return any(w in _FIRST_PERSON or w.split("'")[0] in _FIRST_PERSON for w in words(text))


def trivial_turn(user_message: str) -> bool:
    """True when the turn cannot hold a fact about the user (see the module docstring)."""
    text = user_message.strip()
    return contentless(text) or not in_first_person(text)
