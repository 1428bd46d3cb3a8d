"""Formation jobs on their way to the database (memory_proxy/chat/outbox.py): held, spooled, taken over, set aside."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from memory_proxy.chat.outbox import Outbox, PendingJob
from memory_proxy.job_payload import VERSION, FormationPayload
from memory_proxy.store import jobs
from memory_proxy.store.database import make_pool
from tests.support.data import OLD_CONTEXT, OLD_PAYLOAD, USER_A, USER_B
from tests.support.proxy import metric

DOWN = "postgresql://postgres@/postgres?host=/nonexistent-socket-dir&connect_timeout=1"


def job(user: str, message: str) -> PendingJob:
    return PendingJob(user, datetime.now(UTC), FormationPayload(message))


async def job_rows(database_url: str) -> list[tuple[str, str]]:
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        cur = await conn.execute("SELECT user_id, payload->>'user_message' FROM memory_jobs ORDER BY id")
        return [(u, m) for u, m in await cur.fetchall()]


@pytest.fixture
def ready() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


async def test_a_job_the_database_refuses_is_set_aside_and_the_next_ones_go_on(
        database_url: str, tmp_path: Path, ready: asyncio.Event) -> None:
    """A signed `sub` with NUL (or a lone surrogate) can never be stored: it must not hold back the jobs
    of every other user behind it (it did: Outbox.flush stopped at the first job that failed)."""
    rejected = metric("memory_proxy_jobs_total", event="rejected")
    async with make_pool(database_url, 2) as pool:
        outbox = Outbox(pool, ready, tmp_path)
        await outbox.put(job("bad\x00user", "I live in Lyon."))
        await outbox.put(job("bad\ud800user", "I live in Rome."))
        await outbox.put(job(USER_A, "I have a cat."))
        assert len(outbox) == 0
    assert await job_rows(database_url) == [(USER_A, "I have a cat.")]
    assert metric("memory_proxy_jobs_total", event="rejected") == rejected + 2


@pytest.mark.slow
async def test_held_jobs_survive_a_restart_of_the_proxy_during_the_outage(
        database_url: str, tmp_path: Path, ready: asyncio.Event) -> None:
    """The database is down: jobs are held and spooled to the data dir. The proxy stops (the held jobs
    stay on disk) and a new one starts: it takes them over and writes them, in order, once it can."""
    async with make_pool(DOWN, 1) as down:
        outbox = Outbox(down, ready, tmp_path)
        for i in range(6):
            await outbox.put(job(USER_A if i % 2 else USER_B, f"turn {i}"))
        assert len(outbox) == 6 and len(list(tmp_path.glob("*.json"))) == 6
        stop = asyncio.Event()
        stop.set()
        await outbox.run(stop)  # stopping: one last try, then the jobs stay spooled
    async with make_pool(database_url, 2) as pool:
        restarted = Outbox(pool, ready, tmp_path)
        assert len(restarted) == 6
        await restarted.flush()
        assert len(restarted) == 0
    assert await job_rows(database_url) == [(USER_B if i % 2 == 0 else USER_A, f"turn {i}") for i in range(6)]
    assert list(tmp_path.glob("*.json")) == []  # written: the spool files are gone


async def test_unreadable_spool_files_are_set_aside_and_old_rejected_ones_deleted(
        database_url: str, tmp_path: Path, ready: asyncio.Event) -> None:
    (tmp_path / "00000000000000000001-aaaa.json").write_text("{not json")
    (tmp_path / "00000000000000000002-bbbb.json").write_text(json.dumps(
        {"user_id": USER_A, "said_at": datetime.now(UTC).isoformat(), "payload": {"user_message": "ok"}}))
    (tmp_path / "rejected").mkdir()
    old = tmp_path / "rejected" / "old.json"
    old.write_text("{}")
    os.utime(old, (0, 0))  # 1970: past any retention
    async with make_pool(database_url, 2) as pool:
        outbox = Outbox(pool, ready, tmp_path, rejected_days=30)
        await outbox.flush()
    assert await job_rows(database_url) == [(USER_A, "ok")]
    assert [p.name for p in (tmp_path / "rejected").iterdir()] == ["00000000000000000001-aaaa.json"]


async def test_a_spool_file_written_in_the_old_payload_format_is_written_as_the_current_one(
        database_url: str, tmp_path: Path, ready: asyncio.Event) -> None:
    """A spool file outlives an upgrade: its flattened "role: text" context lines become messages."""
    (tmp_path / "00000000000000000001-aaaa.json").write_text(json.dumps(
        {"user_id": USER_A, "said_at": datetime.now(UTC).isoformat(), "payload": OLD_PAYLOAD,
         "turn_id": "5f0c6f52-2b8e-4c55-9d7e-3f1f4f0e8a11"}))
    async with make_pool(database_url, 2) as pool:
        await Outbox(pool, ready, tmp_path).flush()
        async with pool.connection() as conn:
            await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
            [(payload,)] = await (await conn.execute("SELECT payload FROM memory_jobs")).fetchall()
    assert payload["version"] == VERSION and payload["user_message"] == OLD_PAYLOAD["user_message"]
    assert payload["context"] == [{"role": m.role, "content": m.content} for m in OLD_CONTEXT]
    assert list(tmp_path.glob("*.json")) == []


@pytest.mark.slow
async def test_past_capacity_the_oldest_held_job_is_dropped_from_disk_too(tmp_path: Path,
                                                                         ready: asyncio.Event) -> None:
    dropped = metric("memory_proxy_jobs_total", event="dropped")
    async with make_pool(DOWN, 1) as down:
        outbox = Outbox(down, ready, tmp_path, capacity=2)
        for i in range(3):
            await outbox.put(job(USER_A, f"turn {i}"))
    held = sorted(json.loads(p.read_text())["payload"]["user_message"] for p in tmp_path.glob("*.json"))
    assert held == ["turn 1", "turn 2"]
    assert metric("memory_proxy_jobs_total", event="dropped") == dropped + 1



async def test_jobs_of_turns_that_end_together_are_written_together(database_url: str, tmp_path: Path,
                                                                     ready: asyncio.Event,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Group commit: 20 turns ending at once cost one or two transactions, not 20, and keep each user's
    order; a job the database refuses among them is set aside alone, and no other is lost."""
    from memory_proxy.store import jobs

    batches: list[int] = []
    enqueue_many = jobs.enqueue_many

    async def counted(conn: Any, batch: Any) -> list[int]:
        batches.append(len(batch))
        return await enqueue_many(conn, batch)

    monkeypatch.setattr(jobs, "enqueue_many", counted)
    async with make_pool(database_url, 2) as pool:
        outbox = Outbox(pool, ready, tmp_path)
        await asyncio.gather(*(outbox.put(job(USER_A if i % 2 else USER_B, f"fact {i}")) for i in range(20)))
        assert sum(batches) == 20 and len(batches) <= 2

        rejected = metric("memory_proxy_jobs_total", event="rejected")
        turns = [job(USER_A, f"later {i}") for i in range(5)]
        turns.insert(2, job("bad\x00user", "I live in Lyon."))
        await asyncio.gather(*(outbox.put(turn) for turn in turns))
        assert len(outbox) == 0
    assert metric("memory_proxy_jobs_total", event="rejected") == rejected + 1
    written = await job_rows(database_url)
    assert [m for u, m in written if u == USER_A] == [*(f"fact {i}" for i in range(1, 20, 2)),
                                                      *(f"later {i}" for i in range(5))]  # in order
    assert sorted(m for u, m in written if u == USER_B) == sorted(f"fact {i}" for i in range(0, 20, 2))


@pytest.mark.slow
async def test_spooled_chat_text_is_readable_by_the_proxy_s_user_only(tmp_path: Path, ready: asyncio.Event) -> None:
    """A spool file holds the user's words: 0600 in a 0700 directory, also under a permissive umask and
    when an older version had made the directory 0755."""
    spool = tmp_path / "outbox"
    spool.mkdir(mode=0o755)
    old_umask = os.umask(0o022)
    try:
        async with make_pool(DOWN, 1) as down:
            outbox = Outbox(down, ready, spool)
            await outbox.put(job(USER_A, "My therapist is Dr Lund."))
            outbox._set_aside(next(spool.glob("*.json")))  # a rejected job keeps its text too
            await outbox.put(job(USER_A, "I take sertraline."))
    finally:
        os.umask(old_umask)
    files = [*spool.glob("*.json"), *spool.glob("rejected/*.json")]
    assert len(files) == 2
    assert {oct(f.stat().st_mode & 0o777) for f in files} == {"0o600"}
    assert {oct(d.stat().st_mode & 0o777) for d in (spool, spool / "rejected")} == {"0o700"}


async def test_a_write_that_committed_but_lost_its_answer_is_not_written_twice(
        database_url: str, tmp_path: Path, ready: asyncio.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL (or PgBouncer) restarting just after a commit: the job is in the database but the proxy
    sees an error, holds the job and writes it again later. The turn must still be one job."""
    real = jobs.enqueue_many

    async def commits_then_fails(conn: Any, batch: Any) -> list[int]:
        await real(conn, batch)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    async with make_pool(database_url, 2) as pool:
        outbox = Outbox(pool, ready, tmp_path)
        monkeypatch.setattr(jobs, "enqueue_many", commits_then_fails)
        await outbox.put(job(USER_A, "I live in Lyon."))
        assert len(outbox) == 1  # held: the proxy could not know it was written
        monkeypatch.setattr(jobs, "enqueue_many", real)
        restarted = Outbox(pool, ready, tmp_path)  # the proxy restarts: its spool is taken over and written
        assert len(restarted) == 1
        await restarted.flush()
        assert len(restarted) == 0 and not list(tmp_path.glob("*.json"))
    assert await job_rows(database_url) == [(USER_A, "I live in Lyon.")]


async def test_held_jobs_are_written_in_batches_in_order_and_a_refused_one_is_set_aside(
        database_url: str, tmp_path: Path, ready: asyncio.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("memory_proxy.chat.outbox.FLUSH_BATCH", 3)
    rejected = metric("memory_proxy_jobs_total", event="rejected")
    async with make_pool(database_url, 2) as pool:
        outbox = Outbox(pool, ready, tmp_path)
        for i in range(7):
            await outbox.put(job("bad\x00user" if i == 4 else USER_A, f"turn {i}"), hold=True)
        assert len(outbox) == 7
        await outbox.flush()
        assert len(outbox) == 0 and not list(tmp_path.glob("*.json"))
        assert len(list((tmp_path / "rejected").glob("*.json"))) == 1
    assert await job_rows(database_url) == [(USER_A, f"turn {i}") for i in (0, 1, 2, 3, 5, 6)]
    assert metric("memory_proxy_jobs_total", event="rejected") == rejected + 1
