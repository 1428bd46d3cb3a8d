"""The processes of the run: OpenWebUI's venv, the model server(s), the /v1/models shim, the embeddings
server for OpenWebUI's RAG setting, memory-proxy and OpenWebUI. Every ``start_*`` returns once its
process answers; the caller registers its ``stop`` at once (``__main__`` uses an AsyncExitStack), so
that nothing outlives the run, whatever ends it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from memory_proxy.testing.asgi import free_port, stop_process, wait_http

from ..servers import ROOT, venv_has

OPENWEBUI_VERSION = "0.12.4"
TORCH_VERSION = "2.13.0"  # its CPU build lies on this machine's disk: installed first, open-webui keeps it
CACHE = Path.home() / ".cache" / "memory-proxy-bench"
OPENWEBUI_VENV = CACHE / "openwebui-venv"
SETUP_LLAMA = ROOT / "benchmarks" / "formation_quality" / "setup_llama.sh"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def ensure_openwebui(venv: Path = OPENWEBUI_VENV) -> float:
    """Install OpenWebUI (CPU torch first) into ``venv`` unless it is already there; seconds spent."""
    if venv_has(venv, "open-webui", OPENWEBUI_VERSION):
        return 0.0
    python = venv / "bin" / "python"
    started = time.monotonic()
    log(f"installing OpenWebUI {OPENWEBUI_VERSION} into {venv} (~3 min, ~3 GB)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, f"torch=={TORCH_VERSION}"], check=True)  # else pip pulls a multi-GB CUDA torch
    subprocess.run([*pip, f"open-webui=={OPENWEBUI_VERSION}"], check=True)
    return time.monotonic() - started


def import_socketio(venv: Path = OPENWEBUI_VENV) -> Any:
    """python-socketio, a dependency of OpenWebUI, from its venv: pure Python, appended to the path (the
    project's own packages, aiohttp included, come first), so that the project venv is left as it is."""
    try:
        import socketio
    except ImportError:
        sys.path.append(str(next((venv / "lib").glob("python3*/site-packages"))))
        import socketio
    return socketio


@dataclass
class Proc:
    """A process this run started, its log, and how to stop it."""
    name: str
    proc: subprocess.Popen
    log: Path

    def stop(self) -> None:
        stop_process(self.proc, timeout=20)


def spawn(name: str, cmd: list[str], log_path: Path, env: dict[str, str], cwd: Path | None = None) -> Proc:
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    return Proc(name, proc, log_path)


async def ready(p: Proc, url: str, within_s: float) -> None:
    """Wait (in a thread: the shim serves in this loop meanwhile) until ``url`` answers 200, or stop ``p``
    and raise with the end of its log."""
    try:
        await asyncio.to_thread(wait_http, url, within_s, p.proc)
    except BaseException as exc:  # any failure, Ctrl-C too: stop it; say why unless interrupted
        p.stop()
        if not isinstance(exc, Exception):
            raise
        tail = p.log.read_text(errors="replace")[-2500:]
        raise RuntimeError(f"{p.name} did not answer {url}:\n{tail}") from None


async def start_llama(name: str, log_dir: Path, server: str = "python", threads: int = 2) -> tuple[Proc, str]:
    """A model server from benchmarks/formation_quality/setup_llama.sh on a free port: ``python``
    (llama-cpp-python, one request at a time) or ``native`` (llama-server, 2 slots). Returns it and its
    base URL up to /v1 (first use: installs or builds what the script needs, minutes)."""
    port = free_port()
    env = {**os.environ, "LLAMA_PORT": str(port), "LLAMA_SERVER": server, "LLAMA_THREADS": str(threads)}
    p = spawn(name, ["bash", str(SETUP_LLAMA)], log_dir / f"{name}.log", env)
    base = f"http://127.0.0.1:{port}/v1"
    await ready(p, f"{base}/models", within_s=3600)
    return p, base


def served_model(base_url: str) -> str:
    return str(httpx.get(f"{base_url}/models", timeout=30).json()["data"][0]["id"])


async def start_embed_server(log_dir: Path) -> tuple[Proc, str]:
    """The proxy's local embedder over /v1/embeddings (formation_quality/embed_server.py), for OpenWebUI's
    RAG embedding setting: never called by the chats here, but a real, harmless endpoint."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cmd = [sys.executable, "-m", "benchmarks.formation_quality.embed_server", "--port", str(port)]
    p = spawn("embed-server", cmd, log_dir / "embed-server.log", env, cwd=ROOT)
    base = f"http://127.0.0.1:{port}/v1"
    await ready(p, f"{base}/models", within_s=120)
    return p, base


@dataclass
class ModelsShim:
    """A relay between memory-proxy and the chat model server that can make ``GET /v1/models`` hang
    (``block(seconds)``), as a llama.cpp server busy generating does. Everything else passes through as it
    comes (streams included). It notes each request: method, path, whether it streamed, how many tools; with
    ``keep``, also the request body as sent (``body``) and the reply's last 8 KiB (``tail``: a stream's usage)."""
    upstream: str  # up to /v1
    requests: list[dict] = field(default_factory=list)
    keep: bool = False
    blocked_until: float = 0.0
    base_url: str = ""

    def block(self, seconds: float) -> None:
        self.blocked_until = time.monotonic() + seconds

    async def start(self) -> str:
        from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

        # a fresh connection per request: llama.cpp's server closes idle keep-alive connections, and a reused
        # one it has closed fails the request ("Server disconnected")
        self._session = ClientSession(timeout=ClientTimeout(total=None, sock_connect=10),
                                      connector=TCPConnector(force_close=True))
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._relay)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def _relay(self, request: Any) -> Any:  # aiohttp's types: imported lazily
        from aiohttp import web

        body = await request.read()
        note: dict = {"t": time.time(), "method": request.method, "path": request.path}
        if request.method == "GET" and request.path.endswith("/models"):
            note["held_s"] = round(max(0.0, self.blocked_until - time.monotonic()), 1)
            await asyncio.sleep(note["held_s"])
        elif body:
            try:
                sent = json.loads(body)
                note.update(stream=bool(sent.get("stream")), tools=len(sent.get("tools") or []), bytes=len(body))
                if self.keep:
                    note["body"] = sent
            except ValueError:
                pass
        self.requests.append(note)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        target = self.upstream.removesuffix("/v1") + request.path_qs
        async with self._session.request(request.method, target, headers=headers, data=body) as up:
            reply = web.StreamResponse(status=up.status)
            if "Content-Type" in up.headers:
                reply.headers["Content-Type"] = up.headers["Content-Type"]
            await reply.prepare(request)
            tail = b""
            async for chunk in up.content.iter_any():
                await reply.write(chunk)
                tail = (tail + chunk)[-8192:] if self.keep else tail
            if self.keep:
                note["tail"] = tail.decode(errors="replace")
            await reply.write_eof()
            return reply

    async def stop(self) -> None:
        if self.base_url:
            await self._runner.cleanup()
            await self._session.close()


def openwebui_env(port: int, data_dir: Path, proxy_url: str, proxy_key: str, jwt_secret: str,
                  embed_url: str) -> dict[str, str]:
    """OpenWebUI's settings (../shared/OPENWEBUI.md, README "Using it from OpenWebUI"), from a clean
    environment: nothing of this process (a DATABASE_URL, a PORT) may leak into it."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ")}
    return {
        **keep,
        "DATA_DIR": str(data_dir), "PORT": str(port), "WEBUI_SECRET_KEY": "openwebui-bench-" + jwt_secret[:24],
        "OPENAI_API_BASE_URL": proxy_url, "OPENAI_API_KEY": proxy_key,
        "ENABLE_OPENAI_API": "true", "ENABLE_OLLAMA_API": "false",
        "ENABLE_FORWARD_USER_INFO_HEADERS": "true", "FORWARD_USER_INFO_HEADER_JWT_SECRET": jwt_secret,
        "ENABLE_MEMORIES": "false",
        "WEBUI_AUTH": "true", "ENABLE_SIGNUP": "true", "BYPASS_MODEL_ACCESS_CONTROL": "true",
        "OFFLINE_MODE": "true", "HF_HUB_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "false",
        "RAG_EMBEDDING_MODEL_AUTO_UPDATE": "false", "RAG_RERANKING_MODEL_AUTO_UPDATE": "false",
        "RAG_EMBEDDING_ENGINE": "openai", "RAG_OPENAI_API_BASE_URL": embed_url, "RAG_OPENAI_API_KEY": "x",
        "RAG_EMBEDDING_MODEL": "all-minilm-l6-v2-int8",
        "UVICORN_WORKERS": "1", "GLOBAL_LOG_LEVEL": "INFO",
    }


async def start_openwebui(log_dir: Path, data_dir: Path, env_for: dict[str, str]) -> tuple[Proc, str]:
    binary = OPENWEBUI_VENV / "bin" / "open-webui"
    port = int(env_for["PORT"])
    p = spawn("openwebui", [str(binary), "serve", "--host", "127.0.0.1", "--port", str(port)],
              log_dir / "openwebui.log", env_for, cwd=data_dir)
    base = f"http://127.0.0.1:{port}"
    await ready(p, f"{base}/health", within_s=300)
    return p, base
