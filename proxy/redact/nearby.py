"""A secret stated in a sentence in any language: a word that names it, from maintained translations, and a value
of the right shape on either side of it in the same sentence ("lösenordet är Sommar2024!", "Praha1348! je heslo
k mailu", "kode pintu kos 4472", "1476 is de sim pin", "код від під'їзду 2719").

The words (password_words.json from Django's catalogs; secret_words.json from django-allauth's and Home
Assistant's, both built by scripts under benchmarks/secrets_corpus/) fall in groups, each with its value:
- password: a token that looks like one (6+ characters with a digit or a symbol; not a number, date, URL or
  e-mail address), or 4-8 digits (a card or phone PIN: "密码是 860412");
- code (code, PIN, authenticator code) and door (door, gate, lock): 4-8 digits, with # or * around them, or
  digits in 3-4 small groups ("6-2-8-4", "21-07-45"), two groups of three ("612-908"), or a letter and 4-5
  digits (a digicode "B4172"); never a part of a decimal, date, time, price or reference;
- recovery (recovery codes, backup key): every code after the word, to the end of the paragraph;
- key (key, secret, token): a random-looking token (a credential that no vendor format names).
The value after the word is taken first (the nearest), else the nearest before it. A code word beside a word
that says what kind of harmless code it is (postal, zip, area, error, promo) is skipped: hand-written guards,
since no catalog names look-alikes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from .lexicon import Lexicon
from .passwords import STRONG
from .rule import Span, looks_random

_HERE = Path(__file__).parent
_GROUPS: dict[str, list[str]] = json.loads((_HERE / "secret_words.json").read_text(encoding="utf-8"))["groups"]
_GROUPS["password"] = sorted({*_GROUPS["password"],
                              *json.loads((_HERE / "password_words.json").read_text(encoding="utf-8"))["words"]})
_GROUPS["code"] = [*_GROUPS["code"], "pin", "пин", "otp"]  # the same word in every Latin and Cyrillic locale
_GROUPS["password"] += ["pw"]  # a loanword of chat in many languages ("pw wifi")
_LEXICON = Lexicon(_GROUPS)

_SENTENCE_END = re.compile(r"[.!?](?=\s+(?![a-zà-ÿ])|$)|[\n。！？]")  # "Praha1348! je heslo": no end
_PARAGRAPH_END = re.compile(r"\n\s*\n")
_TOKEN = re.compile(r"[^\s\"'`«»“”„‚‘’,;，、()\[\]]+")
_CJK_EDGE = re.compile(r"^[:=：\-—–]*[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]*[:=：\-—–]*|"
                       r"[:=：\-—–]*[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]*[:=：\-—–]*$")
_LOOKS_STRONG = re.compile(STRONG)
_DIGIT_OR_SYMBOL = re.compile(r"[\d!@#$%^&*+=~_]")  # an inner capital alone is a word: "E-Mail"
_NOT_A_PASSWORD = re.compile(r"[\d.,:/+\-]+|\w+://\S*|www\.\S*|[^@\s]+@[^@\s]+\.[a-z]{2,}|\[REDACTED: \w+\]|"
                             r"[\w.-]+\.(?:com|net|org|io|de|fr|ru|br|pl|jp|cn)\b\S*", re.IGNORECASE)
_DIGITS = re.compile(r"(?<![\w.,/:+€$£¥-])(?:\d{4,8})(?![\w.,/:%°€$£¥-]|[.,]\d)")
_CODE = re.compile(r"(?<![\w.,/:+€$£¥#*-])(?:[#*]?\d{4,8}[#*]?|\d{1,2}(?:-\d{1,2}){2,3}|\d{3}[- ]\d{3}"
                   r"|[A-Z]\d{4,5})(?![\w/:%°€$£¥]|-\w|[.,]\d| ?\d)")
_YEAR = re.compile(r"19[5-9]\d|20[0-3]\d")  # "seit 2019": a year, not a code
_RECOVERY = re.compile(r"(?<![\w-])(?=[A-Za-z0-9-]*\d)[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{3,6}){0,7}(?![\w-])")
_KEY = re.compile(r"[A-Za-z0-9_\-+/=.~]{16,}")
_HARMLESS = re.compile(r"postal|postale|zip|area|error|erreur|fehler|promo|rabatt|discount|qr|vorwahl|ddd|std"
                       r"|conduct|conduta|conducta|condotta|gedrags|verhaltens|poczt|почт|індекс|indice|cep\b"
                       r"|kode pos|mã vùng|alan kodu|区号|郵便|우편|지역번호")


def _password(window: str) -> Iterator[tuple[int, int]]:
    for token in _TOKEN.finditer(window):
        value = _CJK_EDGE.sub("", token[0].rstrip(".,;:!?)]→"))
        value = _CJK_EDGE.sub("", value)
        if not value:
            continue
        start = token.start() + token[0].find(value)
        if "password" in value.lower():  # "1Password", a product
            continue
        if ((_LOOKS_STRONG.match(value) and _DIGIT_OR_SYMBOL.search(value) and not _NOT_A_PASSWORD.fullmatch(value))
                or _DIGITS.fullmatch(value)):
            yield start, start + len(value)


def _shaped(regex: re.Pattern[str], check: Callable[[str], bool] | None = None,
            ) -> Callable[[str], Iterator[tuple[int, int]]]:
    def values(window: str) -> Iterator[tuple[int, int]]:
        for m in regex.finditer(window):
            if check is None or check(m[0]):
                yield m.span()

    return values


class _Group(NamedTuple):
    kind: str
    value: Callable[[str], Iterator[tuple[int, int]]]
    after: int  # characters looked at after the word, and before it (same sentence)
    before: int
    every: bool = False  # every value after the word, to the end of the paragraph


_KINDS = {
    "password": _Group("password", _password, 160, 60),
    "code": _Group("pin", _shaped(_CODE, lambda v: not _YEAR.fullmatch(v)), 60, 40),
    "door": _Group("door_code", _shaped(_CODE, lambda v: not _YEAR.fullmatch(v)), 80, 40),
    "recovery": _Group("recovery_code", _shaped(_RECOVERY), 400, 0, every=True),
    "key": _Group("secret", _shaped(_KEY, lambda v: looks_random(v) and not v.startswith("AAAA")), 60, 0),
}


def nearby(text: str, low: str) -> Iterator[Span]:
    for hit in _LEXICON.hits(low):
        group = _KINDS[hit.group]
        if hit.group in ("code", "door") and _HARMLESS.search(low, max(0, hit.start - 16), hit.end + 16):
            continue
        if group.every:
            stop = _PARAGRAPH_END.search(text, hit.end, hit.end + group.after)
            for start, end in group.value(text[hit.end:stop.start() if stop else hit.end + group.after]):
                yield hit.end + start, hit.end + end, group.kind
            continue
        stop = _SENTENCE_END.search(text, hit.end, hit.end + group.after)
        after = text[hit.end:stop.start() if stop else hit.end + group.after]
        found = next(group.value(after), None)
        if found is not None:
            yield hit.end + found[0], hit.end + found[1], group.kind
            continue
        begin = max(0, hit.start - group.before)
        starts = [m.end() for m in _SENTENCE_END.finditer(text, begin, hit.start)]
        begin = starts[-1] if starts else begin
        before = list(group.value(text[begin:hit.start]))
        if before:
            yield begin + before[-1][0], begin + before[-1][1], group.kind
