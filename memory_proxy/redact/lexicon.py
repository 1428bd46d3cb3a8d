"""Where the words that name a secret occur in a text, in any language: word lists by group, looked up token by
token (a dict lookup or two a token, so the cost does not grow with the number of words).

A word matches at the start of a token and may carry an inflection ("şifre" in "şifremi", "kod" in "kodem"; a
word of six letters or more loses its last two to its stem: "κωδικός" in "κωδικό"); a word of several tokens
("mot de passe") matches as a phrase. A long word (7+ letters) also matches as the last part of a compound
after two letters or more ("Rentenversicherungsnummer", "Routerpasswort"; not "1Password"). An Arabic word may carry its proclitics ("والباسورد": "و" and
"ال" before it), a Greek one may lose its accents. Words of a `whole` group (acronyms: "ssn", "cpf") match
only whole tokens. Words in scripts written without spaces (Chinese, Japanese, Thai) match anywhere.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import NamedTuple

_TOKEN = re.compile(r"\w+")
_UNSPACED = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff]")  # Thai, kana, CJK ideographs
_INFLECTION = 6  # letters a word may carry after its stem
_COMPOUND = 7  # letters a word needs to match as the last part of a longer one
_COMPOUND_TAIL = 3  # and the inflection it may carry there
_PROCLITIC = re.compile(r"(?:[وفبلك]?ال|لل|[وفب])(?=\w{3})")  # Arabic: and/so/with/to + the article
_FOLD = str.maketrans("άέήίόύώϊϋΐΰ", "αεηιουωιυιυ")  # one character for one: offsets stay


def fold(low: str) -> str:
    """`low` (a lower-cased text) with Greek accents dropped, character for character."""
    return low.translate(_FOLD)


class Hit(NamedTuple):
    start: int
    end: int
    groups: tuple[str, ...]  # every group the word belongs to


class _Word(NamedTuple):
    word: str
    stem: str
    inflected: tuple[str, ...]  # groups in which the word may be inflected
    whole: tuple[str, ...]  # groups in which it must stand alone


class Lexicon:
    def __init__(self, groups: Mapping[str, Iterable[str]], whole: Collection[str] = (),
                 never: Collection[str] = ()) -> None:
        """`never`: tokens that are no word of any group, even where one's stem would take them ("port" for
        "portal", whose stem it is: in English it is a network port)."""
        self._never = frozenset(fold(w.lower()) for w in never)
        found: dict[str, dict[str, bool]] = defaultdict(dict)  # word -> {group: whole}
        for group, words in groups.items():
            for word in {fold(w.strip().lower()) for w in words if len(w.strip()) >= 2}:
                found[word][group] = group in whole
        self._spaced: dict[str, list[_Word]] = defaultdict(list)  # first 4 letters of the stem (or all) -> words
        self._tails: dict[str, list[_Word]] = defaultdict(list)  # last 4 letters -> long words
        self._unspaced: list[tuple[str, tuple[str, ...]]] = []
        for word, in_groups in found.items():
            entry = _Word(word, word[:-2] if len(word) >= 6 and _TOKEN.fullmatch(word) else word,
                          tuple(g for g, w in in_groups.items() if not w), tuple(g for g, w in in_groups.items() if w))
            if _UNSPACED.search(word):
                self._unspaced.append((word, (*entry.inflected, *entry.whole)))
                continue
            self._spaced[entry.stem[:4]].append(entry)  # by its first 4 letters, or all of a shorter stem
            if len(word) >= _COMPOUND and _TOKEN.fullmatch(word):
                self._tails[word[-4:]].append(entry)
        for candidates in self._spaced.values():
            candidates.sort(key=lambda c: -len(c.word))  # the longest word at a place wins
        self._firsts = frozenset(key[:3] for key in self._spaced)  # a token that starts otherwise has no word

    def _at(self, low: str, start: int) -> Hit | None:
        for entry in (*self._spaced.get(low[start:start + 4], ()), *self._spaced.get(low[start:start + 3], ()),
                      *self._spaced.get(low[start:start + 2], ())):  # longest first: stems of 4+, 3, 2 letters
            if low.startswith(entry.stem, start):
                end = start + len(entry.stem)
                tail = _TOKEN.match(low, end)
                rest = tail.end() - end if tail else 0
                alone = rest == len(entry.word) - len(entry.stem) and low.startswith(entry.word, start)
                groups = (*(entry.inflected if rest <= _INFLECTION else ()), *(entry.whole if alone else ()))
                if groups and low[start:end + rest] not in self._never:
                    return Hit(start, end + rest, groups)
        return None

    def _compound(self, low: str, token: re.Match[str]) -> Hit | None:
        for rest in range(_COMPOUND_TAIL + 1):
            end = token.end() - rest
            for entry in self._tails.get(low[end - 4:end], ()):
                head = low[token.start():end - len(entry.word)]
                groups = (*entry.inflected, *(entry.whole if rest == 0 else ()))
                if groups and len(head) >= 2 and head.isalpha() and low.endswith(entry.word, token.start(), end):
                    return Hit(token.start(), token.end(), groups)
        return None

    def hits(self, low: str) -> Iterator[Hit]:
        """Each place a word of a group occurs in `low` (the text, lower-cased and folded)."""
        firsts = self._firsts
        for token in _TOKEN.finditer(low):
            start, end = token.span()
            hit = None
            if low[start:start + 3] in firsts or low[start:start + 2] in firsts:
                hit = self._at(low, start)
            if hit is None and "\u0620" <= low[start] <= "\u064a" and (proclitic := _PROCLITIC.match(low, start)):
                hit = self._at(low, proclitic.end())
            if hit is None and end - start > _COMPOUND:
                hit = self._compound(low, token)
            if hit is not None:
                yield hit
        if _UNSPACED.search(low):
            for word, groups in self._unspaced:
                at = low.find(word)
                while at >= 0:
                    yield Hit(at, at + len(word), groups)
                    at = low.find(word, at + len(word))
