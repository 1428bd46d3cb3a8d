"""Secret scans and formation's fact checks, off the event loop: one loop serves every user, and a scan that
holds it (or holds the GIL) for a second stalls every chat turn and /healthz for that second.

Where the work runs, by size:
- A small bounded text (at most SMALL_TEXT_CHARS: a memory, a fact, an audit reason) is redacted in a thread.
  The rule set's engine is Go called through `ctypes.CDLL`, which releases the GIL for the call (at most
  betterleaks.ENGINE_CALLS at once); the Python rules of memory_proxy/redact/ hold it only briefly on a text
  that small (SMALL_TEXT_CHARS).
- Anything larger (a chat turn's formation job), and the check of a memory-LLM reply's facts (redaction and
  grounding), runs in a worker process with a deadline (SECRET_SCAN_TIMEOUT): a task past it is stopped
  with its process, and the caller gets ScanFailed, so the text is not kept (fail closed).

Why pebble's ProcessPool: the standard library's ProcessPoolExecutor cannot stop a running task (a stuck scan
would hold its worker for good, and a timeout would only stop the waiting); pebble stops the worker process of
a task past its timeout, or cancelled, and starts a new one (maintained, pure Python, LGPL-3.0 used as is).
Workers are forked from a forkserver that imported the scanners once: a fork of the serving process, which
runs threads, is unsafe, and a spawn re-imports everything (a second) for each worker a timeout replaces. They run
at a lower priority (nice 10), so that on a busy machine the serving process gets the CPU first.

The pool is started on first use (in a thread: the first start waits for the forkserver's imports) and
stopped by `close()` when the services close. Redaction counts made in a worker are added to this process's
metric (memory_proxy_redactions_total), where /metrics reads them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from pebble import ProcessPool

from ..observability import REDACTIONS, SCAN_SECONDS, SCANS, log
from . import Redaction, redact, redact_strings, warm
from .betterleaks import ScanFailed

T = TypeVar("T")

SMALL_TEXT_CHARS = 2048  # a memory's size: its worst scan holds the GIL ~5 ms, so a thread may run it
# Threads for small scans, apart from anyio's default ones (a burst of scans never starves other thread
# work); the engine calls among them are fewer still (betterleaks.ENGINE_CALLS). One limiter per event loop.
SCAN_THREADS = 16
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()
SMALL_SCAN_TIMEOUT_S = 10.0  # a small text's scan (the engine stops itself at betterleaks.SCAN_TIMEOUT_S)
WORKER_NICE = 10
# What a worker process needs imported before its first task: forked from the forkserver with them loaded.
WORKER_MODULES = ["memory_proxy.redact", "memory_proxy.formation.steps"]


async def redact_small(text: str) -> Redaction:
    """`redact(text)` in a thread, for a text of at most SMALL_TEXT_CHARS (a longer one goes to a Scanner).
    Raises ScanFailed when the scan fails or takes over SMALL_SCAN_TIMEOUT_S."""
    if len(text) > SMALL_TEXT_CHARS:
        raise ValueError(f"a text over {SMALL_TEXT_CHARS} characters is scanned in a worker process")
    return await _in_thread(redact, text)


async def _in_thread(function: Callable[[Any], T], value: Any) -> T:
    started = time.perf_counter()
    try:
        with anyio.fail_after(SMALL_SCAN_TIMEOUT_S):
            limiter = _limiters.setdefault(asyncio.get_running_loop(), anyio.CapacityLimiter(SCAN_THREADS))
            result = await anyio.to_thread.run_sync(function, value, abandon_on_cancel=True, limiter=limiter)
    except (TimeoutError, ScanFailed) as exc:
        _failed("thread", exc, started)
        if isinstance(exc, ScanFailed):
            raise
        raise ScanFailed(f"the secret scan took over {SMALL_SCAN_TIMEOUT_S:g} s") from exc
    SCANS.labels("thread", "ok").inc()
    SCAN_SECONDS.labels("thread").observe(time.perf_counter() - started)
    return result


def _failed(where: str, exc: BaseException, started: float) -> None:
    outcome = "timeout" if isinstance(exc, TimeoutError) else "failed"
    SCANS.labels(where, outcome).inc()
    log.warning("secret_scan_failed", where=where, outcome=outcome, error=type(exc).__name__,
                seconds=round(time.perf_counter() - started, 3))


def _redaction_counts() -> dict[str, float]:
    return {sample.labels["kind"]: sample.value for metric in REDACTIONS.collect() for sample in metric.samples
            if sample.name.endswith("_total")}


def _in_worker(function: Callable[..., T], args: tuple[Any, ...]) -> tuple[T, dict[str, float]]:
    """Runs in a worker process: `function(*args)` and the redactions it counted there."""
    before = _redaction_counts()
    result = function(*args)
    after = _redaction_counts()
    return result, {kind: n - before.get(kind, 0.0) for kind, n in after.items() if n > before.get(kind, 0.0)}


def _start_worker() -> None:
    """A worker's start: a lower priority, and redaction's one-time costs (Kingfisher compiles its catalog,
    seconds on a machine's first run) paid before its first task, not within that task's deadline."""
    os.nice(WORKER_NICE)
    warm()


def _ready() -> bool:
    return True


def _strings_length(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list | dict):
        return sum(_strings_length(item) for item in (value.values() if isinstance(value, dict) else value))
    return 0


class Scanner:
    """The worker processes of one running proxy, worker or CLI command (services.py owns one)."""

    def __init__(self, *, workers: int, timeout_s: float) -> None:
        self.workers, self.timeout_s = workers, timeout_s
        self._pool: ProcessPool | None = None
        self._starting = asyncio.Lock()

    async def redact(self, text: str) -> Redaction:
        """`redact(text)` off the loop (see the module docstring); raises ScanFailed."""
        if len(text) <= SMALL_TEXT_CHARS:
            return await redact_small(text)
        return await self.run(redact, text)

    async def redact_strings(self, value: Any) -> Any:
        """`redact_strings(value)` (a formation job's payload) off the loop; raises ScanFailed."""
        if _strings_length(value) <= SMALL_TEXT_CHARS:
            return await _in_thread(redact_strings, value)
        return await self.run(redact_strings, value)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker process, within `timeout_s` (waiting for a free worker included;
        starting the pool, once, not). Raises ScanFailed when it fails, takes longer (its process is then
        stopped) or the pool is broken; `function` must be importable by name (a module-level function)."""
        started = time.perf_counter()
        try:
            pool = await self._started()
            future = pool.schedule(_in_worker, args=(function, args), timeout=self.timeout_s)
            try:
                async with asyncio.timeout(self.timeout_s):
                    result, counted = await asyncio.wrap_future(future)
            finally:
                future.cancel()  # still queued or running past our deadline: dropped, its process stopped
        except Exception as exc:
            _failed("process", exc, started)
            if isinstance(exc, ScanFailed):
                raise
            raise ScanFailed(f"the check in a worker process failed ({type(exc).__name__})") from exc
        for kind, n in counted.items():
            REDACTIONS.labels(kind).inc(n)
        SCANS.labels("process", "ok").inc()
        SCAN_SECONDS.labels("process").observe(time.perf_counter() - started)
        return result

    async def warm_up(self) -> None:
        """Start the workers now (in the background of a start), and warm this process's redaction for the small
        scans it runs in threads, so that the first turn does not wait for either; a failure is logged, and the
        next scan tries again."""
        try:
            await anyio.to_thread.run_sync(warm)
            await self._started()
        except Exception as exc:  # noqa: BLE001 - a pool that cannot start fails each scan closed, later
            log.warning("secret_scan_workers_failed", error=f"{type(exc).__name__}: {exc}"[:300])

    async def _started(self) -> ProcessPool:
        async with self._starting:
            if self._pool is None or not self._pool.active:
                self._pool = await anyio.to_thread.run_sync(self._start)
            return self._pool

    def _start(self) -> ProcessPool:
        """A running pool whose first worker answered (blocking: the forkserver imports WORKER_MODULES
        once per process, ~1 s)."""
        if self._pool is not None:
            self._pool.stop()
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(WORKER_MODULES)
        pool = ProcessPool(max_workers=self.workers, initializer=_start_worker, context=context)
        pool.schedule(_ready).result()
        return pool

    @property
    def started(self) -> bool:
        return self._pool is not None and self._pool.active

    async def close(self) -> None:
        """Stop the workers (a running task is abandoned: its caller gets ScanFailed)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            await anyio.to_thread.run_sync(pool.join)
