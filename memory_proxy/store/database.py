"""Where the database comes from (DATABASE_URL or an embedded PostgreSQL), migrations, the pool."""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

MIGRATIONS = resources.files(__package__) / "migrations"  # in the package, checkout or wheel alike
_MIGRATION_LOCK = 7_224_801  # pg_advisory_lock key: one migrator at a time across processes
POOL_WAIT_S = 5.0  # longest wait for a connection: a down database is a 503 in 5 s, not 30 (psycopg's default)
APP_ROLE = "memory_proxy_app"  # the role the pool drops to when it connects as a superuser (migration 0004)

log = logging.getLogger(__name__)


def migration_names() -> list[str]:
    return sorted(p.name.removesuffix(".sql") for p in MIGRATIONS.iterdir() if p.name.endswith(".sql"))


async def migrate(conninfo: str) -> list[str]:
    """Apply pending migrations in name order, each in its own transaction; return those applied.

    Recorded in `schema_migrations`; idempotent; an advisory lock makes concurrent starts safe.
    Hand-written (30 lines) rather than yoyo-migrations, which is sync-only and would add a second driver.
    Runs as the connecting user (not the pool's role), with every user's rows in reach (row-level
    security, 0004), so that a data migration can rewrite user-owned tables.
    """
    applied_now: list[str] = []
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
        await conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
        await conn.execute("SELECT pg_advisory_lock(%s)", [_MIGRATION_LOCK])
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT name FROM schema_migrations")
            done = {row[0] for row in await cur.fetchall()}
            for name in migration_names():
                if name in done:
                    continue
                sql = (MIGRATIONS / f"{name}.sql").read_text(encoding="utf-8")
                async with conn.transaction():
                    await conn.execute(sql.encode())
                    await conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", [name])
                applied_now.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", [_MIGRATION_LOCK])
    return applied_now


async def drop_rls_bypass(conn: psycopg.AsyncConnection[Any], *, pooler: bool = False) -> None:
    """SET ROLE memory_proxy_app when the connecting user would bypass row-level security (a superuser,
    as the embedded PostgreSQL's `postgres`, or a BYPASSRLS role) and the role exists; any other user is
    bound by the policies already (FORCE: also as the tables' owner). For the session: a pooled
    connection keeps it for life. Behind a transaction-mode `pooler` a session's role lands on one server
    connection and the next transaction may run on another (measured with PgBouncer 1.18: `current_user`
    was the superuser again), so such a user is refused there: connect as a role bound by the policies."""
    cur = await conn.execute(
        "SELECT rolsuper OR rolbypassrls, to_regrole(%s) IS NOT NULL FROM pg_roles WHERE rolname = current_user",
        [APP_ROLE])
    row = await cur.fetchone()
    bypasses, role_exists = row if row else (False, False)
    if bypasses and pooler:
        log.error("database user %s bypasses row-level security, and behind a transaction pooler SET ROLE does "
                  "not hold: connect DATABASE_URL as %s (or another role bound by the policies)",
                  conn.info.user, APP_ROLE)
        raise psycopg.OperationalError(f"{conn.info.user} bypasses row-level security behind a pooler")
    if bypasses and role_exists:
        await conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(APP_ROLE)))
    elif bypasses:
        log.warning("database user %s bypasses row-level security and role %s does not exist: "
                    "per-user isolation relies on the application's SQL alone", conn.info.user, APP_ROLE)


def make_pool(conninfo: str, max_size: int, *, pooler: bool = False) -> AsyncConnectionPool:
    """An unopened pool whose connections are bound by row-level security (`drop_rls_bypass`); pgvector
    types are registered once per connection (pgvector-python's pattern). Behind a transaction-mode
    `pooler` (DATABASE_DIRECT_URL set) nothing is prepared on the server: PgBouncer before 1.21 keeps no
    prepared statement from one transaction to the next ("prepared statement _pg3_0 does not exist")."""
    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await drop_rls_bypass(conn, pooler=pooler)
        await register_vector_async(conn)

    return AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        open=False,
        configure=configure,
        kwargs={"autocommit": True, **({"prepare_threshold": None} if pooler else {})},
        name="memory-proxy",
        timeout=POOL_WAIT_S,
    )


async def ping(conn: psycopg.AsyncConnection[Any]) -> None:
    """A round trip that raises when the database does not answer (readiness)."""
    await conn.execute("SELECT 1")
