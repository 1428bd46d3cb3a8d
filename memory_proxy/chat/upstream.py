"""The connection to the upstream LLM: open a request, relay its bytes; httpx errors → errors.*.

Time bounds (settings): UPSTREAM_CONNECT_TIMEOUT to connect; UPSTREAM_FIRST_BYTE_TIMEOUT from sending
the request to the first bytes of the reply *body*, so a stream that never starts is a 504 rather
than a 200 followed by an error event; UPSTREAM_READ_TIMEOUT for any silence while reading (httpx's
read timeout, so it also caps each wait before the first byte).

Several `httpx.AsyncClient`s share the load, the relay's and the embedder's (embedding/embedders.py): one shared
client serialises on its connection pool under high concurrency (a fraction of the throughput of several, and
seconds of p99: docs/BENCHMARKS.md#relay-overhead), and httpcore's per-request scan of a pool's connections
grows with the connections one client holds. `Clients` fills them in order, PER_CLIENT requests in flight each:
a quiet proxy keeps using the first client's warm connections, a busy one spreads over all. A request
whose keep-alive connection was closed by the upstream before any byte came back is retried once: nothing
reached the client yet, and the upstream never saw the request.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial

import anyio
import httpx

from ..errors import UpstreamTimeout, UpstreamUnavailable
from ..settings import UpstreamSettings

# Client request headers worth forwarding. Identity headers (X-OpenWebUI-User-*) stay with us: the
# upstream provider has no need for the user's id, name or e-mail.
FORWARDED_REQUEST_HEADERS = ("accept", "content-type", "user-agent")
# Response headers never relayed: hop-by-hop, or describing a body encoding we do not pass on.
DROPPED_RESPONSE_HEADERS = frozenset({
    "connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
    "server", "date", "set-cookie", "alt-svc", "proxy-connection", "upgrade", "trailer", "te",
})
# httpcore 1.0 scans a client's pool on each request sent and each response closed: a poll() per idle connection,
# and for each idle one a list of all connections (O(n²) in the connections one client holds). So a client takes
# at most PER_CLIENT requests in flight while another has room (`Clients`): with clients taken in turn and
# every embedding call on the first, a memory turn's CPU grew with concurrency and the embedding call timed out;
# filled this way it does not (benchmarks.relay --quick; docs/BENCHMARKS.md#relay-overhead).
CLIENT_COUNT = 16
PER_CLIENT = 8


def http_timeout(settings: UpstreamSettings) -> httpx.Timeout:
    return httpx.Timeout(settings.read_timeout, connect=settings.connect_timeout)


def make_clients(settings: UpstreamSettings, count: int = CLIENT_COUNT) -> list[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64, keepalive_expiry=4.0)
    return [httpx.AsyncClient(timeout=http_timeout(settings), limits=limits) for _ in range(count)]


class Clients:
    """Which client a request goes to: the first with fewer than PER_CLIENT requests in flight, else the least
    busy. `take()` returns its index, to `release(index)` when the request is over (its response closed)."""

    def __init__(self, clients: list[httpx.AsyncClient], per_client: int = PER_CLIENT) -> None:
        self.clients = clients
        self.busy = [0] * len(clients)
        self.per_client = per_client

    def take(self) -> int:
        busy = self.busy
        index = next((i for i, n in enumerate(busy) if n < self.per_client), None)
        if index is None:
            index = busy.index(min(busy))
        busy[index] += 1
        return index

    def release(self, index: int) -> None:
        self.busy[index] -= 1

    @contextmanager
    def one(self) -> Iterator[httpx.AsyncClient]:
        """A client for one request that ends with the block (a streamed reply: take and release)."""
        index = self.take()
        try:
            yield self.clients[index]
        finally:
            self.release(index)


class Upstream:
    def __init__(self, settings: UpstreamSettings, clients: list[httpx.AsyncClient]) -> None:
        self.settings = settings
        self.clients = clients
        self.pick = Clients(clients)
        self._auth = f"Bearer {settings.api_key}" if settings.api_key else None
        self._timeout = http_timeout(settings)  # per request: a client handed in (tests) obeys it too

    def _headers(self, client_headers: Mapping[str, str]) -> dict[str, str]:
        headers = {name: client_headers[name] for name in FORWARDED_REQUEST_HEADERS if name in client_headers}
        headers["accept-encoding"] = "identity"  # relay bytes as they come, never re-encode
        if self._auth:
            headers["authorization"] = self._auth
        return headers

    async def open(self, method: str, path: str, client_headers: Mapping[str, str],
                   content: bytes | None = None) -> tuple[httpx.Response, AsyncIterator[bytes]]:
        """Send a request; return the response once the first bytes of its body arrived, and an
        iterator over all its body bytes (the caller drains or closes it; either closes the response)."""
        index = self.pick.take()
        try:
            with anyio.fail_after(self.settings.first_byte_timeout):
                response = await self._send(self.clients[index], method, path, client_headers, content)
                body = iter_upstream(response)
                first = await anext(body, b"")  # on timeout, the generator closes the response
        except TimeoutError as exc:
            self.pick.release(index)
            raise UpstreamTimeout(f"the upstream sent nothing within {self.settings.first_byte_timeout:g}s "
                                  "(UPSTREAM_FIRST_BYTE_TIMEOUT)") from exc
        except BaseException:
            self.pick.release(index)
            raise
        return response, _prepend(first, body, partial(self.pick.release, index))

    async def _send(self, client: httpx.AsyncClient, method: str, path: str, client_headers: Mapping[str, str],
                    content: bytes | None) -> httpx.Response:
        request = client.build_request(method, self.settings.base_url + path, timeout=self._timeout,
                                       headers=self._headers(client_headers), content=content)
        for attempt in (1, 2):
            try:
                return await client.send(request, stream=True)
            except httpx.TimeoutException as exc:
                raise UpstreamTimeout(f"the upstream did not answer in time ({type(exc).__name__})") from exc
            except httpx.RemoteProtocolError as exc:  # stale keep-alive connection: retry once
                if attempt == 2:
                    raise UpstreamUnavailable(f"the upstream closed the connection: {exc}") from exc
            except httpx.TransportError as exc:
                raise UpstreamUnavailable(f"the upstream is unreachable: {exc!r}") from exc
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()


def relayed_headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k.lower() not in DROPPED_RESPONSE_HEADERS}


async def iter_upstream(response: httpx.Response) -> AsyncGenerator[bytes, None]:
    """The upstream's body bytes as they arrive. Closes the response however the iteration ends —
    including a client disconnect, which cancels this generator and so the upstream request."""
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout("the upstream went silent for longer than UPSTREAM_READ_TIMEOUT") from exc
    except httpx.TransportError as exc:
        raise UpstreamUnavailable(f"the upstream connection dropped mid-reply: {exc!r}") from exc
    finally:
        with anyio.CancelScope(shield=True):
            await response.aclose()


async def _prepend(first: bytes, rest: AsyncGenerator[bytes, None], done: Callable[[], None]) -> AsyncIterator[bytes]:
    try:
        if first:
            yield first
        async for chunk in rest:
            yield chunk
    finally:
        try:
            await rest.aclose()  # no-op once drained; else closes the response (shielded in iter_upstream)
        finally:
            done()


async def read_body(body: AsyncIterator[bytes]) -> bytes:
    """The whole body (for JSON replies)."""
    return b"".join([chunk async for chunk in body])
