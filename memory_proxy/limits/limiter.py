"""Admitting a chat request under the limits of its API key, its user and its model (docs/LIMITS.md).

Which limits apply is known without the database: the operator's rows (`limits`, read at the first request and
again every REFRESH_S, `run`) over the defaults of LIMITS_PER_KEY / _USER / _MODEL. A request none
applies to costs nothing more. Otherwise one call of `limits_admit` (store/limits.py) counts it against every
subject at once, across every replica, or names the limit it would pass (then 429, with Retry-After); when the
request ends, `spend` counts its tokens and gives its places back. Far from every limit, that call also reserves
a few requests more, which this process then admits without asking (reserve.py), settled every second (`run`).
The shared state failing or late
(ADMIT_TIMEOUT_S) admits the request uncounted: chat is never broken by the limiter (counted in
memory_proxy_limits_fail_open_total).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio
from psycopg_pool import AsyncConnectionPool

from ..observability import LIMITED, LIMITS_FAIL_OPEN, log
from ..settings.limits_settings import LimitSettings
from ..store import limits as store
from ..store.limits import EVERY, Admitted, Limit, Refusal, Reserving
from .meter import Meter
from .reserve import SETTLE_S, SPARE, Reserves

REFRESH_S = 5.0  # an operator's change reaches every replica within this
ADMIT_TIMEOUT_S = 0.25  # past it the request goes on uncounted
LEASE_S = 900  # a request in flight holds its place at most this long when its replica dies before it ends
# After a refusal this process refuses that subject again at once, without asking PostgreSQL, for this long (at
# most until its Retry-After): a flood of one key then costs the database nothing, and the other users' turns
# keep their connections (benchmarks.stall key_flood). It only ever refuses more, never admits more; requests at
# once free up as streams end, so they are held the least.
HOLD_S = {"rpm": 1.0, "tpm": 1.0, "daily_tokens": 5.0, "concurrent": 0.05}
MAX_HELD = 4096  # subjects held refused in one process (expired ones dropped first)
# A refusal is answered after this long (at most its Retry-After): a client that asks again at once, from many
# connections, then sends one request a second per connection instead of as many as the proxy can answer, and
# its 429s no longer crowd the other users' turns out of the event loop (benchmarks.stall key_flood). Waiting
# costs no CPU; the client had to wait anyway.
PACE_S = 1.0


def key_id(token: str) -> str:
    """How a proxy API key is named in limits and usage: its SHA-256's first 16 hex digits (never the key)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted request: the subjects it was counted against (none: nothing applied, or it went uncounted)."""

    request: uuid.UUID | None = None
    subjects: tuple[tuple[str, str], ...] = ()
    reserved: bool = False  # admitted on this process's reserve: its end is settled with the reserve's


UNCOUNTED = Ticket()


class Limiter:
    def __init__(self, settings: LimitSettings, pool: AsyncConnectionPool) -> None:
        self._pool = pool
        self._defaults = {kind: Limit(kind, EVERY, **values) for kind, values in
                          (("key", settings.key), ("user", settings.user), ("model", settings.model))}
        self._rows: dict[tuple[str, str], Limit] | None = None  # the operator's, once read
        self._held: dict[tuple[str, str], tuple[float, float, Refusal]] = {}  # refused here lately: since, until, why
        self._reserves = Reserves()
        # A settlement sets each block's places to those in use; an admission growing a block meanwhile would
        # have its places taken back. So while one is settled, admissions ask for no reserve, and it waits for
        # those asking to be answered (and their grants recorded).
        self._settling = False
        self._asking = 0
        self._none_asking = asyncio.Event()
        self._none_asking.set()

    def applying(self, subjects: Mapping[str, str | None]) -> list[Limit]:
        """The limits of each subject that has any: its own row, else its kind's `*` row, else the default."""
        rows = self._rows or {}
        found = []
        for kind, subject in subjects.items():
            if not subject:
                continue
            limit = rows.get((kind, subject)) or rows.get((kind, EVERY)) or self._defaults[kind]
            if limit.limits_anything:
                found.append(replace(limit, subject=subject))
        return found

    async def admit(self, *, key: str | None, user: str | None, model: str | None) -> Ticket | Refusal:
        if self._rows is None:
            await self._read()  # the first request waits for the operator's rows (bounded)
        limits = self.applying({"key": key, "user": user, "model": model})
        if not limits:
            return UNCOUNTED
        if (held := self._still_held(limits)) is not None:
            LIMITED.labels(held.kind, held.which).inc()
            return held
        subjects = tuple((lim.kind, lim.subject) for lim in limits)
        if self._reserves.take(limits):
            return Ticket(None, subjects, reserved=True)
        request = uuid.uuid4()
        reserving = None if self._settling else Reserving(SPARE, self._reserves.block, self._reserves.in_use(limits))
        if reserving:
            self._asking += 1
            self._none_asking.clear()
        try:
            with anyio.fail_after(ADMIT_TIMEOUT_S):
                async with self._pool.connection() as conn:
                    outcome = await store.admit(conn, limits, request, LEASE_S, reserving)
            if reserving and isinstance(outcome, Admitted) and outcome.spare:
                self._reserves.granted(limits, reserving.in_use, outcome.spare, outcome.step_left)
                return Ticket(None, subjects, reserved=True)
        except Exception as exc:  # noqa: BLE001 - the shared state is down or late: chat goes on, counted
            LIMITS_FAIL_OPEN.labels("admit").inc()
            log.warning("limits_fail_open", phase="admit", error=type(exc).__name__)
            return UNCOUNTED
        finally:
            if reserving:
                self._asking -= 1
                if not self._asking:
                    self._none_asking.set()
        if isinstance(outcome, Refusal):
            LIMITED.labels(outcome.kind, outcome.which).inc()
            self._hold(outcome)
            return outcome
        return Ticket(request, subjects)

    def _still_held(self, limits: list[Limit]) -> Refusal | None:
        now = time.monotonic()
        for limit in limits:
            found = self._held.get((limit.kind, limit.subject))
            if found is not None and found[1] > now:
                since, _, refusal = found
                return replace(refusal, retry_after=max(refusal.retry_after - (now - since), 1.0))
        return None

    def _hold(self, refusal: Refusal) -> None:
        now = time.monotonic()
        if len(self._held) >= MAX_HELD:
            self._held = {k: v for k, v in self._held.items() if v[1] > now}
        if len(self._held) < MAX_HELD:
            self._held[(refusal.kind, refusal.subject)] = (now, now + min(HOLD_S[refusal.which], refusal.retry_after),
                                                           refusal)

    async def spend(self, ticket: Ticket, tokens: int) -> None:
        """An admitted request's end: its tokens counted, its places given back (on a reserve: at the next
        settlement)."""
        if ticket.reserved:
            self._reserves.ended(ticket.subjects, tokens)
        elif ticket.subjects:
            await self._spent(ticket.subjects, ticket.request, tokens)

    async def user_work(self, user: str, tokens: int) -> None:
        """Tokens a user's memory work spent (a formation job's memory-LLM calls), counted as the user's."""
        if tokens > 0 and self._rows is None:
            await self._read()
        if tokens > 0 and self.applying({"user": user}):
            await self._spent((("user", user),), None, tokens)

    def limit_of(self, refusal: Refusal) -> int | None:
        """The value of the limit a refused request would have passed."""
        found = self.applying({refusal.kind: refusal.subject})
        return getattr(found[0], refusal.which) if found else None

    async def _spent(self, subjects: tuple[tuple[str, str], ...], request: uuid.UUID | None, tokens: int) -> None:
        try:
            with anyio.CancelScope(shield=True), anyio.fail_after(ADMIT_TIMEOUT_S * 4):  # a client gone: still
                async with self._pool.connection() as conn:
                    await store.spent(conn, subjects, request, tokens)
        except Exception as exc:  # noqa: BLE001 - not counted; a lease left expires (LEASE_S)
            LIMITS_FAIL_OPEN.labels("spend").inc()
            log.warning("limits_fail_open", phase="spend", error=type(exc).__name__)

    async def run(self, stop: asyncio.Event) -> None:
        """The operator's rows read again every REFRESH_S, until `stop` (services.py): a change made through
        another replica is in force here within that, whether requests come or not; the reserves settled every
        SETTLE_S, and given back at the end."""
        next_read = time.monotonic() + REFRESH_S
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), SETTLE_S)
            if stop.is_set():
                break
            await self.settle_reserves()
            if time.monotonic() >= next_read:
                next_read = time.monotonic() + REFRESH_S
                await self._read()
        await self.settle_reserves(returning=True)

    async def settle_reserves(self, *, returning: bool = False) -> None:
        """What this process's reserves spent counted, and the places they hold no more given back (`returning`:
        every place, as the process stops)."""
        self._settling = True
        try:
            await self._none_asking.wait()
            settlement = self._reserves.returned() if returning else self._reserves.settling()
            if not settlement.kinds:
                return
            try:
                with anyio.CancelScope(shield=True), anyio.fail_after(ADMIT_TIMEOUT_S * 4):
                    async with self._pool.connection() as conn:
                        await store.settle(conn, settlement.kinds, settlement.subjects, settlement.tokens,
                                           self._reserves.block, settlement.places, LEASE_S)
            except Exception as exc:  # noqa: BLE001 - counted at the next settlement; its places counted until then
                self._reserves.unsettled(settlement)
                LIMITS_FAIL_OPEN.labels("settle").inc()
                log.warning("limits_fail_open", phase="settle", error=type(exc).__name__)
        finally:
            self._settling = False

    async def _read(self) -> None:
        try:
            with anyio.fail_after(ADMIT_TIMEOUT_S):
                async with self._pool.connection() as conn:
                    rows = await store.list_limits(conn)
            self._set_rows({(row.kind, row.subject): row for row in rows})
        except Exception as exc:  # noqa: BLE001 - the defaults (and the rows read before) stand until a read succeeds
            LIMITS_FAIL_OPEN.labels("load").inc()
            log.warning("limits_fail_open", phase="load", error=type(exc).__name__)
            if self._rows is None:
                self._rows = {}

    def changed(self, limit: Limit | None = None, *, gone: tuple[str, str] | None = None) -> None:
        """An operator's change through this process: in force here at once (other replicas: within REFRESH_S)."""
        rows = dict(self._rows or {})
        if gone is not None:
            rows.pop(gone, None)
        if limit is not None:
            rows[(limit.kind, limit.subject)] = limit
        self._set_rows(rows)

    def _set_rows(self, rows: dict[tuple[str, str], Limit]) -> None:
        """The operator's rows in force here; when they changed, no request more on a reserve taken under the old
        ones (the places in use stay held)."""
        if self._rows is not None and rows != self._rows:
            self._reserves.forget_spare()
        self._rows = rows


class Tab:
    """An admitted request's tab: what it spends (meter.py), settled once, when its reply ends (or fails, or the
    client leaves)."""

    def __init__(self, limiter: Limiter, ticket: Ticket, sent: bytes) -> None:
        self._limiter, self._ticket, self.meter = limiter, ticket, Meter(sent)
        self._settled = False

    async def settled_after(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """A stream's bytes unchanged (metered as they are relayed: `meter.event`); the tab settled when it ends."""
        try:
            async for chunk in chunks:
                yield chunk
        finally:
            await self.settle()

    async def settle(self) -> None:
        if not self._settled:
            self._settled = True
            await self._limiter.spend(self._ticket, self.meter.tokens)


async def paced(refusal: Refusal) -> Refusal:
    """The refusal once PACE_S (or its Retry-After, if shorter) has passed, with what is left of its Retry-After."""
    waited = min(PACE_S, refusal.retry_after)
    await asyncio.sleep(waited)
    return replace(refusal, retry_after=refusal.retry_after - waited)


def describe(refusal: Refusal, value: Any) -> str:
    """The 429's message, as OpenAI words its own."""
    what = {"rpm": "requests per minute", "tpm": "tokens per minute", "concurrent": "requests at once",
            "daily_tokens": "tokens per day"}[refusal.which]
    whose = {"key": "this API key", "user": f"user {refusal.subject}", "model": f"model {refusal.subject}"}
    return (f"Rate limit reached for {whose[refusal.kind]} on {what} ({refusal.which}): limit {value}. "
            f"Please try again in {max(1, round(refusal.retry_after))}s.")
