"""Property-based fuzzing of every endpoint with hypothesis (5,350 generated requests in all).

With the upstream answering 200 (JSON, or SSE when asked to stream), whatever a client sends:
the proxy never answers 5xx itself, and every 4xx body is an OpenAI-format error. One app and one
database serve all the examples of a test (hence the suppressed function-scoped-fixture check).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.data import CHAT, USER_A
from tests.support.fakes import chunk, completion, sse
from tests.support.proxy import add_memory, make_env, metric

pytestmark = pytest.mark.slow

FUZZ: dict[str, Any] = {"deadline": None, "database": None,
                        "suppress_health_check": [HealthCheck.function_scoped_fixture]}

ODD_TEXT = ["\ud800", "\udfff", "\x00", "\u202e", "\u200f", "\ufeff", "👩🏽‍💻", "e\u0301", "### Task:",
            "<memory_context>", "<user_query>", "\\u0000", "\r\n", "data: [DONE]\n\n"]
chars = st.characters(categories=["L", "N", "P", "S", "Z", "Cc", "Cf", "Cs", "Mn"])
text = st.one_of(st.text(chars, max_size=40), st.lists(st.sampled_from(ODD_TEXT), max_size=4).map("".join))
words = st.lists(st.text(chars, min_size=1, max_size=12) | st.sampled_from(ODD_TEXT), min_size=1, max_size=6).map(
    " ".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)
parts = st.lists(st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": words | json_values}),
    st.fixed_dictionaries({"type": st.just("image_url"), "image_url": st.fixed_dictionaries(
        {"url": st.just("data:image/png;base64,iVBORw0KGgo=")})}),
    json_values,
), max_size=4)
content = st.sampled_from([words, words, text, parts, json_values]).flatmap(lambda strategy: strategy)
# Mostly the shape the proxy reads (so that retrieval, injection and formation run), sometimes not.
usable_messages = st.builds(
    lambda earlier, last: [*earlier, last],
    st.lists(st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "system", "assistant", "tool"]) | text, "content": content},
        optional={"name": text, "tool_calls": json_values}), max_size=3),
    st.fixed_dictionaries({"role": st.just("user"), "content": content}),
)
any_messages = st.lists(st.fixed_dictionaries({}, optional={"role": json_values, "content": content}),
                        max_size=3) | json_values
messages = st.integers(0, 3).flatmap(lambda i: any_messages if i == 0 else usable_messages)  # 1 in 4 unusable
chat_bodies = st.builds(
    lambda extra, known: {**extra, **known},
    st.dictionaries(text, json_values, max_size=2),
    st.fixed_dictionaries({"messages": messages}, optional={
        "model": text | json_values, "stream": st.booleans() | st.none() | json_values,
        "tools": json_values, "temperature": json_values}),
)


@pytest.fixture
def env(database_url: str, tmp_path: Path) -> dict[str, str]:
    """Every memory scores above the threshold: each identified chat turn with text gets one injected."""
    return make_env(database_url, tmp_path, RETRIEVAL_MIN_SCORE="-1")


@pytest.fixture
async def memory(db: Any) -> str:
    return await add_memory(db, USER_A, "User likes </user_memories>, \u202e odd text and 👩🏽\u200d💻.")


def encoded(body: Any, ascii_only: bool) -> bytes:
    """JSON as a client would send it; ASCII-escaped is how lone surrogates can be sent at all."""
    try:
        return json.dumps(body, ensure_ascii=ascii_only).encode()
    except UnicodeEncodeError:
        return json.dumps(body).encode()


def upstream_reply(request: httpx.Request) -> httpx.Response:
    try:
        streaming = json.loads(request.content).get("stream") is True
    except (ValueError, AttributeError):
        streaming = False
    if streaming:
        return httpx.Response(200, headers={"content-type": "text/event-stream"},
                              content=b"".join(sse(chunk({"content": "Hi \ud800 there"}))))
    return httpx.Response(200, headers={"content-type": "application/json"},
                          content=json.dumps(completion("Hello \x00 \udc00 there")).encode())


def check(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        body = response.json()
        assert set(body) == {"error"}, body
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str), body
        assert isinstance(error["type"], str), body


@given(body=chat_bodies, ascii_only=st.booleans(), identified=st.sampled_from([True, True, True, False]),
       task=st.sampled_from([None, None, None, "", "title_generation"]))
@settings(max_examples=600, **FUZZ)
async def test_fuzzed_chat_bodies(client: Any, outside: Any, memory: str, body: dict[str, Any], ascii_only: bool,
                                  identified: bool, task: str | None) -> None:
    outside.routes["chat"].mock(side_effect=upstream_reply)
    headers = {"content-type": "application/json"}
    if identified:
        headers["x-openwebui-user-id"] = USER_A
    if task is not None:
        headers["x-openwebui-task"] = task
    not_written = [metric("memory_proxy_jobs_total", event=e) for e in ("rejected", "held")]
    response = await client.post(CHAT, content=encoded(body, ascii_only), headers=headers)
    check(response)
    assert [metric("memory_proxy_jobs_total", event=e) for e in ("rejected", "held")] == not_written  # odd text is storable


@given(raw=st.binary(max_size=200) | json_values.map(lambda v: encoded(v, True)),
       identified=st.booleans())
@settings(max_examples=350, **FUZZ)
async def test_fuzzed_raw_chat_bytes(client: Any, outside: Any, raw: bytes, identified: bool) -> None:
    outside.routes["chat"].mock(side_effect=upstream_reply)
    check(await client.post(CHAT, content=raw, headers={"x-openwebui-user-id": USER_A} if identified else {}))


@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]),
       path=st.sampled_from(["/v1/models", "/healthz", "/readyz", "/metrics", CHAT, "/v1", "/",
                             "/v1/chat/completions/", "/v1/embeddings", "/v1/models/fake-model",
                             # the management API (docs/MANAGEMENT.md) and the memory browser page
                             "/api/v1/memories", "/api/v1/memories/search", "/api/v1/memories/nope",
                             "/api/v1/memories/nope/history", "/api/v1/memories/nope/restore",
                             "/api/v1/memories/nope/pin", "/api/v1/export", "/api/v1/erase",
                             "/api/v1/schema/openapi.json", "/memories/", "/memories/app.js"]),
       query=st.text(st.characters(codec="ascii", categories=["L", "N", "P", "S", "Zs"], exclude_characters="#"),
                     max_size=30),
       raw=st.binary(max_size=100) | json_values.map(lambda v: encoded(v, True)),
       authorized=st.booleans(), identified=st.booleans())
@settings(max_examples=400, **FUZZ)
async def test_fuzzed_requests_on_every_endpoint(client: Any, outside: Any, method: str, path: str, query: str,
                                                 raw: bytes, authorized: bool, identified: bool) -> None:
    outside.routes["chat"].mock(side_effect=upstream_reply)
    headers = {} if authorized else {"authorization": "Bearer nope"}
    if identified:
        headers["x-openwebui-user-id"] = USER_A
    response = await client.request(method, f"{path}?{query}", content=raw, headers=headers)
    if method == "HEAD" or response.status_code == 204:  # no body to check
        assert response.status_code < 500
    else:
        check(response)


def _sent(value: str) -> str:
    """A value as it travels in a URL: percent-encoded UTF-8 (a lone surrogate as the bytes it would have)."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


odd_values = st.one_of(text, st.sampled_from(["\x00", "\ud800", "\x1b[31m", "\x7f", "%00", "../..", "' OR 1=1 --"]),
                       st.integers(1, 4).map(lambda n: "é" * 500 * n))  # a URL holds at most 64 KiB
huge_values = odd_values | st.integers(1, 40).map(lambda n: "é" * 1000 * n) | st.just("x" * 100_000)
MANAGE_ROUTES = [("GET", "/memories"), ("GET", "/memories/search"), ("GET", "/memories/{id}"),
                 ("PATCH", "/memories/{id}"), ("POST", "/memories"), ("POST", "/memories/{id}/pin"),
                 ("POST", "/memories/{id}/unpin"), ("DELETE", "/memories/{id}"), ("GET", "/memories/{id}/history"),
                 ("POST", "/memories/{id}/restore"), ("GET", "/export"), ("POST", "/erase")]


@given(route=st.sampled_from(MANAGE_ROUTES), memory_id=odd_values,
       params=st.dictionaries(st.sampled_from(["q", "cursor", "type", "limit", "reason", "format", "confirm",
                                               "user", "pinned"]), odd_values, max_size=3),
       body=st.fixed_dictionaries({}, optional={"content": huge_values | json_values, "memory_type": huge_values,
                                                "pinned": json_values, "reason": huge_values}),
       admin_key=st.booleans())
@settings(max_examples=500, **FUZZ)
async def test_fuzzed_values_on_every_management_route(client: Any, memory: str, route: tuple[str, str],
                                                       memory_id: str, params: dict[str, str], body: dict[str, Any],
                                                       admin_key: bool) -> None:
    """NUL, lone surrogates, control characters and huge values in every id, parameter and field:
    never a 5xx (they gave 500 on 8 routes), always the OpenAI error shape."""
    method, template = route
    path = "/api/v1" + template.replace("{id}", _sent(memory_id))
    query = "&".join(f"{key}={_sent(value)}" for key, value in {"user": USER_A, **params}.items()
                     if admin_key or key != "user")
    headers = {} if admin_key else {"x-openwebui-user-id": USER_A}
    response = await client.request(method, f"{path}?{query}", content=encoded(body, True),
                                    headers={**headers, "content-type": "application/json"})
    check(response)


TEAM_ROUTES = [("GET", ""), ("GET", "?limit={user}&after={id}"), ("POST", ""), ("GET", "/{id}"), ("PATCH", "/{id}"), ("DELETE", "/{id}"),
               ("PUT", "/{id}/members/{user}"), ("DELETE", "/{id}/members/{user}"),
               # a team's memories and proposals ({user} stands for the memory's or the proposal's id)
               ("GET", "/{id}/memories"), ("POST", "/{id}/memories"), ("GET", "/{id}/memories/search"),
               ("GET", "/{id}/memories/{user}"), ("PATCH", "/{id}/memories/{user}"),
               ("DELETE", "/{id}/memories/{user}"), ("POST", "/{id}/memories/{user}/pin"),
               ("GET", "/{id}/proposals"), ("POST", "/{id}/proposals/{user}/accept"),
               ("POST", "/{id}/proposals/{user}/reject")]


@given(route=st.sampled_from(TEAM_ROUTES), team_id=odd_values | st.just("platform"), user=odd_values,
       body=st.fixed_dictionaries({}, optional={"id": huge_values | json_values | st.just("t1"),
                                                "name": huge_values | json_values, "about": huge_values | json_values,
                                                "role": huge_values | json_values,
                                                "content": huge_values | json_values}) | json_values,
       identified=st.booleans())
@settings(max_examples=300, **FUZZ)
async def test_fuzzed_values_on_every_team_route(client: Any, route: tuple[str, str], team_id: str, user: str,
                                                 body: Any, identified: bool) -> None:
    """Odd ids, names, roles and memory texts on /api/v1/teams (docs/TEAMS.md), with a team's memories and
    proposals, as an operator and as a user: never a 5xx."""
    await client.post("/api/v1/teams/", json={"id": "platform"})  # 409 after the first example: no matter
    method, template = route
    path = "/api/v1/teams/" + template.lstrip("/").replace("{id}", _sent(team_id)).replace("{user}", _sent(user))
    headers = {"content-type": "application/json", **({"x-openwebui-user-id": USER_A} if identified else {})}
    check(await client.request(method, path, content=encoded(body, True), headers=headers))


ENDPOINTS = ["/v1/models", "/healthz", "/readyz", "/metrics", CHAT, "/api/v1/memories", "/api/v1/memories/nope",
             "/api/v1/memories/search", "/api/v1/erase", "/api/v1/export", "/memories/", "/memories/app.js"]
odd_file_paths = st.one_of(
    odd_values.map(lambda v: "/memories/" + _sent(v)),
    st.integers(1, 2000).map(lambda n: "/memories/" + "a" * n),
    st.integers(1, 500).map(lambda n: "/memories/" + "a/" * n),
    st.sampled_from(["/memories/%2e%2e/%2e%2e/pyproject.toml", "/memories/..%2f..%2fREADME.md", "/memories/%00",
                     "/memories/app.js%00.html", "/memories//etc/passwd", "/memories/%ff"]))
deep_json = st.tuples(st.integers(1, 100_000), st.sampled_from([("[", "]"), ('{"a":', "}")])).map(
    lambda d: (d[1][0] * d[0] + ("1" if d[1][0] == '{"a":' else "") + d[1][1] * d[0]).encode())


@given(method=st.sampled_from(["GET", "HEAD", "POST", "PATCH", "DELETE"]),
       path=st.sampled_from(ENDPOINTS) | odd_file_paths,
       raw=deep_json | st.binary(max_size=100) | json_values.map(lambda v: encoded(v, True)),
       identified=st.booleans())
@settings(max_examples=3200, **FUZZ)
async def test_fuzzed_hostile_shapes_on_every_endpoint(client: Any, outside: Any, method: str, path: str,
                                                       raw: bytes, identified: bool) -> None:
    """Issue 25's shapes: JSON nested up to 100,000 deep, NUL and over-long file paths, HEAD everywhere
    (they gave 500s: a RecursionError, "embedded null byte", a file name too long)."""
    outside.routes["chat"].mock(side_effect=upstream_reply)
    headers = {"content-type": "application/json", **({"x-openwebui-user-id": USER_A} if identified else {})}
    response = await client.request(method, httpx.URL(path), content=raw, headers=headers)
    if method == "HEAD":
        assert response.status_code < 500 and response.content == b""
    else:
        check(response)
