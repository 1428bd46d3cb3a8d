"""POST /v1/chat/completions end to end: auth, identity, classification, retrieval, injection, relay.

Real PostgreSQL; upstream and embeddings are respx routes (see conftest).
"""

import json
import uuid
from typing import Any

import httpx
import pytest
import respx

from tests.support.data import (
    BERLIN,
    BUN,
    CHAT,
    EMBED_KEY,
    PROXY_KEY,
    RUNTIME_Q,
    UPSTREAM_KEY,
    USER_A,
    USER_B,
)
from tests.support.fakes import completion
from tests.support.proxy import add_memory, chat_body, metric, sent_body, system_text, user_headers


def is_openai_error(response: httpx.Response) -> bool:
    body = response.json()
    return isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str)


# ---------------------------------------------------------------- auth

@pytest.mark.parametrize("authorization", [None, "Bearer wrong-key-0123456789", f"Basic {PROXY_KEY}", "Bearer "])
async def test_missing_or_wrong_key_is_401_in_openai_format(client: Any, outside: respx.MockRouter,
                                                            authorization: str | None) -> None:
    headers = {"authorization": authorization} if authorization else {}
    if authorization is None:
        del client.headers["authorization"]
    for response in (await client.post(CHAT, json=chat_body("hi"), headers=headers),
                     await client.get("/v1/models", headers=headers)):
        assert response.status_code == 401 and is_openai_error(response)
        assert response.json()["error"]["type"] == "authentication_error"
    assert not outside.routes["chat"].called and not outside.routes["models"].called


async def test_upstream_gets_its_own_key_never_the_callers_or_identity_headers(client: Any, outside: Any) -> None:
    await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A, **{
        "x-openwebui-user-email": "a@example.com", "x-openwebui-user-name": "Bob M%C3%BCller"}))
    sent = outside.routes["chat"].calls.last.request
    assert sent.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    assert PROXY_KEY not in str(sent.headers)
    assert not any(name.startswith("x-openwebui") for name in sent.headers)
    assert outside.routes["embeddings"].calls.last.request.headers["authorization"] == f"Bearer {EMBED_KEY}"


# ---------------------------------------------------------------- retrieval and injection

async def test_user_memories_above_threshold_reach_the_system_prompt(client: Any, outside: Any, db: Any) -> None:
    bun = await add_memory(db, USER_A, BUN)
    await add_memory(db, USER_A, BERLIN)  # below threshold for this query
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))

    assert response.status_code == 200
    system = system_text(sent_body(outside))
    assert BUN in system and BERLIN not in system and "<user_memories>" in system
    assert response.headers["x-memory-proxy-memories"] == bun
    assert response.json()["memories"] == [bun]
    assert response.json()["choices"][0]["message"]["content"] == "Hello from the fake upstream."


async def test_one_users_memories_never_reach_another(client: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_B))
    assert response.json()["memories"] == [] and response.headers["x-memory-proxy-memories"] == ""
    assert system_text(sent_body(outside)) == ""


async def test_anonymous_requests_are_relayed_byte_for_byte(client: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    raw = (b'{"model": "fake-model", "messages": [{"role": "user", "content": "' + RUNTIME_Q.encode()
           + b'"}], "temperature": 0.2, "x_unknown": {"kept": [1, 2]}, "tools": []}')
    response = await client.post(CHAT, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert outside.routes["chat"].calls.last.request.content == raw
    assert not outside.routes["embeddings"].called
    assert "memories" not in response.json()  # relay untouched for anonymous callers


async def test_injection_keeps_every_other_field(client: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    body = {**chat_body(RUNTIME_Q), "tools": tools, "temperature": 0.3, "max_tokens": 50,
            "x_vendor": {"a": "ü"}, "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": RUNTIME_Q}]}
    await client.post(CHAT, json=body, headers=user_headers(USER_A))
    sent = sent_body(outside)
    assert {k: v for k, v in sent.items() if k != "messages"} == {k: v for k, v in body.items() if k != "messages"}
    assert len(sent["messages"]) == 2 and sent["messages"][0]["content"].startswith("Be brief.\n\n<user_memories>")
    assert sent["messages"][1] == body["messages"][1]


@pytest.mark.parametrize("task_header", ["title_generation", None])
async def test_tasks_get_no_memory_work(client: Any, outside: Any, db: Any, task_header: str | None) -> None:
    await add_memory(db, USER_A, BUN)
    body = {"model": "fake-model", "stream": False,
            "messages": [{"role": "user", "content": f"### Task:\nGenerate a concise title.\n{RUNTIME_Q}"}]}
    headers = user_headers(USER_A, **({"x-openwebui-task": task_header} if task_header else {}))
    response = await client.post(CHAT, json=body, headers=headers)
    assert response.status_code == 200
    assert not outside.routes["embeddings"].called
    assert system_text(sent_body(outside)) == ""
    assert "memories" not in response.json()


async def test_openwebui_memory_context_is_not_injected_twice(client: Any, outside: Any, db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    skipped = metric("memory_proxy_retrieval_total", outcome="skipped")
    messages = [{"role": "system", "content": "<memory_context>\n[User Memory]\n- uses Bun\n</memory_context>"},
                {"role": "user", "content": RUNTIME_Q}]
    await client.post(CHAT, json={"model": "m", "messages": messages}, headers=user_headers(USER_A))
    assert sent_body(outside)["messages"] == messages
    assert not outside.routes["embeddings"].called
    assert metric("memory_proxy_retrieval_total", outcome="skipped") == skipped + 1


# ---------------------------------------------------------------- memory never breaks chat

async def test_embedder_down_means_the_most_recent_memories_and_a_metric(client: Any, outside: Any, db: Any) -> None:
    """Search is impossible, so the user's most recent memories stand in, whatever the query."""
    await add_memory(db, USER_A, BUN)
    berlin = await add_memory(db, USER_A, BERLIN)
    outside.routes["embeddings"].mock(side_effect=httpx.ConnectError("refused"))
    before = metric("memory_proxy_fail_open_total", reason="embedder_error")
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.status_code == 200 and response.json()["memories"][0] == berlin  # newest first
    assert BUN in system_text(sent_body(outside)) and BERLIN in system_text(sent_body(outside))
    assert metric("memory_proxy_fail_open_total", reason="embedder_error") == before + 1


async def test_embedder_and_database_down_means_plain_relay(client: Any, outside: Any, db: Any,
                                                            pg_server: Any, database_url: str) -> None:
    import psycopg

    await add_memory(db, USER_A, BUN)
    outside.routes["embeddings"].mock(side_effect=httpx.ConnectError("refused"))
    name = database_url.split("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.status_code == 200 and response.json()["memories"] == []
    assert system_text(sent_body(outside)) == ""
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")


async def test_slow_embedder_is_cut_off_by_the_retrieval_budget(env: dict, app_factory: Any, outside: Any) -> None:
    import asyncio

    from litestar.testing import AsyncTestClient

    from memory_proxy.settings import load_settings

    async def never(_: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()  # hangs until cancelled by the budget
        raise AssertionError

    outside.routes["embeddings"].mock(side_effect=never)
    before = metric("memory_proxy_fail_open_total", reason="embedder_timeout")
    app = app_factory(load_settings({**env, "RETRIEVAL_TIMEOUT_MS": "100"}))
    async with AsyncTestClient(app) as test_client:
        async with asyncio.timeout(5):
            response = await test_client.post(CHAT, json=chat_body(RUNTIME_Q), headers={
                "authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_A)})
    assert response.status_code == 200 and response.json()["memories"] == []
    assert metric("memory_proxy_fail_open_total", reason="embedder_timeout") == before + 1


# ---------------------------------------------------------------- upstream errors

@pytest.mark.parametrize("status", [400, 429, 500, 503])
async def test_upstream_openai_errors_pass_through_unchanged(client: Any, outside: Any, status: int) -> None:
    error = b'{"error": {"message": "Rate limit reached", "type": "rate_limit", "param": null, "code": "x"}}'
    outside.routes["chat"].respond(status, content=error, headers={"content-type": "application/json",
                                                                   "retry-after": "7"})
    response = await client.post(CHAT, json=chat_body("hi"), headers=user_headers(USER_A))
    assert response.status_code == status and response.content == error
    assert response.headers["retry-after"] == "7"


async def test_non_openai_upstream_errors_are_wrapped(client: Any, outside: Any) -> None:
    outside.routes["chat"].respond(422, json={"object": "error", "message": "bad model", "code": 1500})
    response = await client.post(CHAT, json=chat_body("hi"))
    assert response.status_code == 422 and is_openai_error(response)
    assert response.json()["error"]["message"] == "bad model"
    outside.routes["chat"].respond(502, text="<html>Bad Gateway</html>")
    response = await client.post(CHAT, json=chat_body("hi"))
    assert response.status_code == 502 and "Bad Gateway" in response.json()["error"]["message"]


@pytest.mark.parametrize(("fault", "status", "code"), [
    (httpx.ConnectError("refused"), 502, "upstream_unavailable"),
    (httpx.ConnectTimeout("slow"), 504, "upstream_timeout"),
    (httpx.ReadTimeout("slow"), 504, "upstream_timeout"),
])
async def test_unreachable_upstream_is_an_openai_error(client: Any, outside: Any, fault: Exception,
                                                       status: int, code: str) -> None:
    outside.routes["chat"].mock(side_effect=fault)
    response = await client.post(CHAT, json=chat_body("hi"))
    assert response.status_code == status and response.json()["error"]["code"] == code


async def test_stale_keep_alive_connection_is_retried_once(client: Any, outside: Any) -> None:
    outside.routes["chat"].mock(side_effect=[httpx.RemoteProtocolError("Server disconnected"),
                                             httpx.Response(200, json=completion())])
    response = await client.post(CHAT, json=chat_body("hi"))
    assert response.status_code == 200 and outside.routes["chat"].call_count == 2


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("raw", [b"{not json", b"[]", b'{"model": "m"}', b'{"messages": []}',
                                 b'{"messages": "hi"}', b'{"messages": [{"content": "x"}]}',
                                 b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
                                 b"\xff\xfe"])
async def test_bad_bodies_are_400_in_openai_format(client: Any, outside: Any, raw: bytes) -> None:
    response = await client.post(CHAT, content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400 and is_openai_error(response)
    assert not outside.routes["chat"].called


async def test_oversized_body_is_413(env: dict, app_factory: Any, outside: Any) -> None:
    from litestar.testing import AsyncTestClient

    from memory_proxy.settings import load_settings

    app = app_factory(load_settings({**env, "MAX_REQUEST_BYTES": "1000"}))
    async with AsyncTestClient(app) as test_client:
        response = await test_client.post(CHAT, json=chat_body("x" * 2000),
                                          headers={"authorization": f"Bearer {PROXY_KEY}"})
    assert response.status_code == 413 and is_openai_error(response)
    assert not outside.routes["chat"].called


async def test_unknown_route_is_404_in_openai_format(client: Any) -> None:
    response = await client.get("/v1/nothing")
    assert response.status_code == 404 and is_openai_error(response)


# ---------------------------------------------------------------- other endpoints

async def test_models_are_relayed(client: Any, outside: Any) -> None:
    response = await client.get("/v1/models", headers=user_headers(USER_A))
    assert response.status_code == 200 and response.json()["data"][0]["id"] == "fake-model"
    assert outside.routes["models"].calls.last.request.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"
    outside.routes["models"].respond(401, json={"error": {"message": "bad key", "type": "auth"}})
    assert (await client.get("/v1/models")).status_code == 401


async def test_health_and_ready_need_no_key_and_metrics_needs_one(proxy: Any) -> None:
    """Probes answer anyone; /metrics (how many users and memories the proxy holds) answers METRICS_KEY or a proxy
    key only."""
    metrics_key = "m" * 32
    client = await proxy(METRICS_KEY=metrics_key)
    del client.headers["authorization"]
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json()["status"] == "ready"
    await client.post(CHAT, json=chat_body("hi"), headers={"authorization": f"Bearer {PROXY_KEY}"})
    assert (await client.get("/metrics")).status_code == 401
    assert (await client.get("/metrics", headers={"authorization": "Bearer wrong-key-0123456789"})).status_code == 401
    for key in (metrics_key, PROXY_KEY):
        metrics = await client.get("/metrics", headers={"authorization": f"Bearer {key}"})
        assert 'memory_proxy_requests_total{kind="anonymous",route="chat",status="2xx"}' in metrics.text


async def test_database_down_mid_run_readyz_says_so_chat_goes_on_and_recovers(
        client: Any, outside: Any, db: Any, pg_server: Any, database_url: str) -> None:
    import asyncio

    import psycopg

    await add_memory(db, USER_A, BUN)
    name = database_url.split("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
    def database_failures() -> float:
        return sum(metric("memory_proxy_fail_open_total", reason=r) for r in ("database_error", "database_timeout"))

    before = database_failures()

    response = await client.get("/readyz")
    assert response.status_code == 503 and response.json()["status"] == "unavailable"
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert response.status_code == 200 and response.json()["memories"] == []
    assert database_failures() == before + 1

    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    async with asyncio.timeout(10):  # the pool reconnects by itself
        while (await client.get("/readyz")).status_code != 200:
            await asyncio.sleep(0.05)
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert len(response.json()["memories"]) == 1


async def test_database_down_at_start_chat_works_and_memory_starts_when_it_comes_up(
        tmp_path: Any, app_factory: Any, outside: Any, pg_server: Any) -> None:
    """serve starts on a database that does not exist yet: /readyz says so, chat is relayed, the turn's
    job is held; once the database exists it is migrated by itself, the job written, memory works."""
    import asyncio

    import psycopg
    from litestar.testing import AsyncTestClient

    from memory_proxy.settings import load_settings
    from memory_proxy.store.database import make_pool
    from tests.support.proxy import make_env

    name = "late_" + uuid.uuid4().hex[:8]
    url = pg_server.get_uri(name)
    app = app_factory(load_settings(make_env(url, tmp_path)))
    async with AsyncTestClient(app, base_url="http://proxy.test") as client:
        client.headers["authorization"] = f"Bearer {PROXY_KEY}"
        assert (await client.get("/readyz")).status_code == 503
        response = await client.post(CHAT, json=chat_body(BUN), headers=user_headers(USER_A))
        assert response.status_code == 200 and response.json()["memories"] == []
        assert len(app.state.services.outbox) == 1  # held, not lost

        with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")  # empty: the proxy applies every migration itself
        async with asyncio.timeout(30):  # the migration retries back off from 1 s
            while (await client.get("/readyz")).status_code != 200 or len(app.state.services.outbox):
                await asyncio.sleep(0.05)
        async with make_pool(url, 1) as pool, pool.connection() as conn:
            await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
            cur = await conn.execute("SELECT user_id, payload->>'user_message' FROM memory_jobs")
            assert await cur.fetchall() == [(USER_A, BUN)]
            await add_memory(conn, USER_A, BUN)
        response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
        assert len(response.json()["memories"]) == 1
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_upstream_json_reply_for_a_stream_request_is_relayed_as_json(client: Any, outside: Any) -> None:
    outside.routes["chat"].respond(200, json=completion("not streamed"))
    response = await client.post(CHAT, json=chat_body("hi", stream=True))
    assert response.json()["choices"][0]["message"]["content"] == "not streamed"



async def test_a_long_turn_is_scanned_in_a_worker_process_and_past_the_deadline_its_job_is_dropped(
        env: dict, app_factory: Any, outside: Any, db: Any) -> None:
    """A turn of 16,000 characters of credential-file text froze every other user for seconds when its job
    was scanned in the serving process; in a worker process it cannot, and a scan past SECRET_SCAN_TIMEOUT
    keeps no job (counted), never an unchecked one."""
    aws = ("[default]\naws_access_key_id = AKIAZ7QW3RTY5UIOP2LK\n"
           "aws_secret_access_key = 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\n")
    from litestar.testing import AsyncTestClient

    from memory_proxy.settings import load_settings

    text = (aws * (16_000 // len(aws)))[:16_000]
    headers = {"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_A)}
    scans = metric("memory_proxy_secret_scans_total", where="process", outcome="ok")
    async with AsyncTestClient(app_factory(load_settings(env)), base_url="http://proxy.test") as client:
        reply = await client.post(CHAT, json=chat_body(text), headers=headers)
        assert reply.status_code == 200
    assert metric("memory_proxy_secret_scans_total", where="process", outcome="ok") == scans + 1
    (payload,) = [row[0] for row in await (await db.execute("SELECT payload FROM memory_jobs")).fetchall()]
    assert "AKIAZ7QW3RTY5UIOP2LK" not in str(payload) and "9sKd8fJ2mQ7xL4pR" not in str(payload)

    unscanned = metric("memory_proxy_jobs_total", event="unscanned")
    async with AsyncTestClient(app_factory(load_settings({**env, "SECRET_SCAN_TIMEOUT": "0.001"})),
                               base_url="http://proxy.test") as client:
        reply = await client.post(CHAT, json=chat_body(text), headers=headers)
        assert reply.status_code == 200  # the chat goes on
    assert metric("memory_proxy_jobs_total", event="unscanned") == unscanned + 1
    assert await (await db.execute("SELECT count(*) FROM memory_jobs")).fetchone() == (1,)


async def test_a_rag_turn_is_searched_and_formed_by_the_users_words_not_its_documents(
        client: Any, outside: Any, db: Any) -> None:
    """OpenWebUI 0.12.4 puts its RAG template (instructions, then the documents between <context> tags) before
    the user's message. The turn was searched by the whole text and its job kept the first 16,000 characters:
    with long documents the user's own words were lost to formation, and the documents searched by."""
    documents = "<source id=\"1\">" + "The quarterly report says revenue grew in the north region. " * 400 + "</source>"
    question = "I moved to Lisbon last month; does the report mention Portugal?"
    message = ("### Task:\nRespond to the user query using the provided context.\n<context>\n"
               f"{documents}\n</context>\n\n{question}")
    reply = await client.post(CHAT, json=chat_body(message), headers=user_headers(USER_A))
    assert reply.status_code == 200
    searched = json.loads(outside.routes["embeddings"].calls.last.request.content)["input"]
    assert searched == [question]
    (kept,) = [row[0] for row in await (await db.execute("SELECT payload->>'user_message' FROM memory_jobs"))
               .fetchall()]
    assert kept == question  # the documents are never the user's: not kept with the job either


async def test_a_long_message_is_searched_by_its_head_and_tail(client: Any, outside: Any, db: Any) -> None:
    """A 16,000-character paste made every word of it a search term (the full-text arm's cost grows with
    them, on the event loop) for an embedder that reads ~500 tokens anyway."""
    from memory_proxy.chat.request import MAX_QUERY_CHARS

    text = "Summarise this please: " + "lorem ipsum dolor sit amet " * 600 + "and tell me what you think."
    await client.post(CHAT, json=chat_body(text), headers=user_headers(USER_A))
    [searched] = json.loads(outside.routes["embeddings"].calls.last.request.content)["input"]
    assert len(searched) <= MAX_QUERY_CHARS + 1
    assert searched.startswith("Summarise this please:") and searched.endswith("what you think.")
