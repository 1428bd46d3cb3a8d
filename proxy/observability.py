"""Logging (structlog) and every Prometheus metric, each defined here once.

Label values are small closed sets (route, kind, outcome, reason): never user ids or memory ids,
so the number of time series stays bounded whatever the number of users.
"""

from __future__ import annotations

import logging
import sys

import structlog
from prometheus_client import Counter, Gauge, Histogram

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
    "Turns relayed without memory because the memory side failed, by reason "
    "(embedder_error, embedder_timeout, database_error, database_timeout).",
    ["reason"],
)

# ---- memory formation
MEMORY_LINKS = Gauge(
    "memory_proxy_memories",
    "Active memories, counted as user-memory links (a shared memory counts once per user). No per-user "
    "label: one series per user would grow without bound; per-user counts are in the database.",
)
MEMORY_USERS = Gauge("memory_proxy_memory_users", "Users holding at least one memory.")
DECISIONS = Counter(
    "memory_proxy_decisions_total",
    "Formation decisions by action (add, replace, refine, ignore). Replacement rate: "
    "rate(…{action=~\"replace|refine\"}) / rate(…); dedup rate: rate(…{action=\"ignore\"}) / rate(…).",
    ["action"],
)
JOB_EVENTS = Counter(
    "memory_proxy_jobs_total",
    "Formation job events: enqueued (written), held (database unavailable: kept in memory and retried), "
    "dropped (outbox full, or held at exit), completed, retried, dead, skipped (trivial turn).",
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
LLM_CALLS = Counter("memory_proxy_llm_calls_total", "Memory-LLM calls by purpose (extract, resolve) and outcome.",
                    ["purpose", "outcome"])
LLM_TOKENS = Counter("memory_proxy_llm_tokens_total", "Memory-LLM tokens by purpose and kind (prompt, completion).",
                     ["purpose", "kind"])


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """JSON lines in production, a readable console in development; stdlib logging routed through too."""
    level_no = getattr(logging, level.upper())
    renderer = (structlog.processors.JSONRenderer() if fmt == "json"
                else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level_no),
        logger_factory=lambda *_: structlog.PrintLogger(sys.stderr),  # stderr as it is now, not at setup
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(level_no, logging.WARNING), stream=sys.stderr, format="%(name)s %(message)s")


log = structlog.get_logger("memory_proxy")
