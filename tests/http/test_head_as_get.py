"""HEAD wherever GET is (memory_proxy/http/head_as_get.py), through a real uvicorn: the GET's status and headers, no body."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.data import USER_A
from tests.support.proxy import user_headers


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/metrics", "/v1/models", "/memories/",
                                  "/memories/app.js", "/api/v1/memories"])
async def test_head_answers_as_get_without_a_body(live_client: Any, path: str) -> None:
    get = await live_client.get(path, headers=user_headers(USER_A))
    head = await live_client.head(path, headers=user_headers(USER_A))
    assert head.status_code == get.status_code, (path, head.status_code, get.status_code)
    assert head.content == b""
    assert head.headers.get("content-type") == get.headers.get("content-type")
