"""A user's teams mirrored from OpenWebUI's groups (TEAM_MIRROR, docs/TEAMS.md#teams-from-openwebuis-groups).

- `openwebui` (recommended): the proxy asks OpenWebUI itself, server to server with an admin's API key, for the
  user's groups (`GET {OPENWEBUI_URL}/api/v1/users/{id}/groups`), at most once every TEAM_MIRROR_REFRESH_SECONDS
  a user, in the background (a turn never waits for OpenWebUI), and mirrors them (store/teams.mirror_groups). A
  failed read changes nothing and is counted. Nothing a client sends decides a membership.
- `header`: the groups a request's USER_GROUPS_HEADER names, mirrored in the turn's own retrieval round trip
  (retrieval/retrieve.memories_for_turn). Unsigned: anyone holding a proxy key can name any group.
- `off`: teams come from operators only.
Either way the mirror only ever makes teams of its own (at most TEAM_MIRROR_MAX_TEAMS) and keeps the memberships
of those: an operator's team is never joined, whatever id a group has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx
from cachetools import TTLCache
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from ..observability import TEAM_MIRROR, log
from ..settings.team_mirror_settings import TeamMirrorSettings
from ..store import teams
from ..store.teams import MAX_MIRRORED_GROUPS, TEAM_ID
from .auth import header_value

READ_TIMEOUT_S = 5.0  # one read of a user's groups from OpenWebUI
MAX_READS = 4  # reads of OpenWebUI under way at once
MAX_USERS = 100_000  # users whose last read is remembered (a bounded map whatever the number of users)


def group_ids(raw: Any) -> list[str] | None:
    """The group ids of OpenWebUI's answer (a list of groups, each with its `id`), as team ids may be; None when
    the answer is not such a list. At most MAX_MIRRORED_GROUPS, in the order given."""
    if not isinstance(raw, list):
        return None
    ids = dict.fromkeys(str(g.get("id")) for g in raw if isinstance(g, dict) and isinstance(g.get("id"), str))
    return [i for i in ids if TEAM_ID.fullmatch(i)][:MAX_MIRRORED_GROUPS]


def header_groups(headers: Mapping[str, str], name: str) -> list[str] | None:
    """The group ids a request's header names (comma-separated), or None when it sends none (then memberships stay
    as they are). Empty means no group: OpenWebUI also sends that when its lookup failed, which removes the
    mirrored memberships (fails closed)."""
    value = header_value(headers, name)
    if value is None:
        return None
    ids = dict.fromkeys(part.strip() for part in value.split(","))
    return [i for i in ids if TEAM_ID.fullmatch(i)][:MAX_MIRRORED_GROUPS]


class GroupMirror:
    def __init__(self, settings: TeamMirrorSettings, pool: AsyncConnectionPool, client: httpx.AsyncClient) -> None:
        self.settings, self._pool, self._client = settings, pool, client
        self._read: TTLCache[str, bool] = TTLCache(maxsize=MAX_USERS, ttl=settings.refresh_s)
        self._reading: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_READS)

    def groups_for_turn(self, headers: Mapping[str, str], user_id: str) -> list[str] | None:
        """The groups the turn itself mirrors (header mode), or None: with `openwebui` a read is started in the
        background when the user's last one is older than TEAM_MIRROR_REFRESH_SECONDS."""
        if self.settings.mode == "header":
            return header_groups(headers, self.settings.groups_header)
        if self.settings.mode == "openwebui" and user_id not in self._read:
            self._read[user_id] = True
            task = asyncio.create_task(self.refresh(user_id))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)
        return None

    async def refresh(self, user_id: str) -> None:
        """Read the user's groups from OpenWebUI and mirror them; a failure is counted and changes nothing."""
        async with self._slots:
            try:
                response = await self._client.get(
                    f"{self.settings.openwebui_url}/api/v1/users/{quote(user_id, safe='')}/groups",
                    headers={"Authorization": f"Bearer {self.settings.openwebui_api_key}"}, timeout=READ_TIMEOUT_S)
                groups = group_ids(response.json()) if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as exc:
                TEAM_MIRROR.labels("read_failed").inc()
                log.warning("team_mirror_read_failed", user_id=user_id, error=type(exc).__name__)
                return
            if groups is None:
                TEAM_MIRROR.labels("read_failed").inc()
                log.warning("team_mirror_read_failed", user_id=user_id, status=response.status_code)
                return
            async with self._pool.connection() as conn:
                await self.mirror_on(conn, user_id, groups)

    async def mirror_on(self, conn: AsyncConnection[Any], user_id: str, groups: list[str]) -> teams.Mirrored:
        """Mirror `groups` for the user on `conn` (the turn's own round trip in header mode), counted."""
        done = await teams.mirror_groups(conn, user_id, groups, max_teams=self.settings.max_teams)
        count(done)
        return done

    async def settled(self) -> None:
        """Wait for the reads under way (tests, and a CLI run that mirrors once)."""
        await asyncio.gather(*self._reading, return_exceptions=True)

    async def close(self) -> None:
        """Stop the reads under way (a stopping proxy does not wait for OpenWebUI)."""
        for task in list(self._reading):
            task.cancel()
        await asyncio.gather(*self._reading, return_exceptions=True)


def count(done: teams.Mirrored) -> None:
    """A mirror's outcome in the metric; groups not mirrored (an operator's team of that id, the cap) logged."""
    TEAM_MIRROR.labels("joined").inc(done.joined)
    TEAM_MIRROR.labels("left").inc(done.left)
    TEAM_MIRROR.labels("made").inc(done.made)
    TEAM_MIRROR.labels("skipped").inc(done.skipped)
    if done.skipped:
        log.warning("team_mirror_skipped", groups=done.skipped,
                    reason="an operator's team has that id, or TEAM_MIRROR_MAX_TEAMS mirrored teams exist")
