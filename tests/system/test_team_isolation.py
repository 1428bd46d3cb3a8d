"""A team's memory reaches its current members and nobody else, on every path (issue 37's isolation count).

One team memory holding a marker; a member, whose paths must show it (else this test proves nothing), and
each adversary: a stranger, a member of another team, a member removed a moment ago, a caller naming the
team as their user id (header, and in a signed OpenWebUI token), a stranger sending the OpenWebUI groups
header on a proxy that does not read it, and a stranger's token beside a member's user header. For each,
every path that could show the memory is checked: the chat turn (what the upstream received, the reply and
its injected ids), the search tool's result, the team's API routes, the personal search, the export (JSON and
Markdown), the log lines of their requests, and /metrics. `CHECKS` is the count docs/TEAMS.md reports.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from structlog.testing import capture_logs

from memory_proxy.http.auth import USER_JWT_HEADER
from memory_proxy.settings import load_settings
from memory_proxy.store import teams
from memory_proxy.store.teams import Holder
from tests.support.data import CHAT, PROXY_KEY, RUNTIME_Q, USER_A, USER_B
from tests.support.fakes import JWT_SECRET, openwebui_token
from tests.support.proxy import add_memory, chat_body, fillers, system_text
from tests.support.tools import ASK, call, calling, script, tool_results

MARK = "Quokkatron"
TEAM_FACT = f"The team's JavaScript runtime for every project is {MARK}."  # found by RUNTIME_Q's words
STRANGER, OTHER, MEMBER = "user-c", "user-d", USER_A
ADVERSARIES = ["stranger", "other team", "removed", "team id as user", "TEAM id as user", "groups header unread",
               "token naming the team", "stranger's token, member's header"]
PATHS = ["chat", "tool", "team list", "team search", "personal search", "export", "export markdown", "logs",
         "metrics"]
CHECKS = len(ADVERSARIES) * len(PATHS)


async def _proxy(env: dict, app_factory: Any, **overrides: str) -> AsyncTestClient:
    client = AsyncTestClient(app_factory(load_settings({**env, **overrides})), base_url="http://proxy.test")
    await client.__aenter__()
    client.headers["authorization"] = f"Bearer {PROXY_KEY}"
    return client


def _identity(adversary: str) -> tuple[str, dict[str, str]]:
    """Whom the adversary's requests act for, and the identity headers they send."""
    return {
        "stranger": (STRANGER, {"x-openwebui-user-id": STRANGER}),
        "other team": (OTHER, {"x-openwebui-user-id": OTHER}),
        "removed": (USER_B, {"x-openwebui-user-id": USER_B}),
        "team id as user": ("", {"x-openwebui-user-id": Holder.team("platform").principal}),
        "TEAM id as user": ("", {"x-openwebui-user-id": "TEAM:platform"}),
        "groups header unread": (STRANGER, {"x-openwebui-user-id": STRANGER, "x-openwebui-user-group-ids": "platform"}),
        "token naming the team": ("", {USER_JWT_HEADER: openwebui_token(sub=Holder.team("platform").principal)}),
        "stranger's token, member's header": (STRANGER, {USER_JWT_HEADER: openwebui_token(sub=STRANGER),
                                                         "x-openwebui-user-id": MEMBER}),
    }[adversary]


async def _seen(client: AsyncTestClient, tools: AsyncTestClient, outside: Any, headers: dict[str, str]) -> dict[str, str]:
    """Every path's text for one caller (a refused request contributes its error body)."""
    seen: dict[str, str] = {}
    upstream = script(outside)
    reply = await client.post(CHAT, json=chat_body(RUNTIME_Q), headers=headers)
    seen["chat"] = reply.text + "".join(system_text(body) for body in upstream)
    upstream = script(outside, calling(call("search_memory", {"query": RUNTIME_Q})))
    tool = await tools.post(CHAT, json=chat_body(ASK), headers=headers)
    seen["tool"] = tool.text + "".join(r for body in upstream for r in tool_results(body))
    seen["team list"] = (await client.get("/api/v1/teams/platform/memories", headers=headers)).text
    seen["team search"] = (await client.get("/api/v1/teams/platform/memories/search", params={"q": RUNTIME_Q},
                                            headers=headers)).text
    seen["personal search"] = (await client.get("/api/v1/memories/search", params={"q": RUNTIME_Q},
                                                headers=headers)).text
    seen["export"] = (await client.get("/api/v1/export", headers=headers)).text
    seen["export markdown"] = (await client.get("/api/v1/export", params={"format": "markdown"}, headers=headers)).text
    return seen


@pytest.mark.parametrize("signed", [False, True])  # the JWT adversaries need a proxy that verifies tokens
async def test_a_teams_memory_reaches_its_members_only_on_every_path(env: dict, app_factory: Any, outside: Any,
                                                                     db: Any, signed: bool) -> None:
    await teams.create_team(db, "platform", "Platform")
    await teams.create_team(db, "billing", "Billing")
    for team, user in (("platform", MEMBER), ("platform", USER_B), ("billing", OTHER)):
        await teams.set_member(db, team, user)
    await add_memory(db, Holder.team("platform").principal, TEAM_FACT)
    for user in (MEMBER, USER_B, STRANGER, OTHER):
        await fillers(db, user)
    jwt = {"USER_JWT_SECRET": JWT_SECRET} if signed else {}
    client = await _proxy(env, app_factory, **jwt)
    tools = await _proxy(env, app_factory, MEMORY_TOOLS="search", **jwt)
    try:
        member = {"x-openwebui-user-id": MEMBER} if not signed else {USER_JWT_HEADER: openwebui_token(sub=MEMBER)}
        shown = await _seen(client, tools, outside, member)
        assert all(MARK in shown[path] for path in ("chat", "tool", "team list", "team search")), shown

        checked = 0
        for adversary in ADVERSARIES:
            if ("token" in adversary) != signed:
                continue
            if adversary == "removed":
                await teams.remove_member(db, "platform", USER_B)
            with capture_logs() as logs:
                seen = await _seen(client, tools, outside, _identity(adversary)[1])
            seen["logs"] = json.dumps(logs, default=str)
            seen["metrics"] = (await client.get("/metrics")).text
            leaked = [path for path in PATHS if MARK in seen[path]]
            assert leaked == [], f"{adversary}: {leaked}"
            checked += len(PATHS)
        assert checked == len(PATHS) * sum(("token" in a) == signed for a in ADVERSARIES)
    finally:
        for opened in (client, tools):
            await opened.__aexit__(None, None, None)


def test_the_count_docs_report() -> None:
    assert CHECKS == 72  # docs/TEAMS.md: "72 checks, 0 leaks"
