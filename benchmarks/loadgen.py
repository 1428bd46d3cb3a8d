"""A small async load generator for streaming chat completions, on loopback only.

It sends a fixed number of identical ``POST`` requests at a fixed concurrency and measures, per
request: time to first token (TTFT: first SSE event whose ``choices[].delta.content`` is non-empty),
total time (until the end of the response body), gaps between consecutive content events, and errors;
and overall requests/s.

Why raw asyncio sockets and not httpx: the client must not be the bottleneck. On 2 cores one shared
``httpx.AsyncClient`` collapsed at c=64 (68 req/s, 3–4 s p99, see shared/BENCHMARKS.md) and even several
clients spend far more CPU per request than the server under test. Here each worker owns one
keep-alive HTTP/1.1 connection (``asyncio.open_connection`` on uvloop) and parses only what it needs:
the status line, headers, chunked / Content-Length / until-close framing, and SSE events. Everything is
precomputed except the JSON decoding of each event.

    python -m benchmarks.loadgen http://127.0.0.1:9100/v1/chat/completions -n 200 -c 16 \\
        -H 'Authorization: Bearer KEY' [--body '{"model": ..., "stream": true, ...}']

From Python: ``run_load(url, headers, body, requests=200, concurrency=16)`` → ``LoadResult``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import socket
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_BODY = {"model": "fake-model", "stream": True,
                "messages": [{"role": "user", "content": "Hello, how are you today?"}]}


@dataclass
class Sample:
    """One request's outcome; times in seconds from just before the request was written."""
    ttft: float | None = None
    total: float | None = None
    gaps: list[float] = field(default_factory=list)
    error: str | None = None


@dataclass
class LoadResult:
    """Summary of one run. Times in milliseconds; percentiles over successful requests only."""
    concurrency: int
    requests: int          # requests attempted in the measured phase
    ok: int
    errors: int
    wall_s: float
    rps: float             # successful requests per second of wall time
    ttft_p50: float
    ttft_p95: float
    ttft_p99: float
    total_p50: float
    total_p95: float
    total_p99: float
    gap_p50: float         # median gap between consecutive content events, pooled over requests
    error_kinds: dict[str, int] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list, repr=False)

    def line(self) -> str:
        return (f"c={self.concurrency:<3} n={self.requests:<5} ok={self.ok:<5} err={self.errors:<3} "
                f"rps={self.rps:7.1f}  TTFT p50/p95/p99 {self.ttft_p50:7.1f} /{self.ttft_p95:7.1f} /"
                f"{self.ttft_p99:7.1f} ms  total p50/p99 {self.total_p50:7.1f} /{self.total_p99:7.1f} ms  "
                f"gap p50 {self.gap_p50:5.1f} ms" + (f"  {dict(self.error_kinds)}" if self.errors else ""))


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100); NaN for an empty list."""
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def check_loopback(host: str) -> None:
    """Refuse anything but a loopback address: this tool is a load generator."""
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"refusing non-loopback target {host!r} (use 127.0.0.1, ::1 or localhost)")


class _Target:
    def __init__(self, url: str, headers: dict[str, str], body: bytes) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError("only http:// URLs are supported")
        self.host = parts.hostname or "127.0.0.1"
        check_loopback(self.host)
        self.port = parts.port or 80
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = {"Host": f"{self.host}:{self.port}", "Content-Type": "application/json",
                "Accept": "text/event-stream", "Content-Length": str(len(body)), **headers}
        self.request = (f"POST {path} HTTP/1.1\r\n"
                        + "".join(f"{k}: {v}\r\n" for k, v in head.items())
                        + "\r\n").encode("latin-1") + body


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.used = reader, writer, False

    def close(self) -> None:
        self.writer.close()


async def _connect(target: _Target) -> _Conn:
    reader, writer = await asyncio.open_connection(target.host, target.port, limit=1 << 20)
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return _Conn(reader, writer)


class _Closed(Exception):
    """The server closed a reused keep-alive connection before answering (safe to retry)."""


async def _body_pieces(reader: asyncio.StreamReader, headers: dict[str, str]):
    if "chunked" in headers.get("transfer-encoding", "").lower():
        while True:
            size_line = await reader.readline()
            if not size_line:
                raise ConnectionError("connection closed mid-body")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            data = await reader.readexactly(size + 2)
            yield data[:-2]
    elif "content-length" in headers:
        remaining = int(headers["content-length"])
        while remaining > 0:
            data = await reader.read(min(remaining, 1 << 16))
            if not data:
                raise ConnectionError("connection closed mid-body")
            remaining -= len(data)
            yield data
    else:
        while data := await reader.read(1 << 16):
            yield data


def _has_content(obj: dict) -> bool:
    for choice in obj.get("choices") or ():
        if (choice.get("delta") or {}).get("content") or (choice.get("message") or {}).get("content"):
            return True
    return False


async def _request(conn: _Conn, target: _Target) -> tuple[Sample, bool]:
    """One request on ``conn``; returns the sample and whether the connection can be reused."""
    sample = Sample()
    reused = conn.used
    conn.used = True
    t0 = time.perf_counter()
    conn.writer.write(target.request)
    reader = conn.reader
    status_line = await reader.readline()
    if not status_line:
        if reused:
            raise _Closed
        raise ConnectionError("connection closed before the status line")
    version, status = status_line.strip().split(b" ", 2)[:2]
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n"):
        if not line:
            raise ConnectionError("connection closed in the headers")
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    keep_alive = (version == b"HTTP/1.1" and headers.get("connection", "").lower() != "close"
                  and ("content-length" in headers or "chunked" in headers.get("transfer-encoding", "")))
    is_sse = headers.get("content-type", "").startswith("text/event-stream")
    buf = b""
    last_content: float | None = None
    done = False
    async for piece in _body_pieces(reader, headers):
        if not is_sse or status != b"200":
            buf += piece
            continue
        now = time.perf_counter() - t0
        buf += piece.replace(b"\r\n", b"\n")
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            for line in event.split(b"\n"):
                if not line.startswith(b"data:"):
                    continue
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    done = True
                    continue
                try:
                    obj = json.loads(payload)
                except ValueError:
                    sample.error = sample.error or "bad SSE JSON"
                    continue
                if "error" in obj:
                    sample.error = sample.error or "error event"
                elif _has_content(obj):
                    if sample.ttft is None:
                        sample.ttft = now
                    else:
                        sample.gaps.append(now - last_content)
                    last_content = now
    sample.total = time.perf_counter() - t0
    if status != b"200":
        sample.error = f"HTTP {status.decode()}"
    elif not is_sse:
        try:
            ok = _has_content(json.loads(buf))
        except ValueError:
            ok = False
        if ok:
            sample.ttft = sample.total
        else:
            sample.error = "no content in JSON reply"
    elif sample.error is None and sample.ttft is None:
        sample.error = "no content event"
    elif sample.error is None and not done:
        sample.error = "no [DONE]"
    return sample, keep_alive


async def run_load_async(url: str, headers: dict[str, str] | None = None, body: dict | bytes | None = None,
                         requests: int = 200, concurrency: int = 16, time_limit: float = 60.0,
                         request_timeout: float = 30.0, warmup: int | None = None,
                         before_measure: Callable[[], None] | None = None) -> LoadResult:
    """Run ``requests`` requests (fewer if ``time_limit`` seconds pass first) with ``concurrency``
    workers, each on its own keep-alive connection. ``warmup`` requests (default: one per worker) are
    sent first, concurrently, and not counted; they also open the connections. ``before_measure`` is
    called between the warm-up and the measured phase (e.g. to read a server's CPU time)."""
    raw = body if isinstance(body, bytes) else json.dumps(body or DEFAULT_BODY).encode()
    target = _Target(url, headers or {}, raw)
    conns: list[_Conn | None] = [None] * concurrency

    async def one(worker: int) -> Sample:
        for attempt in (0, 1):
            conn = conns[worker]
            try:
                if conn is None:
                    conn = conns[worker] = await _connect(target)
                async with asyncio.timeout(request_timeout):
                    sample, keep = await _request(conn, target)
                if not keep:
                    conn.close()
                    conns[worker] = None
                return sample
            except _Closed:
                conn.close()
                conns[worker] = None
                if attempt:
                    return Sample(error="connection closed before answering")
            except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError) as exc:
                if conn is not None:
                    conn.close()
                conns[worker] = None
                kind = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
                return Sample(error=kind)
        raise AssertionError("unreachable")

    n_warm = concurrency if warmup is None else warmup
    warm_left = [n_warm]

    async def warm(worker: int) -> None:
        while warm_left[0] > 0:
            warm_left[0] -= 1
            await one(worker)

    await asyncio.gather(*(warm(w) for w in range(concurrency)))
    if before_measure is not None:
        before_measure()

    samples: list[Sample] = []
    left = [requests]
    start = time.perf_counter()
    deadline = start + time_limit
    end = [start]

    async def worker(w: int) -> None:
        while left[0] > 0 and time.perf_counter() < deadline:
            left[0] -= 1
            samples.append(await one(w))
            end[0] = time.perf_counter()

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        for conn in conns:
            if conn is not None:
                conn.close()
    return summarise(samples, concurrency, end[0] - start)


def summarise(samples: list[Sample], concurrency: int, wall_s: float) -> LoadResult:
    good = [s for s in samples if s.error is None]
    ttft = [s.ttft * 1000 for s in good]
    total = [s.total * 1000 for s in good]
    gaps = [g * 1000 for s in good for g in s.gaps]
    kinds = Counter(s.error for s in samples if s.error is not None)
    return LoadResult(
        concurrency=concurrency, requests=len(samples), ok=len(good), errors=len(samples) - len(good),
        wall_s=wall_s, rps=len(good) / wall_s if wall_s > 0 else float("nan"),
        ttft_p50=percentile(ttft, 50), ttft_p95=percentile(ttft, 95), ttft_p99=percentile(ttft, 99),
        total_p50=percentile(total, 50), total_p95=percentile(total, 95), total_p99=percentile(total, 99),
        gap_p50=percentile(gaps, 50), error_kinds=dict(kinds), samples=samples)


def run_load(*args, **kwargs) -> LoadResult:
    """Synchronous wrapper around ``run_load_async`` (uses uvloop when installed)."""
    try:
        import uvloop
        return uvloop.run(run_load_async(*args, **kwargs))
    except ImportError:
        return asyncio.run(run_load_async(*args, **kwargs))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loadgen",
                                     description="Streaming chat load generator (loopback only).")
    parser.add_argument("url", help="e.g. http://127.0.0.1:9100/v1/chat/completions")
    parser.add_argument("-n", "--requests", type=int, default=200)
    parser.add_argument("-c", "--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("-H", "--header", action="append", default=[], help="'Name: value' (repeatable)")
    parser.add_argument("--body", help="JSON request body (default: a small streaming chat request)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per concurrency level")
    args = parser.parse_args(argv)
    headers = {k.strip(): v.strip() for k, _, v in (h.partition(":") for h in args.header)}
    body = json.loads(args.body) if args.body else DEFAULT_BODY
    for c in args.concurrency:
        print(run_load(args.url, headers, body, requests=args.requests, concurrency=c,
                       time_limit=args.time_limit).line(), flush=True)


if __name__ == "__main__":
    main()
