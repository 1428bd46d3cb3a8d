"""Things that run beside the test: an ASGI app on a real uvicorn in the test's event loop, `memory-proxy` commands
and benchmark harnesses as processes, and waiting for any of them."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import psutil
import uvicorn

from memory_proxy.testing.fake_memory_llm import FakeMemoryLLM
from tests.support.data import ROOT
from tests.support.proxy import job_states


async def until(check: Callable[[], Awaitable[bool] | bool], seconds: float = 10.0, interval: float = 0.01) -> None:
    """Poll `check` (plain or async) until it is true. `seconds` is a bound against a hang, not a measure:
    it fails the test with an AssertionError when the condition never comes."""
    try:
        async with asyncio.timeout(seconds):
            while True:
                result = check()
                if await result if inspect.isawaitable(result) else result:
                    return
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"condition not met within {seconds} s") from None


def running(pid: int) -> bool:
    """`pid` is a live process (a zombie has exited: it only waits for its parent to read its status)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- an ASGI app on uvicorn, in this event loop

@asynccontextmanager
async def served(app: Any, *, lifespan: str = "on", seconds: float = 20) -> AsyncIterator[str]:
    """`app` served by a real uvicorn on a free loopback port, in the test's event loop, while the block runs: its
    base URL. The proxy's app with its lifespan (startup, shutdown); a plain ASGI fake with `lifespan="off"`.
    `seconds` bounds the start and the stop against a hang."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan=lifespan, loop="asyncio")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    await until(lambda: server.started or task.done(), seconds)
    if not server.started:  # it stopped before it started: say why
        task.result()
        raise RuntimeError("uvicorn stopped before it started (see the log above)")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, seconds)


# ---------------------------------------------------------------- `memory-proxy` as a process

def proxy_command(*args: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """`memory-proxy <args>` (python -m memory_proxy) as a process on exactly `env`; its output (stdout and
    stderr together) piped."""
    return subprocess.Popen([sys.executable, "-m", "memory_proxy", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def start_proxy(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """`memory-proxy serve` on `port`, with `env` over this process's environment."""
    return proxy_command("serve", env={**os.environ, **env, "MEMORY_PROXY_PORT": str(port)})


def stop_process(process: subprocess.Popen[bytes], seconds: float = 30) -> str:
    """SIGTERM, then wait (at most `seconds`) for the process to exit; all it wrote."""
    process.send_signal(signal.SIGTERM)
    return process.communicate(timeout=seconds)[0].decode()


async def wait_ready(base_url: str, process: Any, seconds: float = 45) -> None:
    """Poll a `memory-proxy serve` subprocess's /readyz until 200 (failing at once if it exits)."""
    async with httpx.AsyncClient(base_url=base_url) as client, asyncio.timeout(seconds):
        while True:
            assert process.poll() is None, process.stdout.read().decode()
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)


async def restart_until_done(env: dict[str, str], port: int, base: str, database_url: str, llm: FakeMemoryLLM,
                             done: int) -> tuple[int | None, str]:
    """Release the hung memory LLM, start a new proxy, wait until `done` jobs are done, stop it (SIGTERM);
    its exit code and output."""
    assert llm.hang is not None
    llm.hang.set()
    llm.hang = None
    proxy = start_proxy(env, port)
    try:
        await wait_ready(base, proxy)
        await until(lambda: job_states(database_url) == {"done": done}, 30, interval=0.05)
    finally:
        output = stop_process(proxy)
    return proxy.returncode, output


# ---------------------------------------------------------------- benchmark harnesses

def run_benchmark(module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`python -m benchmarks.<module> <args>`, run from the repository (benchmarks/ is not installed): its exit
    status and output. Tests read the JSON it writes; none imports the harness."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
