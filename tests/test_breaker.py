"""The memory side's circuit breaker (memory_proxy/breaker.py), on a clock the test moves; the embedder's on the chat
path here, the database's (a down database skipped after three failures) in test_services.py."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
from structlog.testing import capture_logs

from memory_proxy.breaker import Breaker
from tests.support.data import BERLIN, CHAT, USER_A
from tests.support.fakes import embeddings_reply
from tests.support.proxy import add_memory, chat_body, metric, user_headers


def test_the_breaker_opens_lets_one_probe_through_after_the_cool_down_and_backs_off() -> None:
    now = [0.0]
    breaker = Breaker(threshold=3, cool_s=5, max_cool_s=20, clock=lambda: now[0])
    for _ in range(3):
        assert breaker.allow()
        breaker.failure()
    assert not breaker.allow()  # open
    now[0] = 5.0
    assert breaker.allow()  # half-open: one probe …
    assert not breaker.allow()  # … and only one
    breaker.failure()  # the probe failed: open again, for longer
    now[0] = 14.0
    assert not breaker.allow()
    now[0] = 15.0
    assert breaker.allow()
    breaker.success()  # closed
    assert all(breaker.allow() for _ in range(5))


def test_a_success_before_the_threshold_resets_the_count() -> None:
    breaker = Breaker(threshold=3, clock=lambda: 0.0)
    for _ in range(2):
        breaker.failure()
    breaker.success()
    for _ in range(2):
        breaker.failure()
    assert breaker.allow()  # 2 + 2 failures, not 4 in a row


def test_the_breaker_s_state_is_a_gauge_per_part_and_its_changes_are_logged() -> None:
    now = [0.0]
    breaker = Breaker("embedder", threshold=2, cool_s=5, clock=lambda: now[0])
    with capture_logs() as logs:
        breaker.failure()
        assert metric("memory_proxy_breaker_open", part="embedder") == 0
        breaker.failure()
        assert metric("memory_proxy_breaker_open", part="embedder") == 1
        breaker.failure()  # a call already under way when it opened: no second line, no longer cool-down
        now[0] = 5.0
        assert breaker.allow()
        breaker.success()
    assert metric("memory_proxy_breaker_open", part="embedder") == 0
    assert [(e["event"], e["part"], e.get("retry_in_s")) for e in logs] == [
        ("breaker_opened", "embedder", 5), ("breaker_closed", "embedder", None)]


async def test_a_hung_embedder_costs_a_turn_milliseconds_once_its_breaker_opens(
        proxy: Any, outside: Any, db: Any) -> None:
    """While the embedder hangs, every memory turn paid its embedding share of the budget (2.1 s here, 1.05 s
    by default). Now three do; then turns skip the embedder, and still get the most recent memories. (A long
    budget, so that a turn slowed by a loaded machine is still told apart from one that waited for it.)"""
    client = await proxy(RETRIEVAL_TIMEOUT_MS="3000")
    memory_id = await add_memory(db, USER_A, BERLIN)
    breaker = client.app.state.services.embedder_breaker
    now = [0.0]
    breaker.clock = lambda: now[0]
    hung, asked = asyncio.Event(), [0]

    async def hanging(request: httpx.Request) -> httpx.Response:
        asked[0] += 1  # counted here: respx records a call only once it is answered
        await hung.wait()
        return embeddings_reply(request)

    outside.routes["embeddings"].mock(side_effect=hanging)

    async def turn() -> tuple[float, int, str]:
        """(seconds, embedder calls so far, the injected memory ids)"""
        started = time.perf_counter()
        response = await client.post(CHAT, json=chat_body("Where do I live?"), headers=user_headers(USER_A))
        assert response.status_code == 200
        return time.perf_counter() - started, asked[0], response.headers["x-memory-proxy-memories"]

    def waited() -> float:
        """Turns that waited out the embedder's share of the budget (and then fell back)."""
        return metric("memory_proxy_fail_open_total", reason="embedder_timeout")

    skipped, timed_out = metric("memory_proxy_fail_open_total", reason="embedder_breaker_open"), waited()
    tried = [await turn() for _ in range(breaker.threshold)]
    assert [calls for _, calls, _ in tried] == [1, 2, 3] and all(took >= 2.1 for took, _, _ in tried)
    assert waited() == timed_out + 3
    assert metric("memory_proxy_breaker_open", part="embedder") == 1
    for _ in range(3):  # open: no call, no wait for the embedder, and the most recent memories all the same
        _, calls, injected = await turn()
        assert calls == 3 and injected == memory_id
    # Counted, not timed: not one of them waited for the embedder (a busy machine can slow a turn; it cannot
    # make one count a timeout it did not wait out).
    assert waited() == timed_out + 3
    assert metric("memory_proxy_fail_open_total", reason="embedder_breaker_open") == skipped + 3

    now[0] = 5.0  # the cool-down is over: one turn probes, and the embedder still hangs
    took, calls, injected = await turn()
    assert calls == 4 and took >= 2.1 and injected == memory_id and waited() == timed_out + 4
    now[0] = 14.0  # the failed probe doubled the cool-down (10 s)
    assert (await turn())[1] == 4
    hung.set()  # the embedder is back: the next probe closes the breaker, and turns search again
    now[0] = 15.0
    assert (await turn())[1:] == (5, memory_id)
    assert (await turn())[1] == 6
    assert metric("memory_proxy_breaker_open", part="embedder") == 0
