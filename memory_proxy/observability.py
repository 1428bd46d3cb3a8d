"""Logging (structlog) and every Prometheus metric, each defined here once.

Label values are small closed sets (route, kind, outcome, reason): never user ids or memory ids,
so the number of time series stays bounded whatever the number of users.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import sys
from collections.abc import Callable
from typing import Any

import structlog
from prometheus_client import Counter, Gauge, Histogram

from . import log_text
from .formation.drops import Drop

# Buckets sized for added latency: sub-millisecond relay work up to multi-second upstreams.
_FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_SLOW_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

REQUESTS = Counter(
    "memory_proxy_requests_total",
    "Requests answered, by route, kind of turn (chat, task, anonymous, other) and HTTP status class.",
    ["route", "kind", "status"],
)
ADDED_LATENCY = Histogram(
    "memory_proxy_added_latency_seconds",
    "Time the proxy spent before forwarding a request upstream (auth, classify, retrieve, inject).",
    ["kind"],
    buckets=_FAST_BUCKETS,
)
UPSTREAM_FIRST_BYTE = Histogram(
    "memory_proxy_upstream_first_byte_seconds",
    "Time from forwarding to the first bytes of the upstream's reply body.",
    ["route"],
    buckets=_SLOW_BUCKETS,
)
UPSTREAM_ERRORS = Counter(
    "memory_proxy_upstream_errors_total",
    "Upstream failures by reason: unavailable, timeout, dropped (mid-stream), status_4xx, status_5xx.",
    ["reason"],
)
RETRIEVAL_LATENCY = Histogram(
    "memory_proxy_retrieval_seconds",
    "Embedding + search time of one retrieval, successful or not.",
    buckets=_FAST_BUCKETS,
)
RETRIEVAL_OUTCOMES = Counter(
    "memory_proxy_retrieval_total",
    "Retrievals by outcome: hit (≥1 memory injected), miss (none above threshold), "
    "skipped (client already injected its own memory block), failed (see fail-open counter).",
    ["outcome"],
)
MEMORIES_INJECTED = Histogram(
    "memory_proxy_memories_injected",
    "Number of memories injected into one chat turn.",
    buckets=(0, 1, 2, 3, 5, 8, 10, 15, 20, 30, 50),
)
FAIL_OPEN = Counter(
    "memory_proxy_fail_open_total",
    "Turns whose memory search failed, by reason (embedder_error, embedder_timeout: the most recent "
    "memories were injected instead, as with embedder_breaker_open: the embedder failed repeatedly and is not "
    "tried for a while; database_error, database_timeout, database_not_ready, internal_error: relayed without "
    "memory; breaker_open: the database failed repeatedly and is not tried for a while).",
    ["reason"],
)
BREAKER_OPEN = Gauge(
    "memory_proxy_breaker_open",
    "1 while a part of the memory side is skipped after repeated failures (memory_proxy/breaker.py), by part: database "
    "(turns relayed without memory), embedder (the most recent memories instead of a search); else 0.",
    ["part"],
)
INDEX_LOOKUPS = Counter(
    "memory_proxy_index_lookups_total",
    "Searches by where they ran: hit (the user's in-process index), miss (PostgreSQL, while the index "
    "loads), sql (PostgreSQL: the user has too few memories, or too many to hold), bypass (PostgreSQL: "
    "index off, or its change listener not connected or not hearing).",
    ["result"],
)
INDEX_STALE = Counter(
    "memory_proxy_index_stale_total",
    "Turns whose in-process index still held a memory that PostgreSQL no longer has active (changed by "
    "another process, not heard yet): the memory was dropped before injection and the index read again.",
)
INDEX_USERS = Gauge("memory_proxy_index_users", "Users whose memories this process holds in its search index.")

# ---- memory formation
MEMORY_LINKS = Gauge(
    "memory_proxy_memories",
    "Active memories, counted as user-memory links (a shared memory counts once per user). No per-user "
    "label: one series per user would grow without bound; per-user counts are in the database.",
)
MEMORY_USERS = Gauge("memory_proxy_memory_users", "Users holding at least one memory.")
DECISIONS = Counter(
    "memory_proxy_decisions_total",
    "Formation decisions by action (add, replace, refine, ignore, forget; episode: the user's words kept, EPISODES). "
    "Replacement rate: "
    "rate(…{action=~\"replace|refine\"}) / rate(…); dedup rate: rate(…{action=\"ignore\"}) / rate(…).",
    ["action"],
)
DATABASE_RESTARTS = Counter(
    "memory_proxy_database_restarts_total",
    "The embedded PostgreSQL found stopped and started again by the proxy (restarted), or a start that "
    "failed (failed; retried with backoff).",
    ["outcome"],
)
FACTS_DROPPED = Counter(
    "memory_proxy_facts_dropped_total",
    "Facts the memory LLM returned that were not stored, by reason (formation/drops.py): "
    + ", ".join(Drop) + ".",
    ["reason"],
)
JOB_EVENTS = Counter(
    "memory_proxy_jobs_total",
    "Formation job events: enqueued (written), held (database unavailable: spooled to the data dir and "
    "retried), rejected (values the database refuses: set aside), dropped (outbox full, or held at exit "
    "and not spooled), unscanned (the secret scan failed: not kept), completed, retried, dead, skipped (no LLM "
    "call needed).",
    ["event"],
)
OUTBOX_JOBS = Gauge("memory_proxy_outbox_jobs",
                    "Formation jobs held in this process's memory while the database is unavailable.")
JOBS = Gauge("memory_proxy_job_queue", "Formation jobs in the database by status (queued, running, dead).",
             ["status"])
FORMATION_LATENCY = Histogram(
    "memory_proxy_formation_seconds",
    "Time to process one formation job (extract, resolve, apply), successful or not.",
    buckets=_SLOW_BUCKETS,
)
REDACTIONS = Counter("memory_proxy_redactions_total",
                     "Secrets replaced by [REDACTED: kind] before anything was stored, by kind.", ["kind"])
LLM_CALLS = Counter("memory_proxy_llm_calls_total",
                    "Memory-LLM calls by purpose (provenance, extract, check, relate, forget) and outcome (ok, error, malformed, "
                    "timeout: a busy server, down: unreachable or HTTP 5xx/408/429; both retried without spending "
                    "an attempt).",
                    ["purpose", "outcome"])
PROVENANCE_CHECKS = Counter(
    "memory_proxy_provenance_total",
    "Formation turns by what the provenance call (formation/provenance.py) did: removed (some parts were not "
    "the user's own words), kept (all were), fallback (the call failed or could not be read: the "
    "deterministic result was used), not_needed (too few parts to call it).",
    ["outcome"],
)
LLM_TOKENS = Counter("memory_proxy_llm_tokens_total", "Memory-LLM tokens by purpose and kind (prompt, completion).",
                     ["purpose", "kind"])
TEAM_MIRROR = Counter(
    "memory_proxy_team_mirror_total",
    "What the mirror of OpenWebUI's groups did (TEAM_MIRROR, memory_proxy/http/group_mirror.py): memberships "
    "joined and left, teams made, groups skipped (an operator's team of that id, or past TEAM_MIRROR_MAX_TEAMS), "
    "and reads of a user's groups from OpenWebUI that failed (read_failed).",
    ["outcome"],
)
TOOL_CALLS = Counter(
    "memory_proxy_tool_calls_total",
    "Memory tool calls the chat model made (memory_proxy/tools/calls.py), by tool (search_memory, remember, "
    "forget, unknown) and outcome (ok, empty, refused: a guard said no, bad_arguments, unknown_tool, over_cap, "
    "failed), offers the upstream refused (tool `all`, outcome rejected: HTTP 400, retried without them), and "
    "calls to the client's own tools not sent in a turn that showed the model memories (tool `client`, outcome "
    "withheld: memory_proxy/tools/outbound.py).",
    ["tool", "outcome"],
)
TOOL_TURNS = Counter(
    "memory_proxy_tool_turns_total",
    "Identified chat turns offered the memory tools, counted when their rounds end in the reply relayed to the "
    "client (tools/rounds.py, tools/streamed_rounds.py), by the upstream rounds before that reply, as the memory_retrieval "
    "line counts them (0 to 3; 0: the model called none of our tools). Not counted: a turn whose offer the "
    "upstream refused (memory_proxy_tool_calls_total{tool=\"all\",outcome=\"rejected\"}) or that ended in an "
    "upstream error.",
    ["rounds"],
)
WRITTEN_CALLS = Counter(
    "memory_proxy_tool_calls_written_total",
    "Memory tool calls a model wrote as its text instead of as tool_calls, read as calls (memory_proxy/"
    "tools/text_calls.py): many small models do so behind llama.cpp's server; each is also in tool_calls_total.",
)
SCANS = Counter("memory_proxy_secret_scans_total",
                "Secret scans and formation's reading of a turn and checks of its facts, run off the event loop (memory_proxy/redact/scan_pool.py), by where (thread: a small "
                "text; process: a worker process) and outcome (ok; failed; timeout: past SECRET_SCAN_TIMEOUT, its "
                "text not kept).", ["where", "outcome"])
SCAN_SECONDS = Histogram("memory_proxy_secret_scan_seconds",
                         "Time from asking for a scan off the event loop to its answer (waiting for a worker "
                         "included), by where (thread, process).", ["where"], buckets=_FAST_BUCKETS)

LIMITED = Counter("memory_proxy_limited_total",
                  "Chat requests refused with 429 by a fair-use limit (memory_proxy/limits/), by the kind of subject "
                  "whose limit it was (key, user, model) and the limit (rpm, tpm, concurrent, daily_tokens).",
                  ["kind", "limit"])
LIMITS_FAIL_OPEN = Counter("memory_proxy_limits_fail_open_total",
                           "Limit checks that could not reach the shared state in time (the request was admitted "
                           "uncounted) and spent tokens not counted, by phase (admit, spend, load).", ["phase"])

_DEFAULT_USER_ID_KEY = b"memory-proxy"  # without LOG_USER_ID_KEY: a stable pseudonym, not a secret one


def user_ref(user_id: str, key: str = "") -> str:
    """How a user id appears in logs when hashed: HMAC-SHA256(key, id), 16 hex characters. Stable across
    processes sharing the key, so one user's lines can be followed (compute it with this function)."""
    return hmac.new(key.encode() or _DEFAULT_USER_ID_KEY, user_id.encode(), hashlib.sha256).hexdigest()[:16]


def _hash_user_ids(key: str) -> Callable[[Any, str, dict[str, Any]], dict[str, Any]]:
    def hash_user_id(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
        user_id = event.get("user_id")
        if isinstance(user_id, str):
            event["user_id"] = user_ref(user_id, key)
        return event

    return hash_user_id


def configure_logging(level: str = "info", fmt: str = "json", *, user_ids: str = "hashed",
                      user_id_key: str = "", memory_text: bool = True) -> None:
    """JSON lines in production, a readable console in development; stdlib logging routed through too.

    Every line of a request carries its `request_id` (request_id.py binds it), every line of a formation
    job its `job_id`. A `user_id` field is logged as `user_ref(id, LOG_USER_ID_KEY)` unless `user_ids` is
    "raw": logs travel further than the database (collectors, tickets), and a pseudonym still lets an
    operator follow one user. With `memory_text` false no line holds the text of a fact, a turn or a model
    reply, ours or a library's (memory_proxy/log_text.py)."""
    level_no = getattr(logging, level.upper())
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        *([] if memory_text else [log_text.foreign_text_withheld, log_text.facts_as_lengths]),
        structlog.processors.format_exc_info,
    ]
    if user_ids != "raw":
        processors.append(_hash_user_ids(user_id_key))
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),  # stderr as it is now, not at setup
        cache_logger_on_first_use=False,
    )
    # Libraries' own lines (psycopg's pool, uvicorn) in the same format: a collector reading JSON lines
    # choked on psycopg's plain-text warnings when the database restarted (benchmarks.cluster).
    handler = _Stderr()
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *processors],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer]))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(max(level_no, logging.WARNING))
    # instructor logs two error lines for every memory-LLM call that fails (an outage of minutes wrote hundreds):
    # what a failure does is ours to say, once a job attempt (memory_decision) and in memory_proxy_llm_calls_total.
    logging.getLogger("instructor").setLevel(logging.CRITICAL)


class _Stderr(logging.Handler):
    """stdlib records to stderr as it is at each line (as structlog's logger above)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never raise into the caller
            self.handleError(record)


log = structlog.get_logger("memory_proxy")
