"""Row-level security scopes (memory_proxy/store/migrations/0004): whose rows a transaction may see and write.

A scope is one transaction that starts by setting `memory_proxy.user_id` (or `memory_proxy.all_users`)
with `set_config(..., is_local => true)`: the setting ends with the transaction, so nothing carries over to
the next borrower of a pooled (autocommit) connection, and a connection returned mid-transaction is rolled
back by the pool. Outside any scope the user-owned tables show no row at all (fail closed).

The rule for store functions: each one touching users_vectors, memory_updates or memory_jobs declares its
scope. One given a user id runs `in_user_scope`; one that is cross-user by nature (job claim and leases,
gauges, operator listings) runs `in_all_users`. Both open their own scope on an idle connection and, inside
a transaction, join it under the scope its opener set (they never widen nor switch it: one transaction,
one scope). Functions keyed by a job id (`jobs.complete`, `jobs.fail`) run in their caller's scope.

A scope also names who acts, when it is a member acting on a team's rows (`acting_member`, set by the team
routes of the management API for the request): the setting `memory_proxy.actor`, which memory_proxy/store/migrations/0014
writes as a new link's `author` and an audit row's `actor`. Nowhere else is it set.

A scope runs in pipeline mode: BEGIN, the setting, the statements and COMMIT go out together and the
server is waited for only when a result is fetched, so a one-query scope (a search) is one round trip.
Hence cursor results and `rowcount` are read after the block, or fetched inside it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from typing import Any

from psycopg import AsyncConnection, ProgrammingError
from psycopg.pq import TransactionStatus

_SET_SCOPE = ("SELECT set_config('memory_proxy.user_id', %s, true),"
              " set_config('memory_proxy.all_users', %s, true), set_config('memory_proxy.actor', %s, true)")
# The member acting on a team's rows in this request (the team routes' guard sets it; "" everywhere else).
acting_member: ContextVar[str] = ContextVar("acting_member", default="")


@asynccontextmanager
async def user_scope(conn: AsyncConnection[Any], user_id: str) -> AsyncIterator[None]:
    """A transaction that sees and writes only `user_id`'s rows (also on a connection whose session
    set all_users: a user scope always narrows)."""
    if not user_id:
        raise ValueError("a user scope needs a user id")
    async with _scope(conn, user_id, "off"):
        yield


@asynccontextmanager
async def all_users(conn: AsyncConnection[Any]) -> AsyncIterator[None]:
    """A transaction that sees every user's rows: for work that is cross-user by nature only."""
    async with _scope(conn, "", "on"):
        yield


def in_user_scope(conn: AsyncConnection[Any], user_id: str) -> AbstractAsyncContextManager[None]:
    """`user_scope` on an idle connection; inside a transaction, that transaction as it is scoped."""
    return user_scope(conn, user_id) if _idle(conn) else nullcontext()


def in_all_users(conn: AsyncConnection[Any]) -> AbstractAsyncContextManager[None]:
    """`all_users` on an idle connection; inside a transaction, that transaction as it is scoped."""
    return all_users(conn) if _idle(conn) else nullcontext()


def _idle(conn: AsyncConnection[Any]) -> bool:
    return conn.info.transaction_status == TransactionStatus.IDLE


@asynccontextmanager
async def _scope(conn: AsyncConnection[Any], user_id: str, every_user: str) -> AsyncIterator[None]:
    if not _idle(conn):
        # Nested, the setting would outlive the inner block and rescope the rest of the outer transaction.
        raise ProgrammingError("a scope opens its own transaction; this connection is already in one")
    async with conn.pipeline(), conn.transaction():
        await conn.execute(_SET_SCOPE, [user_id, every_user, acting_member.get()])
        yield
