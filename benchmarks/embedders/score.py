"""Scoring a model on the probe cases (cases.py): rank of each needed memory, by exact cosine in numpy.

For each need (an inject regex of a user, satisfied by one or more of its memories) the rank is 1 + the
number of candidates that are needed by none of the user's needs and score above the best memory of this
need: a user's other needed memories never push a need down, its other memories and the distractors do.
hit@1 and hit@3 are the shares of needs ranked 1 and ≤ 3; MRR the mean of 1 / rank; all@3 the share of
users whose every need is in the top 3 (score.py's rule for the probe's block, with a 3-memory block).
For each need ranked below 1, the memory ranked first is counted by where it came from: the user's own
memories, a same-language user's, or an other-language user's. Cosines are kept to show each model's scale.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from .cases import Case
from .models import Model

SOURCES = ("own", "same-lang", "other-lang")


@dataclass
class Outcome:
    user: str
    lang: str
    ranks: list[int]  # per need
    best: list[float]  # per need: cosine of its best memory
    beaten_by: list[str]  # per need ranked below 1: the source of the first-ranked memory
    top_distractor: float  # highest cosine of a memory no need wants (own or pool)
    first: str = ""  # the first-ranked memory's text (for dev misses only)


@dataclass
class Tally:
    needs: int = 0
    users: int = 0
    hit1: int = 0
    hit3: int = 0
    rr: float = 0.0
    all3: int = 0
    beaten: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    best: list[float] = field(default_factory=list)
    top_distractor: list[float] = field(default_factory=list)

    def add(self, outcome: Outcome) -> None:
        self.users += 1
        self.needs += len(outcome.ranks)
        self.hit1 += sum(r == 1 for r in outcome.ranks)
        self.hit3 += sum(r <= 3 for r in outcome.ranks)
        self.rr += sum(1 / r for r in outcome.ranks)
        self.all3 += all(r <= 3 for r in outcome.ranks)
        for source in outcome.beaten_by:
            self.beaten[source] += 1
        self.best += outcome.best
        self.top_distractor.append(outcome.top_distractor)

    def pct(self, count: int, of_users: bool = False) -> str:
        total = self.users if of_users else self.needs
        return f"{100 * count / total:.0f}" if total else "—"


def embed_all(model: Model, cases: list[Case]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every distinct query and memory text of `cases`, embedded once by `model`."""
    queries = list(dict.fromkeys(c.probe for c in cases))
    texts = list(dict.fromkeys(m.text for c in cases for m in c.memories + c.distractors))
    return (dict(zip(queries, model.query(queries), strict=True)),
            dict(zip(texts, model.passage(texts), strict=True)))


def rank_case(case: Case, queries: dict[str, np.ndarray], passages: dict[str, np.ndarray]) -> Outcome:
    candidates = case.memories + case.distractors
    scores = np.stack([passages[m.text] for m in candidates]) @ queries[case.probe]
    needed = {i for need in case.needs for i in need}
    others = np.array([s for i, s in enumerate(scores) if i not in needed])
    ranks, best, beaten_by = [], [], []
    first = int(np.argmax(scores))
    for need in case.needs:
        top = max(float(scores[i]) for i in need)
        rank = 1 + int((others > top).sum())
        ranks.append(rank)
        best.append(top)
        if rank > 1:
            winner = candidates[max((i for i in range(len(candidates)) if i not in needed), key=lambda i: scores[i])]
            beaten_by.append("own" if winner.user == case.user else
                             "same-lang" if winner.lang == case.lang else "other-lang")
    return Outcome(case.user, case.lang, ranks, best, beaten_by, float(others.max()) if len(others) else -1.0,
                   candidates[first].text)


def score(model: Model, cases: list[Case]) -> list[Outcome]:
    queries, passages = embed_all(model, cases)
    return [rank_case(c, queries, passages) for c in cases]


def by_language(outcomes: list[Outcome]) -> dict[str, Tally]:
    """Tallies per language, then "non-en" and "all"."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    for outcome in outcomes:
        keys = [outcome.lang, "all"] + ([] if outcome.lang == "en" else ["non-en"])
        for key in keys:
            tallies[key].add(outcome)
    order = ["en", *sorted(k for k in tallies if k not in ("en", "non-en", "all")), "non-en", "all"]
    return {k: tallies[k] for k in order if k in tallies}


def quantiles(values: list[float]) -> str:
    if not values:
        return "—"
    q = np.percentile(values, [10, 50, 90])
    return f"{q[0]:.2f} / {q[1]:.2f} / {q[2]:.2f}"
