"""Use counts of injected memories (ranking's frequency and recency), written in batches.

A turn that injects memories counts one use of each. The counts are added up in memory and written by one
statement every FLUSH_S for all users (and at stop), not by one UPDATE per turn: that would be a write
transaction per chat turn on the busiest path. A count lost to a crash
only nudges ranking; the pending map is bounded (MAX_PENDING links; beyond it, uses are not counted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress
from datetime import UTC, datetime

import psycopg
import psycopg_pool

from ..observability import log
from ..store import memories

FLUSH_S = 1.0
FLUSH_TIMEOUT_S = 5.0
MAX_PENDING = 100_000


class UseCounts:
    def __init__(self, pool: psycopg_pool.AsyncConnectionPool) -> None:
        self._pool = pool
        self._pending: dict[tuple[str, str], tuple[int, datetime]] = {}

    def add(self, user_id: str, memory_ids: Sequence[str]) -> None:
        now = datetime.now(UTC)
        for memory_id in memory_ids:
            key = (user_id, memory_id)
            count = self._pending.get(key, (0, now))[0]
            if count or len(self._pending) < MAX_PENDING:
                self._pending[key] = (count + 1, now)

    async def flush(self) -> int:
        """Write the pending counts in one statement; how many links were counted. Never raises."""
        pending, self._pending = self._pending, {}
        if not pending:
            return 0
        try:
            async with asyncio.timeout(FLUSH_TIMEOUT_S), self._pool.connection() as conn:
                await memories.record_uses(conn, [(user, memory_id, count, at)
                                                  for (user, memory_id), (count, at) in pending.items()])
        except (psycopg.Error, psycopg_pool.PoolTimeout, OSError, TimeoutError) as exc:
            log.warning("record_use_failed", links=len(pending), error=f"{type(exc).__name__}: {exc}"[:300])
            return 0
        return len(pending)

    async def run(self, stop: asyncio.Event) -> None:
        """Flush every FLUSH_S until `stop` is set, then once more."""
        while not stop.is_set():
            with suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), FLUSH_S)
            await self.flush()
