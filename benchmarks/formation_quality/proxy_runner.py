"""Drive the scripted users through a running memory-proxy, over HTTP, as a chat client would.

The proxy runs in this process (`create_app` on uvicorn, its worker in process, the embedded PostgreSQL
unless a database URL is given) so that its clock can replay each user's days: a turn on day 3 is said
three days after day 0, and the probe is said now. Everything else is the shipped path: the chat request
(classify, retrieve, inject, relay, tee, outbox), the durable job, the worker, the management API. The
upstream is scripted (the same assistant replies for every system compared); the memory LLM is a real
server (`llm_base_url`), the oracle (each turn's ideal answer) or the scripted fake (each turn's `fake`
extraction answer). Users marked `openwebui` are sent as OpenWebUI sends a chat: their system prompt,
then the whole conversation so far, every turn in one chat, with OpenWebUI's identity headers.

Per user: seeds through `POST /api/v1/memories`, each turn through `POST /v1/chat/completions` (streamed)
and then a wait for its formation job, the active memories through `GET /api/v1/memories`, the audit rows
from `memory_updates`, and the probe's injected block as the upstream received it.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import httpx
import psycopg
from prometheus_client import REGISTRY

from memory_proxy.app import create_app
from memory_proxy.observability import configure_logging
from memory_proxy.settings import Settings, load_settings
from memory_proxy.testing.asgi import serving
from memory_proxy.testing.fake_memory_llm import FakeMemoryLLM, Script, asgi_app

from .scenarios import Turn, User
from .scripted import OracleScript, ScriptedChat

NO_USAGE = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}  # a scripted model costs nothing

API_KEY = "formation-benchmark-key-0123456789"
JOB_DEADLINE_S = 1800.0  # a job on a slow CPU model, retries with backoff included
SAME_CHAT_DAYS = 0.5  # turns closer than this belong to one chat: earlier ones are sent as context
_MEMORY_LINE = re.compile(r'^- \(said [^)]*\) (".*")$', re.MULTILINE)


@dataclass
class Clock:
    """The proxy's clock: what `now` is for the turn being sent."""

    at: datetime

    def __call__(self) -> datetime:
        return self.at


def memory_block(request: dict[str, Any]) -> str:
    """The `<user_memories>` block the proxy put into this upstream request's system prompt ("" for none)."""
    system = "\n".join(m.get("content") or "" for m in request.get("messages", [])
                       if m.get("role") == "system" and isinstance(m.get("content"), str))
    return system.split("<user_memories>", 1)[1].split("</user_memories>", 1)[0] if "<user_memories>" in system else ""


def injected_texts(request: dict[str, Any]) -> list[str]:
    """The memory texts of the `<user_memories>` block the proxy put into this upstream request."""
    return [json.loads(quoted) for quoted in _MEMORY_LINE.findall(memory_block(request))]


def _llm_counts() -> dict[str, float]:
    """Memory-LLM calls and tokens so far (this process's metrics, read through the registry)."""
    totals = {"calls": 0.0, "prompt": 0.0, "completion": 0.0}
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "memory_proxy_llm_calls_total":
                totals["calls"] += sample.value
            elif sample.name == "memory_proxy_llm_tokens_total":
                totals[sample.labels["kind"]] += sample.value
    return totals


class ProxyRun:
    def __init__(self, client: httpx.AsyncClient, conninfo: str, upstream: ScriptedChat,
                 memory_llm: OracleScript | None, clock: Clock) -> None:
        self.client, self.conninfo, self.upstream, self.memory_llm, self.clock = (
            client, conninfo, upstream, memory_llm, clock)

    async def user(self, user: User, tag: str) -> dict[str, Any]:
        user_id = f"{user.id}-{tag}"
        start = datetime.now(UTC) - timedelta(days=user.probe.day)
        result: dict[str, Any] = {"id": user.id, "category": user.category, "turns": [], "errors": []}
        self.clock.at = start - timedelta(days=1)  # seeds are from an earlier session: older than any turn
        for seed in user.seeds:
            response = await self.client.post("/api/v1/memories", params={"user": user_id},
                                              json={"content": seed.text, "memory_type": seed.type})
            if response.status_code not in (200, 201):
                result["errors"].append(f"seed {seed.text!r}: HTTP {response.status_code} {response.text[:200]}")
        history: list[dict[str, str]] = []
        last_day = None
        chat_id = str(uuid.uuid4())
        for number, turn in enumerate(user.turns, 1):
            if not user.openwebui and (last_day is None or turn.day - last_day >= SAME_CHAT_DAYS):
                history = []
            last_day = turn.day
            self.clock.at = start + timedelta(days=turn.day)
            if self.memory_llm:
                self.memory_llm.turn, self.memory_llm.said_on = turn, self.clock.at.date()
            before = _llm_counts()
            try:
                await self.chat(user_id, history, turn, user=user, chat_id=chat_id)
                seconds = await self.formation_seconds(user_id, number)
            except Exception as exc:  # noqa: BLE001 - recorded for this user; the run goes on
                result["errors"].append(f"turn {number}: {type(exc).__name__}: {exc}")
                seconds = None
            after = _llm_counts()
            result["turns"].append({"seconds": seconds, "llm_calls": after["calls"] - before["calls"],
                                    "prompt_tokens": after["prompt"] - before["prompt"],
                                    "completion_tokens": after["completion"] - before["completion"]})
            history += [{"role": "user", "content": turn.user}, {"role": "assistant", "content": turn.assistant}]
        result["active"] = await self._active(user_id)
        result["audit_rows"] = await self.audit_rows(user_id)
        result["memories"] = await self.memories(user_id)
        self.clock.at = start + timedelta(days=user.probe.day)
        if self.memory_llm:
            self.memory_llm.turn, self.memory_llm.said_on = user.probe, self.clock.at.date()
        await self.chat(user_id, [], user.probe, user=user, chat_id=str(uuid.uuid4()))
        result["injected"] = injected_texts(self.upstream.requests[-1])
        await self.formation_seconds(user_id, len(user.turns) + 1)  # its LLM calls are not the next user's
        result["asked"] = []
        for number, question in enumerate(user.questions, len(user.turns) + 2):
            asked = Turn(day=user.probe.day, user=question)
            if self.memory_llm:
                self.memory_llm.turn = asked
            await self.chat(user_id, [], asked, user=user, chat_id=str(uuid.uuid4()))
            result["asked"].append(injected_texts(self.upstream.requests[-1]))
            await self.formation_seconds(user_id, number)
        return result

    async def chat(self, user_id: str, history: list[dict[str, str]], turn: Turn, *, user: User | None = None,
                   chat_id: str = "") -> None:
        """One streamed chat turn of `user_id` (sent as OpenWebUI sends it when `user` is an OpenWebUI user)."""
        self.upstream.say = turn.assistant
        system = [{"role": "system", "content": user.system}] if user and user.openwebui and user.system else []
        body = {"model": "benchmark", "stream": True,
                "messages": [*system, *history, {"role": "user", "content": turn.user}]}
        headers = {"X-OpenWebUI-User-Id": user_id}
        if user and user.openwebui:  # as OpenWebUI 0.12.4 forwards a chat turn (../shared/OPENWEBUI.md)
            headers |= {"X-OpenWebUI-User-Name": "Benchmark%20User", "X-OpenWebUI-User-Role": "user",
                        "X-OpenWebUI-User-Email": f"{user.id}@example.com", "X-OpenWebUI-Chat-Id": chat_id}
        async with self.client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
            async for _ in response.aiter_bytes():
                pass
        if response.status_code != 200:
            raise RuntimeError(f"chat turn: HTTP {response.status_code}")

    async def formation_seconds(self, user_id: str, jobs_expected: int) -> float | None:
        """Wait for the user's jobs to end (done or dead); the last one's time from written to finished."""
        deadline = time.monotonic() + JOB_DEADLINE_S
        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            while time.monotonic() < deadline:
                cur = await conn.execute(
                    "SELECT count(*), count(*) FILTER (WHERE status IN ('queued', 'running')),"
                    " max(extract(epoch FROM finished_at - created_at)) FILTER (WHERE id = (SELECT max(id)"
                    "   FROM memory_jobs WHERE user_id = %(u)s)),"
                    " count(*) FILTER (WHERE status = 'dead')"
                    " FROM memory_jobs WHERE user_id = %(u)s", {"u": user_id})
                total, pending, seconds, dead = (await cur.fetchone()) or (0, 0, None, 0)
                if total >= jobs_expected and not pending:
                    if dead:
                        raise RuntimeError(f"{dead} formation job(s) dead")
                    return float(seconds) if seconds is not None else None
                await asyncio.sleep(0.05)
        raise TimeoutError(f"formation job not done after {JOB_DEADLINE_S:.0f} s")

    async def _active(self, user_id: str) -> list[str]:
        response = await self.client.get("/api/v1/memories", params={"user": user_id, "limit": 200})
        response.raise_for_status()
        return [m["content"] for m in response.json()["data"]]

    async def memories(self, user_id: str) -> dict[str, dict[str, Any]]:
        """Every memory the user ever held, by id: its text and whether it is still active (for steps.py,
        which follows each fact through the decision log's ids)."""
        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT v.id, v.content, l.superseded_at IS NULL FROM users_vectors l JOIN vectors v"
                " ON v.id = l.vector_id WHERE l.user_id = %s", (user_id,))
            rows = await cur.fetchall()
        return {row[0]: {"content": row[1], "active": bool(row[2])} for row in rows}

    async def audit_rows(self, user_id: str) -> int:
        async with await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True) as conn:
            cur = await conn.execute("SELECT count(*) FROM memory_updates WHERE user_id = %s", (user_id,))
            row = await cur.fetchone()
        return int(row[0]) if row else 0


@dataclass
class Served:
    """A memory-proxy serving in this process (`proxy_serving`): the API client with the operator key, its
    database, the scripted upstream, the clock it reads, its settings, and the console (stderr before the
    proxy's log lines were sent to the log file)."""

    client: httpx.AsyncClient
    conninfo: str
    upstream: ScriptedChat
    clock: Clock
    settings: Settings
    console: TextIO


@asynccontextmanager
async def proxy_serving(script: Script | None, *, llm_base_url: str | None, llm_model: str = "local",
                        llm_mode: str = "json", database_url: str | None = None, log_file: Path | None = None,
                        extra_env: dict[str, str] | None = None, data_dir: Path | None = None,
                        upstream_url: str | None = None) -> AsyncIterator[Served]:
    """A memory-proxy on uvicorn, ready: its memory LLM the server at `llm_base_url`, or else the
    `FakeMemoryLLM` answering with `script(purpose, prompt)`; with `log_file`, the proxy's log lines go there.
    Its data in `data_dir` (default: a fresh one); its upstream the scripted chat, or the server at
    `upstream_url` (up to /v1)."""
    data_dir = data_dir or Path(tempfile.mkdtemp(prefix="formation-bench-"))
    upstream = ScriptedChat("scripted-upstream")
    llm_app = None if llm_base_url else asgi_app(FakeMemoryLLM(script=script, usage=NO_USAGE))
    clock = Clock(datetime.now(UTC))
    async with serving(upstream) as scripted_url, (serving(llm_app) if llm_app else nullcontext()) as fake_llm_url:
        env = {
            "MEMORY_PROXY_DATA_DIR": str(data_dir),
            "PROXY_API_KEYS": API_KEY,
            "UPSTREAM_BASE_URL": upstream_url or f"{scripted_url}/v1",
            "UPSTREAM_API_KEY": "unused",
            "EMBEDDING_PROVIDER": "local",
            "MEMORY_LLM_PROVIDER": "openai",
            "MEMORY_LLM_BASE_URL": llm_base_url or f"{fake_llm_url}/v1",
            "MEMORY_LLM_MODEL": llm_model,
            "MEMORY_LLM_MODE": llm_mode,
            "MEMORY_LLM_API_KEY": "unused",
            "LOG_FORMAT": "json",
            "LOG_USER_IDS": "raw",
            "EPISODES": "false",  # this harness judges the facts; the user's words kept too: benchmarks/answers
            **({"DATABASE_URL": database_url} if database_url else {}),
            **(extra_env or {}),
        }
        settings = load_settings(env)
        app = create_app(settings, clock=clock)
        log = log_file.open("w") if log_file else None
        stderr = sys.stderr
        if log:
            configure_logging("info", "json", user_ids="raw")
            sys.stderr = log  # the proxy's structlog lines (memory_decision…) go to the log file
        try:
            async with serving(app) as proxy_url, httpx.AsyncClient(
                    base_url=proxy_url, timeout=600, headers={"Authorization": f"Bearer {API_KEY}"}) as client:
                await _wait_ready(client)
                yield Served(client, app.state.services.pool.conninfo, upstream, clock, settings, stderr)
        finally:
            sys.stderr = stderr
            if log:
                log.close()


async def run_proxy(users: list[User], *, llm_base_url: str | None, llm_model: str = "local",
                    llm_mode: str = "json", database_url: str | None = None, log_file: Path | None = None,
                    extra_env: dict[str, str] | None = None, oracle: bool = False) -> dict[str, Any]:
    """Run `users` through a fresh memory-proxy; return the results in the common format (README). Without
    `llm_base_url` the memory LLM is scripted: the oracle, or the fake."""
    memory_llm = None if llm_base_url else OracleScript(fake=not oracle)
    started = datetime.now(UTC)
    tag = uuid.uuid4().hex[:6]
    results = []
    async with proxy_serving(memory_llm, llm_base_url=llm_base_url, llm_model=llm_model, llm_mode=llm_mode,
                             database_url=database_url, log_file=log_file, extra_env=extra_env) as served:
        run = ProxyRun(served.client, served.conninfo, served.upstream, memory_llm, served.clock)
        for user in users:
            began = time.monotonic()
            results.append(await run.user(user, tag))
            seconds = [t["seconds"] for t in results[-1]["turns"] if t["seconds"] is not None]
            print(f"proxy {user.id}: {time.monotonic() - began:.1f} s, jobs {seconds}", file=served.console)
    scripted = "oracle" if oracle else "scripted fake"
    return {"system": "memory-proxy", "llm_base_url": llm_base_url or scripted, "llm_mode": llm_mode,
            "embedder": served.settings.embedding.model, "started_at": started.isoformat(),
            "finished_at": datetime.now(UTC).isoformat(), "users": results}


async def _wait_ready(client: httpx.AsyncClient, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (await client.get("/readyz")).status_code == 200:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the proxy did not become ready")
