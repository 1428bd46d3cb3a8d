"""`GET /v1/models` that a busy upstream cannot break (issue 26).

A local model server answers its model list only between generations (llama-cpp-python took 10.4 s while
a formation job ran), and OpenWebUI gives up on the list after 10 s: "Model '' was not found". So the list is
asked for as before and relayed faithfully when it comes within MODELS_TIMEOUT; past that, or when the
upstream is unreachable or answers 5xx, the last good list is served instead (marked
`X-Memory-Proxy-Models: cached`) while the same request goes on in the background and refreshes it. One
request to the upstream at a time: clients arriving meanwhile wait for the one in flight. With no good list
yet, the error is the upstream's (a 504 on timeout), as without the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .errors import UpstreamError, UpstreamTimeout


@dataclass(frozen=True, slots=True)
class ModelList:
    status: int
    body: bytes
    headers: dict[str, str]
    media_type: str


class ModelsCache:
    def __init__(self) -> None:
        self.last: ModelList | None = None  # the last 200 the upstream gave
        self._fetch: asyncio.Task[ModelList] | None = None

    async def get(self, fetch: Callable[[], Awaitable[ModelList]], timeout_s: float) -> tuple[ModelList, bool]:
        """The upstream's reply, or (when it is late, unreachable or failing) the last good one; True then."""
        if self._fetch is None or self._fetch.done():
            self._fetch = asyncio.create_task(self._refresh(fetch))
            self._fetch.add_done_callback(_consume)
        try:
            reply = await asyncio.wait_for(asyncio.shield(self._fetch), timeout_s)
        except (TimeoutError, UpstreamError) as exc:
            if self.last is not None:
                return self.last, True
            if isinstance(exc, TimeoutError):
                raise UpstreamTimeout(f"the upstream did not list its models within {timeout_s:g}s "
                                      "(MODELS_TIMEOUT)") from exc
            raise
        if reply.status >= 500 and self.last is not None:
            return self.last, True
        return reply, False

    async def _refresh(self, fetch: Callable[[], Awaitable[ModelList]]) -> ModelList:
        reply = await fetch()
        if reply.status == 200:
            self.last = reply
        return reply

    async def close(self) -> None:
        if self._fetch is not None and not self._fetch.done():
            self._fetch.cancel()
            with contextlib.suppress(BaseException):
                await self._fetch


def _consume(task: asyncio.Task[ModelList]) -> None:
    """A background refresh nobody waited for may fail: that is not an unhandled error."""
    if not task.cancelled():
        task.exception()
