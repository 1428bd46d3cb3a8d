"""What the detectors of this package share: a span, a pattern rule with its trigger words, value shapes.

A rule's pattern runs only when one of its trigger words occurs in the text (`Triggers`): most texts hold
none, and a substring test is far cheaper than a regex scan.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import pairwise
from typing import NamedTuple

Span = tuple[int, int, str]  # start, end, kind: a secret found in a text

# Pattern pieces for a value after a word that names it.
NOT_REDACTED = r"(?![\"'`]?\[REDACTED)"
QUOTED = r"\"(?P<dq>[^\"\n]{1,128})\"|'(?P<sq>[^'\n]{1,128})'|`(?P<bq>[^`\n]{1,128})`"
_PREPOSITIONS = ("for", "to", "of", "on", "at", "f[üu]r", "vo[mn]", "zu[mr]", "beim?", "du", "de", "des", "pour",
                 "del", "para", "della?", "dello", "di", "per", "do", "od", "na")


def target(*left_out: str) -> str:
    """What a secret is for, between its word and the value: "password for my Netflix account", "Passwort für
    das WLAN", "hasło do wifi". `left_out`: prepositions that are a verb in the rule's language (Polish "to")."""
    prepositions = "|".join(p for p in _PREPOSITIONS if p not in left_out)
    return rf"(?:\s+(?:{prepositions})\s+[^.,;:!?\n\"'\[\]]{{1,40}}?)?"


TARGET = target()


class Rule(NamedTuple):
    kind: str
    triggers: tuple[str, ...]  # substrings, one of which must occur for the pattern to run (see Triggers)
    pattern: re.Pattern[str]
    group: str | None = None  # the group to replace; None: the whole match, or the quoted/bare value
    check: Callable[[str], bool] | None = None
    gate: Callable[[str], bool] | None = None  # given the lower-cased text, when triggers are not enough


class Triggers:
    """Which trigger words a text holds, each looked for once (several rules share one)."""

    def __init__(self, text: str) -> None:
        self.text, self.low = text, text.lower()
        self._seen: dict[str, bool] = {}

    def any(self, triggers: tuple[str, ...]) -> bool:
        """Lower-case triggers match any case, others match exactly; no triggers: always run."""
        for t in triggers:
            if t not in self._seen:
                self._seen[t] = t in (self.low if t.islower() else self.text)
            if self._seen[t]:
                return True
        return not triggers

    def run(self, rules: list[Rule]) -> Iterator[Span]:
        for rule in rules:
            if self.any(rule.triggers) and (rule.gate is None or rule.gate(self.low)):
                yield from matches(rule, self.text)


VALUE_GROUPS = ("dq", "sq", "bq", "v", "p")  # quoted, bare, passphrase


def matches(rule: Rule, text: str) -> Iterator[Span]:
    for m in rule.pattern.finditer(text):
        name = rule.group or next((g for g in VALUE_GROUPS if g in m.re.groupindex and m[g]), None)
        start, end = m.span(name) if name else m.span()
        if rule.check is None or rule.check(text[start:end]):
            yield start, end, rule.kind


def entropy(s: str) -> float:  # Shannon entropy, bits per character
    return -sum(n / len(s) * math.log2(n / len(s)) for n in Counter(s).values())


_BASE32 = re.compile(r"[A-Z2-7]{16,}=*")  # a TOTP seed: capitals and the digits 2-7


def looks_random(value: str) -> bool:
    """Long, varied, with digits, and mixed-case or digit-dense or base32: a token, not a word
    ("hard-work-2024")."""
    digits = sum(c.isdigit() for c in value)
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return (len(value) >= 12 and entropy(value) >= 3.0 and digits > 0 and any(c.isalpha() for c in value)
            and (mixed_case or digits >= 0.2 * len(value)
                 or (digits >= 1 and entropy(value) >= 3.5 and _BASE32.fullmatch(value) is not None)))


def random_key(value: str) -> bool:
    """Mixed case, and broken up as no name is: a third of its characters are capitals, digits or symbols, or
    letters right after one (a random 32-character key: ~20; "getUserAccountSettings2FAEnabled": 7). Hex
    digests have one case; base64 of plain text is not a key."""
    breaks = sum(not (b.islower() and a.isalpha()) for a, b in pairwise(value))
    if value.lower() == value or value.upper() == value or breaks < len(value) // 3:
        return False
    try:
        return not base64.b64decode(value, validate=True).decode("ascii").isprintable()
    except (binascii.Error, UnicodeDecodeError):
        return True


def utf8(text: str) -> bytes:
    return text.encode(errors="surrogatepass")  # a lone surrogate (bad input) too
