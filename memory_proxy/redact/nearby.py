"""A secret stated in a sentence in any language: a word that names it (memory_proxy/redact/words.py, from maintained
translations) and a value of the right shape on either side of it in the same sentence ("lösenordet är
Sommar2024!", "Praha1348! je heslo k mailu", "kode pintu kos 4472", "1476 is de sim pin", "код від під'їзду 2719").

Each group of words takes a value of its own shape:
- password: a token that looks like one (6+ characters with a digit or a symbol; not a number, date, URL or
  e-mail address), 4-8 digits (a card or phone PIN: "密码是 860412") or a code (below);
- code (code, PIN), one_time (a one-time code) and door (door, gate, lock, unlock, disarm): 4-8 digits, with #
  or * around them, or digits in 3-4 small groups ("6-2-8-4", "21-07-45"), two groups of three ("612-908"), or
  a letter and 4-5 digits (a digicode "B4172"); never a part of a decimal, date, time, price or reference, nor
  a year;
- recovery (recovery codes, backup key): every code after the word, to the end of the paragraph;
- key (key, secret, token): a random-looking token (a credential that no vendor format names);
- identity: a national ID, tax or passport number (6+ digits, maybe with letters and separators);
- cvv: 3-4 digits; answer (a security question): the rest of the clause after "is", ":", "→" or a dash.
The value after the word is taken first (the nearest), else the nearest before it. A value already redacted
(a placeholder) counts: the word has its value, so redacting again changes nothing. A code word beside a word
that says what kind of harmless code it is (postal, zip, area, error, promo), or a code right after an airline's
two letters ("IB 3166, puerta J52"), is skipped: hand-written guards, since no catalog names look-alikes.

Cost: linear. The text is tokenised once per value shape, and only for the groups whose words occur; each word
then finds its value by bisection among the values, not by scanning its own window.
"""

from __future__ import annotations

import itertools
import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from typing import NamedTuple

from . import words
from .lexicon import Hit, Lexicon, fold
from .passwords import STRONG
from .rule import Span, looks_random

_LEXICON = Lexicon(words.groups(), words.WHOLE, words.NOT_IN_ENGLISH)

_PLACEHOLDER = re.compile(r"\[REDACTED: \w+\]")
_SENTENCE_END = re.compile(r"[.!?](?=\s+(?![a-zà-ÿ])|$)|[\n。！？]")  # "Praha1348! je heslo": no end
_PARAGRAPH_END = re.compile(r"\n\s*\n")
_CJK = "\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af"
_TOKEN = re.compile(rf"[^\s\"'`«»“”„‚‘’,;，、()\[\]{_CJK}]+")  # kana, ideographs, Hangul: no part of a value
_EDGES = re.compile(r"^[:=：\-—–]+|[.,;:!?)\]→:=：\-—–]+$")
_LOOKS_STRONG = re.compile(STRONG)
_DIGIT_OR_SYMBOL = re.compile(r"[\d!@#$%^&*+=~_]")  # an inner capital alone is a word: "E-Mail"
_NOT_A_PASSWORD = re.compile(r"[\d.,:/+\-]+|\w+://\S*|www\.\S*|[^@\s]+@[^@\s]+\.[a-z]{2,}|"
                             r"[\w.-]+\.(?:com|net|org|io|de|fr|ru|br|pl|jp|cn)\b\S*", re.IGNORECASE)
_PIN = re.compile(r"\d{4,8}")
_CODE = re.compile(r"(?<![\w.,/:+€$£¥#*-])(?:[#*]?\d{4,8}[#*]?|\d{1,2}(?:-\d{1,2}){2,3}|\d{3}[- ]\d{3}"
                   r"|[A-Z]\d{4,5})(?![\w/:%°€$£¥]|-\w|[.,]\d| ?\d)")
_YEAR = re.compile(r"19[5-9]\d|20[0-3]\d")  # "seit 2019": a year, not a code
_RECOVERY = re.compile(r"(?<![\w-])(?=[A-Za-z0-9-]*\d)[A-Za-z0-9]{4,10}(?:-[A-Za-z0-9]{3,6}){0,7}(?![\w-])")
_KEY = re.compile(r"(?<![A-Za-z0-9_\-+/=.~])[A-Za-z0-9_\-+/=.~]{16,}")
_IDENTITY = re.compile(  # "123-45-6789", "AK 482913", "CBK948217", "65 170839 J 003"
    r"(?<![\w.-])(?:[A-ZΑ-Ω]{1,2} )?[A-ZΑ-Ω0-9]+(?:[ .\-/][A-ZΑ-Ω0-9]+){0,5}(?![\w-]|[.,]\d)")
_CVV = re.compile(r"(?<![\d/.,:])\d{3,4}(?![\d/%€$]|[.,:]\d)")
_ANSWER = re.compile(r"[^.!?\n]{0,40}?(?:\bis|\bwas|:|=|→|—|–)\s*[\"'„“«]?"
                     r"(?P<v>[^\s.,;!?\n\"“”»][^.,;!?\n\"“”»]{1,39})")
_HARMLESS = re.compile(r"postal|postale|zip|area|error|erreur|fehler|promo|rabatt|discount|qr|vorwahl|ddd|std"
                       r"|conduct|conduta|conducta|condotta|gedrags|verhaltens|poczt|почт|індекс|indice|cep\b"
                       r"|kode pos|mã vùng|alan kodu|区号|郵便|우편|지역번호"
                       r"|gateway|listens?\b|tcp|udp|localhost")  # a network port: "listens on 6432 behind the gateway"
_GLUE = re.compile(r"[:=：]+")
_BESIDE = 12  # characters between a word and a value before it that is taken even with one after
_CLAUSE = re.compile(r"[,;:،、，；]")
_AIRLINE = re.compile(r"(?<!\w)[A-Z0-9]{2} $")  # a flight: "IB 3166", "SK 1417"


def _password(value: str) -> bool:
    if "password" in value.lower():  # "1Password", a product
        return False
    if _PIN.fullmatch(value) or _CODE.fullmatch(value):
        return not _YEAR.fullmatch(value)
    return bool(_LOOKS_STRONG.match(value) and _DIGIT_OR_SYMBOL.search(value) and not _NOT_A_PASSWORD.fullmatch(value))


def _tokens(text: str, check: Callable[[str], bool]) -> list[tuple[int, int]]:
    """Each token (its sentence punctuation left out) that passes `check`."""
    found = []
    for token in _TOKEN.finditer(text):
        value = _EDGES.sub("", token[0])
        if value and check(value):
            start = token.start() + token[0].find(value)
            found.append((start, start + len(value)))
    return found


def _shaped(regex: re.Pattern[str], check: Callable[[str], bool]) -> Callable[[str], list[tuple[int, int]]]:
    return lambda text: [m.span() for m in regex.finditer(text) if check(m[0])]


def _identity(value: str) -> bool:
    digits = sum(c.isdigit() for c in value)
    return digits >= 6 or (digits >= 3 and value[:1].isalpha() and " " not in value)


class _Group(NamedTuple):
    kind: str
    values: Callable[[str], list[tuple[int, int]]]  # every value of the group's shape in a text, in order
    after: int  # characters looked at after the word, and before it (same sentence)
    before: int
    every: bool = False  # every value after the word, to the end of the paragraph
    guarded: bool = False  # a code: skipped beside a word naming a harmless code, or after an airline's code


_SHAPES: dict[str, Callable[[str], list[tuple[int, int]]]] = {
    "password": lambda text: _tokens(text, _password),
    "code": _shaped(_CODE, lambda v: not _YEAR.fullmatch(v)),
    "recovery": _shaped(_RECOVERY, lambda v: True),
    "one_time": lambda text: sorted({*_SHAPES["code"](text), *_SHAPES["recovery"](text)}),
    "key": _shaped(_KEY, lambda v: looks_random(v) and not v.startswith("AAAA")),
    "identity": _shaped(_IDENTITY, _identity),
    "cvv": _shaped(_CVV, lambda v: True),
}
_GROUPS = {
    "password": _Group("password", _SHAPES["password"], 160, 60),
    "code": _Group("pin", _SHAPES["code"], 60, 40, guarded=True),
    "one_time": _Group("one_time_code", _SHAPES["one_time"], 80, 40),
    "door": _Group("door_code", _SHAPES["code"], 80, 40, guarded=True),
    "recovery": _Group("recovery_code", _SHAPES["recovery"], 400, 0, every=True),
    "key": _Group("secret", _SHAPES["key"], 60, 0),
    "identity": _Group("national_id", _SHAPES["identity"], 80, 40),
    "cvv": _Group("card_cvv", _SHAPES["cvv"], 80, 0),
}


def _glued(text: str, at: int) -> int:
    """Where a word ends with the colon or equals sign glued to it."""
    glue = _GLUE.match(text, at)
    return glue.end() if glue else at


def _blank(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with each span (in order) replaced by spaces, character for character."""
    pieces, pos = [], 0
    for start, end in spans:
        if end > pos:
            pieces += [text[pos:max(start, pos)], " " * (end - max(start, pos))]
            pos = end
    return "".join([*pieces, text[pos:]])


class _Text:
    """A text and, computed once when first needed, where its sentences end and its values of each shape are.
    Values are looked for with the words (and a colon or equals sign after them) blanked out, so that a value
    glued to its word is a value of its own ("passwort:Sommer2024!", "kod=4711")."""

    def __init__(self, text: str, hits: list[Hit]) -> None:
        self.text, self.hits = text, hits
        self._values: dict[int, tuple[list[int], list[tuple[int, int, bool]]]] = {}

    @cached_property
    def blanked(self) -> str:
        return _blank(self.text, sorted((h.start, _glued(self.text, h.end)) for h in self.hits))

    @cached_property
    def placeholders(self) -> list[tuple[int, int]]:
        return [m.span() for m in _PLACEHOLDER.finditer(self.text)] if "[REDACTED: " in self.text else []

    @cached_property
    def sentence_ends(self) -> list[int]:
        return [m.start() for m in _SENTENCE_END.finditer(self.text)]

    @cached_property
    def paragraph_ends(self) -> list[int]:
        return [m.start() for m in _PARAGRAPH_END.finditer(self.text)]

    def values(self, group: _Group) -> tuple[list[int], list[tuple[int, int, bool]]]:
        """The group's values and the placeholders, in order, each with whether it is a placeholder; and
        their starts (to bisect)."""
        key = id(group.values)
        if key not in self._values:
            spans = [(s, e, False) for s, e in group.values(self.blanked)]
            spans = sorted([*spans, *((s, e, True) for s, e in self.placeholders)])
            self._values[key] = ([s for s, _, _ in spans], spans)
        return self._values[key]


def _next(ends: list[int], at: int) -> int | None:
    i = bisect_left(ends, at)
    return ends[i] if i < len(ends) else None


def _after(text: _Text, group: _Group, hit: Hit) -> Iterator[tuple[int, int, bool]]:
    """The values after the word, nearest first: in the sentence (the paragraph, for `every`), within reach."""
    starts, spans = text.values(group)
    stop = _next(text.paragraph_ends if group.every else text.sentence_ends, hit.end)
    limit = min(hit.end + group.after, stop if stop is not None else len(text.text))
    for i in range(bisect_left(starts, hit.end), len(spans)):
        if spans[i][0] >= limit:
            return
        yield spans[i]


def _before(text: _Text, group: _Group, hit: Hit) -> tuple[int, int, bool] | None:
    """The nearest value before the word, in its sentence and within reach."""
    starts, spans = text.values(group)
    i = bisect_left(starts, hit.start) - 1
    while i >= 0 and spans[i][1] > hit.start:  # overlaps the word
        i -= 1
    if i < 0:
        return None
    ends = text.sentence_ends
    j = bisect_left(ends, hit.start) - 1
    begin = max(hit.start - group.before, ends[j] + 1 if j >= 0 else 0)
    return spans[i] if spans[i][0] >= begin else None


def _harmless(low: str, hit: Hit) -> bool:
    return _HARMLESS.search(low, max(0, hit.start - 16), hit.end + 16) is not None


def _value(text: _Text, group: _Group, first: Hit, last: Hit) -> Iterator[tuple[int, int, bool]]:
    """The values of a run of the group's words with no value between them, as if each word looked for its own:
    the last word has the nearest value after the run, the first one the nearest before it. A word takes the
    value after it, and the one before it too if that one is right beside it, in the same clause
    ("Pantai_Kuta_2024 itu pw wifi, nama wifinya Villa_Kuta_5G"), or if there is none after."""
    if group.every:
        yield from _after(text, group, last)
        return
    after = next(_after(text, group, first), None)
    before = _before(text, group, first)
    if before is not None and group.guarded and _AIRLINE.search(text.text, max(0, before[0] - 3), before[0]):
        before = None
    if before is not None and (after is None or _beside(text.text, before[1], first.start)):
        yield before
    yield from [after] if after is not None else itertools.islice(_after(text, group, last), 1)


def _beside(text: str, end: int, start: int) -> bool:
    """A value that ends at `end` is right beside a word at `start`: a few characters, no comma between."""
    return start - end <= _BESIDE and not _CLAUSE.search(text, end, start)


def _runs(text: _Text, group: _Group, hits: list[Hit]) -> Iterator[tuple[Hit, Hit]]:
    """The first and last word of each run of words with no value (nor placeholder) starting between them."""
    starts, _ = text.values(group)
    first = last = hits[0]
    for hit in hits[1:]:
        if bisect_left(starts, hit.end) != bisect_left(starts, last.end):
            yield first, last
            first = hit
        last = hit
    yield first, last


def nearby(text: str, low: str) -> Iterator[Span]:
    found = _Text(text, [])
    words_low = fold(_blank(low, found.placeholders))  # no word inside a placeholder
    found.hits = sorted(_LEXICON.hits(words_low))
    by_group: dict[str, list[Hit]] = {}
    for hit in found.hits:
        for name in hit.groups:
            by_group.setdefault(name, []).append(hit)
    for name, hits in by_group.items():
        group = _GROUPS.get(name)
        if group is None:  # a security question: its answer follows it
            yield from (span for hit in hits for span in _answer(text, hit))
            continue
        if group.guarded:
            hits = [hit for hit in hits if not _harmless(words_low, hit)]
        for first, last in _runs(found, group, hits) if hits else ():
            yield from ((s, e, group.kind) for s, e, done in _value(found, group, first, last) if not done)


def _answer(text: str, hit: Hit) -> Iterator[Span]:
    """The answer to a security question: the rest of the clause after "is", ":", "→" or a dash."""
    m = _ANSWER.match(text, hit.end)
    if m and not m["v"].startswith("[REDACTED: "):
        yield *m.span("v"), "security_answer"
