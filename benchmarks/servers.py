"""Start and stop the servers under test as subprocesses pinned to one core, and measure their CPU.

On the 2-core machines here the servers run on core 1 (``taskset -c 1``) and the load generator on
core 0. Each ``start_*`` returns a ``Server`` (its chat URL, the headers a client sends, and the
processes to stop and to bill CPU to); ``Server.stop()`` ends only what it started.

- ``start_fake``: the fake upstream itself (case a, "direct": the floor).
- ``start_memory_proxy``: ``memory-proxy serve`` from the project's .venv on a fresh data dir (its
  embedded PostgreSQL starts itself), upstream and embeddings pointed at the fake; ready on /readyz.
- ``start_litellm``: LiteLLM proxy (``LITELLM_VERSION``) from its own venv, ``benchmarks/.venv-litellm``
  (never the project's venv: its pins would break ours), offline cost map, model ``fake-model`` routed
  to the fake as ``openai/fake-model``. ``install_litellm()`` creates that venv if missing.

``cpu_seconds(server)`` is user+system CPU of the server's processes, including their children (live
ones and reaped ones) and, for memory-proxy, its embedded PostgreSQL; take it before and after a run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from memory_proxy.testing.asgi import free_port, stop_process, wait_http
from memory_proxy.testing.fake_upstream import start_fake as _start_fake_process

ROOT = Path(__file__).resolve().parent.parent
PROXY_BIN = ROOT / ".venv" / "bin" / "memory-proxy"
LITELLM_VENV = Path(__file__).resolve().parent / ".venv-litellm"
# Newest release whose dependencies all resolve from the registry reachable here (1.106.3+ need
# certifi>=2026.10.19, 1.108.10+ a litellm-enterprise / litellm-proxy-extras release not on it).
LITELLM_VERSION = "1.106.2"
SERVER_CORE = 1
PROXY_KEY = "bench-proxy-key-0123456789abcdef"
LITELLM_KEY = "sk-bench-master-key-0123456789"


def _pinned(cmd: list[str], core: int | None) -> list[str]:
    return cmd if core is None else ["taskset", "-c", str(core), *cmd]


@dataclass
class Server:
    """A started server: where to send chat requests, with which headers, and what to stop."""
    name: str
    base_url: str                    # up to /v1
    headers: dict[str, str]
    proc: subprocess.Popen
    tmpdir: str | None = None
    owns_proc: bool = True           # False for a view on a process someone else stops
    extra_match: str | None = None   # processes whose command line contains this are billed and stopped too
    notes: list[str] = field(default_factory=list)

    @property
    def chat_url(self) -> str:
        return self.base_url + "/chat/completions"

    def processes(self) -> list[psutil.Process]:
        """The server's process, its live descendants, and matching detached processes (PostgreSQL)."""
        try:
            root = psutil.Process(self.proc.pid)
        except psutil.NoSuchProcess:
            return []
        procs = {p.pid: p for p in [root, *root.children(recursive=True)]}
        if self.extra_match:
            for p in psutil.process_iter(["cmdline"]):
                if p.pid not in procs and self.extra_match in " ".join(p.info["cmdline"] or ()):
                    procs[p.pid] = p
                    procs.update((c.pid, c) for c in p.children(recursive=True))
        return list(procs.values())

    def stop(self) -> None:
        if not self.owns_proc:
            return
        leftovers = [p for p in self.processes() if p.pid != self.proc.pid]
        stop_process(self.proc, timeout=20)
        for p in leftovers:  # e.g. a PostgreSQL the proxy failed to stop; only ours (matched by data dir)
            try:
                if p.is_running():
                    p.terminate()
                    p.wait(10)
            except (psutil.NoSuchProcess, psutil.TimeoutExpired):
                pass
        if self.tmpdir:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


def cpu_seconds(server: Server) -> float:
    """User+system CPU seconds used so far by the server's processes and their reaped children."""
    total = 0.0
    for p in server.processes():
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.NoSuchProcess:
            pass
    return total


def start_fake(port: int | None = None, chunks: int = 6, delay_ms: float = 20.0, dims: int = 1024,
               core: int | None = SERVER_CORE) -> Server:
    """(a) The fake upstream, pinned to ``core``."""
    port = port or free_port()
    proc = _start_fake_process(port, chunks=chunks, delay_ms=delay_ms, dims=dims, core=core)
    return Server("direct", f"http://127.0.0.1:{port}/v1", {}, proc)


def direct_view(fake: Server) -> Server:
    """The fake as a target without ownership (the run stops the fake itself, last)."""
    return Server("direct", fake.base_url, {}, fake.proc, owns_proc=False)


def start_memory_proxy(upstream: Server, port: int | None = None, core: int | None = SERVER_CORE,
                       user_id: str | None = None, env: dict[str, str] | None = None,
                       timeout: float = 180.0, wait_for: str = "/readyz") -> Server:
    """(b) memory-proxy on a fresh data dir, upstream + embeddings = ``upstream``. ``user_id`` sets the
    user header clients send (None = anonymous). ``env`` overrides/extends the environment. Returns once
    ``wait_for`` answers 200 (/healthz for a proxy whose database is down)."""
    port = port or free_port()
    tmp = (env or {}).get("MEMORY_PROXY_DATA_DIR") or tempfile.mkdtemp(prefix="mp-bench-")
    proxy_env = {
        **os.environ,
        "UPSTREAM_BASE_URL": upstream.base_url, "UPSTREAM_API_KEY": "x",
        "PROXY_API_KEYS": PROXY_KEY,
        "EMBEDDING_PROVIDER": "openai", "EMBEDDING_BASE_URL": upstream.base_url,
        "EMBEDDING_MODEL": "fake-embed", "EMBEDDING_API_KEY": "x",
        # memory-LLM calls (if any) go to the fake too, never to a real provider
        "MEMORY_LLM_PROVIDER": "openai", "MEMORY_LLM_BASE_URL": upstream.base_url,
        "MEMORY_LLM_MODEL": "fake-model", "MEMORY_LLM_API_KEY": "x",
        "MEMORY_PROXY_DATA_DIR": tmp, "MEMORY_PROXY_HOST": "127.0.0.1", "MEMORY_PROXY_PORT": str(port),
        "LOG_LEVEL": "warning",
        **(env or {}),
    }
    with open(Path(tmp) / "server.log", "wb") as log:
        proc = subprocess.Popen(_pinned([str(PROXY_BIN), "serve"], core), env=proxy_env, cwd=tmp,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    headers = {"Authorization": f"Bearer {PROXY_KEY}"}
    if user_id is not None:
        headers["x-openwebui-user-id"] = user_id
    server = Server("memory-proxy" + (f" (user {user_id})" if user_id else " (anonymous)"),
                    f"http://127.0.0.1:{port}/v1", headers, proc, tmpdir=tmp, extra_match=tmp)
    _wait_or_stop(server, f"http://127.0.0.1:{port}{wait_for}", timeout)
    return server


def venv_has(venv: Path, package: str, version: str) -> bool:
    """Whether the venv exists with `package` at exactly `version` installed (a peer's venv is reused)."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"]
    if not python.exists():
        return False
    got = subprocess.run(probe, capture_output=True, text=True, check=False)
    return got.returncode == 0 and got.stdout.strip() == version


def install_litellm(version: str = LITELLM_VERSION) -> Path:
    """Create ``benchmarks/.venv-litellm`` with ``litellm[proxy]==version`` unless already there."""
    if venv_has(LITELLM_VENV, "litellm", version):
        return LITELLM_VENV
    subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
    subprocess.run([str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install", "-q", f"litellm[proxy]=={version}"], check=True)
    return LITELLM_VENV


def start_litellm(upstream: Server, port: int | None = None, core: int | None = SERVER_CORE,
                  timeout: float = 180.0) -> Server:
    """(d) LiteLLM proxy, one worker, no database, routing ``fake-model`` to ``upstream``."""
    binary = LITELLM_VENV / "bin" / "litellm"
    if not binary.exists():
        raise FileNotFoundError(f"{binary} missing: run benchmarks.servers.install_litellm() first")
    port = port or free_port()
    tmp = tempfile.mkdtemp(prefix="litellm-bench-")
    config = Path(tmp) / "config.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: fake-model\n"
        "    litellm_params:\n"
        "      model: openai/fake-model\n"
        f"      api_base: {upstream.base_url}\n"
        "      api_key: x\n"
        "general_settings:\n"
        f"  master_key: {LITELLM_KEY}\n"
        "litellm_settings:\n"
        "  telemetry: false\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "LITELLM_"))}
    env.update({"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
                "LITELLM_MASTER_KEY": LITELLM_KEY, "LITELLM_TELEMETRY": "False",
                "NO_DOCS": "True", "HOME": tmp})
    cmd = [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
           "--num_workers", "1"]
    with open(Path(tmp) / "server.log", "wb") as log:
        proc = subprocess.Popen(_pinned(cmd, core), env=env, cwd=tmp, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT)
    server = Server(f"LiteLLM {LITELLM_VERSION}", f"http://127.0.0.1:{port}/v1",
                    {"Authorization": f"Bearer {LITELLM_KEY}"}, proc, tmpdir=tmp)
    _wait_or_stop(server, f"http://127.0.0.1:{port}/health/liveliness", timeout)
    return server


def _wait_or_stop(server: Server, url: str, timeout: float) -> None:
    try:
        wait_http(url, timeout, server.proc)
    except BaseException:  # noqa: BLE001 - any failure (also Ctrl-C): stop the server, report its log
        log = Path(server.tmpdir or "", "server.log")
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        server.stop()
        raise RuntimeError(f"{server.name} did not become ready at {url}:\n{tail}") from None
