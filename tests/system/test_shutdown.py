"""SIGTERM a real `memory-proxy serve`: it stops accepting, lets the open stream finish, finishes or
releases its formation jobs, and exits; a restart picks the released jobs up."""

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_proxy.testing.fake_memory_llm import FakeMemoryLLM, asgi_app
from tests.support.data import BUN_MSG, PROXY_KEY
from tests.support.fakes import bun_llm, embeddings_reply
from tests.support.proxy import job_states
from tests.support.servers import free_port, restart_until_done, served, start_proxy, until, wait_ready

pytestmark = pytest.mark.slow

CHUNKS = 8
CHUNK_GAP_S = 0.15
SHUTDOWN_TIMEOUT = 3  # the stream above takes ~1.2 s: it finishes; a stuck one is cut
# The process's exit after SIGTERM, bounded against the default SHUTDOWN_TIMEOUT (30 s) being used instead of the
# test's: far from the test's few seconds, so that a busy machine does not fail it.
EXITS_BY_S = 20
CUT = "timeout graceful shutdown exceeded"  # uvicorn's line when SHUTDOWN_TIMEOUT cuts what is still open


def slow_upstream(fallback: Any) -> Any:
    """`/slow/v1/chat/completions` streams CHUNKS chunks CHUNK_GAP_S apart; `/stuck/…` sends one chunk
    and then nothing, forever; anything else → `fallback`."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(("/slow/", "/stuck/")):
            await fallback(scope, receive, send)
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for i in range(CHUNKS):
            event = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": f"part{i} "}, "finish_reason": None}]}
            await send({"type": "http.response.body", "body": f"data: {json.dumps(event)}\n\n".encode(),
                        "more_body": True})
            if scope["path"].startswith("/stuck/"):
                while (await receive())["type"] != "http.disconnect":  # silent until the proxy hangs up
                    pass
                return
            await asyncio.sleep(CHUNK_GAP_S)
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    return app


@pytest.fixture
async def outside_url() -> AsyncIterator[tuple[str, FakeMemoryLLM]]:
    """The fake outside world (memory LLM extracting BUN) with the slow and stuck upstreams, in this process."""
    llm = bun_llm()
    async with served(slow_upstream(asgi_app(llm, embeddings_reply)), lifespan="off") as url:
        try:
            yield url, llm
        finally:
            if llm.hang:
                llm.hang.set()


async def test_sigterm_lets_the_stream_finish_releases_jobs_and_a_restart_completes_them(
        database_url: str, tmp_path: Path, outside_url: tuple[str, FakeMemoryLLM]) -> None:
    base_fake, llm = outside_url
    llm.hang = asyncio.Event()  # memory LLM calls hang: the worker's jobs are running at SIGTERM
    env = {"DATABASE_URL": database_url, "MEMORY_PROXY_DATA_DIR": str(tmp_path), "PROXY_API_KEYS": PROXY_KEY,
           "UPSTREAM_BASE_URL": f"{base_fake}/slow/v1", "UPSTREAM_API_KEY": "x",
           "EMBEDDING_BASE_URL": f"{base_fake}/v1", "MEMORY_LLM_BASE_URL": f"{base_fake}/v1",
           "WORKER_CONCURRENCY": "2", "LOG_LEVEL": "info", "SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT)}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proxy = start_proxy(env, port)
    headers = {"authorization": f"Bearer {PROXY_KEY}"}
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": BUN_MSG}]}
    try:
        await wait_ready(base, proxy)
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
            for user in ("user-0", "user-1"):  # two finished turns: their jobs hang in the worker
                reply = await client.post("/v1/chat/completions", json=body, headers={"x-openwebui-user-id": user})
                assert reply.status_code == 200
            await until(lambda: job_states(database_url) == {"running": 2}, 20, interval=0.05)

            received: list[bytes] = []
            async with client.stream("POST", "/v1/chat/completions", json=body,
                                     headers={"x-openwebui-user-id": "user-2"}) as stream:
                chunks = stream.aiter_raw()
                received.append(await anext(chunks))  # the stream is open and flowing
                proxy.send_signal(signal.SIGTERM)
                stopped_at = time.monotonic()
                await asyncio.sleep(CHUNK_GAP_S)
                with pytest.raises(httpx.ConnectError):  # no longer accepting new connections
                    async with httpx.AsyncClient(base_url=base, headers=headers) as fresh:
                        await fresh.get("/healthz")
                received.extend([piece async for piece in chunks])
        text = b"".join(received).decode()
        assert all(f"part{i} " in text for i in range(CHUNKS)) and text.endswith("data: [DONE]\n\n")
        output = proxy.communicate(timeout=30)[0].decode()
        assert time.monotonic() - stopped_at < EXITS_BY_S  # streams, then the worker's drain
        assert CUT not in output, output  # the stream finished before the timeout: nothing was cut
        released = [json.loads(line) for line in output.splitlines() if '"event": "jobs_released"' in line]
        assert [line["count"] for line in released] == [2], output  # the two running jobs, given back
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait(10)
    assert proxy.returncode in (0, -signal.SIGTERM) and '"event": "stopped"' in output, output
    # Nothing accepted is lost: the running jobs were released, the last turn's job was written.
    assert job_states(database_url) == {"queued": 3}, output

    await restart_until_done(env, port, base, database_url, llm, done=3)


async def test_a_stream_that_never_ends_is_cut_at_the_shutdown_timeout(
        database_url: str, tmp_path: Path, outside_url: tuple[str, FakeMemoryLLM]) -> None:
    base_fake, _ = outside_url
    env = {"DATABASE_URL": database_url, "MEMORY_PROXY_DATA_DIR": str(tmp_path), "PROXY_API_KEYS": PROXY_KEY,
           "UPSTREAM_BASE_URL": f"{base_fake}/stuck/v1", "UPSTREAM_API_KEY": "x",
           "EMBEDDING_BASE_URL": f"{base_fake}/v1", "MEMORY_LLM_BASE_URL": f"{base_fake}/v1",
           "SHUTDOWN_TIMEOUT": "1", "LOG_LEVEL": "info"}
    port = free_port()
    proxy = start_proxy(env, port)
    try:
        await wait_ready(f"http://127.0.0.1:{port}", proxy)
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hello"}]}
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30,
                                     headers={"authorization": f"Bearer {PROXY_KEY}"}) as client, \
                client.stream("POST", "/v1/chat/completions", json=body) as stream:
            chunks = stream.aiter_raw()
            assert b"part0" in await anext(chunks)
            proxy.send_signal(signal.SIGTERM)
            stopped_at = time.monotonic()
            with pytest.raises(httpx.RemoteProtocolError):  # cut: the reply never completes
                async for _ in chunks:
                    pass
        output = proxy.communicate(timeout=30)[0].decode()
        assert time.monotonic() - stopped_at < EXITS_BY_S
        assert CUT in output, output  # cut by the shutdown timeout, not ended by anything else
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait(10)
    assert '"event": "stopped"' in output, output
