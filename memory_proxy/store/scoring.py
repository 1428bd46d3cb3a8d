"""The hybrid search's rules, declared once: the SQL statement (store/search.py) and the in-process index
(retrieval/indexes.py) both rank with the constants and formulas here.

Each formula is a plain Python function of its operands, written with + − × ÷, `ln` and `greatest` only.
Called with numbers or numpy arrays it computes the score (the index); called with `Sql` operands it
writes the same expression as SQL text (the statement), operation for operation in the same order of
evaluation, so both round alike. A formula changed here changes both searches; tests/store/test_scoring.py
evaluates each rendering in PostgreSQL against its numbers.

BM25 (Robertson & Zaragoza 2009), with the document frequencies of the user's own memories:
    idf(t)  = ln(1 + (N − df(t) + 0.5) / (df(t) + 0.5))
    bm25(d) = Σ_t idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · dl / avgdl)),  k1 = 1.2, b = 0.75
N is the user's active memories, dl a memory's distinct words (its tsvector's length), avgdl their mean.
Words that more than COMMON_TERM_SHARE of the user's memories hold are not scored: their weight is near
zero, and they were the text arm's whole cost (a word in every one of 10,000 memories scored 10,000 rows).
The arms are fused by weighted reciprocal rank fusion: Σ weight / (k + rank), rank counted from 1.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

COLD_START_THRESHOLD = 5  # users with fewer memories of their own also see the global ones
ALWAYS_ON_LIMIT = 20  # pinned and identity memories read for the always-on tier
RECENT_LIMIT = 10  # most recent memories: the fallback tier; bounds RETRIEVAL_INJECT_ALL_BELOW
RECENT_READ = RECENT_LIMIT + 1  # read one more: a holder of 11 memories or more is told from one of 10
COMMON_TERM_SHARE = 0.5  # query words held by more of the user's memories than this are not scored
BM25_K1, BM25_B = 1.2, 0.75


class Sql:
    """A SQL expression that arithmetic writes out: `Sql("t.df") + 0.5` is `Sql("(t.df + 0.5)")`. Every
    operation is parenthesised, so the text is evaluated in the order Python evaluated the formula."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Sql({self.text!r})"

    def _op(self, op: str, other: object, reflected: bool = False) -> Sql:
        if not isinstance(other, Sql | int | float):
            return NotImplemented
        left, right = (other, self) if reflected else (self, other)
        return Sql(f"({left} {op} {right})")

    def __add__(self, other: object) -> Sql:
        return self._op("+", other)

    def __radd__(self, other: object) -> Sql:
        return self._op("+", other, reflected=True)

    def __sub__(self, other: object) -> Sql:
        return self._op("-", other)

    def __rsub__(self, other: object) -> Sql:
        return self._op("-", other, reflected=True)

    def __mul__(self, other: object) -> Sql:
        return self._op("*", other)

    def __rmul__(self, other: object) -> Sql:
        return self._op("*", other, reflected=True)

    def __truediv__(self, other: object) -> Sql:
        return self._op("/", other)

    def __rtruediv__(self, other: object) -> Sql:
        return self._op("/", other, reflected=True)


def ln(x: Any) -> Any:
    """The natural logarithm of a number, an array or an expression."""
    if isinstance(x, Sql):
        return Sql(f"ln({x})")
    return np.log(x) if isinstance(x, np.ndarray) else math.log(x)


def greatest(x: Any, y: Any) -> Any:
    """The larger of two numbers, or SQL's greatest() of two expressions."""
    if isinstance(x, Sql) or isinstance(y, Sql):
        return Sql(f"greatest({x}, {y})")
    return max(x, y)


def idf(n: Any, df: Any) -> Any:
    """A word's inverse document frequency among `n` memories, `df` of which hold it."""
    return ln(1 + (n - df + 0.5) / (df + 0.5))


def bm25(idf: Any, tf: Any, dl: Any, avgdl: Any, k1: Any = BM25_K1, b: Any = BM25_B) -> Any:
    """One word's BM25 in a memory holding it `tf` times among `dl` distinct words (`avgdl` on average)."""
    return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))


def most_holders(n: Any, common: Any = COMMON_TERM_SHARE) -> Any:
    """The most of `n` memories a word may be held by and still be scored."""
    return greatest(common * n, 1)


def rrf(weight: Any, rank: Any, k: Any) -> Any:
    """An arm's contribution to the fused score of the candidate it ranks at `rank` (from 1)."""
    return weight / (k + rank)
