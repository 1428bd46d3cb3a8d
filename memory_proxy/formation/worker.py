"""The formation worker: claim job → form (steps.py) → write in one transaction with its end (write.py) → finish.

Runs inside `serve` (WORKER_IN_PROCESS) or as `memory-proxy worker`; any number of workers share the
queue. A job's memory writes and its `done` mark commit together, and only while this worker still
holds the job's lease, so a crash or a takeover never applies a job twice. Failures are retried with
exponential backoff until JOB_MAX_ATTEMPTS, then the job is dead (visible, retryable). Every attempt
logs exactly one `memory_decision` line in a fresh log context: one line per attempt says all that
formation decided and why, so that a turn's outcome can be audited from the logs alone.

Row-level security (store/scope.py): jobs are claimed across users, then everything done for a job — the
reads that prepare it, its writes, its `done` or failure mark — runs in the scope of the job's user.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ..embedding.embedders import Embedder
from ..errors import MemoryUnavailable
from ..job_payload import FormationPayload
from ..observability import (
    DECISIONS,
    FACTS_DROPPED,
    FORMATION_LATENCY,
    JOB_EVENTS,
    JOBS,
    MEMORY_LINKS,
    MEMORY_USERS,
    log,
)
from ..redact.scan_pool import Scanner
from ..settings import FormationSettings, MaintenanceSettings
from ..store import jobs, memories
from ..store.scope import acting_member, user_scope
from ..tokens import SPENT
from .maintain import maintain_if_free
from .memory_llm import LLM_BUSY, WAITING, MemoryLLM, timeout_spends_attempt
from .steps import Formation, Turn, form
from .write import keep_versions, write_decisions

if TYPE_CHECKING:
    from ..limits.limiter import Limiter
    from ..services import Services

POLL_S = 1.0  # fallback when no NOTIFY arrives (listener down, jobs whose backoff has passed)
GAUGES_EVERY_S = 15.0
LISTEN_RETRY_S = 2.0
MAX_BACKOFF_S = 3600.0


class LeaseLost(Exception):
    """Another worker took the job over (our lease expired): our writes are rolled back."""


def backoff_seconds(settings: FormationSettings, attempts: int) -> float:
    return float(min(settings.retry_base_s * 2 ** max(attempts - 1, 0), MAX_BACKOFF_S))


class Worker:
    def __init__(self, *, pool: AsyncConnectionPool, embedder: Embedder, llm: MemoryLLM, scanner: Scanner,
                 settings: FormationSettings, worker_id: str | None = None,
                 maintenance: MaintenanceSettings | None = None, listen_conninfo: str | None = None,
                 limiter: Limiter | None = None, yielding_to: Callable[[], bool] | None = None) -> None:
        self.pool, self.embedder, self.llm, self.settings = pool, embedder, llm, settings
        # Inside `serve`: whether the process is serving chat turns, which then get the CPU first: this worker
        # starts a job only while none of its own runs (its jobs' work shares the event loop with every turn's).
        self.yielding_to = yielding_to
        self.limiter = limiter  # a job's memory-LLM tokens are its user's (fair use: memory_proxy/limits/)
        self.scanner = scanner  # checks each reply's facts in a worker process
        self.listen_conninfo = listen_conninfo or str(pool.conninfo)  # direct, never through a pooler
        self.maintenance = maintenance  # None or interval 0: no scheduled maintenance in this worker
        self._maintaining: asyncio.Task[Any] | None = None
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._running: dict[int, asyncio.Task[str]] = {}
        self._wake = asyncio.Event()

    @classmethod
    def from_services(cls, services: Services, worker_id: str | None = None,
                      yielding_to: Callable[[], bool] | None = None) -> Worker:
        """The worker of a running proxy or `memory-proxy worker`: formation and scheduled maintenance as
        configured. The one way to build it, so that no caller forgets a part (a standalone worker without
        maintenance would leave expired memories in place)."""
        settings = services.settings
        return cls(pool=services.pool, embedder=services.embedder, llm=services.llm, scanner=services.scanner,
                   settings=settings.formation,
                   worker_id=worker_id, maintenance=settings.maintenance, listen_conninfo=services.direct_conninfo,
                   limiter=services.limiter, yielding_to=yielding_to)

    # ------------------------------------------------------------ one job

    async def process(self, job: jobs.Job) -> str:
        """Run one claimed job to `done`, `queued` (retry later) or `dead`; return that status."""
        started = time.perf_counter()
        tally = [0]
        counting = SPENT.set(tally)  # its memory-LLM and embedding calls' tokens, its user's (fair use)
        context = {"job_id": job.id, "user_id": job.user_id, "attempt": job.attempts,
                   "input_message_length": len(job.payload.get("user_message", ""))}
        try:
            payload = FormationPayload.from_json(job.payload)
            llm = self.llm.for_turn(payload.model, timeouts=job.timeouts)
            formation = await form(Turn(job.user_id, job.said_at, payload), pool=self.pool,
                                   embedder=self.embedder, llm=llm, scanner=self.scanner, settings=self.settings)
            acting = acting_member.set(job.user_id)  # the author of what it adds, the actor of what it changes (0014)
            try:
                async with self.pool.connection() as conn, user_scope(conn, job.user_id):
                    if not await jobs.hold(conn, job_id=job.id, worker_id=self.worker_id):
                        raise LeaseLost(f"job {job.id} was taken over by another worker, or erased")
                    decisions = await write_decisions(conn, job, formation.resolutions, self.embedder.model,
                                                      self.settings.max_memories, self.settings.max_episodes)
                    if not await jobs.complete(conn, job_id=job.id, worker_id=self.worker_id):
                        raise LeaseLost(f"job {job.id} was taken over by another worker")
            finally:
                acting_member.reset(acting)
        except LeaseLost as exc:
            log.warning("memory_decision", **context, status="lease_lost", error=str(exc), decisions=[],
                        duration_ms=round((time.perf_counter() - started) * 1000, 1))
            return "lease_lost"
        except Exception as exc:  # noqa: BLE001 — anything: the job is retried or dead, never lost, never raised
            status = await self._fail(job, exc)
            log.warning("memory_decision", **context, status=status, error=f"{type(exc).__name__}: {exc}",
                        extracted_count=0, decisions=[],
                        duration_ms=round((time.perf_counter() - started) * 1000, 1))
            return status
        finally:
            FORMATION_LATENCY.observe(time.perf_counter() - started)
            SPENT.reset(counting)
            if self.limiter is not None:
                await self.limiter.user_work(job.user_id, tally[0])
        await keep_versions(self.pool, job.user_id, decisions, self.settings.max_versions)
        self._count(formation, decisions)
        log.info("memory_decision", **context, status="skipped" if formation.skipped else "done",
                 reason=formation.skipped, extracted_count=formation.extracted, decisions=decisions,
                 dropped=formation.dropped, malformed=formation.malformed, scope=formation.scope,
                 duration_ms=round((time.perf_counter() - started) * 1000, 1))
        return "done"

    @staticmethod
    def _count(formation: Formation, decisions: list[dict[str, Any]]) -> None:
        JOB_EVENTS.labels("skipped" if formation.skipped and not decisions else "completed").inc()
        for decision in decisions:
            DECISIONS.labels(decision["action"]).inc()
        for dropped in formation.dropped:
            FACTS_DROPPED.labels(dropped["why"]).inc()

    async def _fail(self, job: jobs.Job, exc: Exception) -> str:
        try:
            async with self.pool.connection() as conn, user_scope(conn, job.user_id):
                reason = exc.reason if isinstance(exc, MemoryUnavailable) else None
                timed_out = reason == LLM_BUSY
                busy = reason in WAITING and not (timed_out and timeout_spends_attempt(job.timeouts))
                status = await jobs.fail(conn, job_id=job.id, worker_id=self.worker_id,
                                         error=f"{type(exc).__name__}: {exc}",
                                         max_attempts=self.settings.max_attempts,
                                         backoff_s=backoff_seconds(self.settings, job.attempts),
                                         busy_max_s=self.settings.busy_max_s if busy else None,
                                         timed_out=timed_out)
        except (psycopg.Error, OSError):
            status = None  # the database is down too: the lease expires and the job is taken again
        JOB_EVENTS.labels("dead" if status == "dead" else "retried").inc()
        return status or "failed"

    # ------------------------------------------------------------ the queue

    async def claim(self, limit: int) -> list[jobs.Job]:
        async with self.pool.connection() as conn:
            return await jobs.claim(conn, worker_id=self.worker_id, limit=limit, lease_s=self.settings.lease_s)

    async def run_until_idle(self) -> int:
        """Process ready jobs until none is left; return how many ran (tests, benchmarks, one-shot use)."""
        done = 0
        while claimed := await self.claim(self.settings.concurrency):
            await asyncio.gather(*(self.process(job) for job in claimed))
            done += len(claimed)
        return done

    async def run(self, stop: asyncio.Event, drain_timeout_s: float = 30.0,
                  ready: asyncio.Event | None = None) -> None:
        """Work until `stop` is set, then finish or release the running jobs. With `ready`, start only
        once it is set (the database answered and is migrated) or return if `stop` comes first."""
        if ready and not ready.is_set():
            waiting = [asyncio.create_task(ready.wait()), asyncio.create_task(stop.wait())]
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            for task in waiting:
                task.cancel()
            if stop.is_set():
                return
        listener = asyncio.create_task(self._listen())
        stopper = asyncio.create_task(self._wake_on(stop))
        next_gauges = next_heartbeat = 0.0
        next_maintenance = time.monotonic() + (self.maintenance.interval_s if self.maintenance else 0)
        try:
            while not stop.is_set():
                self._wake.clear()
                await self._start_jobs()
                now = time.monotonic()
                if now >= next_heartbeat:
                    await self._extend_leases()
                    next_heartbeat = now + self.settings.lease_s / 3
                if now >= next_gauges:
                    await refresh_gauges(self.pool)
                    next_gauges = now + GAUGES_EVERY_S
                if self.maintenance and self.maintenance.interval_s and now >= next_maintenance:
                    self._start_maintenance()
                    next_maintenance = now + self.maintenance.interval_s
                with contextlib.suppress(TimeoutError):  # new job, free slot, stop, or time to renew
                    await asyncio.wait_for(self._wake.wait(), min(POLL_S, max(next_heartbeat - now, 0.01)))
        finally:
            listener.cancel()
            stopper.cancel()
            if self._maintaining:
                self._maintaining.cancel()  # its per-user transaction rolls back; the next run redoes it
            await self._drain(drain_timeout_s)

    def _start_maintenance(self) -> None:
        """Maintenance in the background (jobs keep flowing); one run at a time, errors logged."""
        if self._maintaining and not self._maintaining.done():
            return
        assert self.maintenance is not None
        self._maintaining = asyncio.create_task(maintain_if_free(self.pool, self.maintenance))
        self._maintaining.add_done_callback(
            lambda task: task.cancelled() or not task.exception() or log.warning(
                "maintenance_failed", error=repr(task.exception())))

    async def _start_jobs(self) -> None:
        at_once = 1 if self.yielding_to and self.yielding_to() else self.settings.concurrency
        free = at_once - len(self._running)
        if free <= 0:
            return
        try:
            claimed = await self.claim(free)
        except (psycopg.Error, OSError) as exc:
            log.warning("job_claim_failed", error=str(exc))
            return
        for job in claimed:
            task = asyncio.create_task(self.process(job))
            self._running[job.id] = task
            task.add_done_callback(self._finished)
        if len(claimed) == free:
            self._wake.set()  # there may be more ready jobs: look again once a slot frees

    def _finished(self, task: asyncio.Task[str]) -> None:
        """A slot is free: forget the task and wake the loop to claim the next job."""
        self._running = {job_id: t for job_id, t in self._running.items() if t is not task}
        self._wake.set()

    async def _extend_leases(self) -> None:
        if not self._running:
            return
        try:
            async with self.pool.connection() as conn:
                await jobs.extend_lease(conn, job_ids=list(self._running), worker_id=self.worker_id,
                                        lease_s=self.settings.lease_s)
        except (psycopg.Error, OSError) as exc:
            log.warning("job_lease_extension_failed", error=str(exc))

    async def _listen(self) -> None:
        """LISTEN for new jobs so an idle worker starts at once; polling covers any gap."""
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.listen_conninfo, autocommit=True) as conn:
                    async for _ in jobs.announced(conn):
                        self._wake.set()
            except (psycopg.Error, OSError):
                await asyncio.sleep(LISTEN_RETRY_S)

    async def _wake_on(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self._wake.set()

    async def _drain(self, timeout_s: float) -> None:
        """Shutdown: let running jobs finish within `timeout_s`, cancel the rest and release them."""
        running = list(self._running.values())
        if running:
            _, pending = await asyncio.wait(running, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        try:
            async with self.pool.connection() as conn:
                released = await jobs.release(conn, worker_id=self.worker_id)
            if released:
                log.info("jobs_released", count=released, worker_id=self.worker_id)
        except (psycopg.Error, OSError) as exc:
            log.warning("job_release_failed", error=str(exc))


async def refresh_gauges(pool: AsyncConnectionPool) -> None:
    """Queue depth and memory totals, read from the database (the truth across workers and replicas)."""
    try:
        async with pool.connection() as conn:
            counts = await jobs.status_counts(conn)
            links, users = await memories.memory_totals(conn)
    except (psycopg.Error, OSError) as exc:
        log.warning("gauge_refresh_failed", error=str(exc))
        return
    for status in ("queued", "running", "dead"):
        JOBS.labels(status).set(counts[status])
    MEMORY_LINKS.set(links)
    MEMORY_USERS.set(users)
