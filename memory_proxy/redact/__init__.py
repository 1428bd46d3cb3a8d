"""Credential redaction, a leaf package: jobs, stored facts and audit reasons pass here.

`redact(text)` replaces each secret with `[REDACTED: <kind>]` and returns the new text and the kinds found.
Kinds: api_key, aws_key, github_token, gitlab_token, slack_token, discord_token, telegram_token, jwt,
bearer_token, basic_auth, webhook, private_key, connection_string, card_number, bank_account (a valid IBAN),
seed_phrase (a BIP-39 phrase whose checksum holds), password, pin, passphrase, national_id, card_cvv,
one_time_code, recovery_code, door_code, security_answer, and secret (a random-looking value after a
key/token/secret/credentials word).

Where the detectors are, by job:
- credentials of 300+ services: maintained rule sets (memory_proxy/redact/betterleaks.py, Betterleaks; memory_proxy/redact/kingfisher.py);
- vendor formats they miss in chat text, and a random value after a key word: vendor.py (ours, detect-secrets);
- values whose format has a checksum (cards, IBANs, BIP-39 seed phrases): checksummed.py;
- lists of recovery codes, keys in equal groups, a password after an e-mail address, by layout: shapes.py;
- passwords, PINs, passphrases in the grammar of six languages: passwords.py;
- secrets stated in a sentence, in any language, by the words of maintained translations: nearby.py.
This module merges what they find: overlapping hits become one placeholder, named by the most telling kind
(slack_token over api_key over secret; among equals, the first hit's); `kinds` lists each kind once.
Redacting again changes nothing.

Every rule is linear in the text, so that no input can stall a scan; what a turn costs, and the worst inputs
tried, are measured by `python -m benchmarks.redact_speed` (figures: docs/RELIABILITY.md#secrets). The first
redaction of a process compiles Kingfisher's catalog: `warm()` does it at start.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..observability import REDACTIONS
from . import kingfisher, passwords, vendor
from .betterleaks import leaked, occurrences
from .checksummed import bank_accounts, cards, national_ids, recovery_keys, seed_phrases
from .nearby import nearby
from .rule import Span, Triggers
from .shapes import code_lists, grouped_keys, logins

__all__ = ["PLACEHOLDER", "Redaction", "redact", "redact_strings", "warm"]


@dataclass(frozen=True, slots=True)
class Redaction:
    """The text with secrets replaced, and what was found (empty: the text is unchanged)."""

    text: str
    kinds: tuple[str, ...]  # each kind found, once, in order of first appearance

    @property
    def redacted(self) -> bool:
        return bool(self.kinds)


def _spans(text: str) -> Iterator[Span]:
    triggers = Triggers(text)
    yield from triggers.run(vendor.RULES)
    yield from cards(text)
    yield from triggers.run(passwords.RULES)
    yield from vendor.bare_keys(text)
    yield from bank_accounts(text)
    yield from seed_phrases(text)
    yield from recovery_keys(text)
    yield from code_lists(text)
    yield from grouped_keys(text)
    yield from logins(text)
    yield from national_ids(text)
    yield from nearby(text, triggers.low)
    yield from vendor.library(text, triggers)
    yield from triggers.run([vendor.GENERIC])  # after the rest, so that a specific kind wins an exact tie
    yield from kingfisher.found(text)


_GENERIC = {"secret": 0, "api_key": 1}  # less telling than any named kind; "secret" least of all
PLACEHOLDER = re.compile(r"\[REDACTED: (\w+)\]")  # what redact() leaves


def _telling(kind: str) -> int:
    return _GENERIC.get(kind, len(_GENERIC))


def redact(text: str, found: list[tuple[str, str]] | None = None) -> Redaction:
    """`text` with every detected secret replaced by `[REDACTED: kind]`, and the kinds found. `found`: what the
    maintained rule set found in a text that holds this one (scanned here when not given)."""
    done = [m.span() for m in PLACEHOLDER.finditer(text)]  # a placeholder is never redacted again
    spans = [s for s in (*_spans(text), *occurrences(text, leaked(text) if found is None else found))
             if not any(s[0] < end and start < s[1] for start, end in done)]
    merged: list[Span] = []  # overlapping spans become one, named by the most telling kind (ties: rule order)
    for start, end, kind in sorted(spans, key=lambda s: (s[0], -s[1])):  # stable: rule order wins
        if merged and start < merged[-1][1]:
            first = merged[-1][2]
            merged[-1] = (merged[-1][0], max(merged[-1][1], end),
                          kind if _telling(kind) > _telling(first) else first)
        else:
            merged.append((start, end, kind))
    out, pos = [], 0
    for start, end, kind in merged:
        out += [text[pos:start], f"[REDACTED: {kind}]"]
        pos = end
        REDACTIONS.labels(kind).inc()
    out.append(text[pos:])
    return Redaction("".join(out), tuple(dict.fromkeys(kind for _, _, kind in merged)))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | dict):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _strings(item)


def redact_strings(value: Any) -> Any:
    """A JSON-like value (a formation job's payload) with every string in it redacted; the maintained rule
    set scans all of them in one call (its cost is mostly per call)."""
    found = leaked("\n".join(_strings(value)))

    def each(item: Any) -> Any:
        if isinstance(item, str):
            return redact(item, found).text
        if isinstance(item, list):
            return [each(i) for i in item]
        if isinstance(item, dict):
            return {key: each(i) for key, i in item.items()}
        return item

    return each(value)


def warm() -> None:
    """Get the first redaction's one-time costs over with (Kingfisher compiles its catalog, seconds on a machine's
    first run: redact/kingfisher.py): call it where a process that redacts starts, before its first job."""
    kingfisher.warm()
    redact("warm: password is W4rm-up! and pin 1234")
