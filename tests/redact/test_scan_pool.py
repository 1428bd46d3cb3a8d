"""Secret scans and fact checks off the event loop (memory_proxy/redact/scan_pool.py): where they run, their deadline, and
that the loop keeps answering meanwhile."""

from __future__ import annotations

import asyncio
import os
import threading
import time
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

KEY = "sk-proj-" + "Zq3xT9vL2mN8pR4sW6yB1cD5fG7hJ0kA" * 2


def burn(seconds: float) -> int:
    """CPU-bound Python that holds its process's GIL the whole time (run in a worker process)."""
    until = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < until:
        n += 1
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


async def test_a_task_past_its_deadline_fails_closed_and_its_worker_is_replaced() -> None:
    scanner = Scanner(workers=1, timeout_s=2)
    try:
        await scanner.run(os.getpid)  # started: the deadline is the task's alone
        started = time.perf_counter()
        with pytest.raises(ScanFailed):
            await scanner.run(burn, 60.0)
        assert time.perf_counter() - started < 15  # stopped at its deadline, not after a minute
        assert await scanner.run(burn, 0.01) > 0  # a new worker took the stopped one's place
    finally:
        await scanner.close()


async def test_the_event_loop_keeps_answering_while_a_worker_holds_its_gil(scanner: Scanner) -> None:
    await scanner.run(os.getpid)
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(tick())
    await scanner.run(burn, 1.5)
    done.set()
    await ticking
    assert len(gaps) > 20 and max(gaps) < 0.5  # held in this process, it would be one 1.5 s gap


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


async def test_the_services_own_the_workers_and_stop_them_on_exit(settings: Settings) -> None:
    async with open_services(settings, httpx.AsyncClient()) as services:
        worker_pid = await services.scanner.run(os.getpid)
        assert psutil.pid_exists(worker_pid)
    async with asyncio.timeout(10):
        while psutil.pid_exists(worker_pid) and psutil.Process(worker_pid).status() != psutil.STATUS_ZOMBIE:
            await asyncio.sleep(0.05)
