"""Retrieval latency, database only: the shipped per-user exact scan against the alternatives.

    python -m benchmarks.retrieval [--sizes 100000,1000000] [--quick] [--queries 200]

For each table size N (rows in ``vectors``, 1024-d float32, unit length) it starts an embedded
PostgreSQL 18 + pgvector 0.8 (``pgserver``, in a temp dir deleted at the end), tunes it (``SETTINGS``,
via ALTER SYSTEM + restart), applies the project's migrations, and bulk-loads N memories: background
users of 100 memories each plus three measured users with exactly 100, 1,000 and 10,000. Rows are
shuffled before loading, so a user's memories are scattered over the table as they are in production
(memories accrue over months, interleaved with everyone else's). The load is one binary COPY per table,
in the transaction that TRUNCATEs them (with ``wal_level=minimal`` the heap then skips WAL).

Data are synthetic but not uniform noise (on uniform random 1024-d vectors every cosine is ~0 and no
search method is meaningful): each vector is normalize(coarse topic + fine topic + noise) with 64
coarse and 4,096 fine topics, so same-topic memories score ~0.67, same-coarse ~0.33, others ~0. A
query is one of the user's memories plus noise (score to it ~0.89), so ``min_score=0.8`` (as shipped)
returns ~1 row and ``min_score=-1`` returns the full top-10.

Plans, each run on the same data with the same queries (top_k = 10):

a  ``shipped`` — ``memory_proxy.store.search._STATEMENT`` imported verbatim, run as a chat turn runs it (both
   tiers, both arms, the candidates' similarities; bitmap scans off as ``search()`` sets them): the
   user's ``SEARCH_CANDIDATES`` (200; ``--candidates 100,400`` adds runs with other counts) nearest links
   by Hamming distance of ``embedding_bq`` (``binary_quantize``, 128 bytes), from an index-only scan of
   the covering index ``users_vectors_search``, plus the cold-start branch, re-ranked by the exact cosine
   of their full vectors read from ``vectors`` by primary key; the text arm from the per-user term index
   (0007). Measured "auto-prepared" (psycopg's default, as shipped: server-side prepared after 5
   executions, when PostgreSQL may switch to a generic plan), "custom plan" (prepare=False), and the
   vector arm alone without tiers. Every other plan is measured with prepare=False.
a0 ``exact scan (before 0003)`` — the query shipped before 0003: every one of the user's links joined to
   ``vectors`` and scored (here on 0003's inline storage: one heap page per memory; before 0003 each
   memory also cost a TOAST index probe and ~3 chunks, 308/340 ms p50/p95 at 1M/10k).
e  ``exact halfvec, covering index`` — ``users_vectors_half``, a copy of ``users_vectors`` plus
   ``embedding_model`` and ``embedding_half halfvec``, covered by ``(user_id, embedding_model) INCLUDE
   (vector_id, embedding_half)`` (~2.1 KB index tuples, under the 2.7 KB btree limit): every halfvec
   cosine of the user's links from an index-only scan, no heap or TOAST access until the final k rows
   are joined to ``vectors`` for their content.
d  ``HNSW iterative`` — ``CREATE INDEX ... ON vectors USING hnsw ((embedding::vector(1024))
   vector_cosine_ops) WHERE embedding_model = 'mistral-embed'`` (m=16, ef_construction=64), queried
   with an EXISTS filter on the user's links, ``hnsw.iterative_scan = relaxed_order``,
   ``hnsw.ef_search = 100`` and the default ``hnsw.max_scan_tuples = 20000``, then re-sorted. Built
   at sizes up to 200k, and above only if its build time extrapolated (n log n) from a smaller size
   measured in the same run is under ``--hnsw-max-minutes`` (30).
f  ``in-process index`` — not SQL: each measured user's memories read once from the same table
   (``memory_proxy.store.snapshot.read_user``) into ``memory_proxy.retrieval.indexes.UserIndex`` and searched as a chat
   turn searches it after its first turn (tiers, both arms, similarities; the same queries and words as
   plan a); also the cost of a read and a build, and the memory held.

Every query is timed client-side (psycopg 3, unix socket, autocommit), after ``--warmup`` queries per
case; p50/p95/p99 in ms; a case stops early after ``--case-seconds`` (at least 20 queries; the
"queries" column says how many were measured). Recall@10 is against the
exact answer computed in numpy from the float32 vectors (same ``min_score``). One query per case is
run under EXPLAIN (ANALYZE, BUFFERS): the table shows its shared buffers touched and the indexes used;
the plans are saved to OUT/retrieval_plans.txt. Results go to stdout and OUT/retrieval_results.md (`--out`,
default out/, git-ignored).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from pgvector.psycopg import register_vector

from memory_proxy.store import embedded
from memory_proxy.store.database import migrate
from memory_proxy.store.search import _STATEMENT as SHIPPED
from memory_proxy.store.search import BM25_B, BM25_K1, COMMON_TERM_SHARE, POSTINGS_PER_TERM, SEARCH_CANDIDATES

DIM = 1024
MODEL = "mistral-embed"
MEASURED = (100, 1_000, 10_000)
BACKGROUND_PER_USER = 100
COARSE, FINE = 64, 4096
QUERY_NOISE = 0.5
TOP_K = 10
MIN_SCORES = (-1.0, 0.8)
OUT = Path(__file__).resolve().parents[1] / "out"  # git-ignored

# For a 2-core / 24 GB box (ALTER SYSTEM, then a restart for shared_buffers / wal_level).
SETTINGS = {
    "shared_buffers": "6GB",            # ~25% of RAM; the OS page cache holds the rest
    "effective_cache_size": "16GB",
    "work_mem": "64MB",
    "maintenance_work_mem": "6GB",      # an HNSW build is fast only while the graph fits in it
    "max_parallel_maintenance_workers": "1",  # leader + 1 worker = the 2 cores
    "random_page_cost": "1.1",          # SSD, mostly cached
    "synchronous_commit": "off",
    "wal_level": "minimal",             # bulk COPY into a table truncated in the same transaction skips WAL
    "max_wal_senders": "0",
    "max_wal_size": "32GB",             # no checkpoints in the middle of the load
    "checkpoint_timeout": "30min",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def normalize(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------------------------------------- plans

def _replace(sql: str, old: str, new: str) -> str:
    assert old in sql, old
    return sql.replace(old, new)


# a0: what shipped before migration 0003: every one of the user's vectors scored (heap + TOAST reads).
SQL_A0 = """
SELECT id, content, created_at, 1 - distance AS score
FROM (
    SELECT v.id, v.content, v.created_at,
           CASE WHEN vector_dims(v.embedding) = %(dims)s THEN v.embedding <=> %(q)s END AS distance
    FROM (
        SELECT vector_id FROM users_vectors WHERE user_id = %(user_id)s
        UNION
        SELECT vector_id FROM global_vectors
        WHERE %(with_global)s AND (SELECT count(*) FROM (
            SELECT 1 FROM users_vectors WHERE user_id = %(user_id)s LIMIT 5) own) < 5
    ) links
    JOIN vectors v ON v.id = links.vector_id
    WHERE v.embedding_model = %(model)s
) candidates
WHERE distance <= 1 - %(min_score)s
ORDER BY distance
LIMIT %(k)s
"""

# e: exact halfvec ranking of all the user's links from the covering index (no heap, no TOAST); only
# the k winners touch `vectors`. (Cold-start branch left out: it only matters below 5 memories.)
SQL_E = """
SELECT v.id, v.content, v.created_at, 1 - best.distance AS score
FROM (
    SELECT vector_id,
           CASE WHEN vector_dims(embedding_half) = %(dims)s
                THEN embedding_half <=> (SELECT %(q)s::halfvec) END AS distance
    FROM users_vectors_half
    WHERE user_id = %(user_id)s AND embedding_model = %(model)s
    ORDER BY distance
    LIMIT %(k)s
) best
JOIN vectors v ON v.id = best.vector_id
WHERE best.distance <= 1 - %(min_score)s
ORDER BY best.distance
"""

# d: HNSW with a user filter; the model is a literal so the partial index matches under generic plans.
SQL_D = f"""
WITH hits AS MATERIALIZED (
    SELECT v.id, v.content, v.created_at, v.embedding::vector({DIM}) <=> %(q)s AS distance
    FROM vectors v
    WHERE v.embedding_model = '{MODEL}'
      AND EXISTS (SELECT 1 FROM users_vectors uv WHERE uv.user_id = %(user_id)s AND uv.vector_id = v.id)
    ORDER BY v.embedding::vector({DIM}) <=> %(q)s
    LIMIT %(k)s
)
SELECT id, content, created_at, 1 - distance AS score FROM hits
WHERE distance <= 1 - %(min_score)s
ORDER BY distance
"""
HNSW_SETTINGS = ("SET hnsw.iterative_scan = relaxed_order", "SET hnsw.ef_search = 100")

# name -> (sql, prepare): prepare=None is psycopg's default, as in the product's pool (server-side
# prepared after 5 executions, after which PostgreSQL may switch to a generic plan); False plans every
# execution with the actual values (a custom plan).
PLAN_SQL: dict[str, tuple[str, bool | None]] = {
    "a shipped turn statement (tiers + hybrid + similarities), custom plan": (SHIPPED, False),
    "a shipped turn statement, auto-prepared": (SHIPPED, None),
    "a shipped vector arm alone (no tiers), custom plan": (SHIPPED, False),
    "a0 exact scan of every vector (before 0003)": (SQL_A0, False),
    "e exact halfvec, covering index": (SQL_E, False),
    "d HNSW iterative (relaxed)": (SQL_D, False),
}


# ----------------------------------------------------------------------------------------- server

def start_server(base: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from pgserver._commands import pg_ctl
        from pgserver.utils import PostmasterInfo

        server = embedded.start_server(base / "pg", cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        for name, value in SETTINGS.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
    # pgserver has no restart: pg_ctl restart reuses the original options (postmaster.opts); then point
    # the handle at the new postmaster so that cleanup() stops it.
    pg_ctl(["-w", "-l", str(server.log), "restart"], pgdata=server.pgdata, user=server.system_user, timeout=300)
    while True:
        info = PostmasterInfo.read_from_pgdata(server.pgdata)
        if info is not None and info.is_running() and info.status == "ready":
            server._postmaster_info = info
            break
        time.sleep(0.2)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        got = conn.execute("SELECT current_setting('shared_buffers'), current_setting('wal_level')").fetchone()
    log(f"server up: shared_buffers={got[0]} wal_level={got[1]}")
    return server


# ------------------------------------------------------------------------------------------- data

@dataclass
class Dataset:
    n: int
    centers_coarse: np.ndarray
    centers_fine: np.ndarray
    fine_to_coarse: np.ndarray
    measured_ids: dict[int, list[str]] = field(default_factory=dict)
    measured_vecs: dict[int, np.ndarray] = field(default_factory=dict)


def user_name(size: int) -> str:
    return f"measured-{size}"


# What the migration 0007 does for existing links: the postings of a bulk load, in three statements.
POST_IN_BULK = (
    "INSERT INTO memory_terms (user_id, lexeme, vector_id, tf, dl) SELECT uv.user_id, w.lexeme, uv.vector_id,"
    " greatest(cardinality(w.positions), 1), length(uv.search_text) FROM users_vectors uv, unnest(uv.search_text) w",
    "INSERT INTO memory_lexicon SELECT user_id, lexeme, count(*) FROM memory_terms GROUP BY user_id, lexeme",
    "INSERT INTO memory_term_stats SELECT user_id, count(*), sum(length(search_text)) FROM users_vectors GROUP BY user_id",
)


def content_of(i: int, name: str, half: bool) -> str:
    return f"memory {i} of {name}" + (" half" if half else "")


def load(uri: str, n: int, seed: int) -> tuple[Dataset, dict[str, float]]:
    rng = np.random.default_rng(seed)
    coarse = normalize(rng.standard_normal((COARSE, DIM), dtype=np.float32))
    fine = normalize(rng.standard_normal((FINE, DIM), dtype=np.float32))
    ds = Dataset(n, coarse, fine, rng.integers(0, COARSE, FINE))
    n_measured = sum(MEASURED)
    if n < n_measured + BACKGROUND_PER_USER:
        raise SystemExit(f"size {n} too small: the measured users alone hold {n_measured}")
    n_bg = n - n_measured
    bg_users = math.ceil(n_bg / BACKGROUND_PER_USER)
    owner = np.concatenate([np.arange(n_bg) // BACKGROUND_PER_USER,
                            *[np.full(s, bg_users + i) for i, s in enumerate(MEASURED)]]).astype(np.int64)
    rng.shuffle(owner)
    names = [f"user-{i:06d}" for i in range(bg_users)] + [user_name(s) for s in MEASURED]
    # every other memory of each user holds the word "half": the most common word the text arm still
    # scores (COMMON_TERM_SHARE), its worst case since 0007
    seen: dict[int, int] = {}
    half = np.zeros(n, dtype=bool)
    for i in range(n):
        seen[int(owner[i])] = seen.get(int(owner[i]), 0) + 1
        half[i] = seen[int(owner[i])] % 2 == 0
    raw = rng.bytes(16 * n)
    ids = [str(uuid.UUID(bytes=raw[16 * i:16 * i + 16], version=4)) for i in range(n)]
    for s in MEASURED:
        ds.measured_ids[s] = []
    measured_chunks: dict[int, list[np.ndarray]] = {s: [] for s in MEASURED}
    size_of = {bg_users + i: s for i, s in enumerate(MEASURED)}

    times: dict[str, float] = {}
    t0 = time.perf_counter()
    with psycopg.connect(uri) as conn:
        register_vector(conn)
        with conn.transaction():
            conn.execute("TRUNCATE vectors, users_vectors, global_vectors, memory_updates, memory_terms,"
                         " memory_lexicon, memory_term_stats")
            with conn.cursor().copy("COPY vectors (id, embedding, embedding_model, content)"
                                    " FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["text", "vector", "text", "text"])
                batch = 20_000
                for start in range(0, n, batch):
                    stop = min(n, start + batch)
                    f = rng.integers(0, FINE, stop - start)
                    vecs = normalize(coarse[ds.fine_to_coarse[f]] + fine[f]
                                     + normalize(rng.standard_normal((stop - start, DIM), dtype=np.float32)))
                    for j in range(stop - start):
                        i = start + j
                        u = int(owner[i])
                        copy.write_row((ids[i], vecs[j], MODEL, content_of(i, names[u], half[i])))
                        if u in size_of:
                            ds.measured_ids[size_of[u]].append(ids[i])
                            measured_chunks[size_of[u]].append(vecs[j])
                    if (stop // batch) % 10 == 0 or stop == n:
                        el = time.perf_counter() - t0
                        log(f"  vectors: {stop:,}/{n:,} rows, {stop / el:,.0f} rows/s")
            times["COPY vectors (s)"] = time.perf_counter() - t0
            t1 = time.perf_counter()
            conn.execute("CREATE TEMP TABLE links (user_id text, vector_id text, content_key text)")
            with conn.cursor().copy("COPY links FROM STDIN") as copy:
                for i in range(n):
                    content = content_of(i, names[int(owner[i])], half[i])  # already lower-case, single-spaced
                    copy.write_row((names[int(owner[i])], ids[i], hashlib.md5(content.encode()).hexdigest()))
            conn.execute("ALTER TABLE users_vectors DISABLE TRIGGER memory_terms_follow")  # posted in bulk below
            conn.execute("INSERT INTO users_vectors (user_id, vector_id, content_key, embedding_model, embedding_bq,"
                         " search_text) SELECT l.user_id, l.vector_id, l.content_key, v.embedding_model,"
                         " binary_quantize(v.embedding), v.search_text FROM links l JOIN vectors v ON v.id = l.vector_id")
            conn.execute("ALTER TABLE users_vectors ENABLE TRIGGER memory_terms_follow")
            for statement in POST_IN_BULK:
                conn.execute(statement)
            times["COPY + INSERT users_vectors (s)"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        conn.autocommit = True
        conn.execute("VACUUM (ANALYZE) vectors")
        conn.execute("VACUUM (ANALYZE) users_vectors")
        for table in ("memory_terms", "memory_lexicon", "memory_term_stats"):
            conn.execute(f"VACUUM (ANALYZE) {table}")
        times["VACUUM ANALYZE (s)"] = time.perf_counter() - t2
        bad = conn.execute("SELECT count(*) FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"
                           " WHERE uv.content_key <> v.content_key").fetchone()[0]
        assert bad == 0, f"{bad} content_key mismatches"
    times["load total (s)"] = time.perf_counter() - t0
    for s in MEASURED:
        ds.measured_vecs[s] = np.stack(measured_chunks[s])
        assert len(ds.measured_ids[s]) == s
    return ds, times


VARIANTS = [
    ("users_vectors_half (+embedding_half halfvec) + covering index", [
        ("CREATE TABLE users_vectors_half (user_id text NOT NULL, vector_id text NOT NULL,"
        " embedding_model text NOT NULL, embedding_half halfvec STORAGE PLAIN NOT NULL)"),
        ("INSERT INTO users_vectors_half SELECT uv.user_id, uv.vector_id, v.embedding_model,"
        " v.embedding::halfvec FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id"),
        "ALTER TABLE users_vectors_half ADD PRIMARY KEY (user_id, vector_id)",
        ("CREATE INDEX users_vectors_half_user ON users_vectors_half (user_id, embedding_model)"
        " INCLUDE (vector_id, embedding_half)"),
    ], ["users_vectors_half"]),
]


def build_variants(uri: str) -> dict[str, float]:
    times = {}
    with psycopg.connect(uri) as conn:
        for name, stmts, tables in VARIANTS:
            t = time.perf_counter()
            with conn.transaction():  # created and filled in one transaction: no WAL (wal_level=minimal)
                for s in stmts:
                    conn.execute(s)
            conn.autocommit = True
            for tb in tables:
                conn.execute(f"VACUUM (ANALYZE) {tb}")
            conn.autocommit = False
            times[f"build {name} (s)"] = time.perf_counter() - t
            log(f"  built {name} in {times[f'build {name} (s)']:.1f} s")
    return times


def build_hnsw(uri: str) -> float:
    with psycopg.connect(uri, autocommit=True) as conn:
        t = time.perf_counter()
        conn.execute(f"CREATE INDEX vectors_hnsw ON vectors USING hnsw ((embedding::vector({DIM})) vector_cosine_ops)"
                     f" WHERE embedding_model = '{MODEL}'")
        conn.execute("ANALYZE vectors")
        return time.perf_counter() - t


def sizes_report(uri: str) -> list[str]:
    q = """
    SELECT c.relname, pg_size_pretty(pg_relation_size(c.oid)),
           coalesce(pg_size_pretty(pg_relation_size(nullif(c.reltoastrelid, 0))), '-'),
           pg_size_pretty(pg_indexes_size(c.oid))
    FROM pg_class c WHERE c.relname IN ('vectors', 'users_vectors', 'users_vectors_half') ORDER BY 1"""
    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(q).fetchall()
        storage = conn.execute("SELECT attrelid::regclass, attstorage FROM pg_attribute WHERE attname LIKE 'embedding%%'"
                               " AND attrelid::regclass::text IN ('vectors', 'users_vectors',"
                               " 'users_vectors_half') ORDER BY 1").fetchall()
        colsize = conn.execute("SELECT avg(pg_column_size(embedding))::int FROM (SELECT embedding FROM vectors"
                               " LIMIT 1000) s").fetchone()[0]
        idx = conn.execute("SELECT indexrelid::regclass::text, pg_size_pretty(pg_relation_size(indexrelid))"
                           " FROM pg_index WHERE indrelid::regclass::text IN ('users_vectors', 'users_vectors_half',"
                           " 'vectors') ORDER BY 1"
                           ).fetchall()
    out = ["| relation | heap | TOAST | all indexes |", "|---|---|---|---|"]
    out += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows]
    out.append("")
    out.append("Index sizes: " + ", ".join(f"{a} {b}" for a, b in idx))
    out.append("attstorage of the embedding columns: " + ", ".join(f"{a}.{b}" for a, b in storage)
               + f"; avg pg_column_size(vectors.embedding) = {colsize} bytes")
    return out


# -------------------------------------------------------------------------------------- measuring

@dataclass
class Row:
    n: int
    memories: int
    plan: str
    min_score: float
    p50: float
    p95: float
    p99: float
    recall: float | None
    buffers: str
    indexes: str
    returned: float
    measured: int


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(p / 100 * len(xs)) - 1))]


def truth(ids: list[str], vecs: np.ndarray, q: np.ndarray, min_score: float) -> set[str]:
    scores = vecs @ q
    order = np.argsort(-scores)[:TOP_K]
    return {ids[i] for i in order if scores[i] >= min_score}


def add_candidate_variants(counts: list[int]) -> None:
    """The shipped query with other candidate counts than SEARCH_CANDIDATES (--candidates)."""
    for n in counts:
        if n != SEARCH_CANDIDATES:
            PLAN_SQL[f"a' shipped vector arm alone (no tiers), {n} BQ candidates, custom plan"] = (SHIPPED, False)


def candidates_of(plan: str) -> int:
    m = re.search(r"(\d+) BQ candidates", plan)
    return int(m.group(1)) if m else SEARCH_CANDIDATES


def measure_all(uri: str, ds: Dataset, plans: list[str], queries: int, warmup: int,
                seed: int, plans_log: list[str], case_seconds: float) -> list[Row]:
    rows: list[Row] = []
    rng = np.random.default_rng(seed + 1)
    for size in MEASURED:
        vecs, ids = ds.measured_vecs[size], ds.measured_ids[size]
        picks = rng.integers(0, size, warmup + queries)
        qs = normalize(vecs[picks] + QUERY_NOISE * normalize(rng.standard_normal((len(picks), DIM),
                                                                                  dtype=np.float32)))
        for plan in plans:
            sql, prepare = PLAN_SQL[plan]
            with psycopg.connect(uri, autocommit=True) as conn:
                register_vector(conn)
                if plan.startswith("d "):
                    for s in HNSW_SETTINGS:
                        conn.execute(s)
                if sql is SHIPPED:
                    conn.execute("SET enable_bitmapscan = off")  # as search() sets for its transaction
                for min_score in MIN_SCORES:
                    shipped = sql is SHIPPED
                    params = {"user_id": user_name(size), "model": MODEL, "dims": DIM, "with_global": True,
                              "min_score": min_score, "k": TOP_K, "candidates": candidates_of(plan),
                              # the shipped statement (its ranking then runs in Python), as a chat turn
                              # runs it: the tiers, both arms; the query's words are "memory" (in every
                              # memory: dropped), the number of the memory it was made from (in one) and
                              # "half" (in exactly half: the text arm's worst case)
                              "cold": 5, "use_vector": True, "use_text": "vector arm alone" not in plan,
                              "common": COMMON_TERM_SHARE, "postings": POSTINGS_PER_TERM, "k1": BM25_K1, "b": BM25_B,
                              "rrf_k": 60, "w_vector": 1.0, "w_text": 1.0, "n": 50, "limit": TOP_K * 3,
                              "with_tiers": "no tiers" not in plan, "always": 20, "recent": 10}
                    lat, hits, got_n, n_truth = [], 0, 0, 0
                    started = time.perf_counter()
                    for qi, q in enumerate(qs):
                        if qi >= warmup + 20 and time.perf_counter() - started > case_seconds:
                            break  # a very slow case: report what fits in the time cap
                        params["q"] = q
                        params["text"] = f"what is memory {int(picks[qi])} about, half of it"
                        t = time.perf_counter()
                        res = conn.execute(sql, params, prepare=prepare, binary=shipped).fetchall()
                        el = (time.perf_counter() - t) * 1000
                        if qi < warmup:
                            continue
                        lat.append(el)
                        found = [r[1] for r in res if r[0] == "hit"] if shipped else [r[0] for r in res]
                        got_n += len(found)
                        tr = truth(ids, vecs, q, min_score)
                        n_truth += len(tr)
                        hits += len(tr & set(found))
                    params["q"] = qs[-1]
                    plan_text = "\n".join(r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql,
                                                                      params, prepare=False).fetchall())
                    plans_log.append(f"=== N={ds.n:,} user={size:,} plan={plan} min_score={min_score}\n{plan_text}\n")
                    m = re.search(r"Buffers: shared ((?:hit=\d+)?\s*(?:read=\d+)?)", plan_text)
                    used = sorted(set(re.findall(r"using (\w+)", plan_text)))
                    row = Row(ds.n, size, plan, min_score, statistics.median(lat), pct(lat, 95), pct(lat, 99),
                              hits / n_truth if n_truth else None, m.group(1).strip() if m else "?",
                              ", ".join(used), got_n / len(lat), len(lat))
                    rows.append(row)
                    log(f"  N={ds.n:,} user={size:>6,} {plan:<34} min={min_score:>4} p50 {row.p50:7.2f}"
                        f" p95 {row.p95:7.2f} p99 {row.p99:7.2f} ms recall {fmt_recall(row.recall)}"
                        f" rows {row.returned:.1f} buf {row.buffers} [{row.indexes}]")
    return rows


def fmt_recall(r: float | None) -> str:
    return "—" if r is None else f"{r:.3f}"


def markdown(rows: list[Row]) -> list[str]:
    out = [("| table rows | user memories | plan | min_score | p50 ms | p95 ms | p99 ms | recall@10 "
           "| queries | rows returned | shared buffers (1 query) | indexes used |"),
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.n:,} | {r.memories:,} | {r.plan} | {r.min_score:g} | {r.p50:.2f} | {r.p95:.2f} "
                   f"| {r.p99:.2f} | {fmt_recall(r.recall)} | {r.measured} | {r.returned:.1f} | {r.buffers} "
                   f"| {r.indexes} |")
    return out


# -------------------------------------------------------------------------------------------- main

def measure_index(uri: str, ds: Dataset, queries: int, warmup: int, seed: int) -> tuple[list[Row], list[str]]:
    """Plan f: the in-process index (memory_proxy/retrieval/indexes.py) of each measured user, read once from this
    table, then searched as a chat turn searches it (tiers, both arms, similarities): no database work.
    Also the cost of a load (read + build), which a user pays again after each change to their memories."""
    from memory_proxy.retrieval.indexes import UserIndex
    from memory_proxy.retrieval.user_index import Query
    from memory_proxy.store.database import make_pool
    from memory_proxy.store.snapshot import read_user

    rows: list[Row] = []
    loads = ["| user memories | load p50 ms (read + build) | build alone ms | index MB |", "|---|---|---|---|"]
    rng = np.random.default_rng(seed + 1)  # the same queries as measure_all draws, in the same order

    async def read(user: str) -> list[Any]:
        async with make_pool(uri, 1) as pool, pool.connection() as conn:
            found = await read_user(conn, user, 10**9)
        assert found is not None
        return found

    for size in MEASURED:
        vecs, ids = ds.measured_vecs[size], ds.measured_ids[size]
        timings, builds = [], []
        for _ in range(3):
            t = time.perf_counter()
            snapshot_rows = asyncio.run(read(user_name(size)))
            b = time.perf_counter()
            index = UserIndex.of(snapshot_rows, MODEL)
            builds.append((time.perf_counter() - b) * 1000)
            timings.append((time.perf_counter() - t) * 1000)
        loads.append(f"| {size:,} | {statistics.median(timings):.1f} | {statistics.median(builds):.1f} "
                     f"| {index.nbytes / 2**20:.1f} |")
        picks = rng.integers(0, size, warmup + queries)
        qs = normalize(vecs[picks] + QUERY_NOISE * normalize(rng.standard_normal((len(picks), DIM), dtype=np.float32)))
        for min_score in MIN_SCORES:
            lat, hits, got_n, n_truth = [], 0, 0, 0
            for qi, q in enumerate(qs):
                text = f"what is memory {int(picks[qi])} about, half of it"
                t = time.perf_counter()
                found = index.search(Query.of(q.tolist(), text), limit=TOP_K * 3, mode="hybrid", rrf_k=60,
                                     weights=(1.0, 1.0), tiers=True, now=datetime.now(UTC))
                el = (time.perf_counter() - t) * 1000
                if qi < warmup:
                    continue
                lat.append(el)
                got = [h.memory.id for h in found.hits]
                got_n += len(got)
                tr = truth(ids, vecs, q, min_score)
                n_truth += len(tr)
                hits += len(tr & set(got))
            rows.append(Row(ds.n, size, "f in-process index (retrieval/indexes.py), from a list of floats", min_score,
                            statistics.median(lat), pct(lat, 95), pct(lat, 99),
                            hits / n_truth if n_truth else None, "0 (no database)", "—", got_n / len(lat), len(lat)))
            log(f"  N={ds.n:,} user={size:>6,} in-process index min={min_score:>4} p50 {rows[-1].p50:7.2f}"
                f" p95 {rows[-1].p95:7.2f} ms recall {fmt_recall(rows[-1].recall)}")
    return rows, loads


def run_size(n: int, args: argparse.Namespace, hnsw_rate: dict[str, float], report: list[str],
             plans_log: list[str]) -> None:
    base = Path(tempfile.mkdtemp(prefix="retrieval-pg-", dir=args.tmp))
    server = None
    try:
        server = start_server(base)
        uri = server.get_uri()
        asyncio.run(migrate(uri))
        log(f"N={n:,}: loading")
        ds, times = load(uri, n, args.seed)
        log(f"N={n:,}: loaded in {times['load total (s)']:.1f} s; building variants")
        times.update(build_variants(uri))
        plans = [p for p in PLAN_SQL if not p.startswith("d ")]
        hnsw_note = ""
        est = None
        if hnsw_rate:
            n0, t0 = hnsw_rate["n"], hnsw_rate["t"]
            est = t0 * (n / n0) * math.log(n) / math.log(n0)
        if n <= 200_000 or (est is not None and est / 60 <= args.hnsw_max_minutes):
            log(f"N={n:,}: building HNSW" + (f" (estimated {est / 60:.1f} min)" if est else ""))
            t = build_hnsw(uri)
            times["build HNSW m=16 ef_construction=64 (s)"] = t
            hnsw_rate.update(n=n, t=t)
            plans.append("d HNSW iterative (relaxed)")
            log(f"  HNSW built in {t:.1f} s")
        else:
            hnsw_note = (f"HNSW skipped at N={n:,}: estimated build "
                         + (f"{est / 60:.0f} min (from {hnsw_rate['t']:.0f} s at {hnsw_rate['n']:,}, n log n)"
                            if est is not None else "unknown (no smaller size measured in this run)")
                         + f" > {args.hnsw_max_minutes} min limit")
            log(hnsw_note)
        sizes = sizes_report(uri)
        rows = measure_all(uri, ds, plans, args.queries, args.warmup, args.seed, plans_log,
                           args.case_seconds)
        index_rows, loads = measure_index(uri, ds, args.queries, args.warmup, args.seed)
        rows += index_rows
        report += [f"## N = {n:,} vectors ({DIM}-d)", "", "| step | seconds |", "|---|---|"]
        report += [f"| {k.removesuffix(' (s)')} | {v:.1f} |" for k, v in times.items()]
        report += ["", f"Load rate: {n / times['COPY vectors (s)']:,.0f} vectors/s (binary COPY)."]
        if hnsw_note:
            report += ["", hnsw_note + "."]
        report += ["", *sizes, "", *markdown(rows), "", "In-process index loads (plan f):", "", *loads, ""]
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=None, help="comma-separated table sizes (default 100000,1000000)")
    ap.add_argument("--quick", action="store_true", help="30k rows, 30 queries: a smoke run")
    ap.add_argument("--queries", type=int, default=None, help="measured queries per case (default 200)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--candidates", default="", help="comma-separated other candidate counts to try (plan a')")
    ap.add_argument("--hnsw-max-minutes", type=float, default=30.0)
    ap.add_argument("--case-seconds", type=float, default=40.0,
                    help="stop a case after this long (at least 20 queries), for the very slow plans")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tmp", default=tempfile.gettempdir(), help="where the temporary database lives")
    ap.add_argument("--out", type=Path, default=OUT, help=f"where the report and the plans go (default: {OUT})")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("30000" if args.quick else "100000,1000000")).split(",")]
    args.queries = args.queries or (30 if args.quick else 200)
    add_candidate_variants([int(c) for c in args.candidates.split(",") if c])
    report = ["# Retrieval latency, database only", "",
              f"PostgreSQL 18 + pgvector 0.8.2 (pgserver), top_k={TOP_K}, {args.queries} queries per case after "
              f"{args.warmup} warm-up. Settings: "
              + ", ".join(f"{k}={v}" for k, v in SETTINGS.items()), ""]
    plans_log: list[str] = []
    args.out.mkdir(parents=True, exist_ok=True)
    results, plans = args.out / "retrieval_results.md", args.out / "retrieval_plans.txt"
    hnsw_rate: dict[str, float] = {}
    try:
        for n in sizes:
            run_size(n, args, hnsw_rate, report, plans_log)
            results.write_text("\n".join(report) + "\n")
            plans.write_text("\n".join(plans_log))
    finally:
        results.write_text("\n".join(report) + "\n")
        plans.write_text("\n".join(plans_log))
    print("\n".join(report))


if __name__ == "__main__":
    main()
