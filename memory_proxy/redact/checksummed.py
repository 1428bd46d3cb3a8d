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
from collections.abc import Callable, Iterator
from hashlib import sha256

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
_NEXT_CVV = re.compile(r"(?<![\d/.,:])\d{3,4}(?![\d/%€$]|[.,:]\d|\s?(?:€|\$|zł|kr|tl|rp))", re.IGNORECASE)


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
_BIP39 = {word: index for index, word in enumerate(_SEED.wordlist)}
_SEED_LENGTHS = (24, 21, 18, 15, 12)  # words in a BIP-39 phrase, longest first
_LOWER_WORD = re.compile(r"[a-z]+")
_WORD_RUN = re.compile(r"(?<![A-Za-z])[a-z]{3,8}(?:\s+[a-z]{3,8}){11,}(?![A-Za-z])")  # wordlist words: 3-8 letters
_DIGIT = re.compile(r"\d")


def bank_accounts(text: str) -> Iterator[Span]:
    if _DIGIT.search(text):
        for found in _IBAN.finditer(text):
            if iban.is_valid(found.group(0)):
                yield found.start(), found.end(), "bank_account"


def _checked(indexes: list[int]) -> list[int]:
    """For each start, the longest BIP-39 length whose words from there hold their checksum (0: none). The
    words' 11-bit indexes are the entropy followed by the first n/3 bits of its SHA-256; one pass a length,
    the window's bits slid along, so a long run costs one hash a word and length."""
    best = [0] * len(indexes)
    for n in reversed(_SEED_LENGTHS):  # shortest first: a longer phrase from the same start wins
        checksum, size, bits = n // 3, n * 4 // 3, 0
        mask = (1 << 11 * n) - 1
        for end, index in enumerate(indexes, 1):
            bits = (bits << 11 | index) & mask
            if end >= n and sha256((bits >> checksum).to_bytes(size, "big")).digest()[0] >> 8 - checksum \
                    == bits & (1 << checksum) - 1:
                best[end - n] = n
    return best


def seed_phrases(text: str) -> Iterator[Span]:
    """The longest run of 12–24 wordlist words, separated by spaces only, whose checksum holds."""
    for run in _WORD_RUN.finditer(text):  # 12+ short lower-case words in a row: few in prose
        yield from _seed_phrases(text, run.start(), run.end())


def _seed_phrases(text: str, begin: int, end: int) -> Iterator[Span]:
    words = [w for w in _LOWER_WORD.finditer(text, begin, end) if w.group(0) in _BIP39]
    if len(words) < _SEED_LENGTHS[-1]:
        return
    run: list[re.Match[str]] = []
    for word in [*words, None]:
        if word is not None and (not run or text[run[-1].end():word.start()].isspace()):
            run.append(word)
            continue
        if len(run) >= _SEED_LENGTHS[-1]:
            yield from _phrases(run)
        run = [word] if word is not None else []


def _phrases(run: list[re.Match[str]]) -> Iterator[Span]:
    checked = _checked([_BIP39[w.group(0)] for w in run])
    i = 0
    while len(run) - i >= _SEED_LENGTHS[-1]:
        n = checked[i]
        if not n and i == 0 and len({w.group(0) for w in run}) >= 10:  # a mistyped phrase, not one word again
            n = len(run)
        if n:
            yield run[i].start(), run[i + n - 1].end(), "seed_phrase"
        i += n or 1


# A BitLocker recovery key: eight groups of six digits, each divisible by 11 (Microsoft's own check).
_BITLOCKER = re.compile(r"(?<![\d-])\d{6}(?:-\d{6}){7}(?![\d-])")


def recovery_keys(text: str) -> Iterator[Span]:
    if "-" in text:
        for found in _BITLOCKER.finditer(text):
            if all(int(block) % 11 == 0 for block in found[0].split("-")):
                yield found.start(), found.end(), "recovery_code"


# National identity numbers whose format carries a check strong enough to stand without a word that names
# them (python-stdnum validates them): two check digits, or a checked date of birth and a check digit, or a
# shape no other number has. Weaker ones (one check digit over plain digits) need a word (nearby.py).
_ID_MODULES = {  # module: the letters and digits its numbers have (a cheap test before the library's)
    "br.cpf": (11,), "tr.tckimlik": (11,), "kr.rrn": (13,), "cn.ric": (18,), "it.codicefiscale": (16,),
    "fr.nir": (15,), "es.dni": (9,), "es.nie": (9,), "mx.curp": (18,), "ch.ssn": (13,),
    "no.fodselsnummer": (11,), "fi.hetu": (10, 11), "se.personnummer": (10, 12), "cz.rc": (9, 10),
    "gr.amka": (11,), "bg.egn": (10,), "ro.cnp": (13,), "ee.ik": (11,), "lt.asmens": (11,), "pl.pesel": (11,),
    "id.nik": (16,)}
_ID_VALIDATORS: dict[int, list[Callable[[str], bool]]] = {}
for _name, _lengths in _ID_MODULES.items():
    for _length in _lengths:
        _ID_VALIDATORS.setdefault(_length, []).append(importlib.import_module(f"stdnum.{_name}").is_valid)
_ID_CANDIDATE = re.compile(  # no spaces inside: numbers read out in groups of digits are phones
    r"(?<![\w+/.,-])(?:[A-Z]{1,6}\d[\dA-Z]{5,16}|\d[\d.\-/]{7,22}[\dA-Z])(?![\w/-]|[.,]\d)")
_ID_BUDGET = 100  # numbers checked a text, ~60 µs each at most: in a table of more, those after the 100th go
# only if a word names them (nearby.py)


def national_ids(text: str) -> Iterator[Span]:
    if sum(map(text.count, "0123456789")) < 9:
        return
    budget = _ID_BUDGET
    for found in _ID_CANDIDATE.finditer(text):
        value = found[0]
        digits = sum(c.isdigit() for c in value)
        validators = _ID_VALIDATORS.get(sum(c.isalnum() for c in value), ())
        if digits < 9 or (len(value) - digits > 4 and not value[:1].isalpha()) or not validators:
            continue
        if any(valid(value) for valid in validators):
            yield found.start(), found.end(), "national_id"
        budget -= 1
        if not budget:
            return
