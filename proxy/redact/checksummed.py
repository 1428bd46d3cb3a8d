"""Values whose format carries a checksum, so that a match is no accident, with or without a word that names
them: payment cards (Luhn), IBANs (python-stdnum: country length and mod-97) and BIP-39 wallet seed phrases
(Trezor's `mnemonic`: 12–24 words of its wordlist whose last word checks). A bank account is injected into
every later prompt if stored: it is a secret here, as a card number is.

Cards: 13-19 digits, run together or grouped like a card by spaces, dashes or dots (4-4-4-4[-3], 4-6-5,
4-6-4), Luhn-valid, first digit 2-6 (a 2 only for Mastercard's 2221-2720). Phone numbers, timestamps, order
numbers don't fit.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator

from mnemonic import Mnemonic
from stdnum import iban, luhn

from .rule import Rule, Span, matches, utf8


def _card(value: str) -> bool:
    """Luhn-valid, and a card starting with 2 is a 16-digit Mastercard 2221-2720 (not a 2017… timestamp)."""
    digits = "".join(c for c in value if c.isdigit())
    if not 13 <= len(digits) <= 19 or (digits[0] == "2" and (len(digits) != 16 or not 2221 <= int(digits[:4]) <= 2720)):
        return False
    return luhn.is_valid(digits)


# Cards are first looked for as runs in the text's translated bytes: ~10× cheaper than a regex scan of the
# text, which then runs only where one may be.
_DIGITS = bytes(48 if 48 <= b <= 57 else 45 if b in b" .-" else 120 for b in range(256))  # "0", "-", "x"


def _card_runs(low: str) -> bool:
    """13+ digits, or digits grouped 4-4 or 4-6 (Amex) by spaces, dashes or dots."""
    digits = utf8(low).translate(_DIGITS)
    return any(run in digits for run in (b"0" * 13, b"0000-0000", b"0000-000000"))


_CARD = Rule("card_number", (), re.compile(  # grouped by spaces, dashes or dots
    r"[2-6](?<![\w+.,/-].)(?<!\d[ .-].)(?:\d{12,18}|\d{3}(?:[ .-]\d{4}){3}(?:[ .-]\d{3})?"
    r"|\d{3}[ .-]\d{6}[ .-]\d{4,5})(?!\w|[ .-]\d(?!\d/\d))"), check=_card)  # an expiry may follow


# A card's CVV, written right after it: "5566/264", "05/28 prüfnummer 731", "5566, cvc 539". A 3-4 digit number
# in the next 64 characters that is no part of an expiry date (MM/YY), an amount or a longer number.
_ATTACHED_CVV = re.compile(r"/(\d{3,4})(?![\d/])")
_NEXT_CVV = re.compile(r"(?<![\d/.,:])\d{3,4}(?![\d/.,:%€$]|\s?(?:€|\$|zł|kr|tl|rp))", re.IGNORECASE)


def cards(text: str) -> Iterator[Span]:
    if not _card_runs(text):
        return
    for start, end, kind in matches(_CARD, text):
        yield start, end, kind
        cvv = _ATTACHED_CVV.match(text, end) or _NEXT_CVV.search(text, end, end + 64)
        if cvv:
            yield *cvv.span(cvv.lastindex or 0), "card_cvv"


_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")
_SEED = Mnemonic("english")
_BIP39 = frozenset(_SEED.wordlist)
_SEED_LENGTHS = (24, 21, 18, 15, 12)  # words in a BIP-39 phrase, longest first
_LOWER_WORD = re.compile(r"[a-z]+")


def bank_accounts(text: str) -> Iterator[Span]:
    if any(c.isdigit() for c in text):
        for found in _IBAN.finditer(text):
            if iban.is_valid(found.group(0)):
                yield found.start(), found.end(), "bank_account"


def seed_phrases(text: str) -> Iterator[Span]:
    """The longest run of 12–24 wordlist words, separated by spaces only, whose checksum holds."""
    words = [w for w in _LOWER_WORD.finditer(text) if w.group(0) in _BIP39]
    if len(words) < _SEED_LENGTHS[-1]:
        return
    run: list[re.Match[str]] = []
    for word in [*words, None]:
        if word is not None and (not run or text[run[-1].end():word.start()].isspace()):
            run.append(word)
            continue
        i = 0
        while len(run) - i >= _SEED_LENGTHS[-1]:
            n = next((n for n in _SEED_LENGTHS if len(run) - i >= n
                      and _SEED.check(" ".join(w.group(0) for w in run[i:i + n]))), 0)
            if not n and i == 0 and len({w.group(0) for w in run}) >= 10:  # a mistyped phrase, not one word again
                n = len(run)
            if n:
                yield run[i].start(), run[i + n - 1].end(), "seed_phrase"
            i += n or 1
        run = [word] if word is not None else []



# A BitLocker recovery key: eight groups of six digits, each divisible by 11 (Microsoft's own check).
_BITLOCKER = re.compile(r"(?<![\d-])\d{6}(?:-\d{6}){7}(?![\d-])")


def recovery_keys(text: str) -> Iterator[Span]:
    if "-" in text:
        for found in _BITLOCKER.finditer(text):
            if all(int(block) % 11 == 0 for block in found[0].split("-")):
                yield found.start(), found.end(), "recovery_code"


# National identity numbers whose format carries a check strong enough to stand without a word that names
# them (python-stdnum validates them): two check digits, or a checked date of birth and a check digit, or a
# shape no other number has. Weaker ones (one check digit over plain digits) need a word (stated.py).
_ID_MODULES = ("br.cpf", "tr.tckimlik", "kr.rrn", "cn.ric", "it.codicefiscale", "fr.nir", "es.dni", "es.nie",
               "mx.curp", "ch.ssn", "no.fodselsnummer", "fi.hetu", "se.personnummer", "cz.rc", "gr.amka",
               "bg.egn", "ro.cnp", "ee.ik", "lt.asmens", "pl.pesel", "id.nik")
_ID_VALIDATORS = [importlib.import_module(f"stdnum.{name}").is_valid for name in _ID_MODULES]
_ID_CANDIDATE = re.compile(  # no spaces inside: numbers read out in groups of digits are phones
    r"(?<![\w+/.,-])(?:[A-Z]{1,6}\d[\dA-Z]{5,16}|\d[\d.\-/]{7,22}[\dA-Z])(?![\w/-]|[.,]\d)")


def national_ids(text: str) -> Iterator[Span]:
    if sum(c.isdigit() for c in text) < 9:
        return
    for found in _ID_CANDIDATE.finditer(text):
        value = found[0]
        digits = sum(c.isdigit() for c in value)
        if digits < 9 or (len(value) - digits > 4 and not value[:1].isalpha()):
            continue
        if any(valid(value) for valid in _ID_VALIDATORS):
            yield found.start(), found.end(), "national_id"
