"""Replay what OpenWebUI 0.12.4 really sent (tests/fixtures, copied from ../shared/data) through the proxy."""

import json
from typing import Any

import pytest

from memory_proxy.chat.request import TurnKind, classify
from tests.support.data import FIXTURES, PROXY_KEY
from tests.support.proxy import add_memory, system_text

TEA = "User prefers green tea over coffee."


def replayable(name: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]
    return [r for r in rows if r["path"] in ("/v1/chat/completions", "/v1/models")]


@pytest.mark.parametrize("capture", ["openwebui-0.12.4-requests.jsonl",
                                     "openwebui-0.12.4-requests-task-headers.jsonl"])
async def test_replayed_openwebui_session(client: Any, outside: Any, db: Any, capture: str) -> None:
    rows = replayable(capture)
    bob = next(r["headers"]["X-OpenWebUI-User-Id"] for r in rows if "X-OpenWebUI-User-Id" in r["headers"])
    tea = await add_memory(db, bob, TEA)
    seen = {"task": 0, "chat": 0, "injected": 0}
    for row in rows:
        headers = {k: v for k, v in row["headers"].items()
                   if k.lower() not in ("host", "content-length", "authorization", "accept-encoding")}
        headers["authorization"] = f"Bearer {PROXY_KEY}"
        raw = json.dumps(row["body"]).encode() if row["body"] is not None else None
        embeds_before = outside.routes["embeddings"].call_count
        response = await client.request(row["method"], row["path"], content=raw, headers=headers)
        assert response.status_code == 200, (row["path"], response.text)
        if row["path"] == "/v1/models":
            continue

        lowered = {k.lower(): v for k, v in row["headers"].items()}
        kind = classify(lowered.get("x-openwebui-user-id"), lowered.get("x-openwebui-task"), row["body"])
        forwarded = outside.routes["chat"].calls.last.request.content
        if kind is TurnKind.TASK:
            seen["task"] += 1
            assert forwarded == raw  # byte for byte: task replies must stay parseable
            assert outside.routes["embeddings"].call_count == embeds_before
            assert "memories" not in response.json()
            continue
        seen["chat"] += 1
        body = json.loads(forwarded)
        if tea in response.headers["x-memory-proxy-memories"]:
            seen["injected"] += 1
            assert TEA in system_text(body) and response.json()["memories"] == [tea]
        else:
            assert forwarded == raw
    assert seen == {"task": 11, "chat": 8, "injected": 2}  # the two turns about drinks got the tea memory
