"""Where the words that name a secret occur in a text, in any language: a word list per group, looked up token by
token (one dict lookup a token, so the cost does not grow with the number of words).

A word matches at the start of a token and may carry an inflection ("şifre" in "şifremi", "kod" in "kodem"; a
word of six letters or more loses its last two to its stem: "κωδικός" in "κωδικό"); a word of several tokens ("mot de passe") matches as a
phrase. Words in scripts written without spaces (Chinese, Japanese, Thai) match anywhere.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

_TOKEN = re.compile(r"\w+")
_UNSPACED = re.compile(r"[\u0e00-\u0e7f\u3040-\u30ff\u3400-\u9fff]")  # Thai, kana, CJK ideographs
_INFLECTION = 6  # letters a word may carry after its stem (a long word loses two letters to its stem)


class Hit(NamedTuple):
    start: int
    end: int
    group: str


class Lexicon:
    def __init__(self, groups: Mapping[str, Iterable[str]]) -> None:
        self._spaced: dict[str, list[tuple[str, str]]] = defaultdict(list)  # first 2 letters -> (word, group)
        self._unspaced: list[tuple[str, str]] = []
        for group, words in groups.items():
            for word in {w.strip().lower() for w in words if len(w.strip()) >= 2}:
                if _UNSPACED.search(word):
                    self._unspaced.append((word, group))
                else:
                    self._spaced[word[:2]].append((word, group))
        for candidates in self._spaced.values():
            candidates.sort(key=lambda c: -len(c[0]))  # the longest word at a place wins

    def hits(self, low: str) -> Iterator[Hit]:
        """Each place a word of a group occurs in `low` (the text, lower-cased)."""
        for token in _TOKEN.finditer(low):
            start = token.start()
            for word, group in self._spaced.get(low[start:start + 2], ()):
                stem = word[:-2] if len(word) >= 6 and " " not in word else word  # "κωδικός": "κωδικό"
                if low.startswith(stem, start):
                    end = start + len(stem)
                    tail = _TOKEN.match(low, end)
                    if tail is None or len(tail[0]) <= _INFLECTION:
                        yield Hit(start, tail.end() if tail else end, group)
                        break
        if _UNSPACED.search(low):
            for word, group in self._unspaced:
                at = low.find(word)
                while at >= 0:
                    yield Hit(at, at + len(word), group)
                    at = low.find(word, at + len(word))
