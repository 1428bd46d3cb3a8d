"""The Grafana dashboard, proven against a real Prometheus.

A real `prometheus` (Debian package; `.ci/install-system-packages.sh`) scrapes the proxy, served live by
uvicorn, every second. The test drives a short load that gives every panel something to show (chat turns
that hit, miss and fail open, a task, an anonymous request, memory tool calls (MEMORY_TOOLS=all) in a JSON and
a streamed turn, an upstream error, formation jobs that add, replace, refine and ignore, one failed attempt),
twice, so that every counter and histogram *increases* between scrapes. Then every panel query of
grafana/dashboards/memory-proxy.json runs through Prometheus' HTTP API (`/api/v1/query`), with Grafana's
variables replaced by concrete windows, and must return data.

Without the `prometheus` binary the test is skipped, except under CI (`CI=true`), where it fails.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memory_proxy.formation.worker import refresh_gauges
from tests.support.data import BUN, CHAT, DASHBOARD, PROXY_KEY, RUNTIME_Q
from tests.support.fakes import completion, embeddings_reply
from tests.support.proxy import add_memory, chat_body, make_env, metric, user_headers
from tests.support.servers import free_port
from tests.support.tools import SECRET_FACT, call, calling, calls_stream, script, script_stream

pytestmark = pytest.mark.slow

FORM_MSG = "Let me tell you about myself: I like tea, I drink coffee now, I live near Berlin with a cat, round"
RETRY_MSG = "One more thing about me: I play chess, round"
# Grafana's built-in interval variables, as concrete windows for a 1 s scrape interval and a short test.
GRAFANA_VARIABLES = {"__rate_interval": "1m", "__interval": "5s", "__range": "5m", "__range_s": "300",
                     "__range_ms": "300000", "__interval_ms": "5000"}
DEADLINE_S = 30.0


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        pytest.fail("the prometheus binary is missing under CI: run .ci/install-system-packages.sh "
                    "(apt-get install prometheus) before the tests")
    pytest.skip("the prometheus binary is missing: apt-get install prometheus (or run "
                ".ci/install-system-packages.sh); under CI=true this test fails instead")


def panel_targets() -> list[tuple[str, str]]:
    """(panel title / refId, expr) of every query of every panel, rows' nested panels included."""
    dashboard = json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append((f"{panel['title']} / {target.get('refId', '?')}", target["expr"]))

    walk(dashboard["panels"])
    return out


def concrete(expr: str) -> str:
    """Replace Grafana's `$__rate_interval`, `${__range}`… with windows Prometheus understands."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in GRAFANA_VARIABLES, f"unknown Grafana variable ${name} in {expr!r}"
        return GRAFANA_VARIABLES[name]

    # longest names first so that $__range_s is not read as $__range followed by "_s"
    return re.sub(r"\$\{(\w+)\}|\$(__range_ms|__range_s|__interval_ms|__rate_interval|__interval|__range)",
                  value, expr)


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    """The proxy under test offers every memory tool, so that the tools' panels have calls to show, with the
    threshold memories injected beside them, so that retrieval hits and misses show as without tools."""
    return make_env(database_url, tmp_path, MEMORY_TOOLS="all", MEMORY_TOOLS_INJECT="threshold")


@pytest.fixture
def prometheus_bin() -> str:
    return prometheus_binary()


@pytest.fixture
def prometheus(prometheus_bin: str, tmp_path: Path, live_url: str) -> Iterator[str]:
    """A real Prometheus scraping the live proxy every second; yields its base URL."""
    binary = prometheus_bin
    port = free_port()
    config = tmp_path / "prometheus.yml"
    key = tmp_path / "metrics_key"  # /metrics asks for a key, read from a file as deploy/prometheus.yml does
    key.write_text(PROXY_KEY)
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: memory-proxy\n    metrics_path: /metrics\n"
        f"    authorization:\n      type: Bearer\n      credentials_file: {key}\n"
        f"    static_configs:\n      - targets: ['{live_url.removeprefix('http://')}']\n")
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        if process.returncode not in (0, -15):
            print(log.read_text(errors="replace")[-4000:])  # shown by pytest on failure


async def wait_for_scrape_after(prom: httpx.AsyncClient, moment: float) -> None:
    """Poll until Prometheus holds a sample of the proxy scraped after `moment` (wall-clock seconds)."""
    async with asyncio.timeout(DEADLINE_S):
        while True:
            try:
                # timestamp() of a plain selector is the sample's scrape time (of an expression, it would
                # be the evaluation time); `up` is written with the scrape's samples, in one commit
                reply = await prom.get("/api/v1/query", params={"query": 'timestamp(up{job="memory-proxy"}) '
                                                                         'and up{job="memory-proxy"} == 1'})
                result = reply.json()["data"]["result"] if reply.status_code == 200 else []
                if result and float(result[0]["value"][1]) > moment:
                    return
            except httpx.TransportError:
                pass  # Prometheus still starting
            await asyncio.sleep(0.1)


async def drive_load(phase: int, proxy: httpx.AsyncClient, db: Any, worker: Any, outside: Any,
                     memory_llm: Any) -> None:
    """One round of everything the dashboard shows."""
    hit_user, miss_user, former = f"dash-hit-{phase}", f"dash-miss-{phase}", f"dash-former-{phase}"
    tea, berlin = f"User likes tea (round {phase}).", f"User lives near Berlin (round {phase})."
    await add_memory(db, hit_user, BUN)
    await add_memory(db, former, tea)
    await add_memory(db, former, berlin)
    facts = {FORM_MSG: [tea,  # the same text as a memory: ignored
                        {"fact": f"User drinks coffee now (round {phase}).", "replaces_text": tea},  # replace
                        f"User lives near Berlin with a cat (round {phase}).",  # refine (says more)
                        f"User drinks coffee with a cat (round {phase}).",  # add
                        f"Berlin has a zoo (round {phase})."],  # not about the user: dropped
             RETRY_MSG: [f"User plays chess (round {phase})."]}
    memory_llm.extract = lambda message: facts.get(message.removesuffix(f" {phase}"), [])

    async def ok(*args: Any, **kwargs: Any) -> httpx.Response:
        response = await proxy.post(*args, **kwargs)
        assert response.status_code == 200, response.text
        return response

    # chat turns: a retrieval hit (one memory injected), a miss, a streamed turn; a task; an anonymous turn
    hit = await ok(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(hit_user))
    assert hit.headers["x-memory-proxy-memories"], "the hit turn injected nothing"
    await ok(CHAT, json=chat_body("Tell me a joke about the weather."), headers=user_headers(miss_user))
    await ok(CHAT, json=chat_body("title please", stream=False),
             headers=user_headers(miss_user, **{"x-openwebui-task": "title_generation"}))
    await ok(CHAT, json=chat_body("Hello, anonymous."))
    assert (await proxy.get("/v1/models")).status_code == 200
    # the memory tools (MEMORY_TOOLS=all): a JSON turn whose model searches and tries to remember a secret, a
    # streamed turn whose model searches, a turn whose model writes its search as text; then plain text again
    script(outside, calling(call("search_memory", {"query": RUNTIME_Q}, "call_1"),
                            call("remember", {"fact": SECRET_FACT}, "call_2")))
    assert "search_memory" not in (await ok(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(hit_user))).text
    search = json.dumps({"query": RUNTIME_Q})
    script_stream(outside, calls_stream((0, "call_1", "search_memory", [search])))
    streamed = await ok(CHAT, json=chat_body(RUNTIME_Q, stream=True), headers=user_headers(hit_user))
    assert b"search_memory" not in streamed.content
    written = metric("memory_proxy_tool_calls_written_total")  # an unlabelled counter shows 0 with no call
    script(outside, completion(json.dumps({"name": "search_memory", "arguments": {"query": RUNTIME_Q}})))
    assert "search_memory" not in (await ok(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(hit_user))).text
    assert metric("memory_proxy_tool_calls_written_total") == written + 1
    outside.routes["chat"].side_effect = None
    # fair use: a user whose limit an operator set to one request a minute, refused the second time (429)
    limited = f"dash-limited-{phase}"
    assert (await proxy.put("/api/v1/limits", json={"kind": "user", "subject": limited, "rpm": 1})).is_success
    await ok(CHAT, json=chat_body("Hello."), headers=user_headers(limited))
    assert (await proxy.post(CHAT, json=chat_body("Hello."), headers=user_headers(limited))).status_code == 429
    # an upstream error (relayed as a 5xx), then the upstream is back
    outside.routes["chat"].respond(500, json={"error": {"message": "overloaded", "type": "server_error",
                                                        "param": None, "code": None}})
    assert (await proxy.post(CHAT, json=chat_body("fails upstream"), headers=user_headers(miss_user))
            ).status_code == 500
    outside.routes["chat"].respond(200, json=completion())
    # the embedder down: the turn is relayed without memory (fail-open), then the embedder is back
    outside.routes["embeddings"].mock(side_effect=httpx.ConnectError("refused"))
    await ok(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(hit_user))
    outside.routes["embeddings"].mock(side_effect=embeddings_reply)

    # formation: add / replace / refine / ignore, then one job that fails once and succeeds on retry
    await ok(CHAT, json=chat_body(f"{FORM_MSG} {phase}"), headers=user_headers(former))
    await refresh_gauges(worker.pool)  # jobs are queued now: the queue gauge shows them
    assert await worker.run_until_idle() >= 1
    await ok(CHAT, json=chat_body(f"{RETRY_MSG} {phase}"), headers=user_headers(former))
    memory_llm.down = True
    [job] = await worker.claim(1)
    assert await worker.process(job) == "queued"  # retried later
    memory_llm.down = False
    async with asyncio.timeout(DEADLINE_S):  # its backoff is 10 ms (JOB_RETRY_BASE_SECONDS in support.proxy.make_env)
        while not await worker.run_until_idle():
            await asyncio.sleep(0.02)
    await refresh_gauges(worker.pool)  # memory totals and the (now empty) queue, as the worker does every 15 s


async def test_every_dashboard_panel_returns_data_from_a_real_prometheus(
        prometheus: str, live_client: httpx.AsyncClient, db: Any, worker: Any, outside: Any,
        memory_llm: Any) -> None:
    started = time.monotonic()
    targets = panel_targets()
    assert len(targets) >= 20
    proxy = live_client
    async with httpx.AsyncClient(base_url=prometheus, timeout=5) as prom:
        await wait_for_scrape_after(prom, 0)
        # two rounds, each scraped: rates and quantiles need a counter that grew between two samples
        for phase in (1, 2):
            await drive_load(phase, proxy, db, worker, outside, memory_llm)
            await wait_for_scrape_after(prom, time.time())

        empty, not_a_number = [], []
        for name, expr in targets:
            reply = await prom.get("/api/v1/query", params={"query": concrete(expr)})
            body = reply.json()
            assert reply.status_code == 200 and body["status"] == "success", f"{name}: {expr}\n{body}"
            result = body["data"]["result"]
            if not result:
                empty.append(f"{name}: {expr}")
            elif all(math.isnan(float(series["value"][1])) for series in result):
                not_a_number.append(f"{name}: {expr}")
        if empty:  # say what Prometheus did see, to tell a scrape problem from a missing metric
            names = (await prom.get("/api/v1/label/__name__/values")).json()["data"]
            scrape = [(t["health"], t["lastError"]) for t in
                      (await prom.get("/api/v1/targets")).json()["data"]["activeTargets"]]
            empty.append(f"(Prometheus holds {len(names)} metric names: {names}; scrape: {scrape})")
    assert not empty, "panels without data:\n" + "\n".join(empty)
    assert not not_a_number, "panels whose every value is NaN (nothing increased):\n" + "\n".join(not_a_number)
    # A bound against a hang of the whole, not a measure (each wait above has its own deadline, DEADLINE_S).
    assert time.monotonic() - started < 300
