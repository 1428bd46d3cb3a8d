"""Secret scans and fact checks off the event loop (memory_proxy/redact/scan_pool.py): where they run, their deadline, and
that the loop keeps answering meanwhile."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from memory_proxy.redact import kingfisher
from memory_proxy.redact.betterleaks import ScanFailed
from memory_proxy.redact.scan_pool import SMALL_TEXT_CHARS, Scanner, redact_small
from memory_proxy.services import open_services
from memory_proxy.settings import Settings
from tests.support.proxy import metric
from tests.support.servers import running, until

KEY = "sk-proj-" + "Zq3xT9vL2mN8pR4sW6yB1cD5fG7hJ0kA" * 2


def burn(seconds: float) -> int:
    """CPU-bound Python that holds its process's GIL the whole time (run in a worker process)."""
    until = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < until:
        n += 1
    return n


def burn_until(started: str, stop: str, limit_s: float) -> int:
    """CPU-bound Python, holding its process's GIL, from the moment it creates `started` until `stop` exists
    (run in a worker process); -1 if `stop` never came within `limit_s` (a bound against a hang)."""
    Path(started).touch()
    n, give_up = 0, time.monotonic() + limit_s
    while not os.path.exists(stop):
        n += 1
        if n % 10_000 == 0 and time.monotonic() > give_up:
            return -1
    return n


@pytest.fixture
async def scanner() -> Any:
    scanner = Scanner(workers=1, timeout_s=20)
    yield scanner
    await scanner.close()


async def test_a_long_text_is_redacted_in_another_process_and_its_count_reaches_this_ones_metrics(
        scanner: Scanner) -> None:
    assert await scanner.run(os.getpid) != os.getpid()
    before = metric("memory_proxy_redactions_total", kind="api_key")
    text = "x " * SMALL_TEXT_CHARS + f"my key is {KEY}"
    redacted = await scanner.redact(text)
    assert KEY not in redacted.text and "[REDACTED: api_key]" in redacted.text
    assert metric("memory_proxy_redactions_total", kind="api_key") == before + 1
    assert metric("memory_proxy_secret_scans_total", where="process", outcome="ok") >= 2


def compiled_catalogs() -> int:
    """In a worker process: whether Kingfisher's catalog is compiled there (1) or not yet (0)."""
    return kingfisher._scanner.cache_info().currsize


async def test_a_worker_has_compiled_the_catalog_before_its_first_task(scanner: Scanner) -> None:
    assert await scanner.run(compiled_catalogs) == 1


@pytest.mark.slow
async def test_a_task_past_its_deadline_fails_closed_and_its_worker_is_replaced() -> None:
    scanner = Scanner(workers=1, timeout_s=2)
    try:
        stuck = await scanner.run(os.getpid)  # started: the deadline is the task's alone
        started = time.monotonic()
        with pytest.raises(ScanFailed):
            await scanner.run(burn, 60.0)
        # Not a measure: a bound against a hang, far below the minute the task would run by itself.
        assert time.monotonic() - started < 45
        await until(lambda: not running(stuck), 20)  # the worker past its deadline was stopped, not left burning
        assert await scanner.run(burn, 0.01) > 0  # a new worker took the stopped one's place
        assert await scanner.run(os.getpid) != stuck
    finally:
        await scanner.close()


@pytest.mark.slow
async def test_the_event_loop_keeps_answering_while_a_worker_holds_its_gil(scanner: Scanner, tmp_path: Path) -> None:
    """A worker burns CPU holding its GIL until this event loop, having ticked 50 times meanwhile, tells it to
    stop. Held in this process, the loop could not tick until the work gave up on its own (-1), 30 s later."""
    await scanner.run(os.getpid)
    started, stop = tmp_path / "started", tmp_path / "stop"
    busy = asyncio.create_task(scanner.run(burn_until, str(started), str(stop), 30.0))
    await until(started.exists, 20)
    ticks = 0
    while ticks < 50 and not busy.done():
        await asyncio.sleep(0.005)
        ticks += 1
    stop.touch()
    assert await busy > 0 and ticks == 50


async def test_a_small_text_is_scanned_in_a_thread_and_a_long_one_is_never(monkeypatch: Any) -> None:
    import memory_proxy.redact.scan_pool

    threads: list[int] = []

    def recording(text: str) -> Any:
        threads.append(threading.get_ident())
        return memory_proxy.redact.redact(text)

    monkeypatch.setattr(memory_proxy.redact.scan_pool, "redact", recording)
    found = await redact_small(f"my key is {KEY}")
    assert KEY not in found.text and threads and threads[0] != threading.get_ident()
    with pytest.raises(ValueError):
        await redact_small("x" * (SMALL_TEXT_CHARS + 1))


@pytest.mark.slow
async def test_the_services_own_the_workers_and_stop_them_on_exit(settings: Settings) -> None:
    async with open_services(settings, httpx.AsyncClient()) as services:
        worker_pid = await services.scanner.run(os.getpid)
        assert psutil.pid_exists(worker_pid)
    async with asyncio.timeout(10):
        while psutil.pid_exists(worker_pid) and psutil.Process(worker_pid).status() != psutil.STATUS_ZOMBIE:
            await asyncio.sleep(0.05)
