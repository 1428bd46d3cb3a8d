"""One user's active memories in numpy, searched with the SQL statement's rules (store/search.py).

A `UserIndex` holds vectors as a float32 matrix, words as per-word postings, and what ranking and the tiers
read; `search` returns what store.search.search returns for that user, ranked with the same formulas and
constants (store/scoring.py, which both render; tests/retrieval/test_indexes.py runs both on one user): exact cosines of
the SEARCH_CANDIDATES memories nearest by their sign bits (the SQL's binary codes) ranked, BM25 over the user's own
words with words most memories hold dropped, weighted reciprocal rank fusion, and the candidates'
similarities to each other for MMR (exact cosines instead of the SQL's code estimates). Expiry is checked
at search time. retrieval/indexes.py holds these indexes and keeps them true to the database.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from ..embedding.memory_document import embedding_text
from ..records import Memory, SearchHit
from ..settings import EPISODE
from ..store import scoring, snapshot
from ..store.scoring import ALWAYS_ON_LIMIT, RECENT_READ
from ..store.search import SEARCH_CANDIDATES, Found
from . import late_interaction
from .late_interaction import Tokens
from .lexemes import query_lexemes

# Users with more are ranked without late interaction: their words' states cost the local model a pass over
# each memory in the load and several KB a memory to hold (retrieval/late_interaction.py; the figures:
# docs/BENCHMARKS.md#retrieval-quality-on-locomo).
LATE_MAX_MEMORIES = 2_000
ROW_OVERHEAD_BYTES = 600  # per memory beside its vector: text, postings, Python objects (approximate)
_NEVER = math.inf


@dataclass(frozen=True, slots=True)
class Query:
    """A turn's query, prepared once for every index it searches (the user's and each team's)."""

    searching: bool  # a vector came with it: without one, a search reads the tiers only
    unit: np.ndarray | None  # the vector at unit length (None: no vector, or a zero one)
    code: np.ndarray  # the vector's sign bits, packed as `UserIndex.codes`
    words: list[str]  # its lexemes, for BM25

    @classmethod
    def of(cls, embedding: Sequence[float] | None, text: str) -> Query:
        vector = np.asarray(embedding if embedding is not None else [], dtype=np.float32)
        norm = float(np.linalg.norm(vector)) if len(vector) else 0.0
        unit = vector / norm if norm > 0 else None
        return cls(searching=embedding is not None, unit=unit,
                   code=_codes(unit[None, :])[0] if unit is not None else np.zeros(0, dtype=np.uint64),
                   words=query_lexemes(text) if text and embedding is not None else [])


@dataclass(frozen=True, slots=True)
class UserIndex:
    """One user's active memories, by vector id (the SQL's tie order), ready to search."""

    memories: list[Memory]
    vectors: np.ndarray  # (n, dims) float32, unit length; zero rows for another model or dimension
    codes: np.ndarray  # (words, n) uint64: each vector's sign bits (the SQL's binary_quantize), packed, by word
    has_vector: np.ndarray  # bool (n,)
    always_on: np.ndarray  # bool (n,): pinned or identity
    facts: np.ndarray  # bool (n,): not an episode (a question about the user as a whole reads facts only)
    pinned: np.ndarray  # bool (n,)
    expires: np.ndarray  # float64 (n,): POSIX time, inf for never
    lasts_until: float  # the first expiry of a memory not pinned (inf for none): all are live before it
    everyone: np.ndarray  # bool (n,), all True: `live` until then
    recent_order: np.ndarray  # indexes, newest link first
    always_order: np.ndarray  # indexes, pinned first, then newest statement first
    always_first: list[int]  # the always-on tier while `everyone` is live: always_order's always-on, cut
    vectors_held: int  # how many memories have a comparable vector
    postings: dict[str, tuple[np.ndarray, np.ndarray]]  # lexeme → (indexes, tf)
    dl: np.ndarray  # float64 (n,): distinct words of each memory
    avgdl: float  # their mean (1 for none)
    access_count: np.ndarray  # int64 (n,), this process's uses added
    last_accessed: list[datetime | None]
    tokens: list[Tokens | None]  # the states of each memory's words, for late interaction (retrieval/late_interaction.py)
    position: dict[str, int] = field(repr=False)  # vector id → index
    rows: tuple[snapshot.LinkRow, ...] = field(default=(), repr=False)  # what it was built from (embeddings
    #                                                    as views of `vectors`): the base of the next read
    nbytes: int = 0

    @classmethod
    def of(cls, rows: Sequence[snapshot.LinkRow], model: str,
           tokenize: Callable[[list[str]], list[Tokens]] | None = None, base: UserIndex | None = None) -> UserIndex:
        """The index of `rows`; with `tokenize`, the states of each memory's words too (kept from `base`, the
        index read before, for the memories whose text did not change)."""
        n = len(rows)
        tokens: list[Tokens | None] = [None] * n
        if tokenize is not None and n <= LATE_MAX_MEMORIES:
            tokens = _word_states(rows, tokenize, base)
        dims = max((len(r.embedding) for r in rows if r.embedding_model == model), default=0)
        has_vector = np.array([r.embedding_model == model and len(r.embedding) == dims for r in rows], dtype=bool)
        vectors = np.zeros((n, dims), dtype=np.float32)
        if has_vector.any():
            vectors[has_vector] = np.stack([r.embedding for r, ok in zip(rows, has_vector, strict=True) if ok])
        norms = np.linalg.norm(vectors, axis=1)
        has_vector &= norms > 0
        vectors[has_vector] /= norms[has_vector, None]
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, r in enumerate(rows):
            for lexeme, tf in r.terms.items():
                entry = postings.setdefault(lexeme, ([], []))
                entry[0].append(i)
                entry[1].append(tf)
        pinned = np.array([r.pinned for r in rows], dtype=bool)
        expires = np.array([r.expires_at.timestamp() if r.expires_at else _NEVER for r in rows], dtype=np.float64)
        dl = np.array([len(r.terms) for r in rows], dtype=np.float64)
        stated = np.array([r.stated_at.timestamp() for r in rows])
        always_on = pinned | np.array([r.identity for r in rows], dtype=bool)
        always_order = np.lexsort((np.arange(n), -stated, ~pinned)) if n else np.zeros(0, dtype=np.int64)
        linked = np.array([r.linked_at.timestamp() for r in rows])
        return cls(
            memories=[Memory(id=r.id, content=r.content, created_at=r.created_at, stated_at=r.stated_at,
                             memory_type=r.memory_type, pinned=r.pinned) for r in rows],
            vectors=vectors, codes=np.ascontiguousarray(_codes(vectors).T), has_vector=has_vector, pinned=pinned,
            always_on=always_on, facts=np.array([r.memory_type != EPISODE for r in rows], dtype=bool),
            expires=expires, lasts_until=float(expires[~pinned].min(initial=_NEVER)), everyone=np.ones(n, dtype=bool),
            recent_order=np.lexsort((np.arange(n), -linked)) if n else np.zeros(0, dtype=np.int64),
            always_order=always_order, always_first=always_order[always_on[always_order]][:ALWAYS_ON_LIMIT].tolist(),
            vectors_held=int(has_vector.sum()),
            postings={w: (np.array(ix, dtype=np.int64), np.array(tf, dtype=np.float64))
                      for w, (ix, tf) in postings.items()},
            dl=dl, avgdl=(float(dl.mean()) if n else 0.0) or 1.0,
            access_count=np.array([r.access_count for r in rows], dtype=np.int64),
            last_accessed=[r.last_accessed_at for r in rows],
            tokens=tokens,
            position={r.id: i for i, r in enumerate(rows)},
            rows=_sharing(rows, vectors, has_vector),
            nbytes=vectors.nbytes * 33 // 32 + n * ROW_OVERHEAD_BYTES  # vectors and their codes
                   + sum(t.nbytes for t in tokens if t is not None))

    def search(self, query: Query, *, limit: int, mode: str, rrf_k: int, weights: tuple[float, float], tiers: bool,
               now: datetime, word_states: np.ndarray | None = None, late_weight: float = 0.0,
               recent: int = RECENT_READ, recent_facts: bool = False) -> Found:
        """What store.search.search returns for this user (see the module docstring for the differences);
        with the states of the query's words and a `late_weight`, the candidates' fused scores also hold
        the late-interaction arm (retrieval/late_interaction.py), when this index holds the states of their words."""
        live = self._live(now)
        found = Found()
        if tiers:
            shown = live & self.facts if recent_facts else live
            if live is self.everyone:
                always = self.always_first
            else:
                always = self.always_order[(self.always_on & live)[self.always_order]][:ALWAYS_ON_LIMIT].tolist()
            newest = self.recent_order if shown is self.everyone else self.recent_order[shown[self.recent_order]]
            found.always_on.extend(self.memories[i] for i in always)
            found.recent.extend(self.memories[i] for i in newest[:recent].tolist())
        if not query.searching or not self.memories:
            return found
        # Each arm ranks its few candidates (a few hundred by sign bits, the memories holding a query word), never
        # all memories: an operation over every memory of a large index is costly, and a turn searches several
        # indexes, its user's and its teams' (docs/BENCHMARKS.md#retrieval-latency).
        n = max(limit, 50)
        unit = query.unit if query.unit is not None and len(query.unit) == self.vectors.shape[1] else None
        arms: list[tuple[np.ndarray, np.ndarray]] = []  # (memory indexes, their fusion contributions)
        if mode != "text" and unit is not None:
            near = self._nearest(query.code)
            near = near if live is self.everyone else near[live[near]]
            cosine = self.vectors[near] @ unit
            ranked = np.lexsort((near, -cosine))[:n]  # ties by position, as `_best`
            arms.append((near[ranked], scoring.rrf(weights[0], np.arange(1, len(ranked) + 1), rrf_k)))
        words = query.words if mode != "vector" else []
        held, bm25, matched = self._bm25(words)
        if live is not self.everyone:
            bm25 = np.where(live[held], bm25, -np.inf)
        if len(held):
            best = held[_best(bm25, n)]
            arms.append((best, scoring.rrf(weights[1], np.arange(1, len(best) + 1), rrf_k)))
        candidates = np.unique(np.concatenate([ix for ix, _ in arms])) if arms else np.zeros(0, dtype=np.int64)
        fused = np.zeros(len(candidates))
        for ix, contribution in arms:
            fused[np.searchsorted(candidates, ix)] += contribution
        chosen = np.argsort(-fused, kind="stable")[:limit]  # ties by position: candidates are ascending
        chosen = chosen[fused[chosen] > 0]
        top, fused = candidates[chosen], fused[chosen]
        picked, has_vector = self.vectors[top], self.has_vector[top]
        # exact cosines of the chosen, text hits too (as the SQL's top); -1 without a comparable vector
        cosine = np.where(has_vector, picked @ unit, -1.0) if unit is not None else np.full(len(top), -1.0)
        if (word_states is not None and len(word_states) and late_weight > 0  # a query of stop words has none
                and any(self.tokens[i] is not None for i in top)):
            late_scores = late_interaction.maxsim(word_states, [self.tokens[i] for i in top])
            fused = fused + _rrf(late_scores, len(top), late_weight, rrf_k)
            found = replace(found, late_weight=late_weight)
        similar = (picked @ picked.T).tolist()  # a row without a comparable vector is zeros: 0 with every other
        found.hits.extend(  # columns as Python lists first: a numpy scalar per field cost more than the search
            SearchHit(memory=self.memories[i], fused=f, cosine=c, matched_terms=m, query_terms=len(query.words),
                      access_count=a, last_accessed_at=self.last_accessed[i], similar=tuple(s))
            for i, f, c, m, a, s in zip(top.tolist(), fused.tolist(), cosine.tolist(), _at(held, matched, top).tolist(),
                                        self.access_count[top].tolist(), similar, strict=True))
        return found

    def _live(self, now: datetime) -> np.ndarray:
        """Which memories are live at `now`: pinned, or not expired (every one until the first expiry)."""
        if now.timestamp() < self.lasts_until:
            return self.everyone
        return self.pinned | (self.expires > now.timestamp())

    def _nearest(self, code: np.ndarray) -> np.ndarray:
        """The memories with a comparable vector that the vector arm ranks: all of them, or for more than
        SEARCH_CANDIDATES the nearest by Hamming distance of their sign bits (`code`: the query's), as the SQL
        picks whom to re-rank: far cheaper than exact cosines over all (docs/BENCHMARKS.md#retrieval-latency)."""
        if self.vectors_held <= SEARCH_CANDIDATES:
            return np.flatnonzero(self.has_vector)
        # (words, n) at once: the bits of each memory's words are summed down the columns
        distance = np.bitwise_count(self.codes ^ code[:, None]).sum(axis=0, dtype=np.uint16)
        counted = distance
        if self.vectors_held < len(self.memories):
            distance[~self.has_vector] = np.iinfo(np.uint16).max
            counted = distance[self.has_vector]
        # the SEARCH_CANDIDATES smallest distances, by a count of each distance (at most `bits` + 1 values):
        # cheaper than a partition, and ties at the last distance go to the first memories
        counts = np.cumsum(np.bincount(counted, minlength=1))
        last = int(np.searchsorted(counts, SEARCH_CANDIDATES))  # the distance the last candidate has
        closer = np.flatnonzero(distance < last)
        return np.concatenate([closer, np.flatnonzero(distance == last)[:SEARCH_CANDIDATES - len(closer)]])

    def used(self, memory_ids: Sequence[str], at: datetime) -> None:
        """Count one use of each memory (what retrieval/use_counts.py writes to the database in its next batch)."""
        for memory_id in memory_ids:
            i = self.position.get(memory_id)
            if i is not None:
                self.access_count[i] += 1
                self.last_accessed[i] = at

    def _bm25(self, words: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The memories holding any of the query's words (indexes, ascending), and for each of them its BM25
        for those words and how many of them it holds (summed in the words' order, as the SQL does)."""
        n = len(self.memories)
        posted = [p for p in map(self.postings.get, words) if p is not None and len(p[0]) <= scoring.most_holders(n)]
        if not posted:
            return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
        ix = np.concatenate([p[0] for p in posted])
        idf = np.concatenate([np.full(len(p[0]), scoring.idf(n, len(p[0]))) for p in posted])
        held, at = np.unique(ix, return_inverse=True)
        score = scoring.bm25(idf, np.concatenate([p[1] for p in posted]), self.dl[ix], self.avgdl)
        return held, np.bincount(at, weights=score, minlength=len(held)), np.bincount(at, minlength=len(held))


def _word_states(rows: Sequence[snapshot.LinkRow], tokenize: Callable[[list[str]], list[Tokens]],
                 base: UserIndex | None) -> list[Tokens | None]:
    """Each row's word states: `base`'s for a memory whose text it already read (a use count or a pin gives
    a row a new version, not new words), the local model's for the others (a pass over each, the costly part)."""
    known = {(r.content, r.stated_at): t for r, t in zip(base.rows, base.tokens, strict=True)} if base else {}
    states = [known.get((r.content, r.stated_at)) for r in rows]
    missing = [i for i, t in enumerate(states) if t is None]
    if missing:
        for i, computed in zip(missing, tokenize([embedding_text(rows[i].content, rows[i].stated_at)
                                                  for i in missing]), strict=True):
            states[i] = computed
    return states


def _sharing(rows: Sequence[snapshot.LinkRow], vectors: np.ndarray,
             has_vector: np.ndarray) -> tuple[snapshot.LinkRow, ...]:
    """`rows` whose embeddings are now views of `vectors` (unit length): each vector is held once. Set in
    place: a dataclasses.replace per row was a third of the build (docs/BENCHMARKS.md#retrieval-latency)."""
    for i in np.flatnonzero(has_vector):
        rows[int(i)].embedding = vectors[i]
    return tuple(rows)


def _rrf(scores: np.ndarray, n: int, weight: float, rrf_k: int) -> np.ndarray:
    """weight / (k + rank) for the `n` best scores (-inf: not in this arm), 0 for the rest."""
    contribution = np.zeros(len(scores))
    ranked = _best(scores, n)
    contribution[ranked] = scoring.rrf(weight, np.arange(1, len(ranked) + 1), rrf_k)
    return contribution


def _codes(vectors: np.ndarray) -> np.ndarray:
    """Each row's sign bits (1 where > 0, as pgvector's binary_quantize), packed in 64-bit words."""
    bits = np.packbits(vectors > 0, axis=1)
    padded = np.zeros((len(bits), -(-bits.shape[1] // 8) * 8), dtype=np.uint8)
    padded[:, :bits.shape[1]] = bits
    return padded.view(np.uint64)


def _at(held: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """`values` (one per `held` index, ascending) at the `wanted` indexes, 0 for those not held."""
    at = np.minimum(np.searchsorted(held, wanted), max(len(held) - 1, 0))
    return np.where(held[at] == wanted, values[at], 0) if len(held) else np.zeros(len(wanted), dtype=values.dtype)


def _best(scores: np.ndarray, n: int) -> np.ndarray:
    """Indexes of the `n` highest finite scores, best first, ties by position (vector id order), sorting only
    the finite ones (an arm scores a few hundred of 10,000 memories), and a partition of those first when
    few of many are wanted."""
    finite = np.flatnonzero(np.isfinite(scores))
    if n <= 0 or not len(finite):
        return np.zeros(0, dtype=np.int64)
    values = scores[finite]
    if len(finite) > 4 * n:
        kth = np.partition(values, len(values) - n)[len(values) - n]  # the n-th highest
        keep = np.concatenate([np.flatnonzero(values > kth), np.flatnonzero(values == kth)])
        finite, values = finite[keep], values[keep]
    return finite[np.lexsort((finite, -values))][:n]
