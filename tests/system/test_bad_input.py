"""Bad and odd input on every endpoint: a 4xx in OpenAI's error format, or a transparent relay.

The proxy validates only what it reads itself (see `chat/request.parse_chat_body`): a JSON object,
`messages` a non-empty array of objects with a string `role`, `stream` a boolean when set. Everything
else (model, content types, roles, unknown fields) is forwarded for the upstream to judge. Cases
already in test_chat.py (not JSON, `[]`, no/empty/string messages, no role, `stream: "yes"`, invalid
UTF-8, 413 with a Content-Length, 404) are not repeated here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.data import BUN, CHAT, RUNTIME_Q, USER_A
from tests.support.proxy import add_memory, chat_body, make_env, metric, sent_body, system_text, user_headers

MAX_BYTES = 1024 * 1024
JSON = {"content-type": "application/json"}


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    return make_env(database_url, tmp_path, MAX_REQUEST_BYTES=str(MAX_BYTES))


def openai_error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


def user(content: Any, role: Any = "user") -> dict[str, Any]:
    return {"role": role, "content": content}


async def job_payloads(db: Any) -> list[dict[str, Any]]:
    rows = await (await db.execute("SELECT payload FROM memory_jobs WHERE user_id = %s ORDER BY id", [USER_A])
                  ).fetchall()
    return [row[0] for row in rows]


# ---------------------------------------------------------------- what the proxy refuses: 400

@pytest.mark.parametrize("raw", [
    b"", b"null", b'"messages"', b"42",
    b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # nesting past the parser's recursion limit
    b'{"messages": [{"role": "user", "content": "x"}], "n": ' + b"9" * 5000 + b"}",  # int past 4300 digits
    b'{"messages": {"role": "user", "content": "x"}}', b'{"messages": null}',
    b'{"messages": [1]}', b'{"messages": [null]}', b'{"messages": [["user", "x"]]}',
    b'{"messages": [{"role": 5, "content": "x"}]}', b'{"messages": [{"role": null, "content": "x"}]}',
    b'{"messages": [{"role": "user", "content": "x"}], "stream": 1}',
    b'{"messages": [{"role": "user", "content": "x"}], "stream": "false"}',
    b'{"messages": [{"role": "user", "content": "x"}]} trailing',
])
async def test_unusable_chat_bodies_are_400(client: Any, outside: Any, raw: bytes) -> None:
    response = await client.post(CHAT, content=raw, headers={**JSON, **user_headers(USER_A)})
    assert response.status_code == 400, response.text
    assert openai_error(response)["type"] == "invalid_request_error"
    assert not outside.routes["chat"].called and not outside.routes["embeddings"].called


async def test_overlong_user_id_is_400(client: Any, outside: Any) -> None:
    response = await client.post(CHAT, json={"messages": [user("hi")]}, headers=user_headers("u" * 256))
    assert response.status_code == 400 and "x-openwebui-user-id" in openai_error(response)["message"]
    assert not outside.routes["chat"].called


# ---------------------------------------------------------------- what the upstream judges: relayed as sent

@pytest.mark.parametrize("body", [
    {"messages": [user("hi")]},  # no model
    {"model": 7, "messages": [user("hi")]},
    {"model": None, "messages": [user("hi")], "stream": None},
    {"model": "m", "messages": [user(42)]},
    {"model": "m", "messages": [user(None)]},
    {"model": "m", "messages": [user({"text": "hi"})]},
    {"model": "m", "messages": [{"role": "user"}]},
    {"model": "m", "messages": [user("hi", role="narrator"), user("hi", role="")]},
    {"model": "m", "messages": [user([1, None, {"type": "text", "text": 5}, {"type": "text"}])]},
    {"model": "m", "messages": [user("hi")], "temperature": "hot", "tools": "none", "x": {"y": [None]}},
])
@pytest.mark.parametrize("identified", [False, True])
async def test_fields_the_proxy_does_not_need_are_relayed_unchanged(client: Any, outside: Any, db: Any,
                                                                    body: dict[str, Any], identified: bool) -> None:
    raw = json.dumps(body).encode()
    response = await client.post(CHAT, content=raw, headers={**JSON, **(user_headers(USER_A) if identified else {})})
    assert response.status_code == 200
    assert outside.routes["chat"].calls.last.request.content == raw


async def test_upstream_refusal_of_a_relayed_body_reaches_the_client(client: Any, outside: Any) -> None:
    error = {"error": {"message": "model is required", "type": "invalid_request_error", "param": "model",
                       "code": None}}
    outside.routes["chat"].respond(400, json=error)
    response = await client.post(CHAT, json={"messages": [user("hi")]})
    assert response.status_code == 400 and response.json() == error


# ---------------------------------------------------------------- multimodal content

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0KGgo" * 50_000}}


async def test_multimodal_content_passes_through_and_retrieval_reads_only_its_text(client: Any, outside: Any,
                                                                                   db: Any) -> None:
    bun = await add_memory(db, USER_A, BUN)
    message = user([{"type": "text", "text": RUNTIME_Q}, IMAGE, {"type": "input_audio", "input_audio": {}}])
    response = await client.post(CHAT, json={"model": "m", "messages": [message]}, headers=user_headers(USER_A))
    assert response.status_code == 200 and response.json()["memories"] == [bun]
    assert json.loads(outside.routes["embeddings"].calls.last.request.content)["input"] == [RUNTIME_Q]
    sent = sent_body(outside)
    assert sent["messages"][-1] == message  # the image went on untouched
    assert BUN in system_text(sent)
    assert (await job_payloads(db))[-1]["user_message"] == RUNTIME_Q


async def test_multimodal_system_message_gets_the_memories_as_one_more_text_part(client: Any, outside: Any,
                                                                                 db: Any) -> None:
    await add_memory(db, USER_A, BUN)
    system = {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    await client.post(CHAT, json={"model": "m", "messages": [system, user(RUNTIME_Q)]}, headers=user_headers(USER_A))
    content = sent_body(outside)["messages"][0]["content"]
    assert content[0] == system["content"][0] and BUN in content[1]["text"]


# ---------------------------------------------------------------- odd unicode

ODD = "RTL \u202eabc\u202c \u200f emoji 👩🏽‍💻🇫🇷 zero-width \u200b\ufeff combining e\u0301"


async def test_odd_but_valid_unicode_is_relayed_byte_for_byte_and_embedded_as_is(client: Any, outside: Any,
                                                                                 db: Any) -> None:
    raw = json.dumps({"model": "m", "messages": [user(ODD)]}, ensure_ascii=False).encode()
    response = await client.post(CHAT, content=raw, headers={**JSON, **user_headers(USER_A)})
    assert response.status_code == 200
    assert outside.routes["chat"].calls.last.request.content == raw
    assert json.loads(outside.routes["embeddings"].calls.last.request.content)["input"] == [ODD]
    assert (await job_payloads(db))[-1]["user_message"] == ODD


async def test_nul_and_lone_surrogates_reach_the_upstream_as_sent_and_memory_as_replacement_chars(
        client: Any, outside: Any, db: Any) -> None:
    """JSON may escape them ("\\u0000", "\\ud800"); PostgreSQL text and UTF-8 cannot hold them."""
    raw = b'{"model": "m", "messages": [{"role": "user", "content": "a\\u0000b\\ud800c\\udfffd"}]}'
    failed = [metric("memory_proxy_jobs_total", event=e) for e in ("rejected", "held")]
    response = await client.post(CHAT, content=raw, headers={**JSON, **user_headers(USER_A)})
    assert response.status_code == 200
    assert outside.routes["chat"].calls.last.request.content == raw
    assert json.loads(outside.routes["embeddings"].calls.last.request.content)["input"] == ["a\ufffdb\ufffdc\ufffdd"]
    assert (await job_payloads(db))[-1]["user_message"] == "a\ufffdb\ufffdc\ufffdd"
    assert [metric("memory_proxy_jobs_total", event=e) for e in ("rejected", "held")] == failed


async def test_lone_surrogate_survives_injection(client: Any, outside: Any, db: Any) -> None:
    """The body is re-encoded when memories are injected: a lone surrogate goes on JSON-escaped."""
    await add_memory(db, USER_A, BUN)
    raw = json.dumps({"model": "m", "messages": [{"role": "system", "content": "Be brief \ud800"},
                                                 user(RUNTIME_Q)]}).encode()
    response = await client.post(CHAT, content=raw, headers={**JSON, **user_headers(USER_A)})
    assert response.status_code == 200 and len(response.json()["memories"]) == 1
    sent = outside.routes["chat"].calls.last.request.content
    sent.decode("utf-8")  # valid UTF-8
    system = json.loads(sent)["messages"][0]["content"]
    assert system.startswith("Be brief \ud800\n\n<user_memories>") and BUN in system


async def test_upstream_reply_with_nul_and_lone_surrogates(client: Any, outside: Any, db: Any) -> None:
    reply = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok \\u0000 \\udc00"}}]}'
    outside.routes["chat"].respond(200, content=reply, headers=JSON)
    response = await client.post(CHAT, json={"model": "m", "messages": [user("hi")]}, headers=user_headers(USER_A))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "ok \x00 \udc00"
    assert (await job_payloads(db))[-1]["assistant_reply"] == "ok \ufffd \ufffd"


# ---------------------------------------------------------------- size limit (MAX_REQUEST_BYTES)

async def test_body_just_under_the_limit_is_relayed(client: Any, outside: Any) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * (MAX_BYTES - 300)}}
    raw = json.dumps({"model": "m", "messages": [user([image])]}).encode()
    assert MAX_BYTES - 300 < len(raw) <= MAX_BYTES
    response = await client.post(CHAT, content=raw, headers=JSON)
    assert response.status_code == 200 and outside.routes["chat"].calls.last.request.content == raw


@pytest.mark.parametrize("chunked", [False, True])
async def test_body_over_the_limit_is_413_with_or_without_content_length(live_client: Any, outside: Any,
                                                                         chunked: bool) -> None:
    raw = b'{"messages": [{"role": "user", "content": "' + b"x" * MAX_BYTES + b'"}]}'

    async def parts() -> Any:
        for i in range(0, len(raw), 64 * 1024):
            yield raw[i:i + 64 * 1024]

    response = await live_client.post(CHAT, content=parts() if chunked else raw, headers=JSON)
    assert response.status_code == 413 and openai_error(response)["type"] == "invalid_request_error"
    assert not outside.routes["chat"].called


def test_default_limit_fits_chats_with_images() -> None:
    from memory_proxy.settings import load_settings

    assert load_settings({"MEMORY_PROXY_DATA_DIR": "/tmp/x"}).server.max_request_bytes >= 20 * 1024 * 1024


# ---------------------------------------------------------------- the other endpoints

@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/healthz"), ("PUT", "/readyz"), ("DELETE", "/metrics"), ("POST", "/v1/models"),
    ("GET", CHAT), ("PATCH", CHAT),
])
async def test_wrong_method_is_405_in_openai_format(client: Any, method: str, path: str) -> None:
    response = await client.request(method, path, content=b"{not json")
    assert response.status_code == 405 and openai_error(response)


@pytest.mark.parametrize("path", ["/v1/models", "/healthz", "/readyz", "/metrics"])
async def test_get_endpoints_ignore_bodies_and_odd_query_strings(client: Any, outside: Any, path: str) -> None:
    response = await client.request("GET", f"{path}?x=%ff%00&messages[]=1&&=", content=b"\xff{not json",
                                    headers={**JSON, **user_headers(USER_A)})
    assert response.status_code == 200


# ---------------------------------------------------------------- hostile shapes: 10,000-deep JSON, odd file paths

DEEP = 10_000  # ten times the decoder's recursion limit, and each body below the API's MAX_BODY_BYTES


def nested(depth: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/v1/memories"), ("PATCH", "/api/v1/memories/00000000-0000-0000-0000-000000000000"),
    ("POST", CHAT), ("POST", "/api/v1/erase"),
])
@pytest.mark.parametrize("body", [nested(DEEP), b'{"content": ' + nested(DEEP) + b"}",
                                  b'{"a":' * DEEP + b"1" + b"}" * DEEP])
async def test_deeply_nested_json_is_a_400_not_a_500(live_client: Any, method: str, path: str, body: bytes) -> None:
    response = await live_client.request(method, path, content=body, headers={**user_headers(USER_A),
                                                                         "content-type": "application/json"})
    assert response.status_code == 400, (response.status_code, response.text[:300])
    openai_error(response)


async def test_moderate_nesting_still_reaches_the_upstream(live_client: Any, outside: Any) -> None:
    body = chat_body("hi", tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array",
                                                                                    "items": [[[[1]]]]}}}}}}}])
    response = await live_client.post(CHAT, json=body, headers=user_headers(USER_A))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", ["/memories/%00", "/memories/a%00b.js", "/memories/" + "a" * 300,
                                  "/memories/" + "a/" * 400, "/memories/%2e%2e/%2e%2e/etc/passwd",
                                  "/memories/..%2f..%2fpyproject.toml", "/memories/%ff%fe"])
async def test_odd_static_paths_are_a_404_not_a_500(live_client: Any, path: str) -> None:
    response = await live_client.get(httpx.URL(path))
    assert response.status_code in (400, 404), (response.status_code, response.text[:300])
    assert "[project]" not in response.text and "root:" not in response.text
