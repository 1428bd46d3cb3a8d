"""The chat turns a process is serving (memory_proxy/http/chat_load.py): counted from the request to the reply's
last byte, however the reply ends; nothing else is counted. The ASGI app inside is a stand-in: the wrapper is
what is tested."""

from __future__ import annotations

from typing import Any

import pytest

from memory_proxy.http.chat_load import CHAT_PATH, ChatLoad, CountChatTurns


def scope(path: str = CHAT_PATH) -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "POST"}


async def nothing() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


async def test_a_streamed_reply_is_counted_until_its_last_byte() -> None:
    load, seen = ChatLoad(), []

    async def streamed(scope: Any, receive: Any, send: Any) -> None:
        seen.append(load.in_flight)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        seen.append(load.in_flight)
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        seen.append(load.in_flight)  # what runs after the reply (its formation job) is not chat

    async def sent(message: Any) -> None:
        pass

    await CountChatTurns(streamed, load)(scope(), nothing, sent)
    assert seen == [1, 1, 0] and load.in_flight == 0 and not load.busy()


async def test_a_turn_that_fails_or_loses_its_client_is_no_longer_counted() -> None:
    load = ChatLoad()

    async def failing(scope: Any, receive: Any, send: Any) -> None:
        assert load.busy()
        raise RuntimeError("upstream gone")

    async def sent(message: Any) -> None:
        pass

    with pytest.raises(RuntimeError):
        await CountChatTurns(failing, load)(scope(), nothing, sent)
    assert load.in_flight == 0


async def test_other_routes_are_not_chat() -> None:
    load = ChatLoad()

    async def health(scope: Any, receive: Any, send: Any) -> None:
        assert not load.busy()

    async def sent(message: Any) -> None:
        pass

    await CountChatTurns(health, load)(scope("/healthz"), nothing, sent)
    await CountChatTurns(health, load)({"type": "lifespan"}, nothing, sent)
