"""What the measurements send and read: probe turns, what the fake upstream saw, the memory API, seeding.

A probe is a non-streamed chat turn carrying a unique ``"probe"`` field, which the proxy forwards to the
fake upstream untouched; the fake records which memory markers (``mk`` + ten letters, one per memory
written by a measurement) were in that request's system prompt, i.e. injected (``GET /seen``).
"""

from __future__ import annotations

import asyncio
import random
import re
import string
import time
import uuid
from dataclasses import dataclass, field

import httpx

from memory_proxy.testing.fake_upstream import embed

from ..servers import PROXY_KEY
from .parts import Node

AUTH = {"Authorization": f"Bearer {PROXY_KEY}"}
PROBE_TEXT = "What is my code word, and what else do you know about me?"
FILLERS = 6  # memories seeded per user: above the cold-start threshold (5), so replicas hold an index of them
EMBED_DIMS, EMBED_MODEL = 1024, "fake-embed"  # as the fake embeds for the nodes (cluster.py: EMBEDDING_MODEL)
TEAMS = "/api/v1/teams"


def marker() -> str:
    return "mk" + "".join(random.choices(string.ascii_lowercase, k=10))


def user_headers(user: str) -> dict[str, str]:
    return {**AUTH, "x-openwebui-user-id": user}


@dataclass
class Turn:
    node: str                 # the replica's URL, or the replica nginx chose (X-Upstream-Addr)
    probe: str
    start: float              # time.monotonic() just before sending
    end: float = 0.0
    status: int | None = None
    error: str | None = None
    markers: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None


async def probe(client: httpx.AsyncClient, base: str, user: str, text: str = PROBE_TEXT) -> Turn:
    """One non-streamed chat turn of ``user`` to ``base`` (a replica, or nginx)."""
    turn = Turn(base, uuid.uuid4().hex, time.monotonic())
    body = {"model": "fake-model", "probe": turn.probe, "messages": [{"role": "user", "content": text}]}
    try:
        reply = await client.post(base + "/v1/chat/completions", json=body, headers=user_headers(user))
        turn.status = reply.status_code
        turn.node = reply.headers.get("x-upstream-addr", base)
    except httpx.HTTPError as exc:
        turn.error = type(exc).__name__
    turn.end = time.monotonic()
    return turn


async def seen(client: httpx.AsyncClient, fake_url: str, turns: list[Turn]) -> None:
    """Fill in each turn's markers: what the fake upstream saw in its system prompt."""
    for i in range(0, len(turns), 2000):
        batch = turns[i:i + 2000]
        answer = (await client.post(fake_url + "/seen", json={"probes": [t.probe for t in batch]})).json()["seen"]
        for t in batch:
            t.markers = answer.get(t.probe) or []


async def create_memory(client: httpx.AsyncClient, node: Node, user: str, content: str, pinned: bool = True) -> str:
    reply = await client.post(node.url + "/api/v1/memories", params={"user": user}, headers=AUTH,
                              json={"content": content, "pinned": pinned})
    assert reply.status_code in (200, 201), reply.text
    return str(reply.json()["id"])


async def delete_memory(client: httpx.AsyncClient, node: Node, user: str, memory_id: str, erase: bool) -> None:
    """DELETE one memory, or erase the user (POST /api/v1/erase), through ``node``."""
    if erase:
        reply = await client.post(node.url + "/api/v1/erase", params={"user": user, "confirm": user}, headers=AUTH)
    else:
        reply = await client.delete(node.url + f"/api/v1/memories/{memory_id}", params={"user": user}, headers=AUTH)
    assert reply.status_code in (200, 204), reply.text


async def create_team(client: httpx.AsyncClient, node: Node, team_id: str, members: list[str]) -> None:
    """A team (named as its id) with ``members``, made through ``node``'s API as an operator (the proxy key
    without a user identity)."""
    reply = await client.post(node.url + TEAMS + "/", headers=AUTH, json={"id": team_id})
    assert reply.status_code == 201, reply.text
    for user in members:
        reply = await client.put(node.url + f"{TEAMS}/{team_id}/members/{user}", headers=AUTH, json={"role": "member"})
        assert reply.status_code == 200, reply.text


async def leave_team(client: httpx.AsyncClient, node: Node, team_id: str, user: str | None) -> None:
    """DELETE the member ``user`` from the team, or with None the whole team, through ``node``."""
    path = f"{TEAMS}/{team_id}" + (f"/members/{user}" if user is not None else "")
    reply = await client.delete(node.url + path, headers=AUTH)
    assert reply.status_code == 200, reply.text


async def index_hits(client: httpx.AsyncClient, node: Node) -> float:
    text = (await client.get(node.url + "/metrics", headers=AUTH)).text  # /metrics asks for a key
    found = re.search(r'^memory_proxy_index_lookups_total\{result="hit"\} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def warm(client: httpx.AsyncClient, nodes: list[Node], user: str, tries: int = 40, lookups: int = 1) -> bool:
    """Probe each node until it searched ``user`` in its in-process indexes (its hit counter moved by
    ``lookups``: 1 + the user's teams for a turn searched wholly in them), so that what follows tests those
    indexes being kept true; False if some node never did. One user at a time: the counter is the node's."""
    async def one(node: Node) -> bool:
        for _ in range(tries):
            before = await index_hits(client, node)
            await probe(client, node.url, user)
            if await index_hits(client, node) - before >= lookups:
                return True
        return False
    return all(await asyncio.gather(*(one(n) for n in nodes)))


async def seed(direct_url: str, users: list[str], count: int = FILLERS, relevant_to: str | None = None) -> None:
    """Store ``count`` memories for each user straight into the database, embedded as the fake embeds;
    with ``relevant_to``, five of them share its words (as benchmarks.relay's users)."""
    from memory_proxy.store.database import make_pool
    from memory_proxy.store.memories import add_or_find_memory

    texts = [f"Filler fact {i}: enjoys hobby {i % 97} in city {i % 89} with pet {i % 83}." for i in range(count)]
    if relevant_to:
        texts[:5] = [f"{relevant_to} It was Rust, note {i}." for i in range(5)]
    vectors = [embed(t, EMBED_DIMS) for t in texts]
    async with make_pool(direct_url, 4) as pool:
        async def one(user: str) -> None:
            async with pool.connection() as conn:
                for text, vector in zip(texts, vectors, strict=True):
                    await add_or_find_memory(conn, user_id=user, content=text, embedding=vector, model=EMBED_MODEL)
        await asyncio.gather(*(one(u) for u in users))


async def create_team_memory(client: httpx.AsyncClient, node: Node, team_id: str, content: str) -> str:
    """One memory of the team, written through ``node``'s API as an operator (``POST /api/v1/teams/{id}/memories``):
    held by the team's principal ``team:<id>``. Returns its id."""
    reply = await client.post(node.url + f"{TEAMS}/{team_id}/memories", headers=AUTH,
                              json={"content": content, "memory_type": "project"})
    assert reply.status_code in (200, 201), reply.text
    return str(reply.json()["id"])
