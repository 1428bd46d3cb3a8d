"""Requests shaped to break the HTTP layer itself (issue 25): deep JSON, odd static paths, HEAD.

Each answer is a 4xx in OpenAI's error format (or the resource itself, for HEAD), never a 500, served by a
real uvicorn so that raw paths reach the app as a client sends them.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import CHAT, PROXY_KEY, USER_A, chat_body, user_headers

DEEP = 50_000


def nested(depth: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


@pytest.fixture
async def proxy(live_url: str) -> Any:
    async with httpx.AsyncClient(base_url=live_url, timeout=20,
                                 headers={"authorization": f"Bearer {PROXY_KEY}"}) as client:
        yield client


def is_openai_error(response: httpx.Response) -> bool:
    body = response.json()
    return set(body) == {"error"} and bool(body["error"]["message"])


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/api/v1/memories"), ("PATCH", "/api/v1/memories/00000000-0000-0000-0000-000000000000"),
    ("POST", CHAT), ("POST", "/api/v1/erase"),
])
@pytest.mark.parametrize("body", [nested(DEEP), b'{"content": ' + nested(DEEP) + b"}",
                                  b'{"a":' * DEEP + b"1" + b"}" * DEEP])
async def test_deeply_nested_json_is_a_400_not_a_500(proxy: Any, method: str, path: str, body: bytes) -> None:
    response = await proxy.request(method, path, content=body, headers={**user_headers(USER_A),
                                                                         "content-type": "application/json"})
    assert response.status_code == 400, (response.status_code, response.text[:300])
    assert is_openai_error(response)


async def test_moderate_nesting_still_reaches_the_upstream(proxy: Any, outside: Any) -> None:
    body = chat_body("hi", tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "array",
                                                                                    "items": [[[[1]]]]}}}}}}}])
    response = await proxy.post(CHAT, json=body, headers=user_headers(USER_A))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", ["/memories/%00", "/memories/a%00b.js", "/memories/" + "a" * 300,
                                  "/memories/" + "a/" * 400, "/memories/%2e%2e/%2e%2e/etc/passwd",
                                  "/memories/..%2f..%2fpyproject.toml", "/memories/%ff%fe"])
async def test_odd_static_paths_are_a_404_not_a_500(proxy: Any, path: str) -> None:
    response = await proxy.get(httpx.URL(path))
    assert response.status_code in (400, 404), (response.status_code, response.text[:300])
    assert "[project]" not in response.text and "root:" not in response.text


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/v1/models", "/memories/",
                                  "/memories/app.js", "/api/v1/memories"])
async def test_head_answers_as_get_without_a_body(proxy: Any, path: str) -> None:
    get = await proxy.get(path, headers=user_headers(USER_A))
    head = await proxy.head(path, headers=user_headers(USER_A))
    assert head.status_code == get.status_code, (path, head.status_code, get.status_code)
    assert head.content == b""
    assert head.headers.get("content-type") == get.headers.get("content-type")
