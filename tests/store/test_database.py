"""The pool behind PgBouncer in transaction mode (memory_proxy/store/database.py, DATABASE_DIRECT_URL): Debian's
PgBouncer 1.18 for real, in front of the test's embedded PostgreSQL. CI installs it
(.ci/install-system-packages.sh); elsewhere the tests are skipped when it is missing."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from memory_proxy.store.database import make_pool
from memory_proxy.store.scope import user_scope
from tests.support.data import CHAT
from tests.support.proxy import chat_body, metric, user_headers
from tests.support.servers import free_port

PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
pytestmark = pytest.mark.skipif(PGBOUNCER is None and not os.environ.get("CI"),
                                reason="PgBouncer is not installed (apt-get install pgbouncer; CI installs it)")
POOLED_ROLE = "mp_pooled"  # a login role bound by row-level security, as a pooled deployment connects


@pytest.fixture
def bouncer(database_url: str) -> Iterator[dict[str, str]]:
    """PgBouncer in transaction mode with fewer server connections than the pools' clients, so that
    consecutive transactions of one client land on different server connections. Returns the URLs."""
    assert PGBOUNCER, "CI must install pgbouncer"
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"DO $$ BEGIN IF to_regrole('{POOLED_ROLE}') IS NULL THEN"
                     f" CREATE ROLE {POOLED_ROLE} LOGIN; END IF; END $$")
        conn.execute(f"GRANT memory_proxy_app TO {POOLED_ROLE}")
    target = conninfo_to_dict(database_url)
    socket_dir = str(target["host"])
    work = Path(tempfile.mkdtemp(prefix="mp-pgbouncer-"))
    work.chmod(0o755)
    (work / "users.txt").write_text(f'"{POOLED_ROLE}" ""\n"{target.get("user", "postgres")}" ""\n')
    port = free_port()
    (work / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={socket_dir} port={target.get('port', 5432)}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {work / 'users.txt'}\npool_mode = transaction\n"
        "default_pool_size = 3\nmax_client_conn = 200\nlogfile =\n")
    # PgBouncer refuses to run as root: as root, run it as the user who owns the database's socket
    as_owner = ["-u", pwd.getpwuid(os.stat(socket_dir).st_uid).pw_name] if os.geteuid() == 0 else []
    log = (work / "pgbouncer.log").open("wb")  # a file, not a pipe nobody reads (a full pipe would block it)
    process = subprocess.Popen([PGBOUNCER, *as_owner, str(work / "pgbouncer.ini")],
                               stdout=subprocess.DEVNULL, stderr=log)
    try:
        for _ in range(100):
            if process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {(work / 'pgbouncer.log').read_text()[-2000:]}")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)  # polling the port, 5 s at most
        dbname = target["dbname"]
        yield {"pooled": f"postgresql://{POOLED_ROLE}@127.0.0.1:{port}/{dbname}",
               "superuser": f"postgresql://{target.get('user', 'postgres')}@127.0.0.1:{port}/{dbname}",
               "direct": database_url}
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


async def _hammer(url: str, *, pooler: bool) -> tuple[Counter[str], set[str]]:
    """400 user-scoped statements from 20 concurrent clients (each statement repeated past psycopg's
    prepare threshold of 5): the errors by type, and every `current_user` seen."""
    errors: Counter[str] = Counter()
    users: set[str] = set()
    async with make_pool(url, 8, pooler=pooler) as pool:
        async def one(i: int) -> None:
            try:
                async with pool.connection() as conn, user_scope(conn, f"u{i % 5}"):
                    cur = await conn.execute("SELECT current_user, count(*) FROM users_vectors WHERE user_id = %s",
                                             [f"u{i % 5}"])
                    row = await cur.fetchone()
                    users.add(str(row[0]) if row else "")
            except psycopg.Error as exc:
                errors[type(exc).__name__] += 1
        for _ in range(20):
            await asyncio.gather(*(one(i) for i in range(20)))
    return errors, users


async def test_through_pgbouncer_in_transaction_mode_nothing_is_prepared_and_nothing_fails(
        bouncer: dict[str, str]) -> None:
    errors, users = await _hammer(bouncer["pooled"], pooler=True)
    assert errors == Counter() and users == {POOLED_ROLE}
    # the same load with psycopg's server-side prepared statements: PgBouncer 1.18 loses them
    errors, _ = await _hammer(bouncer["pooled"], pooler=False)
    assert errors["InvalidSqlStatementName"] + errors["DuplicatePreparedStatement"] > 0


@pytest.mark.slow
async def test_behind_a_pooler_a_user_that_bypasses_row_level_security_is_refused(
        bouncer: dict[str, str]) -> None:
    """SET ROLE would hold on one server connection only: as a superuser the next transaction ran as the
    superuser again (every user's rows). So no connection is given out at all."""
    async with make_pool(bouncer["superuser"], 2, pooler=True) as pool:
        with pytest.raises(PoolTimeout):
            await pool.getconn(timeout=1.5)


def _failed_open() -> float:
    return sum(metric("memory_proxy_fail_open_total", reason=r) for r in (
        "database_error", "database_timeout", "database_not_ready", "internal_error", "breaker_open"))


async def test_the_proxy_serves_and_forms_through_pgbouncer_with_listen_and_migrations_direct(
        bouncer: dict[str, str], proxy: Any, worker: Any, memory_llm: Any) -> None:
    memory_llm.extract = lambda message: [f"User's favourite number is {message.split()[-1]}."]
    client = await proxy(DATABASE_URL=bouncer["pooled"], DATABASE_DIRECT_URL=bouncer["direct"])
    failed = _failed_open()
    replies = await asyncio.gather(*(client.post(CHAT, json=chat_body(f"my favourite number is {i}"),
                                                 headers=user_headers(f"pooled-{i % 4}")) for i in range(40)))
    assert [r.status_code for r in replies] == [200] * 40
    assert _failed_open() == failed
    assert await worker.run_until_idle() == 40
    listing = await client.get("/api/v1/memories", params={"user": "pooled-1"})
    assert listing.status_code == 200 and len(listing.json()["data"]) == 10
