"""The memory LLM: structured output through instructor, from Mistral or any OpenAI-compatible server —
the chat upstream itself with MEMORY_LLM_PROVIDER=upstream, each job read by the turn's own model (`for_turn`).

One narrow interface — `await llm.structured(ResponseModel, messages, purpose=...)` — whatever the
provider. Both SDKs get an `httpx.AsyncClient` we own (mistralai 3.x would otherwise use httpx2,
which respx cannot intercept). Every call is bounded by MEMORY_LLM_TIMEOUT and counted with its tokens.
A reply that does not validate even after instructor's one re-ask (not JSON, truncated, nested too deep,
a lone surrogate, the wrong shape) is `MalformedReply`: the model has answered, and asking again at
temperature 0 answers the same, so the caller reads it as an empty answer ("no facts") instead of
failing the job. A server that is busy (the call timed out: LLM_BUSY) or down (unreachable, the connection
dropped, HTTP 5xx, 408 or 429: LLM_DOWN) will answer later: the worker retries the job without spending
an attempt (`WAITING`, JOB_BUSY_MAX_SECONDS). A call that timed out is asked again with twice the time, then
four times (`patience`): a small model that writes to MEMORY_LLM_MAX_TOKENS on a slow machine times out on every
try of the same length; only timeouts at four times the length spend attempts. Any other failure (a 4xx that
asking again will not change) becomes `MemoryUnavailable("llm")`: the worker retries the job with backoff, up to
JOB_MAX_ATTEMPTS.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from functools import cache
from typing import Any, TypeVar

import httpx
import instructor
import openai
from instructor.core import IncompleteOutputException, InstructorRetryException, ResponseParsingError
from mistralai.client import Mistral
from pydantic import BaseModel, ValidationError

from ..errors import MemoryUnavailable
from ..observability import LLM_CALLS, LLM_TOKENS
from ..settings import MemoryLLMSettings
from ..tokens import spent

Model = TypeVar("Model", bound=BaseModel)
_UNREADABLE = (ValidationError, json.JSONDecodeError, ResponseParsingError, RecursionError, UnicodeError,
               IncompleteOutputException)  # cut at MEMORY_LLM_MAX_TOKENS


class MalformedReply(Exception):
    """The memory LLM answered, but with nothing that reads as the expected shape."""


LLM_BUSY = "llm_busy"  # MemoryUnavailable's reason for a call that timed out: queueing, not failure
LLM_DOWN = "llm_down"  # … for a server that could not be reached or failed: an outage, not the job's fault
WAITING = frozenset({LLM_BUSY, LLM_DOWN})  # reasons a job waits for the server without spending an attempt
PATIENCE_STEPS = 3  # a job's calls get 1x, 2x, then 4x MEMORY_LLM_TIMEOUT, a step for each timeout


def patience(timeouts: int) -> int:
    """How many times MEMORY_LLM_TIMEOUT a job's calls may take after `timeouts` of its calls timed out."""
    return 2 ** min(timeouts, PATIENCE_STEPS - 1)


def timeout_spends_attempt(timeouts: int) -> bool:
    """Whether a job's call that timed out after `timeouts` earlier ones spends an attempt: only at the last
    step, where asking again gives no more time (before it, the job waits like one for a busy server)."""
    return timeouts >= PATIENCE_STEPS - 1


_TIMEOUTS = (TimeoutError, httpx.TimeoutException, openai.APITimeoutError)
_UNREACHABLE = (httpx.TransportError, openai.APIConnectionError)  # refused, reset, DNS (after timeouts: subclasses)
_LATER = frozenset({408, 429})  # 4xx statuses that say "ask again later"


def _timed_out(exc: BaseException) -> bool:
    """Our deadline or the client's, also when instructor wrapped it."""
    return isinstance(exc, _TIMEOUTS) or isinstance(exc.__cause__, _TIMEOUTS)


def _malformed(exc: BaseException) -> bool:
    """The call failed on the reply itself, not on the way to it (instructor wraps both)."""
    cause = exc.__cause__ if isinstance(exc, InstructorRetryException) else exc
    return isinstance(cause, _UNREADABLE)


def _down(exc: BaseException) -> bool:
    """The server could not be reached or failed (HTTP 5xx, 408, 429): it will answer once it is back. A 4xx
    that says the request itself is wrong is not this: asking again will not change it."""
    cause = exc.__cause__ if isinstance(exc, InstructorRetryException) and exc.__cause__ else exc
    status = getattr(cause, "status_code", None)
    if isinstance(status, int):
        return status >= 500 or status in _LATER
    return isinstance(cause, _UNREACHABLE)


def _failure(exc: BaseException) -> str:
    """What failed, by type and HTTP status, never by message: an SDK's error quotes the server's error body,
    which may echo the prompt, and instructor's quotes the reply."""
    cause = exc.__cause__ if isinstance(exc, InstructorRetryException) and exc.__cause__ else exc
    status = getattr(cause, "status_code", None)
    return type(cause).__name__ + (f" (HTTP {status})" if isinstance(status, int) else "")


MODES = {
    "tools": instructor.Mode.TOOLS,
    "json_schema": instructor.Mode.JSON_SCHEMA,
    "json": instructor.Mode.JSON,  # response_format json_object: what llama.cpp accepts
    "md_json": instructor.Mode.MD_JSON,
}


@cache  # pydantic builds a model's JSON schema anew on every call (~2 ms)
def _json_object_with_schema(response_model: type[BaseModel]) -> dict[str, Any]:
    """`json` mode: the JSON schema inside `response_format`, which llama.cpp (and servers built on it)
    turn into a grammar, so that even a small model can only answer in the expected shape. Sent through
    `extra_body`, which the OpenAI SDK merges over the `{"type": "json_object"}` instructor sets; a
    server that does not know the key ignores it."""
    return {"extra_body": {"response_format": {"type": "json_object",
                                               "schema": response_model.model_json_schema()}}}


def _usage(completion: Any) -> tuple[int, int]:
    usage = getattr(completion, "usage", None)
    return (int(getattr(usage, "prompt_tokens", 0) or 0), int(getattr(usage, "completion_tokens", 0) or 0))


class MemoryLLM:
    def __init__(self, settings: MemoryLLMSettings, http_client: httpx.AsyncClient) -> None:
        self.settings = settings
        self.timeout_s = settings.timeout_s
        mode = MODES[settings.mode]
        if settings.provider == "mistral":
            sdk = Mistral(api_key=settings.api_key, server_url=settings.base_url.removesuffix("/v1"),
                          async_client=http_client)  # type: ignore[arg-type]  # httpx, not httpx2: same protocol
            self._client = instructor.from_mistral(sdk, mode=mode, use_async=True)
        else:
            sdk_openai = openai.AsyncOpenAI(base_url=settings.base_url, api_key=settings.api_key or "unused",
                                            http_client=http_client, max_retries=0)
            self._client = instructor.from_openai(sdk_openai, mode=mode)

    def for_turn(self, model: str, *, timeouts: int = 0) -> MemoryLLM:
        """The memory LLM that reads one turn: with the `upstream` provider, the same client asking the turn's
        own model (MEMORY_LLM_MODEL for a job that names none); otherwise this one, as configured. A job whose
        calls timed out `timeouts` times before gets `patience(timeouts)` times MEMORY_LLM_TIMEOUT per call."""
        model = model if self.settings.provider == "upstream" and model else self.settings.model
        if model == self.settings.model and not timeouts:
            return self
        turn = copy.copy(self)  # the same SDK client and connections
        turn.settings = replace(self.settings, model=model)
        turn.timeout_s = self.settings.timeout_s * patience(timeouts)
        return turn

    def _constrained(self, response_model: type[BaseModel]) -> dict[str, Any]:
        if self.settings.provider != "mistral" and self.settings.mode == "json":
            return _json_object_with_schema(response_model)
        return {}

    async def structured(self, response_model: type[Model], messages: list[dict[str, str]], *,
                         purpose: str) -> Model:
        """One structured call; instructor re-asks once when the output does not validate, then
        `MalformedReply`."""
        try:
            async with asyncio.timeout(self.timeout_s):
                result, completion = await self._client.create_with_completion(
                    model=self.settings.model, messages=messages,  # type: ignore[arg-type]
                    response_model=response_model, max_retries=1, temperature=0,
                    max_tokens=self.settings.max_tokens,
                    **self._constrained(response_model),
                )
        except Exception as exc:  # timeouts, HTTP errors, invalid output after the re-ask
            if _malformed(exc):
                LLM_CALLS.labels(purpose, "malformed").inc()
                raise MalformedReply(f"{purpose}: {type(exc.__cause__ or exc).__name__}") from exc
            if _timed_out(exc):  # a busy server (queued behind chat): the job is retried without spending an attempt
                LLM_CALLS.labels(purpose, "timeout").inc()
                raise MemoryUnavailable(LLM_BUSY, f"{purpose} call timed out: {type(exc).__name__}") from exc
            if _down(exc):  # an outage: the job waits for the server without spending an attempt
                LLM_CALLS.labels(purpose, "down").inc()
                raise MemoryUnavailable(LLM_DOWN, f"{purpose} call failed: {_failure(exc)}") from exc
            LLM_CALLS.labels(purpose, "error").inc()
            raise MemoryUnavailable("llm", f"{purpose} call failed: {_failure(exc)}") from exc
        LLM_CALLS.labels(purpose, "ok").inc()
        prompt_tokens, completion_tokens = _usage(completion)
        spent(prompt_tokens + completion_tokens)
        LLM_TOKENS.labels(purpose, "prompt").inc(prompt_tokens)
        LLM_TOKENS.labels(purpose, "completion").inc(completion_tokens)
        return result
