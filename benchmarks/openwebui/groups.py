"""OpenWebUI's groups mirrored as teams, against the real OpenWebUI 0.12.4: `python -m benchmarks.openwebui.groups`.

Starts a scripted upstream, memory-proxy (embedded PostgreSQL, a signed user JWT, `USER_GROUPS_HEADER`) and
OpenWebUI pointed at it, whose admin sets the connection header the proxy reads, as docs/TEAMS.md says:
`{"X-OpenWebUI-User-Group-Ids": "{{USER_GROUP_IDS}}"}`. Then, as OpenWebUI's admin: create two groups, join
both, chat (the proxy must hold both memberships); an operator writes a memory of the first group's team
through the proxy's API, and the next chat's request to the model holds it, marked as the team's; leave
that group, chat (only the other team is left, and the model no longer gets the team's memory), leave the
other, chat (none). Each check is printed; the exit status is 1 if one fails. About 2 minutes, most of it
OpenWebUI's start; its venv is made on first use (benchmarks/openwebui/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.formation_quality.scripted import ScriptedChat
from memory_proxy.app import create_app
from memory_proxy.settings import load_settings
from memory_proxy.testing.asgi import free_port, serving

from .stack import ensure_openwebui, log, openwebui_env, start_openwebui

PROXY_KEY = "groups-bench-" + secrets.token_urlsafe(16)
HEADER = "X-OpenWebUI-User-Group-Ids"
ADMIN = {"name": "Ada Admin", "email": "ada@example.test", "password": "groups-bench-pw-1"}
TEAM_FACT = "Team's staging database runs on port 5433."
QUESTION = "which port is the staging database on?"  # holds the fact's words: found whatever the embedder


async def memberships(app: Any, user_id: str) -> list[str]:
    async with app.state.services.pool.connection() as conn:
        cur = await conn.execute("SELECT team_id FROM team_members WHERE user_id = %s AND mirrored ORDER BY 1",
                                 [user_id])
        return [row[0] for row in await cur.fetchall()]


async def run(out: Path) -> list[tuple[str, bool, str]]:
    checks: list[tuple[str, bool, str]] = []
    async with contextlib.AsyncExitStack() as stack:
        await asyncio.to_thread(ensure_openwebui)
        upstream = ScriptedChat("scripted-model")
        upstream_url = await stack.enter_async_context(serving(upstream))
        jwt_secret = secrets.token_urlsafe(32)
        data_dir = Path(tempfile.mkdtemp(prefix="groups-bench-"))
        stack.callback(shutil.rmtree, data_dir, True)
        app = create_app(load_settings({
            "MEMORY_PROXY_DATA_DIR": str(data_dir / "proxy"), "PROXY_API_KEYS": PROXY_KEY,
            "UPSTREAM_BASE_URL": f"{upstream_url}/v1", "UPSTREAM_API_KEY": "unused", "EMBEDDING_PROVIDER": "local",
            "FORMATION_ENABLED": "false", "USER_JWT_SECRET": jwt_secret, "USER_GROUPS_HEADER": HEADER.lower()}))
        proxy_url = await stack.enter_async_context(serving(app))
        log("starting OpenWebUI (~30 s or more)")
        env = openwebui_env(free_port(), data_dir / "webui", f"{proxy_url}/v1", PROXY_KEY, jwt_secret,
                            "http://127.0.0.1:9/v1")  # no document is uploaded: the RAG embedder is never asked
        (data_dir / "webui").mkdir()
        webui_proc, webui_base = await start_openwebui(out, data_dir / "webui", env)
        stack.callback(webui_proc.stop)
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=webui_base, timeout=120))

        async def call(method: str, path: str, **kwargs: Any) -> Any:
            response = await http.request(method, path, **kwargs)
            if response.status_code >= 400:
                raise RuntimeError(f"OpenWebUI {method} {path}: {response.status_code} {response.text[:300]}")
            return response.json()

        admin = await call("POST", "/api/v1/auths/signup", json=ADMIN)  # the first user is the admin
        http.headers["Authorization"] = f"Bearer {admin['token']}"
        config = await call("GET", "/openai/config")
        configs = dict(config.get("OPENAI_API_CONFIGS") or {})
        configs["0"] = {**configs.get("0", {}), "enable": True, "headers": {HEADER: "{{USER_GROUP_IDS}}"}}
        await call("POST", "/openai/config/update", json={**config, "OPENAI_API_CONFIGS": configs})
        groups = [await call("POST", "/api/v1/groups/create", json={"name": name, "description": ""})
                  for name in ("Platform", "Billing")]
        for group in groups:
            await call("POST", f"/api/v1/groups/id/{group['id']}/users/add", json={"user_ids": [admin["id"]]})

        async def chat_then_memberships(content: str = "hello") -> list[str]:
            await call("POST", "/api/chat/completions", json={
                "model": "scripted-model", "stream": False, "messages": [{"role": "user", "content": content}]})
            return await memberships(app, admin["id"])

        def model_got_team_memory() -> bool:
            """Whether the model's last request held the team's memory, marked as the team's."""
            system = " ".join(str(m.get("content")) for m in upstream.requests[-1]["messages"] if m["role"] == "system")
            return TEAM_FACT in system and f'(team "{groups[0]["id"]}")' in system

        def check(what: str, seen: list[str], wanted: list[str]) -> None:
            checks.append((what, seen == wanted, f"proxy holds {seen}, OpenWebUI says {wanted}"))
            log(f"{'ok  ' if seen == wanted else 'FAIL'} {what}: {checks[-1][2]}")

        ids = sorted(g["id"] for g in groups)
        check("in both groups: a member of both teams", await chat_then_memberships(), ids)
        async with httpx.AsyncClient(base_url=proxy_url, headers={"Authorization": f"Bearer {PROXY_KEY}"}) as ops:
            written = await ops.post(f"/api/v1/teams/{groups[0]['id']}/memories", json={"content": TEAM_FACT})
            assert written.status_code == 201, written.text
        await chat_then_memberships(QUESTION)
        check("a team's memory reaches the member's chat, marked", [model_got_team_memory()], [True])
        await call("POST", f"/api/v1/groups/id/{groups[0]['id']}/users/remove", json={"user_ids": [admin["id"]]})
        check("removed from one: out of that team on the next turn", await chat_then_memberships(QUESTION),
              [groups[1]["id"]])
        check("removed from one: the team's memory no longer reaches the model", [model_got_team_memory()], [False])
        await call("POST", f"/api/v1/groups/id/{groups[1]['id']}/users/remove", json={"user_ids": [admin["id"]]})
        check("in no group: in no mirrored team", await chat_then_memberships(), [])
    return checks


def main() -> None:
    out = Path(tempfile.mkdtemp(prefix="groups-bench-logs-"))
    checks = asyncio.run(run(out))
    print(f"{sum(ok for _, ok, _ in checks)} / {len(checks)} checks passed (logs: {out})")
    sys.exit(0 if checks and all(ok for _, ok, _ in checks) else 1)


if __name__ == "__main__":
    main()
