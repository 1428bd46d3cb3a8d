"""The management API (/api/v1, memory_proxy/api/memory_routes.py): every route, its errors, and who may reach what.

Authorization is tested across every route and every kind of credential: user B never reads, edits,
pins, deletes, restores or sees the history of A's memory (404, as for an id that does not exist).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import jwt
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from memory_proxy.formation.memory_text import MAX_MEMORY_BYTES
from memory_proxy.job_payload import FormationPayload
from memory_proxy.settings import load_settings
from memory_proxy.store import jobs, keys, memories
from memory_proxy.store.database import make_pool
from tests.support.data import API, BUN, PROXY_KEY, RUNTIME_Q, USER_A, USER_B
from tests.support.fakes import vector_for
from tests.support.proxy import add_memory, chat_body, make_env, user_headers


def admin(user: str) -> dict[str, str]:
    return {"user": user}


async def create(client: Any, user: str, content: str, **extra: Any) -> dict[str, Any]:
    response = await client.post(f"{API}/memories", params=admin(user), json={"content": content, **extra})
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def error_code(response: Any) -> str:
    return response.json()["error"]["code"]  # type: ignore[no-any-return]


# ---------------------------------------------------------------- the routes

async def test_create_list_filter_and_paginate(client: Any) -> None:
    tea = await create(client, USER_A, "User prefers green tea over coffee.", memory_type="preference")
    await create(client, USER_A, "User lives in Berlin.", memory_type="identity", pinned=True)
    for i in range(5):
        await create(client, USER_A, f"Project note number {i}.", memory_type="project")
    assert tea["memory_type"] == "preference" and tea["active"] and not tea["pinned"]

    everything = (await client.get(f"{API}/memories", params=admin(USER_A))).json()
    assert len(everything["data"]) == 7 and everything["next_cursor"] is None
    assert everything["data"][0]["content"] == "Project note number 4."  # newest first

    by_words = (await client.get(f"{API}/memories", params={**admin(USER_A), "q": "tea"})).json()["data"]
    assert [m["id"] for m in by_words] == [tea["id"]]
    substring = (await client.get(f"{API}/memories", params={**admin(USER_A), "q": "Berl"})).json()["data"]
    assert [m["content"] for m in substring] == ["User lives in Berlin."]
    typed = (await client.get(f"{API}/memories", params={**admin(USER_A), "type": "project"})).json()["data"]
    assert len(typed) == 5
    pinned = (await client.get(f"{API}/memories", params={**admin(USER_A), "pinned": "true"})).json()["data"]
    assert [m["content"] for m in pinned] == ["User lives in Berlin."]

    seen, cursor = [], None
    while True:
        params = {**admin(USER_A), "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"{API}/memories", params=params)).json()
        seen += [m["id"] for m in page["data"]]
        if not (cursor := page["next_cursor"]):
            break
    assert seen == [m["id"] for m in everything["data"]]


async def test_create_twice_returns_the_same_memory_and_secrets_are_redacted(client: Any) -> None:
    first = await create(client, USER_A, "User lives in Berlin.")
    again = await client.post(f"{API}/memories", params=admin(USER_A), json={"content": "User lives in Berlin."})
    assert again.status_code == 200 and again.json()["id"] == first["id"]
    secret = await create(client, USER_A, "My key is sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD")
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz" not in secret["content"] and "REDACTED" in secret["content"]


async def test_edit_reembeds_keeps_history_and_restores(client: Any, outside: Any) -> None:
    old = await create(client, USER_A, "User drinks coffee.", pinned=True)
    embedded = outside.routes["embeddings"].call_count
    response = await client.patch(f"{API}/memories/{old['id']}", params=admin(USER_A),
                                  json={"content": "User drinks green tea.", "reason": "switched"})
    assert response.status_code == 200, response.text
    new = response.json()
    assert new["id"] != old["id"] and new["content"] == "User drinks green tea." and new["pinned"]
    assert outside.routes["embeddings"].call_count == embedded + 1
    assert "green tea" in outside.routes["embeddings"].calls.last.request.content.decode()

    retyped = (await client.patch(f"{API}/memories/{new['id']}", params=admin(USER_A),
                                  json={"memory_type": "identity"})).json()
    assert retyped["memory_type"] == "identity" and outside.routes["embeddings"].call_count == embedded + 1

    history = (await client.get(f"{API}/memories/{retyped['id']}/history", params=admin(USER_A))).json()
    assert [v["content"] for v in history["versions"]] == ["User drinks coffee.", "User drinks green tea.",
                                                          "User drinks green tea."]
    assert [(u["action"], u["reason"]) for u in history["updates"]] == [
        ("pin", "pinned by the user"), ("edit", "switched"), ("edit", "edited by the user")]
    assert all(u["created_at"] for u in history["updates"])
    assert (await client.get(f"{API}/memories/{old['id']}", params=admin(USER_A))).json()["active"] is False

    restored = await client.post(f"{API}/memories/{old['id']}/restore", params=admin(USER_A))
    assert restored.status_code == 200, restored.text
    assert restored.json()["memory"]["active"] and restored.json()["replaced"] == new["id"]
    again = await client.post(f"{API}/memories/{old['id']}/restore", params=admin(USER_A))
    assert again.status_code == 409


async def test_pin_unpin_delete_and_restore_a_deleted_memory(client: Any) -> None:
    memory = await create(client, USER_A, "User has a dog named Rex.")
    pinned = await client.post(f"{API}/memories/{memory['id']}/pin", params=admin(USER_A))
    assert pinned.status_code == 200 and pinned.json()["pinned"] is True
    unpinned = await client.post(f"{API}/memories/{memory['id']}/unpin", params=admin(USER_A))
    assert unpinned.json()["pinned"] is False
    deleted = await client.delete(f"{API}/memories/{memory['id']}", params={**admin(USER_A), "reason": "wrong"})
    assert deleted.status_code == 200 and deleted.json() == {"id": memory["id"], "deleted": True}
    assert (await client.get(f"{API}/memories", params=admin(USER_A))).json()["data"] == []
    assert (await client.delete(f"{API}/memories/{memory['id']}", params=admin(USER_A))).status_code == 404
    history = (await client.get(f"{API}/memories/{memory['id']}/history", params=admin(USER_A))).json()
    assert [(u["action"], u["reason"]) for u in history["updates"]] == [
        ("pin", "pinned by the user"), ("unpin", "unpinned by the user"), ("delete", "wrong")]
    assert (await client.post(f"{API}/memories/{memory['id']}/restore", params=admin(USER_A))).status_code == 200
    assert len((await client.get(f"{API}/memories", params=admin(USER_A))).json()["data"]) == 1


async def test_search_ranks_as_injection_with_scores(client: Any, db: Any) -> None:
    bun = await add_memory(db, USER_A, BUN)
    await add_memory(db, USER_A, "User lives in Berlin.")
    response = await client.get(f"{API}/memories/search", params={**admin(USER_A), "q": RUNTIME_Q})
    assert response.status_code == 200, response.text
    found = response.json()["data"]
    assert [m["id"] for m in found] == [bun] and 0 < found[0]["score"] <= 1


async def test_bad_input_is_a_400_in_the_openai_shape(client: Any) -> None:
    memory = await create(client, USER_A, "User lives in Berlin.")
    cases = [
        client.post(f"{API}/memories", params=admin(USER_A), json={"content": "  "}),
        client.post(f"{API}/memories", params=admin(USER_A), json={"content": "x" * (MAX_MEMORY_BYTES + 1)}),
        client.post(f"{API}/memories", params=admin(USER_A), json={"content": "ok", "memory_type": "gossip"}),
        client.post(f"{API}/memories", params=admin(USER_A), json={"text": "no content"}),
        client.post(f"{API}/memories", params=admin(USER_A), content=b"{not json"),
        client.patch(f"{API}/memories/{memory['id']}", params=admin(USER_A), json={"content": ""}),
        client.get(f"{API}/memories", params={**admin(USER_A), "cursor": "garbage!"}),
        client.get(f"{API}/memories", params={**admin(USER_A), "type": "gossip"}),
        client.get(f"{API}/memories", params={**admin(USER_A), "limit": 0}),
        client.get(f"{API}/memories/search", params={**admin(USER_A), "q": " "}),
        client.get(f"{API}/export", params={**admin(USER_A), "format": "pdf"}),
        client.get(f"{API}/memories"),  # an admin key names no user
    ]
    for pending in cases:
        response = await pending
        assert response.status_code == 400, (response.request.url, response.text)
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    missing = await client.get(f"{API}/memories/does-not-exist", params=admin(USER_A))
    assert missing.status_code == 404 and error_code(missing) == "memory_not_found"


async def test_no_or_wrong_key_is_a_401_on_every_route(client: Any) -> None:
    memory = await create(client, USER_A, "User lives in Berlin.")
    for headers in ({"authorization": ""}, {"authorization": "Bearer wrong"},
                    {"authorization": "Bearer mpk_000000000000_nope"}):
        for method, path in _routes(memory["id"]):
            response = await client.request(method, path, params={**admin(USER_A), "q": "x"}, headers=headers,
                                            json={})
            assert response.status_code == 401, (method, path, response.text)


def _routes(memory_id: str) -> list[tuple[str, str]]:
    one = f"{API}/memories/{memory_id}"
    return [("GET", f"{API}/memories"), ("GET", f"{API}/memories/search"), ("GET", one),
            ("POST", f"{API}/memories"), ("PATCH", one), ("POST", f"{one}/pin"), ("POST", f"{one}/unpin"),
            ("DELETE", one), ("GET", f"{one}/history"), ("POST", f"{one}/restore"), ("GET", f"{API}/export"),
            ("POST", f"{API}/erase")]


async def test_openapi_schema_is_published(client: Any) -> None:
    schema = (await client.get(f"{API}/schema/openapi.json")).json()
    assert {"/api/v1/memories", "/api/v1/memories/{memory_id}/history", "/api/v1/erase"} <= set(schema["paths"])


# ---------------------------------------------------------------- authorization

@pytest.fixture
async def user_keys(database_url: str) -> dict[str, str]:
    """Per-user keys for A and B and an admin key, created through the app's own pool (its role)."""
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        return {"a": (await keys.create_key(conn, user_id=USER_A, label="a"))[1],
                "b": (await keys.create_key(conn, user_id=USER_B, label="b"))[1],
                "admin": (await keys.create_key(conn, user_id=None, label="ops"))[1]}


async def test_key_store_as_the_app_role(database_url: str) -> None:
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        key_id, secret = await keys.create_key(conn, user_id=USER_A, label="laptop")
        admin_id, admin_secret = await keys.create_key(conn, user_id=None, label="ops")
        assert await keys.key_owner(conn, secret) == (False, USER_A)
        assert await keys.key_owner(conn, admin_secret) == (True, None)
        assert await keys.key_owner(conn, secret[:-1] + ("A" if secret[-1] != "A" else "B")) is None
        assert await keys.key_owner(conn, "not-a-key") is None
        listed = await keys.list_keys(conn)
        assert {k["id"] for k in listed} == {key_id, admin_id} and secret not in str(listed)
        assert await keys.revoke_key(conn, key_id) and not await keys.revoke_key(conn, key_id)
        assert await keys.key_owner(conn, secret) is None
        stored = await (await conn.execute("SELECT key_hash::text FROM api_keys")).fetchall()
        assert secret not in str(stored)


async def test_user_b_reaches_none_of_a_memories_by_any_route(client: Any, user_keys: dict[str, str]) -> None:
    a_memory = await create(client, USER_A, "User is allergic to peanuts.")
    await client.post(f"{API}/memories/{a_memory['id']}/pin", params=admin(USER_A))
    as_b = [  # every way of being user B
        ({"authorization": f"Bearer {user_keys['b']}"}, {}),
        ({"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_B)}, {}),
        ({"authorization": f"Bearer {PROXY_KEY}"}, admin(USER_B)),
        ({"authorization": f"Bearer {user_keys['admin']}"}, admin(USER_B)),
    ]
    for headers, params in as_b:
        for method, path in _routes(a_memory["id"]):
            if "/memories/" not in path or path.endswith("/search"):
                continue
            response = await client.request(method, path, headers=headers, params=params,
                                            json={"content": "hijacked", "pinned": False})
            assert response.status_code == 404, (method, path, response.text)
            assert error_code(response) == "memory_not_found"
        listed = await client.get(f"{API}/memories", headers=headers, params=params)
        assert listed.json()["user"] == USER_B and listed.json()["data"] == []
        found = await client.get(f"{API}/memories/search", headers=headers, params={**params, "q": "peanuts"})
        assert found.json()["data"] == []
        exported = (await client.get(f"{API}/export", headers=headers, params=params)).json()
        assert exported["user_id"] == USER_B and exported["memories"] == exported["updates"] == []
    after = (await client.get(f"{API}/memories/{a_memory['id']}", params=admin(USER_A))).json()
    assert after["content"] == "User is allergic to peanuts." and after["pinned"] and after["active"]


async def test_user_credentials_cannot_name_another_user(client: Any, user_keys: dict[str, str]) -> None:
    await create(client, USER_A, "User is allergic to peanuts.")
    for headers in ({"authorization": f"Bearer {user_keys['b']}"},
                    {"authorization": f"Bearer {PROXY_KEY}", **user_headers(USER_B)}):
        response = await client.get(f"{API}/memories", headers=headers, params=admin(USER_A))
        assert response.status_code == 403 and error_code(response) == "other_user"
        erase = await client.post(f"{API}/erase", headers=headers, params={**admin(USER_A), "confirm": USER_A})
        assert erase.status_code == 403
    own = await client.get(f"{API}/memories", headers={"authorization": f"Bearer {user_keys['a']}"})
    assert [m["content"] for m in own.json()["data"]] == ["User is allergic to peanuts."]


async def test_revoked_key_is_refused(client: Any, database_url: str) -> None:
    async with make_pool(database_url, 1) as pool, pool.connection() as conn:
        key_id, secret = await keys.create_key(conn, user_id=USER_A, label="old")
        await keys.revoke_key(conn, key_id)
    response = await client.get(f"{API}/memories", headers={"authorization": f"Bearer {secret}"})
    assert response.status_code == 401


@pytest.fixture
async def jwt_client(database_url: str, tmp_path: Any, app_factory: Callable[[Any], Litestar]
                     ) -> AsyncIterator[AsyncTestClient[Litestar]]:
    settings = load_settings(make_env(database_url, tmp_path, USER_JWT_SECRET="s" * 40))
    async with AsyncTestClient(app_factory(settings), base_url="http://proxy.test") as test_client:
        test_client.headers["authorization"] = f"Bearer {PROXY_KEY}"
        yield test_client


async def test_signed_identity_acts_only_as_its_user(jwt_client: Any) -> None:
    token = jwt.encode({"sub": USER_A, "iss": "open-webui", "exp": int(time.time()) + 60}, "s" * 40,
                       algorithm="HS256")
    signed = {"x-openwebui-user-jwt": token}
    created = await jwt_client.post(f"{API}/memories", headers=signed, json={"content": "User lives in Berlin."})
    assert created.status_code == 201
    assert (await jwt_client.get(f"{API}/memories", headers=user_headers(USER_A))).status_code == 401
    assert (await jwt_client.get(f"{API}/memories", headers=signed, params=admin(USER_B))).status_code == 403
    assert len((await jwt_client.get(f"{API}/memories", headers=signed)).json()["data"]) == 1


# ---------------------------------------------------------------- export and erasure

async def test_export_then_erase_leaves_nothing_of_the_user(client: Any, db: Any) -> None:
    bun = await add_memory(db, USER_A, BUN)
    shared = await add_memory(db, USER_A, "Everyone on this server works at Acme.")
    assert await memories.link_vector(db, USER_B, shared)  # one vector, two users
    edited = (await client.patch(f"{API}/memories/{shared}", params=admin(USER_A),
                                 json={"content": "User works at Acme."})).json()
    await client.post(f"{API}/memories/{bun}/pin", params=admin(USER_A))
    await jobs.enqueue(db, user_id=USER_A, payload=FormationPayload("hi"), said_at=datetime.now(UTC))
    chat = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert bun in chat.headers["x-memory-proxy-memories"]

    exported = (await client.get(f"{API}/export", params=admin(USER_A))).json()
    assert {m["content"] for m in exported["memories"]} == {BUN, "User works at Acme."}
    assert [m["content"] for m in exported["history"]] == ["Everyone on this server works at Acme."]
    assert {u["action"] for u in exported["updates"]} == {"edit", "pin"}
    assert exported["jobs"] == 2  # the one above and the chat turn's formation job
    assert all(m["memory_type"] and m["stated_at"] and "pinned" in m for m in exported["memories"])
    markdown = await client.get(f"{API}/export", params={**admin(USER_A), "format": "markdown"})
    assert markdown.headers["content-type"] == "text/markdown; charset=utf-8"  # once, not twice
    assert f"# Memories of {USER_A}" in markdown.text and BUN in markdown.text and "**edit**" in markdown.text

    unconfirmed = await client.post(f"{API}/erase", params=admin(USER_A))
    assert unconfirmed.status_code == 400 and error_code(unconfirmed) == "confirmation_required"
    assert "3 memories, 2 history rows and 2 pending jobs" in unconfirmed.json()["error"]["message"]
    wrong = await client.post(f"{API}/erase", params={**admin(USER_A), "confirm": USER_B})
    assert wrong.status_code == 400
    erased = await client.post(f"{API}/erase", params={**admin(USER_A), "confirm": USER_A})
    assert erased.status_code == 200, erased.text
    assert erased.json()["erased"] == {"memories": 3, "updates": 2, "jobs": 2, "memberships": 0,
                                        "team_memories": 0, "team_proposals": 0, "usage": 0, "vectors": 2}

    for table in ("users_vectors", "memory_updates", "memory_jobs", "memory_terms", "memory_lexicon",
                  "memory_term_stats"):
        rows = await (await db.execute(f"SELECT count(*) FROM {table} WHERE user_id = %s", [USER_A])).fetchone()
        assert rows[0] == 0, table
    left = await (await db.execute("SELECT id FROM vectors")).fetchall()
    assert [r[0] for r in left] == [shared]  # still B's
    chat = await client.post("/v1/chat/completions", json=chat_body(RUNTIME_Q), headers=user_headers(USER_A))
    assert chat.headers["x-memory-proxy-memories"] == ""
    assert (await client.get(f"{API}/memories/search", params={**admin(USER_A), "q": RUNTIME_Q})).json()["data"] == []
    b_list = (await client.get(f"{API}/memories", params=admin(USER_B))).json()["data"]
    assert [m["id"] for m in b_list] == [shared]
    assert edited["id"] not in {r[0] for r in left}


async def test_the_apis_export_is_the_format_an_import_reads_back(client: Any, db: Any) -> None:
    from memory_proxy.api import export_format
    from memory_proxy.store import transfer

    bun = await add_memory(db, USER_A, BUN)
    await add_memory(db, USER_A, "User works at Acme.")
    await client.post(f"{API}/memories/{bun}/pin", params=admin(USER_A))
    document = (await client.get(f"{API}/export", params=admin(USER_A))).json()
    user, items = export_format.read(document)  # what `memory-proxy memories import` runs on the file
    assert user == USER_A and {m["content"] for m in items} == {BUN, "User works at Acme."}
    for item in items:
        await transfer.import_memory(db, user_id=USER_B, memory=item, embedding=vector_for(item["content"]),
                                     model="mistral-embed")
    imported = (await client.get(f"{API}/memories", params=admin(USER_B))).json()["data"]
    assert {(m["content"], m["pinned"], m["memory_type"]) for m in imported} == {
        (m["content"], m["pinned"], m["memory_type"]) for m in document["memories"]}
    assert ({datetime.fromisoformat(m["stated_at"]) for m in imported}
            == {datetime.fromisoformat(m["stated_at"]) for m in document["memories"]})


# ---------------------------------------------------------------- hardening

async def test_the_memory_page_forbids_inline_script_framing_and_sniffing(client: Any) -> None:
    for path in ("/memories/", "/memories/app.js", "/memories/style.css"):
        response = await client.get(path)
        assert response.status_code == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("odd", ["\x00", "\ud800", "a\x00b"])
async def test_nul_and_lone_surrogates_are_a_400_on_every_route_never_a_500(client: Any, odd: str) -> None:
    """They gave 500 on 8 routes (11 responses), and search said 503 "database_error". In a URL they come
    percent-encoded (a lone surrogate as the UTF-8 bytes it would have, which no valid text has)."""
    memory = await create(client, USER_A, "User likes tea.")
    sent = quote(odd.encode("utf-8", "surrogatepass"), safe="")
    routes = [("GET", f"/memories?q={sent}"), ("GET", f"/memories?cursor={sent}"),
              ("GET", f"/memories?type={sent}"), ("GET", f"/memories/search?q={sent}"),
              ("GET", f"/memories/{sent}"), ("PATCH", f"/memories/{sent}"),
              ("POST", f"/memories/{sent}/pin"), ("POST", f"/memories/{sent}/unpin"),
              ("DELETE", f"/memories/{sent}"), ("DELETE", f"/memories/{memory['id']}?reason={sent}"),
              ("GET", f"/memories/{sent}/history"), ("POST", f"/memories/{sent}/restore"),
              ("GET", f"/export?format={sent}"), ("POST", f"/erase?confirm={sent}")]
    for method, path in routes:
        separator = "&" if "?" in path else "?"
        response = await client.request(method, f"{API}{path}{separator}user={USER_A}",
                                        json={"content": "x"} if method == "PATCH" else None)
        assert response.status_code < 500, (method, path, response.status_code, response.text[:200])
        if "\x00" in odd:  # a URL's invalid UTF-8 (the surrogate) arrives as U+FFFD: harmless text
            assert error_code(response) in ("unstorable_text", "invalid_user_id"), (method, path, response.text)
    for user in (sent, f"user{sent}"):
        response = await client.get(f"{API}/memories?user={user}")
        assert response.status_code < 500 and ("\x00" not in odd or error_code(response) in ("invalid_user_id", "unstorable_text"))
    for content in (odd, f"User likes {odd} tea."):
        body = json.dumps({"content": content}).encode()  # ASCII-escaped: how a lone surrogate is sent at all
        response = await client.post(f"{API}/memories", params=admin(USER_A), content=body,
                                     headers={"content-type": "application/json"})
        # NUL reaches our check; a lone surrogate escape is refused by the JSON decoder itself
        assert response.status_code == 400 and ("\x00" not in odd or error_code(response) == "unstorable_text")
        body = json.dumps({"content": content, "reason": "why"}).encode()
        response = await client.patch(f"{API}/memories/{memory['id']}", params=admin(USER_A), content=body,
                                      headers={"content-type": "application/json"})
        assert response.status_code == 400 and ("\x00" not in odd or error_code(response) == "unstorable_text")


async def test_while_the_database_is_down_the_api_answers_503(client: Any, pg_server: Any,
                                                             database_url: str) -> None:
    """It answered 500 where docs/MANAGEMENT.md promises 503."""
    import psycopg

    memory = await create(client, USER_A, "User likes tea.")
    name = database_url.split("?")[0].rsplit("/", 1)[1]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin_conn:
        admin_conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
        admin_conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
    try:
        for method, path, params in [("GET", "/memories", {}), ("GET", f"/memories/{memory['id']}", {}),
                                     ("GET", "/export", {}), ("GET", "/memories/search", {"q": "tea"}),
                                     ("DELETE", f"/memories/{memory['id']}", {})]:
            response = await client.request(method, API + path, params={**admin(USER_A), **params})
            assert response.status_code == 503, (method, path, response.text[:200])
            assert response.json()["error"]["type"] == "server_error"
    finally:
        with psycopg.connect(pg_server.get_uri(), autocommit=True) as admin_conn:
            admin_conn.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")


async def test_create_at_the_memory_cap_is_a_409_and_a_delete_makes_room(proxy: Any) -> None:
    client = await proxy(MAX_MEMORIES_PER_USER="2")
    first = await create(client, USER_A, "User lives in Berlin.")
    await create(client, USER_A, "User drinks coffee.")
    full = await client.post(f"{API}/memories", params=admin(USER_A), json={"content": "User has a cat."})
    assert full.status_code == 409 and error_code(full) == "memory_cap"
    again = await client.post(f"{API}/memories", params=admin(USER_A), json={"content": "User drinks coffee."})
    assert again.status_code == 200  # the same text is no new memory
    await create(client, USER_B, "User has a cat.")  # the cap is per user
    assert (await client.delete(f"{API}/memories/{first['id']}", params=admin(USER_A))).status_code == 200
    await create(client, USER_A, "User has a cat.")


async def test_restore_needs_room_under_the_cap_so_delete_create_restore_never_exceeds_it(proxy: Any) -> None:
    client = await proxy(MAX_MEMORIES_PER_USER="2")
    first = await create(client, USER_A, "User lives in Berlin.")
    await create(client, USER_A, "User drinks coffee.")
    assert (await client.delete(f"{API}/memories/{first['id']}", params=admin(USER_A))).status_code == 200
    await create(client, USER_A, "User has a cat.")  # the deleted one's place
    restored = await client.post(f"{API}/memories/{first['id']}/restore", params=admin(USER_A))
    assert restored.status_code == 409 and error_code(restored) == "memory_cap"
    active = (await client.get(f"{API}/memories", params=admin(USER_A))).json()["data"]
    assert sorted(m["content"] for m in active) == ["User drinks coffee.", "User has a cat."]


async def test_restoring_an_edited_memory_swaps_versions_and_needs_no_room(proxy: Any) -> None:
    client = await proxy(MAX_MEMORIES_PER_USER="1")
    old = await create(client, USER_A, "User lives in Berlin.")
    edited = await client.patch(f"{API}/memories/{old['id']}", params=admin(USER_A),
                                json={"content": "User lives in Lyon."})
    assert edited.status_code == 200
    restored = await client.post(f"{API}/memories/{old['id']}/restore", params=admin(USER_A))
    assert restored.status_code == 200 and restored.json()["replaced"] == edited.json()["id"]


async def test_past_max_versions_an_edit_drops_the_oldest_version(proxy: Any, db: Any) -> None:
    client = await proxy(MAX_VERSIONS_PER_MEMORY="3")
    memory = await create(client, USER_A, "User drinks tea, cup 0.")
    ids = [memory["id"]]
    for cup in range(1, 4):
        edited = await client.patch(f"{API}/memories/{ids[-1]}", params=admin(USER_A),
                                    json={"content": f"User drinks tea, cup {cup}."})
        assert edited.status_code == 200, edited.text
        ids.append(edited.json()["id"])
    history = (await client.get(f"{API}/memories/{ids[-1]}/history", params=admin(USER_A))).json()
    assert [v["id"] for v in history["versions"]] == ids[1:]  # the 4th version dropped the 1st
    assert all(ids[0] not in (u["old_id"], u["new_id"]) for u in history["updates"])
    assert (await client.get(f"{API}/memories/{ids[0]}", params=admin(USER_A))).status_code == 404
    gone = await db.execute("SELECT count(*) FROM vectors WHERE id = %s", [ids[0]])
    assert (await gone.fetchone())[0] == 0  # its text is gone too, not only its link
