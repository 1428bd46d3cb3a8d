"""The project's local embedder served as an OpenAI-compatible embeddings endpoint, on loopback.

Peers in the formation-quality benchmark (mem0 through its `openai` embedder) must embed exactly as
memory-proxy does with EMBEDDING_PROVIDER=local: all-MiniLM-L6-v2 int8 on onnxruntime, 384-d unit
vectors (`memory_proxy.embedding.local_model.LocalEmbedder`). This serves that embedder, nothing else:

    .venv/bin/python -m benchmarks.formation_quality.embed_server --port 8082

- ``POST /v1/embeddings``: ``input`` is a string or a list of strings (token arrays are refused);
  ``encoding_format`` ``float`` (default) or ``base64``; ``dimensions``, if sent, must be 384. Answers
  ``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}], "model",
  "usage"}`` with usage counted by the model's own tokenizer (truncated at 256 tokens, like the model).
- ``GET /v1/models``: the one model. The server accepts connections only once the model is loaded.

A raw ASGI app on uvicorn. From another program in the project venv, ``serve_in_background(port)``
starts it in a subprocess and returns once it answers; stop it with ``.stop()``, or use it as
``with serve_in_background() as base_url: ...``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from memory_proxy.embedding.local_model import (
    DIMENSIONS,
    MAX_TOKENS,
    MODEL_NAME,
    TOKENIZER_PATH,
    LocalEmbedder,
)
from memory_proxy.testing.asgi import (
    error_body,
    free_port,
    lifespan,
    read_body,
    reply,
    stop_process,
    wait_http,
)

ROOT = Path(__file__).resolve().parents[2]


class EmbeddingsApp:
    """ASGI app over one `LocalEmbedder`; the model loads during lifespan start-up."""

    def __init__(self) -> None:
        self.embedder = LocalEmbedder(MODEL_NAME)
        self.tokenizer = Tokenizer.from_file(str(TOKENIZER_PATH))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.models_body = json.dumps({"object": "list", "data": [
            {"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "memory-proxy"}]}).encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            return await lifespan(receive, send, self.embedder.warm_up)
        if scope["type"] != "http":
            return
        method, path = scope["method"], scope["path"]
        if method == "GET" and path in ("/v1/models", "/models"):
            return await reply(send, 200, self.models_body)
        if method != "POST" or path not in ("/v1/embeddings", "/embeddings"):
            return await reply(send, 404, error_body("not found"))
        try:
            body = json.loads(await read_body(receive) or b"{}")
            texts, encoding, dimensions = _parse(body)
        except ValueError as exc:
            return await reply(send, 400, error_body(str(exc)))
        if dimensions not in (None, DIMENSIONS):
            message = f"this model has {DIMENSIONS} dimensions, not {dimensions}"
            return await reply(send, 400, error_body(message))
        vectors = await self.embedder.embed(texts)
        tokens = sum(len(e.ids) for e in self.tokenizer.encode_batch(texts))
        data = [{"object": "embedding", "index": i, "embedding": _encode(vector, encoding)}
                for i, vector in enumerate(vectors)]
        answer = {"object": "list", "data": data, "model": MODEL_NAME,
                  "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        await reply(send, 200, json.dumps(answer).encode())


def _parse(body: object) -> tuple[list[str], str, int | None]:
    """(texts, encoding_format, dimensions) from a request body; ValueError if it is not one we serve."""
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    inputs = body.get("input")
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
        raise ValueError("input must be a string or a non-empty list of strings")
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise ValueError("encoding_format must be float or base64")
    return inputs, encoding, body.get("dimensions")


def _encode(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "base64":  # what the OpenAI SDKs ask for by default: little-endian float32
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode()
    return vector


@dataclass
class EmbedServer:
    """A running embed server subprocess: ``base_url`` (up to /v1) and ``stop()``. As a context
    manager it gives the base URL and stops the server on exit."""
    process: subprocess.Popen
    base_url: str

    def stop(self) -> None:
        stop_process(self.process)

    def __enter__(self) -> str:
        return self.base_url

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_ready(base_url: str, timeout: float = 60.0, process: subprocess.Popen | None = None) -> None:
    """Return once ``GET {base_url}/models`` answers 200 (the model is loaded by then)."""
    wait_http(f"{base_url}/models", timeout, process)


def serve_in_background(port: int | None = None, host: str = "127.0.0.1",
                        timeout: float = 60.0) -> EmbedServer:
    """Start the server in a subprocess of this interpreter (a free port if ``port`` is None) and
    return once it answers."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "benchmarks.formation_quality.embed_server", "--host", host,
           "--port", str(port)]
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    server = EmbedServer(process, f"http://{host}:{port}/v1")
    try:
        wait_ready(server.base_url, timeout, process)
    except BaseException:
        server.stop()
        raise
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.formation_quality.embed_server",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8082)
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(EmbeddingsApp(), host=args.host, port=args.port, http="httptools", loop="uvloop",
                log_level="warning", access_log=False, lifespan="on")


if __name__ == "__main__":
    main()
