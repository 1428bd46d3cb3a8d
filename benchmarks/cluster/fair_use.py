"""Fair use across replicas (issue 52, docs/LIMITS.md): do a user's limits hold when their requests are spread
over every replica? One PostgreSQL call admits each request (store/limits.py), so they should hold exactly.

- requests a minute: an operator sets one user's `rpm` through replica-0 (the others read it within
  limiter.REFRESH_S); then 10 clients per replica send that user's non-streamed turns back to back, 3 × rpm in
  all (a refusal is answered after up to a second: limiter.PACE_S). The most admitted (200) in any 60 s against
  the limit;
- requests a minute, far: the same for a limit above 8 × PostgreSQL's max_connections (`rpm` + 300 sent), which
  each replica admits mostly on its reserves (limits/reserve.py, migration 0021) until the user comes near it;
- requests at once: another user's `concurrent`; 5 × that many streamed turns started at once, spread over the
  replicas, each held by the fake for its 6 chunks; the most whose streams overlapped (from the first byte to
  the last, as the client saw them: inside the server's admission) against the limit, per replica too.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from memory_proxy.limits.limiter import REFRESH_S

from .client import AUTH, user_headers
from .cluster import Cluster

RPM, CONCURRENT = 300, 6
CLIENTS_PER_REPLICA = 10


async def _set(http: httpx.AsyncClient, cl: Cluster, user: str, **values: int) -> None:
    reply = await http.put(cl.replicas[0].url + "/api/v1/limits", json={"kind": "user", "subject": user, **values},
                           headers=AUTH)
    reply.raise_for_status()


async def per_minute(cl: Cluster, rpm: int = RPM, sending: int = 3 * RPM) -> dict[str, Any]:
    user, codes, admitted_at = f"fair-rpm-{rpm}-{int(time.time())}", {}, []
    async with httpx.AsyncClient(timeout=60) as http:
        await _set(http, cl, user, rpm=rpm)
        await asyncio.sleep(REFRESH_S + 1)  # every replica has read the operator's row
        sent = iter(range(sending))

        async def client(base: str) -> None:
            for i in sent:
                reply = await http.post(base + "/v1/chat/completions", headers=user_headers(user), json={
                    "model": "fake-model", "messages": [{"role": "user", "content": f"Request {i}."}]})
                codes[reply.status_code] = codes.get(reply.status_code, 0) + 1
                if reply.status_code == 200:
                    admitted_at.append(time.monotonic())

        began = time.monotonic()
        await asyncio.gather(*(client(n.url) for n in cl.replicas for _ in range(CLIENTS_PER_REPLICA)))
    most = max((sum(1 for t in admitted_at if start <= t < start + 60) for start in admitted_at), default=0)
    return {"limit": rpm, "sent": sending, "admitted": codes.get(200, 0), "most_in_60s": most,
            "refused": codes.get(429, 0), "other": {k: v for k, v in codes.items() if k not in (200, 429)},
            "seconds": round(time.monotonic() - began, 1), "off_by": round((most - rpm) / rpm, 4)}


async def at_once(cl: Cluster) -> dict[str, Any]:
    user = f"fair-conc-{int(time.time())}"
    spans: list[tuple[float, float, str]] = []
    codes: dict[int, int] = {}
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=200)) as http:
        await _set(http, cl, user, concurrent=CONCURRENT)
        await asyncio.sleep(REFRESH_S + 1)

        async def stream(i: int) -> None:
            node = cl.replicas[i % len(cl.replicas)]
            body = {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": f"Stream {i}."}]}
            async with http.stream("POST", node.url + "/v1/chat/completions", json=body,
                                   headers=user_headers(user)) as reply:
                first = None
                async for _ in reply.aiter_bytes():
                    first = first or time.monotonic()
                codes[reply.status_code] = codes.get(reply.status_code, 0) + 1
                if reply.status_code == 200 and first is not None:
                    spans.append((first, time.monotonic(), node.name))

        await asyncio.gather(*(stream(i) for i in range(5 * CONCURRENT)))
    return {"limit": CONCURRENT, "sent": 5 * CONCURRENT, "admitted": codes.get(200, 0), "refused": codes.get(429, 0),
            "most_at_once": _most_at_once(spans),
            "most_at_once_per_replica": {n.name: _most_at_once([s for s in spans if s[2] == n.name]) for n in cl.replicas}}


def _most_at_once(spans: list[tuple[float, float, str]]) -> int:
    events = sorted([(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans])
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def fair_use(cl: Cluster) -> dict[str, Any]:
    [(connections,)] = cl.rows("SELECT current_setting('max_connections')::int")
    far = 8 * int(connections) + 300
    return {"per_minute": asyncio.run(per_minute(cl)), "per_minute_far": asyncio.run(per_minute(cl, far, far + 300)),
            "at_once": asyncio.run(at_once(cl))}
