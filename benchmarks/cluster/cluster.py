"""The cluster as a whole: up, down, restarts, which database the nodes use, CPU, and the database as seen
from outside (the run's own superuser connection)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from memory_proxy.testing.asgi import free_port

from ..servers import PROXY_BIN, PROXY_KEY, ROOT
from .parts import Nginx, Node, PgBouncer, Postgres, Proc, wait_until

POOLED_ROLE = "mp_pooled"  # a login role bound by row-level security, as a pooled deployment connects
DATABASE = "memory_proxy"


@dataclass
class Options:
    replicas: int = 3
    workers: int = 2
    pgbouncer: bool = True
    nginx: bool = True
    database_url: str | None = None  # a superuser URL of a database of its own; else a PostgreSQL of this run
    llm_delay_ms: float = 50.0       # the fake memory LLM's answer time: a job is "running" that long
    lease_s: int = 10                # JOB_LEASE_SECONDS: a killed worker's jobs are taken over this much later
    keep: bool = False               # keep the temporary directory (logs) after the run


class Cluster:
    """Start with ``up()``, stop with ``down()`` (idempotent: call it in a ``finally``)."""

    def __init__(self, options: Options) -> None:
        self.o = options
        self.run = uuid.uuid4().hex[:6]  # user ids of this run start with it
        self.work = Path(tempfile.mkdtemp(prefix="mp-cluster-"))
        self.work.chmod(0o755)  # PostgreSQL and PgBouncer run as another user when we are root
        self.fake: Proc | None = None
        self.postgres: Postgres | None = None
        self.bouncer: PgBouncer | None = None
        self.nginx: Nginx | None = None
        self.replicas: list[Node] = []
        self.workers: list[Node] = []
        self.mode = "pgbouncer" if options.pgbouncer else "direct"
        self.direct = self.pooled = ""
        self.fake_url = ""

    # ------------------------------------------------------------ up and down

    def up(self) -> Cluster:
        port = free_port()
        self.fake = Proc("fake", [sys.executable, "-m", "memory_proxy.testing.fake_upstream", "--port", str(port), "--chunks", "6",
                                  "--delay-ms", "20", "--llm-delay-ms", str(self.o.llm_delay_ms)],
                         self.work / "fake.log", cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}).start()
        self.fake_url = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(self.fake_url + "/v1/models").status_code == 200, 30, "the fake upstream", self.fake)
        self._database()
        if self.o.pgbouncer:
            self._bouncer()
        env = self.node_env()
        self.replicas = [Node(f"replica-{i}", self.work, env, port=free_port()) for i in range(self.o.replicas)]
        self.workers = [Node(f"worker-{i}", self.work, {**env, "LOG_LEVEL": "info"}) for i in range(self.o.workers)]
        self.start_nodes(self.nodes)
        if self.o.nginx:
            self.nginx = Nginx(self.work, [n.port for n in self.replicas if n.port])
            self.nginx.start()
        return self

    def _database(self) -> None:
        if self.o.database_url:
            self.direct = self.o.database_url
        else:
            self.postgres = Postgres(self.work)
            self.postgres.start()
            with psycopg.connect(self.postgres.url(), autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {DATABASE}")
            self.direct = self.postgres.url(DATABASE)
        migrated = subprocess.run([str(PROXY_BIN), "migrate"], env={**self.base_env(), "DATABASE_URL": self.direct},
                                  capture_output=True, text=True, cwd=self.work, check=False)
        if migrated.returncode:
            raise RuntimeError(f"memory-proxy migrate failed:\n{migrated.stdout}{migrated.stderr}")
        with self.db() as conn:
            conn.execute(f"DO $$ BEGIN IF to_regrole('{POOLED_ROLE}') IS NULL THEN"
                         f" CREATE ROLE {POOLED_ROLE} LOGIN; END IF; END $$")
            conn.execute(f"GRANT memory_proxy_app TO {POOLED_ROLE}")

    def _bouncer(self) -> None:
        target = conninfo_to_dict(self.direct)
        self.bouncer = PgBouncer(self.work, str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432),
                                 [POOLED_ROLE, str(target.get("user") or "postgres")])
        self.bouncer.start()
        self.pooled = make_conninfo(self.direct, host="127.0.0.1", port=self.bouncer.port, user=POOLED_ROLE,
                                    password="")

    @property
    def nodes(self) -> list[Node]:
        return [*self.replicas, *self.workers]

    def down(self) -> None:
        """Stop everything we started, the load balancer first and the database last; remove the temp dir."""
        for stop in [*(n.proc.stop for n in self.nodes if n.proc.alive), *(
                part.stop for part in (self.nginx, self.bouncer, self.postgres) if part is not None)]:
            try:
                stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                print(f"cluster: stopping failed: {exc!r}", file=sys.stderr)
        if self.fake is not None:
            self.fake.stop()
        if not self.o.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    # ------------------------------------------------------------ nodes

    def base_env(self) -> dict[str, str]:
        """What every node gets: the fake for upstream, embeddings and memory LLM; the proxy key; JSON logs."""
        kept = {k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")}
        fake = self.fake_url + "/v1"
        return {**kept, "PROXY_API_KEYS": PROXY_KEY, "UPSTREAM_BASE_URL": fake, "UPSTREAM_API_KEY": "x",
                "EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": fake, "EMBEDDING_MODEL": "fake-embed",
                "EMBEDDING_API_KEY": "x", "MEMORY_LLM_PROVIDER": "openai", "MEMORY_LLM_MODE": "json",
                "MEMORY_LLM_BASE_URL": fake, "MEMORY_LLM_MODEL": "fake-model", "MEMORY_LLM_API_KEY": "x",
                "LOG_FORMAT": "json", "LOG_USER_IDS": "raw", "LOG_LEVEL": "warning", "WORKER_IN_PROCESS": "false",
                "JOB_LEASE_SECONDS": str(self.o.lease_s), "JOB_RETRY_BASE_SECONDS": "1",
                "MAINTENANCE_INTERVAL_SECONDS": "0", "SHUTDOWN_TIMEOUT": "5"}

    def node_env(self, mode: str | None = None, listen_port: int | None = None) -> dict[str, str]:
        """The environment of a replica or worker: DATABASE_URL through PgBouncer (``mode`` "pgbouncer", with
        DATABASE_DIRECT_URL for LISTEN and migrations) or straight to PostgreSQL ("direct"). ``listen_port``:
        what needs a session goes to 127.0.0.1 on that port instead (a relay), as DATABASE_DIRECT_URL."""
        mode = mode or self.mode
        env = self.base_env()
        if mode == "pgbouncer":
            env.update(DATABASE_URL=self.pooled, DATABASE_DIRECT_URL=self.direct)
        else:
            env["DATABASE_URL"] = self.direct
        if listen_port:
            if mode == "direct":  # a direct URL beside DATABASE_DIRECT_URL is a "pooler": it must not bypass RLS
                env["DATABASE_URL"] = make_conninfo(self.direct, user=POOLED_ROLE, password="")
            env["DATABASE_DIRECT_URL"] = make_conninfo(self.direct, host="127.0.0.1", port=listen_port)
        return env

    def start_nodes(self, nodes: list[Node], env: dict[str, str] | None = None) -> None:
        """Start ``nodes`` together (a worker with its own log level), then wait until each is ready."""
        for node in nodes:
            node.start(None if env is None else {**env, "LOG_LEVEL": node.env["LOG_LEVEL"]})
        for node in nodes:
            node.wait_ready()

    def restart(self, nodes: list[Node], env: dict[str, str] | None = None, sig: int = signal.SIGTERM) -> None:
        for node in nodes:
            node.proc.stop(sig)
        self.start_nodes(nodes, env)

    def use(self, mode: str) -> None:
        """Every replica and worker on DATABASE_URL ``mode`` ("pgbouncer" or "direct"), restarted."""
        self.mode = mode
        self.restart(self.nodes, self.node_env(mode))

    # ------------------------------------------------------------ measuring

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far by role: serve, worker, postgres, pgbouncer, nginx."""
        return {"serve": sum(n.proc.cpu() for n in self.replicas),
                "worker": sum(n.proc.cpu() for n in self.workers),
                "postgres": self.postgres.proc.cpu() if self.postgres else 0.0,
                "pgbouncer": self.bouncer.proc.cpu() if self.bouncer else 0.0,
                "nginx": self.nginx.proc.cpu() if self.nginx else 0.0}

    @property
    def entry(self) -> str:
        """Where clients go: nginx, or the first replica without it."""
        return self.nginx.url if self.nginx else self.replicas[0].url

    @contextmanager
    def db(self, url: str | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A superuser connection straight to the database, every user's rows in view."""
        with psycopg.connect(url or self.direct, autocommit=True) as conn:
            conn.execute("SELECT set_config('memory_proxy.all_users', 'on', false)")
            yield conn

    def rows(self, query: str, params: Any = None, url: str | None = None) -> list[tuple[Any, ...]]:
        with self.db(url) as conn:
            return conn.execute(query, params).fetchall()

    def drain(self, user_like: str, timeout: float, url: str | None = None, nodes: list[Node] | None = None) -> float:
        """Wait until no job of users ``LIKE user_like`` is queued or running (in the database at ``url``,
        the cluster's by default), and no replica (of ``nodes``) holds one in its outbox; returns the seconds
        it took (``timeout`` if it did not)."""
        started = time.monotonic()

        def idle() -> bool:
            pending = self.rows("SELECT count(*) FROM memory_jobs WHERE user_id LIKE %s"
                                " AND status IN ('queued', 'running')", [user_like], url)[0][0]
            return pending == 0 and all(outbox_jobs(n) == 0 for n in nodes or self.replicas if n.proc.alive)
        try:
            wait_until(idle, timeout, "drained job queue", every=0.25)
        except TimeoutError:
            return timeout
        return time.monotonic() - started


def outbox_jobs(node: Node) -> float:
    """The replica's memory_proxy_outbox_jobs gauge: jobs it holds because the database did not take them."""
    for line in httpx.get(node.url + "/metrics", headers={"Authorization": f"Bearer {PROXY_KEY}"},
                          timeout=5).text.splitlines():
        if line.startswith("memory_proxy_outbox_jobs "):
            return float(line.split()[1])
    return 0.0
