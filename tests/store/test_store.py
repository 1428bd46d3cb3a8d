"""The SQL layer against the real embedded PostgreSQL."""

import asyncio
from typing import Any

import numpy as np
import psycopg
import pytest

from memory_proxy.store.database import migrate, migration_names
from memory_proxy.store.embedded import BUNDLED_NEEDS, needs_rebuild
from memory_proxy.store.memories import add_or_find_memory, count_memories, link_vector
from memory_proxy.store.search import SEARCH_CANDIDATES, neighbours
from tests.support.data import ROOT, USER_A, USER_B
from tests.support.fakes import vector_for
from tests.support.proxy import add_memory

QUERY = "Which JavaScript runtime should I use for my next project?"


async def search(conn: Any, user: str, text: str = QUERY, model: str = "mistral-embed",
                 min_score: float = 0.8, top_k: int = 10) -> list:
    return await neighbours(conn, user_id=user, model=model, embedding=vector_for(text),
                            top_k=top_k, min_score=min_score)


async def test_search_returns_only_the_users_memories_above_threshold(db: Any) -> None:
    bun = await add_memory(db, USER_A, "User is a software engineer who uses Bun.")
    await add_memory(db, USER_A, "User lives in Berlin.")
    await add_memory(db, USER_B, "User is a software engineer who uses Bun.")  # B's own copy

    found = await search(db, USER_A)
    assert [m.id for m in found] == [bun]
    assert 0.8 <= found[0].score <= 1.0
    assert next(m.id for m in await search(db, USER_A, min_score=-1.0)) == bun  # ranking still holds
    assert len(await search(db, USER_A, min_score=-1.0)) == 2
    assert all(m.id != bun for m in await search(db, USER_B, min_score=-1.0))
    assert await search(db, "nobody", min_score=-1.0) == []


async def test_top_k_limits_results(db: Any) -> None:
    for text in ["User lives in Berlin.", "User has a dog named Rex.", "User prefers green tea over coffee."]:
        await add_memory(db, USER_A, text)
    assert len(await search(db, USER_A, min_score=-1.0, top_k=2)) == 2


async def test_vectors_of_another_model_or_dimension_are_never_compared(db: Any) -> None:
    await add_memory(db, USER_A, "User is a software engineer who uses Bun.", model="other-embed")
    await add_or_find_memory(db, user_id=USER_A, content="short vector", embedding=[0.1] * 384, model="mistral-embed")
    assert await search(db, USER_A, min_score=-1.0) == []  # neither mismatched model nor 384-d vector
    assert await count_memories(db, USER_A) == 2


async def insert_random_memories(conn: Any, user: str, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, 1024))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = {}
    for i, v in enumerate(vectors):
        ids[await add_or_find_memory(conn, user_id=user, content=f"fact {i}", embedding=v.tolist(),
                                model="mistral-embed")] = v
    return ids


async def test_search_is_exact_up_to_the_candidate_count(db: Any) -> None:
    memories = await insert_random_memories(db, USER_A, SEARCH_CANDIDATES, seed=1)
    query = np.asarray(vector_for(QUERY))
    exact = sorted(memories, key=lambda i: -float(memories[i] @ query))[:10]
    found = await search(db, USER_A, min_score=-1.0)
    assert [m.id for m in found] == exact
    assert [round(m.score, 4) for m in found] == [round(float(memories[i] @ query), 4) for i in exact]


@pytest.mark.slow
async def test_a_close_memory_is_found_among_more_than_the_candidates(db: Any) -> None:
    await insert_random_memories(db, USER_A, SEARCH_CANDIDATES + 100, seed=2)
    bun = await add_memory(db, USER_A, "User is a software engineer who uses Bun.")
    assert [m.id for m in await search(db, USER_A)] == [bun]


async def test_shared_vector_unlinked_for_one_user_stays_for_the_other(db: Any) -> None:
    vector_id = await add_memory(db, USER_A, "User lives in Berlin.")
    assert await link_vector(db, USER_B, vector_id)
    await db.execute("DELETE FROM users_vectors WHERE user_id = %s AND vector_id = %s", [USER_A, vector_id])
    assert await count_memories(db, USER_A) == 0 and await count_memories(db, USER_B) == 1


async def test_migrations_are_recorded_and_idempotent(database_url: str) -> None:
    assert await migrate(database_url) == []  # the template already has them all
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        rows = await (await conn.execute("SELECT name FROM schema_migrations ORDER BY name")).fetchall()
    assert [r[0] for r in rows] == migration_names() != []


async def test_concurrent_migrations_on_an_empty_database_apply_once(pg_server: Any) -> None:
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS fresh_migrate WITH (FORCE)")
        conn.execute("CREATE DATABASE fresh_migrate")
    url = pg_server.get_uri("fresh_migrate")
    results = await asyncio.gather(*(migrate(url) for _ in range(3)))
    assert sorted(len(r) for r in results) == [0, 0, len(migration_names())]


async def test_parallel_inserts_of_the_same_text_leave_one_link(database_url: str) -> None:
    """The exact-duplicate guard is a unique constraint: racing transactions cannot create twins."""
    from memory_proxy.store.database import make_pool

    async with make_pool(database_url, 20) as pool:
        async def insert(text: str) -> str:
            async with pool.connection() as conn:
                return await add_or_find_memory(conn, user_id=USER_A, content=text, embedding=vector_for(text),
                                           model="mistral-embed")
        variants = ["User lives in Berlin.", "user lives in berlin", "  User  lives in Berlin!  "] * 7
        ids = await asyncio.gather(*(insert(v) for v in variants))
        async with pool.connection() as conn:
            assert await count_memories(conn, USER_A) == 1
            assert await count_memories(conn, USER_B) == 0
    assert len(set(ids)) == 1  # every caller got the one surviving id


async def test_the_database_refuses_a_memory_over_2_kb_whatever_the_path(db: Any) -> None:
    await add_memory(db, USER_A, "x" * 2048)  # at the limit: stored
    with pytest.raises(psycopg.errors.CheckViolation):
        await add_memory(db, USER_A, "y" * 2049)


async def test_pgvector_runs_on_this_cpu(db: Any) -> None:
    """Full-size float and bit distances (the bundled build dies with SIGILL on CPUs without AVX-512)."""
    a, b = np.linspace(-1, 1, 1024, dtype=np.float32), np.cos(np.arange(1024, dtype=np.float32))
    cur = await db.execute("SELECT %s::vector <=> %s::vector, vector_norm(%s::vector),"
                           " binary_quantize(%s::vector) <~> binary_quantize(%s::vector)", [a, b, a, a, b])
    cosine, norm, hamming = await cur.fetchone()
    assert cosine == pytest.approx(1 - float(a @ b) / float(np.linalg.norm(a) * np.linalg.norm(b)), abs=1e-5)
    assert norm == pytest.approx(float(np.linalg.norm(a)), rel=1e-5)
    assert hamming == int(np.sum((a > 0) != (b > 0)))


def test_the_bundled_pgvector_is_replaced_only_when_this_cpu_cannot_run_it(tmp_path: Any) -> None:
    other = tmp_path / "vector.so"
    other.write_bytes(b"another build")
    assert not needs_rebuild(other, frozenset())  # not the bundled file: never touched
    assert not needs_rebuild(tmp_path / "missing.so", frozenset())
    assert not needs_rebuild(other, None)  # no /proc/cpuinfo: nothing to judge by
    assert {"avx512f", "avx512_vpopcntdq"} <= BUNDLED_NEEDS


async def test_a_secret_in_an_audit_reason_is_redacted(db: Any) -> None:
    """The management API stores a free-text reason (PATCH body, DELETE ?reason=): never a secret in it."""
    from memory_proxy.store.memories import audit

    await audit(db, user_id=USER_A, old_id=None, new_id=None, action="edit",
                reason="typo; my new wifi password is Hx7-kP2q9zLm")
    cur = await db.execute("SELECT reason FROM memory_updates WHERE user_id = %s", [USER_A])
    assert await cur.fetchall() == [("typo; my new wifi password is [REDACTED: password]",)]


async def test_an_audit_reason_is_cut_to_its_bound_before_it_is_scanned_or_stored(db: Any) -> None:
    """A model's reason (the worker's audits) is cut; the API refuses a longer one (tests/api/test_input_bounds.py)."""
    from memory_proxy.store.memories import MAX_REASON_CHARS, audit

    await audit(db, user_id=USER_A, old_id=None, new_id=None, action="replace", reason="because " * 20_000)
    cur = await db.execute("SELECT length(reason) FROM memory_updates WHERE user_id = %s", [USER_A])
    assert await cur.fetchall() == [(MAX_REASON_CHARS,)]


async def test_a_pinned_memory_imported_from_an_export_is_pinned_and_audited(db: Any) -> None:
    from memory_proxy.api.export_format import read
    from memory_proxy.store.transfer import import_memory

    _, [memory] = read({"format": "memory-proxy/memories", "version": 1, "memories": [
        {"content": "User is allergic to penicillin.", "memory_type": "identity", "pinned": True}]})
    memory["stated_at"] = None
    new_id = await import_memory(db, user_id=USER_A, memory=memory, embedding=vector_for(memory["content"]),
                                 model="mistral-embed")
    async with db.transaction():
        await db.execute("SELECT set_config('memory_proxy.user_id', %s, true)", [USER_A])
        pinned = await (await db.execute("SELECT pinned FROM users_vectors WHERE vector_id = %s", [new_id])).fetchone()
        audit = await (await db.execute("SELECT action, old_vector_id, new_vector_id FROM memory_updates"
                                        " WHERE user_id = %s", [USER_A])).fetchall()
    assert pinned == (True,)
    assert audit == [("pin", new_id, new_id)]


async def test_an_export_holding_importance_and_confidence_still_imports(db: Any) -> None:
    """Exports written while memories had an importance and a confidence (never set, dropped by 0011)."""
    from memory_proxy.api.export_format import read
    from memory_proxy.store.transfer import active_memories, import_memory

    _, [memory] = read({"format": "memory-proxy/memories", "version": 1, "memories": [
        {"content": "User prefers tea.", "memory_type": "preference", "pinned": False,
         "stated_at": "2025-12-24T08:00:00+00:00", "importance": 7, "confidence": 0.9}]})
    assert await import_memory(db, user_id=USER_A, memory=memory, embedding=vector_for(memory["content"]),
                               model="mistral-embed")
    [stored] = await active_memories(db, USER_A)
    assert stored["content"] == "User prefers tea." and stored["stated_at"].year == 2025
    assert not {"importance", "confidence"} & set(stored)
    cur = await db.execute("SELECT column_name FROM information_schema.columns WHERE table_name = 'vectors'")
    assert not {"importance", "confidence"} & {name for (name,) in await cur.fetchall()}


def test_every_pin_change_goes_through_the_one_audited_function() -> None:
    import re

    root = ROOT / "memory_proxy"
    writers = {str(path.relative_to(root)): len(re.findall(r"SET\s+pinned\b", path.read_text()))
               for path in root.rglob("*.py")}
    assert {path: n for path, n in writers.items() if n} == {"store/memories.py": 1}  # in set_pinned
