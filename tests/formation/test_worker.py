"""Memory formation end to end: chat turn → durable job → one LLM call → resolve → apply → audit → retrieval.

Real PostgreSQL; the memory LLM is the scripted FakeMemoryLLM behind respx. Tests await the worker
(`run_until_idle`) instead of sleeping.
"""

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.types.json import Jsonb
from structlog.testing import capture_logs

from memory_proxy.job_payload import VERSION, FormationPayload
from memory_proxy.store import jobs
from memory_proxy.store.scope import in_user_scope
from tests.support.data import (
    BUN,
    BUN_MSG,
    CHAT,
    NODE,
    NODE_MSG,
    OLD_PAYLOAD,
    PROXY_KEY,
    RUNTIME_Q,
    USER_A,
    USER_B,
    runtime_facts,
)
from tests.support.fakes import chunk, completion, sse
from tests.support.proxy import (
    active_texts,
    add_memory,
    chat_body,
    metric,
    sent_body,
    system_text,
    user_headers,
)

CAT_MSG = "my cat Miso turned 3 today"
CAT = "User has a cat called Miso."



async def job_rows(db: Any) -> list[tuple]:
    cur = await db.execute("SELECT user_id, status, payload, attempts FROM memory_jobs ORDER BY id")
    return await cur.fetchall()


# ---------------------------------------------------------------- enqueue

async def test_a_chat_turn_enqueues_one_job_with_the_reply(client: Any, outside: Any, db: Any) -> None:
    outside.routes["chat"].respond(200, json=completion("Nice, Bun is fast."))
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A, **{"x-openwebui-chat-id": "c1"}))
    [(user, status, payload, attempts)] = await job_rows(db)
    assert (user, status, attempts) == (USER_A, "queued", 0)
    assert payload["user_message"] == BUN_MSG and payload["assistant_reply"] == "Nice, Bun is fast."


async def test_inside_serve_the_worker_runs_one_job_at_a_time_while_chat_turns_are_served(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    """Its jobs share the event loop with every turn: while the process serves chat, chat gets the CPU first
    (benchmarks.stall key_flood_compose: +58.5 ms p99 on another user's turn with 4 jobs at once, +10.6 with 1)."""
    outside.routes["chat"].respond(200, json=completion("Noted."))
    for user, text in ((USER_A, BUN_MSG), (USER_B, NODE_MSG), ("user-c", CAT_MSG)):  # a user's jobs go in turn
        await client.post(CHAT, json=chat_body(text), headers=user_headers(user))
    serving = True
    worker.yielding_to = lambda: serving
    assert worker.settings.concurrency > 1
    await worker._start_jobs()
    assert len(worker._running) == 1
    serving = False
    await worker._start_jobs()
    assert len(worker._running) == 3  # idle: as many as WORKER_CONCURRENCY
    await asyncio.gather(*worker._running.values())


async def test_a_chat_turn_writes_the_earlier_messages_as_structured_messages_and_its_model(
        client: Any, outside: Any, db: Any) -> None:
    outside.routes["chat"].respond(200, json=completion("Nice, Bun is fast."))
    earlier = [{"role": "user", "content": "Which runtime?"}, {"role": "assistant", "content": "Bun or Node."}]
    body = chat_body(BUN_MSG)
    body["messages"][-1:-1] = earlier
    await client.post(CHAT, json=body, headers=user_headers(USER_A))
    [(_, _, payload, _)] = await job_rows(db)
    assert payload["version"] == VERSION and payload["context"] == earlier and payload["model"] == body["model"]
    assert FormationPayload.from_json(payload).earlier("assistant") == ["Bun or Node."]


async def test_a_job_written_in_the_old_payload_format_is_formed(db: Any, worker: Any, memory_llm: Any) -> None:
    """A queued or dead job outlives an upgrade: the worker reads the flattened context lines too."""
    memory_llm.extract = runtime_facts
    async with in_user_scope(db, USER_A):
        await db.execute("INSERT INTO memory_jobs (user_id, payload, said_at) VALUES (%s, %s, now())",
                         [USER_A, Jsonb(OLD_PAYLOAD)])
    assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [BUN]
    [(_, status, _, _)] = await job_rows(db)
    assert status == "done"
    [prompt] = [prompt for purpose, prompt in memory_llm.prompts if purpose == "extract"]
    assert "Node is the safe choice; Bun is faster." in prompt and "assistant: Node" not in prompt


async def test_tasks_anonymous_and_failed_turns_enqueue_nothing(client: Any, outside: Any, db: Any) -> None:
    task = {"model": "m", "stream": False, "messages": [{"role": "user", "content": "### Task:\nGenerate a title"}]}
    await client.post(CHAT, json=task, headers=user_headers(USER_A))
    await client.post(CHAT, json=chat_body(BUN_MSG))  # anonymous
    outside.routes["chat"].respond(500, json={"error": {"message": "boom", "type": "server_error"}})
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    assert await job_rows(db) == []


async def test_formation_disabled_enqueues_nothing(env: dict, app_factory: Any, outside: Any, db: Any) -> None:
    from litestar.testing import AsyncTestClient

    from memory_proxy.settings import load_settings

    async with AsyncTestClient(app_factory(load_settings({**env, "FORMATION_ENABLED": "false"}))) as c:
        response = await c.post(CHAT, json=chat_body(BUN_MSG),
                                headers={"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_A)})
    assert response.status_code == 200 and await job_rows(db) == []


async def test_stream_is_teed_and_the_job_is_written_before_the_request_ends(
        live_url: str, outside: Any, db: Any) -> None:
    events = sse(chunk({"role": "assistant", "content": ""}), chunk({"content": "Bun "}),
                 chunk({"content": "is fast."}), chunk({}, finish_reason="stop"))
    outside.routes["chat"].respond(200, stream=httpx.ByteStream(b"".join(events)),
                                   headers={"content-type": "text/event-stream"})
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{live_url}{CHAT}", json=chat_body(BUN_MSG, stream=True),
                                     headers={"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_A)})
    assert response.content == b"".join(events)  # the tee changed nothing
    [(_, status, payload, _)] = await job_rows(db)  # already there: no waiting
    assert status == "queued" and payload["assistant_reply"] == "Bun is fast."


async def test_database_down_mid_run_chat_goes_on_and_the_job_is_written_when_it_returns(
        client: Any, outside: Any, db: Any, pg_server: Any, database_url: str) -> None:
    name = database_url.split("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
    held = metric("memory_proxy_jobs_total", event="held")
    def database_fail_opens() -> float:  # refused at once, or the pool's reconnects outlast the budget on a busy machine
        return sum(metric("memory_proxy_fail_open_total", reason=r) for r in ("database_error", "database_timeout"))
    fail_open = database_fail_opens()
    response = await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    assert response.status_code == 200 and response.json()["memories"] == []
    assert database_fail_opens() == fail_open + 1  # retrieval failed open
    assert metric("memory_proxy_jobs_total", event="held") == held + 1
    assert len(client.app.state.services.outbox) == 1
    assert (await client.get("/readyz")).status_code == 503

    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    async with asyncio.timeout(15):  # the outbox retries every second; nothing accepted was lost
        while len(client.app.state.services.outbox):
            await asyncio.sleep(0.05)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute("SELECT user_id, payload->>'user_message' FROM memory_jobs")
        assert await cur.fetchall() == [(USER_A, BUN_MSG)]
    assert (await client.get("/readyz")).status_code == 200


# ---------------------------------------------------------------- learn, replace, retrieve

async def test_learn_replace_and_retrieve(client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = runtime_facts  # no `replaces` pointer: the user's "switched from Bun" is enough
    replaced_before = metric("memory_proxy_decisions_total", action="replace")

    # 1. A tells a fact → one memory for A alone, one decision line
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    with capture_logs() as logs:
        assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [BUN] and await active_texts(db, USER_B) == []
    [line] = [e for e in logs if e["event"] == "memory_decision"]
    assert line["user_id"] == USER_A and line["input_message_length"] == len(BUN_MSG)
    assert line["extracted_count"] == 1 and line["status"] == "done" and "job_id" in line and "duration_ms" in line
    assert [(d["fact"], d["action"]) for d in line["decisions"]] == [(BUN, "add")]
    assert memory_llm.calls("extract") == 1  # one LLM call a turn

    # 2. A switches → Bun unlinked for A, Node linked, audited with the reason
    await client.post(CHAT, json=chat_body(NODE_MSG), headers=user_headers(USER_A))
    with capture_logs() as logs:
        assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [NODE]
    cur = await db.execute("SELECT o.content, n.content, u.reason, u.user_id FROM memory_updates u"
                           " JOIN vectors o ON o.id = u.old_vector_id JOIN vectors n ON n.id = u.new_vector_id")
    assert await cur.fetchall() == [(BUN, NODE, "the model: the new fact updates it (confirmed)", USER_A)]
    [line] = [e for e in logs if e["event"] == "memory_decision"]
    assert line["decisions"][0]["action"] == "replace" and line["decisions"][0]["target_id"]
    assert metric("memory_proxy_decisions_total", action="replace") == replaced_before + 1
    cur = await db.execute("SELECT count(*) FROM vectors WHERE content = %s", [BUN])
    assert (await cur.fetchone())[0] == 1  # the old vector stays (others may share it)
    cur = await db.execute(  # … and A's link stays as history, pointing at what replaced it
        "SELECT o.content, n.content, uv.superseded_at IS NOT NULL, u.action FROM users_vectors uv"
        " JOIN vectors o ON o.id = uv.vector_id JOIN vectors n ON n.id = uv.superseded_by"
        " JOIN memory_updates u ON u.old_vector_id = uv.vector_id WHERE uv.user_id = %s", [USER_A])
    assert await cur.fetchall() == [(BUN, NODE, True, "replace")]

    # 3. A's next chat has Node injected, not Bun
    response = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    system = system_text(sent_body(outside))
    assert NODE in system and BUN not in system and len(response.json()["memories"]) == 1
    assert [s for s, *_ in await job_rows(db)].count(USER_A) == 3


async def test_a_user_at_the_memory_cap_gets_no_new_memory_but_updates_still_happen(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    """One user sent 1,000 turns and held 10,000 active memories. At MAX_MEMORIES_PER_USER a new fact is
    dropped (counted, logged); a replacement keeps the count, so it still happens."""
    worker.settings = replace(worker.settings, max_memories=2)
    memory_llm.extract = lambda message: {CAT_MSG: [CAT]}.get(message) or runtime_facts(message)
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    await add_memory(db, USER_A, "User lives in Lyon.")
    assert await worker.run_until_idle() == 1 and len(await active_texts(db, USER_A)) == 2
    dropped = metric("memory_proxy_facts_dropped_total", reason="user_cap")
    await client.post(CHAT, json=chat_body(CAT_MSG), headers=user_headers(USER_A))
    with capture_logs() as logs:
        assert await worker.run_until_idle() == 1
    assert CAT not in await active_texts(db, USER_A)
    assert metric("memory_proxy_facts_dropped_total", reason="user_cap") == dropped + 1
    assert [e["active"] for e in logs if e["event"] == "memory_limit"] == [2]
    await client.post(CHAT, json=chat_body(NODE_MSG), headers=user_headers(USER_A))
    assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == ["User is a software engineer who uses Node.", "User lives in Lyon."]
    # another user is not affected by A's cap
    await client.post(CHAT, json=chat_body(CAT_MSG), headers=user_headers(USER_B))
    assert await worker.run_until_idle() == 1 and await active_texts(db, USER_B) == [CAT]


async def test_the_same_fact_in_20_parallel_requests_leaves_one_memory(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any, settings: Any) -> None:
    from memory_proxy.formation.worker import Worker
    from memory_proxy.services import open_services

    memory_llm.extract = runtime_facts
    await asyncio.gather(*(client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
                           for _ in range(20)))
    assert len(await job_rows(db)) == 20
    async with open_services(settings, httpx.AsyncClient()) as other:  # a second worker races the first
        rival = Worker(pool=other.pool, embedder=other.embedder, llm=other.llm, scanner=other.scanner,
                       settings=settings.formation)
        done = await asyncio.gather(worker.run_until_idle(), rival.run_until_idle())
    assert sum(done) == 20
    assert await active_texts(db, USER_A) == [BUN]
    assert {status for _, status, _, _ in await job_rows(db)} == {"done"}


async def test_flip_flop_an_older_statement_never_replaces_a_newer_one(
        db: Any, worker: Any, memory_llm: Any) -> None:
    node_now = "I'm a software engineer and I use Node now"
    memory_llm.extract = lambda message: [{"fact": BUN, "replaces_text": NODE}] if message == BUN_MSG else [NODE]
    now = datetime.now(UTC)
    # the newer statement (Node, said now) is processed first: nothing to compare with, it is added …
    await jobs.enqueue(db, user_id=USER_A, said_at=now, payload=FormationPayload(node_now))
    await worker.run_until_idle()
    # … then an older one (Bun, said an hour ago) arrives late: the LLM says replace, the rule says no
    await jobs.enqueue(db, user_id=USER_A, said_at=now - timedelta(hours=1), payload=FormationPayload(BUN_MSG))
    with capture_logs() as logs:
        await worker.run_until_idle()
    assert await active_texts(db, USER_A) == [NODE]
    [line] = [e for e in logs if e["event"] == "memory_decision"]
    assert line["decisions"][0]["action"] == "ignore" and "flip-flop" in line["decisions"][0]["reason"]


async def test_a_shared_memory_is_unlinked_only_for_the_user_who_changed(
        db: Any, worker: Any, memory_llm: Any) -> None:
    from memory_proxy.store.memories import link_vector

    memory_llm.extract = runtime_facts
    bun = await add_memory(db, USER_A, BUN)
    await db.execute("UPDATE vectors SET stated_at = now() - interval '1 day' WHERE id = %s", [bun])
    assert await link_vector(db, USER_B, bun)
    await jobs.enqueue(db, user_id=USER_A, said_at=datetime.now(UTC), payload=FormationPayload(NODE_MSG))
    await worker.run_until_idle()
    assert await active_texts(db, USER_A) == [NODE] and await active_texts(db, USER_B) == [BUN]


# ---------------------------------------------------------------- failures

@pytest.mark.parametrize("fault", ["timeout", "http_500"])
async def test_a_failing_memory_llm_is_retried_then_dead_and_chat_is_unaffected(
        env: dict, client: Any, outside: Any, db: Any, memory_llm: Any, fault: str) -> None:
    from memory_proxy.formation.worker import Worker
    from memory_proxy.services import open_services
    from memory_proxy.settings import load_settings

    memory_llm.extract = runtime_facts
    if fault == "timeout":
        memory_llm.hang = asyncio.Event()
    else:
        outside.routes["memory_llm"].respond(500, json={"object": "error", "message": "overloaded"})
    # past JOB_BUSY_MAX_SECONDS a timeout or a 5xx counts as a failure (before it, the tests below)
    settings = load_settings({**env, "JOB_MAX_ATTEMPTS": "3", "MEMORY_LLM_TIMEOUT": "0.2",
                              "JOB_BUSY_MAX_SECONDS": "0.001"})
    dead_before = metric("memory_proxy_jobs_total", event="dead")
    retried_before = metric("memory_proxy_jobs_total", event="retried")

    response = await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    assert response.status_code == 200
    async with open_services(settings, httpx.AsyncClient()) as services:
        worker = Worker(pool=services.pool, embedder=services.embedder, llm=services.llm, scanner=services.scanner,
                        settings=settings.formation)
        async with asyncio.timeout(20):  # backoff is 10 ms here: poll until the job is dead
            while (await job_rows(db))[0][1] != "dead":
                await worker.run_until_idle()
                response = await client.post(CHAT, json=chat_body(RUNTIME_Q))  # chat keeps working
                assert response.status_code == 200
    [(_, status, _, attempts)] = [r for r in await job_rows(db) if r[0] == USER_A]
    assert (status, attempts) == ("dead", 3)
    assert metric("memory_proxy_jobs_total", event="retried") == retried_before + 2
    assert metric("memory_proxy_jobs_total", event="dead") == dead_before + 1
    cur = await db.execute("SELECT last_error FROM memory_jobs WHERE status = 'dead'")
    assert (await cur.fetchone())[0]
    assert await active_texts(db, USER_A) == []

    # a dead job is visible and can be retried once the LLM is back
    memory_llm.hang = None
    outside.routes["memory_llm"].mock(side_effect=memory_llm)
    assert await jobs.retry_dead(db) == 1
    back = load_settings({**env, "JOB_MAX_ATTEMPTS": "3"})  # the LLM's usual timeout: 0.2 s was for the fault
    async with open_services(back, httpx.AsyncClient()) as services:  # (a loaded CI machine took 1 s once)
        worker = Worker(pool=services.pool, embedder=services.embedder, llm=services.llm, scanner=services.scanner,
                        settings=back.formation)
        assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [BUN]


async def test_a_busy_memory_llm_server_is_queueing_not_failure(
        env: dict, client: Any, db: Any, memory_llm: Any) -> None:
    """A local server shared with chat answers formation late. A call that times out gives the job its
    attempt back and a backoff that grows with the job's age (10 s at first), never a dead job while it is young."""
    from memory_proxy.formation.worker import Worker
    from memory_proxy.services import open_services
    from memory_proxy.settings import load_settings

    memory_llm.extract = runtime_facts
    memory_llm.hang = asyncio.Event()
    settings = load_settings({**env, "JOB_MAX_ATTEMPTS": "1", "MEMORY_LLM_TIMEOUT": "0.2"})
    timeouts = metric("memory_proxy_llm_calls_total", purpose="extract", outcome="timeout")
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    async with open_services(settings, httpx.AsyncClient()) as services:
        worker = Worker(pool=services.pool, embedder=services.embedder, llm=services.llm, scanner=services.scanner,
                        settings=settings.formation)
        assert await worker.run_until_idle() == 1  # one attempt of at most 1, yet not dead
        cur = await db.execute("SELECT status, attempts, run_after - now() FROM memory_jobs")
        status, attempts, wait = await cur.fetchone()
        assert (status, attempts) == ("queued", 0) and timedelta(seconds=9) < wait <= timedelta(seconds=60)
        assert metric("memory_proxy_llm_calls_total", purpose="extract", outcome="timeout") == timeouts + 1
        memory_llm.hang = None  # the server is free again
        await db.execute("UPDATE memory_jobs SET run_after = now()")
        assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [BUN]


async def test_a_memory_llm_slower_than_its_timeout_every_time_is_given_more_time(
        env: dict, client: Any, db: Any, memory_llm: Any) -> None:
    """A 1.5B model writing to MEMORY_LLM_MAX_TOKENS on 2 cores took longer than MEMORY_LLM_TIMEOUT on every try
    (LoCoMo conv-30's first turn), and its job was retried as "busy" for an hour while the user's later turns
    waited. Its calls now get twice, then four times the time; a timeout at four times spends an attempt."""
    from memory_proxy.formation.worker import Worker
    from memory_proxy.services import open_services
    from memory_proxy.settings import load_settings

    async def rounds(worker: Any) -> list[tuple[str, int, int]]:
        seen = []
        for _ in range(3):
            assert await worker.run_until_idle() == 1
            cur = await db.execute("SELECT status, attempts, timeouts FROM memory_jobs WHERE status <> 'done'")
            seen.append(await cur.fetchone() or ("done", 0, 0))
            await db.execute("UPDATE memory_jobs SET run_after = now() WHERE status = 'queued'")
        return seen

    memory_llm.extract = runtime_facts
    memory_llm.slow_s = 0.7  # each answer: over 0.3 s and 0.6 s, under 1.2 s
    settings = load_settings({**env, "JOB_MAX_ATTEMPTS": "1", "MEMORY_LLM_TIMEOUT": "0.3"})
    timeouts = metric("memory_proxy_llm_calls_total", purpose="extract", outcome="timeout")
    await client.post(CHAT, json=chat_body(BUN_MSG), headers=user_headers(USER_A))
    async with open_services(settings, httpx.AsyncClient()) as services:
        worker = Worker(pool=services.pool, embedder=services.embedder, llm=services.llm, scanner=services.scanner,
                        settings=settings.formation)
        assert await rounds(worker) == [("queued", 0, 1), ("queued", 0, 2), ("done", 0, 0)]
        assert await active_texts(db, USER_A) == [BUN]
        assert metric("memory_proxy_llm_calls_total", purpose="extract", outcome="timeout") == timeouts + 2

        memory_llm.hang = asyncio.Event()  # never answers: only the timeout at four times spends the attempt
        await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
        assert await rounds(worker) == [("queued", 0, 1), ("queued", 0, 2), ("dead", 1, 3)]


OUTAGES = {
    "503": lambda memory_llm, route: setattr(memory_llm, "down", True),
    "connection refused": lambda memory_llm, route: route.mock(side_effect=httpx.ConnectError("refused")),
}


async def aged(db: Any, step: str = "run_after - now()") -> None:
    """Time passes for the queue without waiting: every queued job is `step` older and ready to be claimed."""
    await db.execute(f"UPDATE memory_jobs SET created_at = created_at - ({step}), run_after = now()"
                     " WHERE status = 'queued'")


@pytest.mark.parametrize("outage", OUTAGES.values(), ids=OUTAGES.keys())
async def test_a_ten_minute_memory_llm_outage_kills_no_job(db: Any, worker: Any, memory_llm: Any, outside: Any,
                                                           outage: Any) -> None:
    """5xx and refused connections spent attempts: an outage of more than ~150 s killed every job written before
    it. A server that is down is waited for like a busy one (JOB_BUSY_MAX_SECONDS), its jobs' attempts kept."""
    memory_llm.extract = runtime_facts
    users = [f"user-{n}" for n in range(10)]
    for user in users:
        await jobs.enqueue(db, user_id=user, said_at=datetime.now(UTC), payload=FormationPayload(BUN_MSG))
    outage(memory_llm, outside.routes["memory_llm"])
    down = metric("memory_proxy_llm_calls_total", purpose="extract", outcome="down")
    rounds = 0
    while True:  # each round: every job tried once, then its backoff (10 s to 60 s) passes at once
        assert await worker.run_until_idle() == len(users)
        cur = await db.execute("SELECT DISTINCT status, attempts FROM memory_jobs")
        assert await cur.fetchall() == [("queued", 0)]  # none dead, no attempt spent
        rounds += 1
        cur = await db.execute("SELECT min(now() - created_at) FROM memory_jobs")
        if (await cur.fetchone())[0] >= timedelta(minutes=10):
            break
        await aged(db)
    assert rounds >= 15  # the waits grew to the minute they are capped at
    assert metric("memory_proxy_llm_calls_total", purpose="extract", outcome="down") == down + rounds * len(users)

    memory_llm.down = False  # the server is back
    outside.routes["memory_llm"].mock(side_effect=memory_llm)
    await aged(db)
    assert await worker.run_until_idle() == len(users)
    cur = await db.execute("SELECT DISTINCT status FROM memory_jobs")
    assert await cur.fetchall() == [("done",)]
    for user in users:
        assert await active_texts(db, user) == [BUN]


async def test_a_request_the_memory_llm_refuses_still_spends_attempts(db: Any, worker: Any, outside: Any) -> None:
    """A 400 says the request is wrong: asking again will not change it, so the job dies after its attempts."""
    from memory_proxy.formation.worker import Worker

    outside.routes["memory_llm"].respond(400, json={"error": {"message": "bad request", "type": "invalid_request"}})
    await jobs.enqueue(db, user_id=USER_A, said_at=datetime.now(UTC), payload=FormationPayload(BUN_MSG))
    worker = Worker(pool=worker.pool, embedder=worker.embedder, llm=worker.llm,  # one attempt per round
                    settings=replace(worker.settings, retry_base_s=60), scanner=worker.scanner)
    for attempt in range(1, worker.settings.max_attempts + 1):
        await aged(db, "interval '1 second'")
        assert await worker.run_until_idle() == 1
        cur = await db.execute("SELECT status, attempts FROM memory_jobs")
        assert await cur.fetchone() == ("queued" if attempt < worker.settings.max_attempts else "dead", attempt)


HOSTILE_REPLIES = {  # the reply's text, and how the server says it ended
    "not json": ("this is not JSON {", "stop"),
    "truncated": ('{"facts": [{"fact": "User li', "stop"),
    "cut at max_tokens": ('{"facts": [{"fact": "User likes tea and ' + "and " * 50, "length"),
    "deeply nested": ("[" * 50_000 + "]" * 50_000, "stop"),
    "lone surrogate": ('{"facts": [{"fact": "User likes \\ud800 tea."}]}', "stop"),
}


@pytest.mark.parametrize("purpose", ["extract", "relate"])
@pytest.mark.parametrize(("reply", "finish"), HOSTILE_REPLIES.values(), ids=HOSTILE_REPLIES.keys())
async def test_a_reply_that_can_never_be_read_is_an_empty_answer_not_a_failed_job(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any, purpose: str, reply: str,
        finish: str) -> None:
    await add_memory(db, USER_A, BUN)
    memory_llm.extract = runtime_facts
    memory_llm.raw = {purpose: reply}
    memory_llm.finish_reason = finish
    before = metric("memory_proxy_llm_calls_total", purpose=purpose, outcome="malformed")
    await client.post(CHAT, json=chat_body(NODE_MSG), headers=user_headers(USER_A))
    with capture_logs() as logs:
        assert await worker.run_until_idle() == 1
    [(_, status, _, attempts)] = await job_rows(db)
    assert (status, attempts) == ("done", 1)  # answered: not retried, never dead
    assert metric("memory_proxy_llm_calls_total", purpose=purpose, outcome="malformed") == before + 1
    [decision] = [e for e in logs if e["event"] == "memory_decision"]
    assert decision["malformed"] and decision["malformed"][0].startswith(purpose)
    # no facts read from a broken extraction; a broken comparison adds the fact beside the old one
    assert await active_texts(db, USER_A) == ([BUN] if purpose == "extract" else sorted([BUN, NODE]))


async def test_a_job_whose_worker_died_is_taken_over_after_its_lease(
        db: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = runtime_facts
    await jobs.enqueue(db, user_id=USER_A, said_at=datetime.now(UTC), payload=FormationPayload(BUN_MSG))
    [claimed] = await jobs.claim(db, worker_id="dead-worker", limit=5, lease_s=0.05)  # then it "dies"
    assert await worker.run_until_idle() == 0  # its lease is still valid
    await db.execute("UPDATE memory_jobs SET locked_until = now() - interval '1 second'")
    assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [BUN]
    # the dead worker waking up cannot complete (nor apply) the job a second time
    assert not await jobs.complete(db, job_id=claimed.id, worker_id="dead-worker")


# ---------------------------------------------------------------- cold start

async def test_global_memories_reach_users_with_fewer_than_five_of_their_own(client: Any, outside: Any,
                                                                            db: Any) -> None:
    from memory_proxy.store.memories import add_global_memory
    from tests.support.fakes import vector_for

    text = "Everyone on this server works at Acme."
    global_id = await add_global_memory(db, content=text, embedding=vector_for(text), model="mistral-embed")
    assert await add_global_memory(db, content=text, embedding=vector_for(text), model="mistral-embed") == global_id
    response = await client.post(CHAT, json=chat_body("Where do I work?"), headers=user_headers(USER_A))
    assert response.json()["memories"] == [global_id] and text in system_text(sent_body(outside))

    for fact in ["User lives in Berlin.", "User has a dog named Rex.", "User is allergic to peanuts.",
                 "User prefers green tea over coffee.", BUN]:
        await add_memory(db, USER_B, fact)
    response = await client.post(CHAT, json=chat_body("Where do I work?"), headers=user_headers(USER_B))
    assert response.json()["memories"] == []


@pytest.mark.slow
@pytest.mark.parametrize(("provider", "mode"), [("mistral", "tools"), ("mistral", "json_schema"),
                                                ("mistral", "md_json"), ("openai", "json"), ("openai", "tools")])
async def test_every_provider_and_mode_forms_memories(env: dict, outside: Any, db: Any, memory_llm: Any,
                                                      provider: str, mode: str) -> None:
    from memory_proxy.formation.worker import Worker
    from memory_proxy.services import open_services
    from memory_proxy.settings import load_settings

    memory_llm.extract = runtime_facts
    settings = load_settings({**env, "MEMORY_LLM_PROVIDER": provider, "MEMORY_LLM_MODE": mode})
    calls = metric("memory_proxy_llm_calls_total", purpose="extract", outcome="ok")
    tokens = metric("memory_proxy_llm_tokens_total", purpose="extract", kind="prompt")
    await add_memory(db, USER_A, "User lives in Berlin.")
    await jobs.enqueue(db, user_id=USER_A, said_at=datetime.now(UTC), payload=FormationPayload(BUN_MSG))
    async with open_services(settings, httpx.AsyncClient()) as services:
        worker = Worker(pool=services.pool, embedder=services.embedder, llm=services.llm, scanner=services.scanner,
                        settings=settings.formation)
        assert await worker.run_until_idle() == 1
    assert await active_texts(db, USER_A) == [BUN, "User lives in Berlin."]
    assert memory_llm.calls("extract") == 1  # one call a turn, whatever the number of facts
    sent = outside.routes["memory_llm"].calls.last.request
    assert sent.headers["authorization"] == "Bearer llm-secret-key"
    assert ("tools" in json.loads(sent.content)) == (mode == "tools")
    assert metric("memory_proxy_llm_calls_total", purpose="extract", outcome="ok") == calls + 1
    assert metric("memory_proxy_llm_tokens_total", purpose="extract", kind="prompt") == tokens + 100


# ---------------------------------------------------------------- secrets

async def test_no_secret_of_the_corpus_is_stored_or_sent_to_the_memory_llm(
        client: Any, outside: Any, db: Any, worker: Any, memory_llm: Any) -> None:
    """Every credential sample goes through a whole turn: in the user's message, echoed in the reply,
    and handed back by an extraction LLM that ignores redaction (the store must redact anyway)."""
    from dataclasses import replace

    from tests.support.secrets import POSITIVE, pieces

    worker.settings = replace(worker.settings, skip_trivial=False)  # every sample reaches extraction
    raw_by_seen: dict[str, str] = {}  # what the extraction LLM is shown → the original text
    memory_llm.extract = lambda seen: [f"User said: {seen}", *[  # … and the raw sample it came from
        f"User said verbatim: {raw}" for raw in raw_by_seen.values() if seen[:20] in raw][:1]]
    dropped_before = metric("memory_proxy_facts_dropped_total", reason="secret")
    for sample in POSITIVE:
        outside.routes["chat"].respond(200, json=completion(f"Noted: {sample['text']}"))
        await client.post(CHAT, json=chat_body(sample["text"]), headers=user_headers(USER_A))
        [(payload,)] = await (await db.execute("SELECT payload FROM memory_jobs ORDER BY id DESC LIMIT 1")).fetchall()
        raw_by_seen[payload["user_message"]] = sample["text"]
    assert await worker.run_until_idle() == len(POSITIVE)

    def strings(value: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        if isinstance(value, dict):
            return [s for v in value.values() for s in strings(v)]
        return [s for v in value for s in strings(v)] if isinstance(value, list) else []

    stored = [row[0] for row in await (await db.execute("SELECT content FROM vectors")).fetchall()]
    stored += [s for (p,) in await (await db.execute("SELECT payload FROM memory_jobs")).fetchall()
               for s in strings(p)]
    stored += [row[0] for row in await (await db.execute("SELECT reason FROM memory_updates")).fetchall()]
    stored += [prompt for _, prompt in memory_llm.prompts]
    blob = "\n".join(stored)
    leaked = [s["kind"] for s in POSITIVE if any(piece in blob for piece in pieces(s["secret"], 12))]
    assert leaked == []
    # a fact that held a secret is dropped whole ("User's key is [REDACTED]" is worth nothing)
    assert not any("REDACTED" in text for text in await active_texts(db, USER_A))
    # the model reads a sentence that held a secret with its placeholder only; the raw secret a model hands
    # back (this fake repeats what it was told) is dropped whole
    calls = memory_llm.calls("extract")
    assert calls and metric("memory_proxy_facts_dropped_total", reason="secret") - dropped_before >= calls


async def test_a_jobs_memory_llm_and_embedding_tokens_count_against_its_user(env: dict[str, str], outside: Any, db: Any,
                                                               memory_llm: Any) -> None:
    """Fair use (memory_proxy/limits/): a user's memory work is theirs, as their chat turns are: the memory LLM's
    tokens and a remote embedder's."""
    from memory_proxy.formation.worker import Worker
    from memory_proxy.services import open_services
    from memory_proxy.settings import load_settings
    from memory_proxy.store import limits

    memory_llm.extract = runtime_facts
    async with in_user_scope(db, USER_A):
        await db.execute("INSERT INTO memory_jobs (user_id, payload, said_at) VALUES (%s, %s, now())",
                         [USER_A, Jsonb(OLD_PAYLOAD)])
    settings = load_settings({**env, "LIMITS_PER_USER": "daily_tokens=1000000"})
    embedded_before = outside.routes["embeddings"].call_count
    async with open_services(settings, httpx.AsyncClient(timeout=5)) as services:
        assert await Worker.from_services(services).run_until_idle() == 1
    calls, embedded = len(memory_llm.prompts), outside.routes["embeddings"].call_count - embedded_before
    [use] = await limits.usage(db, "user", USER_A)
    assert calls >= 1 and embedded >= 1  # its facts embedded by the remote embedder: 3 tokens a call, it says
    assert use.tokens_today == calls * sum(memory_llm.usage.get(k, 0) for k in
                                           ("prompt_tokens", "completion_tokens")) + 3 * embedded
