"""What the management API accepts (memory_proxy/api/input_bounds.py): every size bounded before anything costly reads it,
and the event loop free while a hostile body arrives."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from memory_proxy.api.input_bounds import MAX_BODY_BYTES, MAX_PARAMETER_CHARS
from memory_proxy.formation.memory_text import MAX_MEMORY_BYTES
from memory_proxy.store.memories import MAX_REASON_CHARS
from tests.support.data import API, CHAT, USER_A
from tests.support.proxy import chat_body, user_headers

AWS_FILE = ("[default]\naws_access_key_id = AKIAZ7QW3RTY5UIOP2LK\n"
            "aws_secret_access_key = 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\n")


def error(response: Any) -> dict[str, Any]:
    return response.json()["error"]  # type: ignore[no-any-return]


async def create(client: Any, content: str) -> dict[str, Any]:
    response = await client.post(f"{API}/memories", params={"user": USER_A}, json={"content": content})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


async def test_healthz_answers_while_a_256_kb_credential_file_is_sent_to_create(client: Any) -> None:
    content = (AWS_FILE * (256 * 1024 // len(AWS_FILE) + 1))[:256 * 1024]
    answered: list[int] = []

    async def health() -> None:
        for _ in range(20):
            answered.append((await client.get("/healthz")).status_code)
            await asyncio.sleep(0.01)

    loop_cpu = time.thread_time()  # the CPU of this thread, the event loop's (the app runs in it)
    created, _ = await asyncio.gather(
        client.post(f"{API}/memories", params={"user": USER_A}, json={"content": content}), health())
    loop_cpu = time.thread_time() - loop_cpu
    assert created.status_code == 413 and error(created)["type"] == "invalid_request_error"
    assert answered == [200] * 20
    # Scanned on the loop, this body costs it 8 s of CPU (measured), during which nothing else is answered;
    # CPU, not wall-clock time: other processes' load does not count.
    assert loop_cpu < 1.0, loop_cpu
    listed = await client.get(f"{API}/memories", params={"user": USER_A})
    assert listed.json()["data"] == []


async def test_a_body_over_the_api_limit_is_a_413_while_chat_still_takes_a_large_one(client: Any) -> None:
    big = await client.post(f"{API}/memories", params={"user": USER_A},
                            json={"content": "User likes tea.", "pad": "x" * MAX_BODY_BYTES})
    assert big.status_code == 413, big.text
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 100_000}}
    body = chat_body("What is on this picture?")
    body["messages"][0]["content"] = [{"type": "text", "text": "What is on this picture?"}, image]
    assert (await client.post(CHAT, json=body, headers=user_headers(USER_A))).status_code == 200


async def test_content_over_the_size_limit_is_refused_before_any_scan(client: Any, monkeypatch: Any) -> None:
    scans: list[str] = []
    services = client.app.state.services

    async def recording(text: str) -> Any:
        scans.append(text)
        raise AssertionError("an oversized text was scanned")

    monkeypatch.setattr(services.scanner, "redact", recording)
    response = await client.post(f"{API}/memories", params={"user": USER_A},
                                 json={"content": "é" * (MAX_MEMORY_BYTES // 2 + 1)})
    assert response.status_code == 400 and error(response)["code"] == "content_too_long"
    assert scans == []


@pytest.mark.parametrize(("path", "param"), [("/memories", "q"), ("/memories", "cursor"),
                                             ("/memories/search", "q"), ("/memories", "user")])
async def test_a_parameter_over_its_bound_is_a_400_naming_it(client: Any, path: str, param: str) -> None:
    params = {"user": USER_A, param: "a" * (MAX_PARAMETER_CHARS + 1)}
    response = await client.get(f"{API}{path}", params=params)
    assert response.status_code == 400, response.text
    assert error(response)["code"] == "too_long" and error(response)["param"] == param


async def test_a_reason_over_its_bound_is_a_400_and_nothing_changes(client: Any) -> None:
    memory = await create(client, "User likes tea.")
    reason = "r" * (MAX_REASON_CHARS + 1)
    edited = await client.patch(f"{API}/memories/{memory['id']}", params={"user": USER_A},
                                json={"content": "User likes green tea.", "reason": reason})
    assert edited.status_code == 400 and error(edited)["code"] == "reason_too_long"
    deleted = await client.delete(f"{API}/memories/{memory['id']}", params={"user": USER_A, "reason": reason})
    assert deleted.status_code == 400 and error(deleted)["code"] == "reason_too_long"
    history = (await client.get(f"{API}/memories/{memory['id']}/history", params={"user": USER_A})).json()
    assert history["memory"]["active"] and history["memory"]["content"] == "User likes tea."
    assert history["updates"] == []
    fits = await client.patch(f"{API}/memories/{memory['id']}", params={"user": USER_A},
                              json={"content": "User likes green tea.", "reason": "r" * MAX_REASON_CHARS})
    assert fits.status_code == 200
