"""PostgreSQL's `english` full-text analysis of a query, in Python: the words the text arm looks up.

The in-process index (retrieval/indexes.py) holds each memory's words as PostgreSQL analyzed them
(`users_vectors.search_text`, `to_tsvector('english', content)`), so only a query is analyzed here, the
way `to_tsvector('english', query)` would: lower case, PostgreSQL's English stop words dropped, words
stemmed by Snowball 2.2's English stemmer (PostgreSQL's `english_stem`; Snowball 3 changed some stems,
such as "organized": `organ` in PostgreSQL, `organiz` in Snowball 3), numbers and
words with digits kept as they are (its `simple` dictionary), a hyphenated word as itself and its parts.
tests/retrieval/test_lexemes.py compares the two on the LoCoMo questions; where the parsers differ (URLs, e-mail
addresses, version numbers), a query word simply finds no memory by text, and the vector arm still runs.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer  # PyStemmer 2.2: Snowball 2.2's English stemmer, the one PostgreSQL 18's `english_stem` runs

# PostgreSQL's tsearch_data/english.stop (the `english_stem` dictionary's stop words).
_ENGLISH_STOP = """
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom this that these those am is
are was were be been being have has had having do does did doing a an the and but if or because as until
while of at by for with about against between into through during before after above below to from up
down in out on off over under again further then once here there when where why how all any both each
few more most other some such no nor not only own same so than too very s t can will just don should now
"""
STOP_WORDS = frozenset(_ENGLISH_STOP.split())

# Words joined by "." or "/" (3.5, u.s, j.k, artists/bands) are one token PostgreSQL keeps as it is; then
# words, a hyphenated one whole.
_TOKEN = re.compile(r"(?:[^\W_]+[./])+[^\W_]+|[^\W_]+(?:-[^\W_]+)*")
_STEMMER = Stemmer.Stemmer("english")


@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """Snowball's English stem, cached (words repeat)."""
    return str(_STEMMER.stemWord(word))


def _lexeme(token: str) -> str | None:
    if token in STOP_WORDS:
        return None
    return token if any(not c.isalpha() for c in token.replace("-", "")) else stem(token)


def query_lexemes(text: str) -> list[str]:
    """The distinct lexemes of `to_tsvector('english', text)`, in order of first appearance."""
    found: dict[str, None] = {}
    for token in _TOKEN.findall(text.lower()):
        for part in [token, *token.split("-")] if "-" in token else [token]:
            lexeme = _lexeme(part)
            if lexeme:
                found[lexeme] = None
    return list(found)
