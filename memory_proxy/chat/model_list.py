"""`GET /v1/models` that a busy upstream cannot break.

A local model server answers its model list only between generations (while a formation job runs, it may
answer later than OpenWebUI waits: docs/LOCAL_MODELS.md), and OpenWebUI gives up on the list after 10 s:
"Model '' was not found". So the list is asked for as before and relayed faithfully when it comes within
MODELS_TIMEOUT; past that, or when the upstream is unreachable or answers 5xx, the last good list is served
instead (marked `X-Memory-Proxy-Models: cached`) while the same request goes on in the background and
refreshes it. One request to the upstream at a time: clients arriving meanwhile wait for the one in flight.
With no good list yet, the error is the upstream's (a 504 on timeout), as without the cache.

A good list is a 200 whose body is an OpenAI model list: a JSON object whose `data` is a non-empty array of
objects, each with a string `id` (what OpenWebUI reads). `"object": "list"` is not required: OpenAI, Mistral,
vLLM, Ollama and llama.cpp send it, but a client reads only `data`, and a server that leaves it out still
lists its models. Anything else (an HTML error page behind a 200, an empty list while a server loads) is
relayed when it comes in time but never kept. A good list is served for MODELS_CACHE_MAX_AGE after it came;
older, the upstream's error is the answer. Served from the cache it carries its content type, its `Age`
and our marker, none of the upstream's headers: those described the reply they came with (a cookie, a
rate-limit count, a request id), not the clients served the copy later.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UpstreamError, UpstreamTimeout


@dataclass(frozen=True, slots=True)
class ModelList:
    status: int
    body: bytes
    headers: dict[str, str]
    media_type: str


def is_model_list(body: bytes) -> bool:
    """An OpenAI model list with at least one model (see the module docstring)."""
    try:
        parsed: Any = json.loads(body)
    except (ValueError, RecursionError):
        return False
    models = parsed.get("data") if isinstance(parsed, dict) else None
    return (isinstance(models, list) and bool(models)
            and all(isinstance(model, dict) and isinstance(model.get("id"), str) for model in models))


class ModelsCache:
    def __init__(self, max_age_s: float = 86400.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s, self.clock = max_age_s, clock
        self.last: ModelList | None = None  # the last good list, without the upstream's headers
        self._stored_at = 0.0
        self._fetch: asyncio.Task[ModelList] | None = None

    async def get(self, fetch: Callable[[], Awaitable[ModelList]], timeout_s: float) -> tuple[ModelList, bool]:
        """The upstream's reply, or (when it is late, unreachable or failing) the last good one; True then."""
        if self._fetch is None or self._fetch.done():
            self._fetch = asyncio.create_task(self._refresh(fetch))
            self._fetch.add_done_callback(_consume)
        try:
            reply = await asyncio.wait_for(asyncio.shield(self._fetch), timeout_s)
        except (TimeoutError, UpstreamError) as exc:
            if (cached := self._fresh()) is not None:
                return cached, True
            if isinstance(exc, TimeoutError):
                raise UpstreamTimeout(f"the upstream did not list its models within {timeout_s:g}s "
                                      "(MODELS_TIMEOUT)") from exc
            raise
        if reply.status >= 500 and (cached := self._fresh()) is not None:
            return cached, True
        return reply, False

    def _fresh(self) -> ModelList | None:
        """The last good list with its age, unless it is older than `max_age_s`."""
        age = self.clock() - self._stored_at
        if self.last is None or age > self.max_age_s:
            return None
        return replace(self.last, headers={"age": str(int(age))})

    async def _refresh(self, fetch: Callable[[], Awaitable[ModelList]]) -> ModelList:
        reply = await fetch()
        if reply.status == 200 and is_model_list(reply.body):
            self.last, self._stored_at = replace(reply, headers={}), self.clock()
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
