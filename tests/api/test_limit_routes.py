"""api/limit_routes.py: operators set, list and remove limits and read everyone's use; a user reads only their
own; a key is named by its fingerprint, never by itself; a change is in force at once."""

from __future__ import annotations

from typing import Any

from memory_proxy.limits.limiter import key_id
from tests.support.data import PROXY_KEY, USER_A, USER_B
from tests.support.proxy import chat_body, user_headers


async def test_an_operator_sets_a_limit_that_holds_at_once_and_removes_it(proxy: Any) -> None:
    client = await proxy(LIMITS_PER_MODEL="tpm=1000000")
    put = await client.put("/api/v1/limits", json={"kind": "user", "subject": USER_A, "rpm": 1})
    assert put.status_code == 200 and put.json()["rpm"] == 1
    listed = (await client.get("/api/v1/limits")).json()
    assert listed["limits"] == [{"kind": "user", "subject": USER_A, "rpm": 1, "tpm": None, "concurrent": None,
                                 "daily_tokens": None}]
    assert listed["defaults"]["model"] == {"tpm": 1000000} and listed["defaults"]["user"] == {}
    codes = [(await client.post("/v1/chat/completions", json=chat_body("hi"), headers=user_headers(USER_A))).status_code
             for _ in range(2)]
    assert codes == [200, 429]
    removed = await client.delete("/api/v1/limits", params={"kind": "user", "subject": USER_A})
    assert removed.status_code == 200
    assert (await client.post("/v1/chat/completions", json=chat_body("hi"),
                              headers=user_headers(USER_A))).status_code == 200
    assert (await client.delete("/api/v1/limits", params={"kind": "user", "subject": USER_A})).status_code == 404


async def test_a_key_is_set_by_its_fingerprint_and_never_by_the_key(proxy: Any) -> None:
    client = await proxy()
    refused = await client.put("/api/v1/limits", json={"kind": "key", "subject": PROXY_KEY, "rpm": 5})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_subject"
    assert (await client.put("/api/v1/limits", json={"kind": "key", "subject": key_id(PROXY_KEY),
                                                    "rpm": 5})).status_code == 200
    for bad in ({"kind": "team", "subject": "x", "rpm": 1}, {"kind": "user", "subject": "u", "rpm": 0},
                {"kind": "model", "subject": "m\x00x", "tpm": 5}, {"kind": "user", "subject": "u", "rpm": True}):
        assert (await client.put("/api/v1/limits", json=bad)).status_code == 400, bad


async def test_a_user_reads_their_own_use_only_and_cannot_set_limits(proxy: Any) -> None:
    client = await proxy(LIMITS_PER_USER="rpm=100")
    for user in (USER_A, USER_B, USER_B):
        assert (await client.post("/v1/chat/completions", json=chat_body("hi"),
                                  headers=user_headers(user))).status_code == 200
    everyone = (await client.get("/api/v1/usage")).json()["usage"]
    assert [(u["subject"], u["requests_today"], u["tokens_today"]) for u in everyone] == [(USER_B, 2, 22),
                                                                                           (USER_A, 1, 11)]
    own = (await client.get("/api/v1/usage", params={"kind": "user", "subject": USER_B},
                            headers=user_headers(USER_A))).json()["usage"]
    assert [u["subject"] for u in own] == [USER_A]
    forbidden = await client.put("/api/v1/limits", json={"kind": "user", "subject": USER_A},
                                 headers=user_headers(USER_A))
    assert forbidden.status_code == 403


async def test_erasing_a_user_erases_the_record_of_their_use(proxy: Any) -> None:
    client = await proxy(LIMITS_PER_USER="rpm=100")
    assert (await client.post("/v1/chat/completions", json=chat_body("hi"),
                              headers=user_headers(USER_A))).status_code == 200
    assert [u["subject"] for u in (await client.get("/api/v1/usage")).json()["usage"]] == [USER_A]
    erased = await client.post("/api/v1/erase", params={"user": USER_A, "confirm": USER_A})
    assert erased.status_code == 200 and erased.json()["erased"]["usage"] == 2  # its minute and its day
    assert (await client.get("/api/v1/usage")).json()["usage"] == []
