"""The long-lived resources of a running proxy or worker, opened and closed in one place."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from .breaker import Breaker
from .chat.model_list import ModelsCache
from .chat.outbox import Outbox
from .chat.upstream import Upstream, make_clients
from .embedding.embedders import Embedder, WordsEmbedder, build_embedder
from .errors import MemoryUnavailable
from .formation.memory_llm import MemoryLLM
from .http.group_mirror import GroupMirror
from .limits.limiter import Limiter
from .observability import DATABASE_RESTARTS, log
from .redact.scan_pool import Scanner
from .retrieval.about_user import AboutUser
from .retrieval.indexes import Indexes
from .retrieval.use_counts import UseCounts
from .settings import Settings
from .store.database import make_pool, migrate
from .store.embedded import EmbeddedPostgres
from .tools.refusals import ToolLessModels


@dataclass(frozen=True)
class Services:
    settings: Settings
    pool: AsyncConnectionPool
    upstream: Upstream
    embedder: Embedder
    about_user: AboutUser  # whether a question asks about the user as a whole (the embedder decides)
    limiter: Limiter  # fair use per key, user and model, shared by every replica
    llm: MemoryLLM
    ready: asyncio.Event  # set once the database answered and is migrated
    outbox: Outbox
    clock: Callable[[], datetime]  # when a turn or an API-created memory is stated (benchmarks replay days)
    uses: UseCounts  # injections counted for ranking, written in batches
    indexes: Indexes  # users' memories held between turns, searched without the database
    scanner: Scanner  # secret scans and fact checks off the event loop (worker processes, started on first use)
    mirror: GroupMirror  # the user's teams mirrored from OpenWebUI's groups (TEAM_MIRROR)
    breaker: Breaker = field(default_factory=Breaker)  # retrieval skips a database that keeps failing
    embedder_breaker: Breaker = field(default_factory=lambda: Breaker("embedder"))  # … and an embedder: recent memories
    models: ModelsCache = field(default_factory=ModelsCache)  # the last good /v1/models, for a busy upstream
    tool_less: ToolLessModels = field(default_factory=ToolLessModels)  # models that refused our memory tools
    direct_conninfo: str = ""  # for what needs a session (LISTEN): DATABASE_DIRECT_URL behind a pooler

    def require_database(self) -> None:
        """Memory work needs the database answered and migrated: until then MemoryUnavailable("database_not_ready"),
        so a chat turn or a tool call goes on without memory, the API answers 503 and /readyz says why."""
        if not self.ready.is_set():
            raise MemoryUnavailable("database_not_ready", NOT_READY)


NOT_READY = "the database is not reachable or not migrated yet"


MIGRATE_TIMEOUT_S = 60.0  # one attempt: connecting plus applying the migrations
MIGRATE_RETRY_MAX_S = 30.0
START_WAIT_S = 3.0  # how long a start waits for the database before serving without memory
SUPERVISE_S = 1.0  # how often the embedded postmaster is checked (a file read and a pid check)


async def migrate_when_reachable(conninfo: str, ready: asyncio.Event) -> None:
    """Migrate as soon as the database answers, retrying with backoff (1 s doubling to 30 s), then set
    `ready`. Until then the proxy relays chat without memory, holds formation jobs and /readyz is 503."""
    delay = 1.0
    while True:
        try:
            async with asyncio.timeout(MIGRATE_TIMEOUT_S):
                applied = await migrate(conninfo)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("database_unavailable", error=f"{type(exc).__name__}: {exc}"[:300], retry_in_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, MIGRATE_RETRY_MAX_S)
            continue
        if applied:
            log.info("migrations_applied", names=applied)
        ready.set()
        return


@asynccontextmanager
async def database(settings: Settings) -> AsyncIterator[str]:
    """DATABASE_URL, or the embedded PostgreSQL under the data dir for as long as the block runs, kept
    running by `supervise` (a postmaster that dies is started again). Started and stopped in a thread
    (about a second); stopped explicitly, because atexit never runs when uvicorn re-raises SIGTERM."""
    if settings.database.url:
        yield settings.database.url
        return
    embedded = await asyncio.to_thread(EmbeddedPostgres, settings.server.data_dir / "postgres")
    supervisor = asyncio.create_task(supervise(embedded))
    try:
        yield embedded.uri
    finally:
        supervisor.cancel()
        with suppress(asyncio.CancelledError):
            await supervisor
        await asyncio.to_thread(embedded.stop)


def direct_conninfo(settings: Settings, conninfo: str) -> str:
    """Where what needs a session goes (migrations' advisory lock, LISTEN): DATABASE_DIRECT_URL when
    DATABASE_URL is a transaction-mode pooler, else the database itself."""
    return (settings.database.url and settings.database.direct_url) or conninfo


async def supervise(embedded: EmbeddedPostgres) -> None:
    """Check every SUPERVISE_S that the embedded postmaster runs; start it again when it does not, with
    backoff (1 s doubling to 30 s) while starting fails; logged and counted either way."""
    delay = SUPERVISE_S
    while True:
        await asyncio.sleep(delay)
        try:
            restarted = await asyncio.to_thread(embedded.restart_if_stopped)
        except Exception as exc:  # noqa: BLE001 - pg_ctl failed or timed out: try again later, never die
            DATABASE_RESTARTS.labels("failed").inc()
            log.warning("embedded_database_restart_failed", error=f"{type(exc).__name__}: {exc}"[:300],
                        retry_in_s=delay)
            delay = min(delay * 2, MIGRATE_RETRY_MAX_S)
            continue
        if restarted:
            DATABASE_RESTARTS.labels("restarted").inc()
            log.warning("embedded_database_restarted", reason="the postmaster was not running")
        delay = SUPERVISE_S


@asynccontextmanager
async def open_services(settings: Settings, http_client: httpx.AsyncClient | None = None, *,
                        wait_for_database: bool = True, search_index: bool = False,
                        clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> AsyncIterator[Services]:
    """Database (migrated), pool, HTTP clients, embedder, memory LLM and the scanner's worker processes; all
    closed on exit.
    A given `http_client` (tests: mocked by respx) is used for every outside call and not closed here.
    With `wait_for_database` false (serve, worker) a database that is down does not stop the start:
    it is migrated in the background when it answers (`services.ready`). `search_index` (the chat
    server): users' memories held for search, with their change listener (retrieval/indexes.py); the CLI and
    the standalone worker do without (no listener connection)."""
    async with database(settings) as conninfo:
        direct = direct_conninfo(settings, conninfo)
        ready = asyncio.Event()
        if wait_for_database:
            applied = await migrate(direct)
            if applied:
                log.info("migrations_applied", names=applied)
            ready.set()
            schema = None
        else:
            schema = asyncio.create_task(migrate_when_reachable(direct, ready))
            with suppress(TimeoutError):  # a reachable database: start ready; a down one: start anyway
                await asyncio.wait_for(ready.wait(), START_WAIT_S)
        async with make_pool(conninfo, settings.database.pool_size, pooler=direct != conninfo) as pool:
            clients = [http_client] if http_client else make_clients(settings.upstream)
            upstream = Upstream(settings.upstream, clients)
            outbox = Outbox(pool, ready, settings.server.data_dir / "outbox",
                            rejected_days=settings.maintenance.dead_job_days)
            stop_outbox = asyncio.Event()
            embedder = build_embedder(settings.embedding, upstream.pick)
            tokenize = (embedder.tokens_sync  # late interaction (retrieval/late_interaction.py): the local model's word states
                        if isinstance(embedder, WordsEmbedder) and settings.retrieval.ranking.late_weight > 0 else None)
            services = Services(settings=settings, pool=pool, upstream=upstream, embedder=embedder,
                                about_user=AboutUser(embedder),
                                limiter=Limiter(settings.limits, pool), llm=MemoryLLM(settings.memory_llm, clients[0]), ready=ready, outbox=outbox,
                                clock=clock, uses=UseCounts(pool),
                                indexes=Indexes(pool, model=settings.embedding.model,
                                                budget_bytes=settings.retrieval.index_mb << 20 if search_index else 0,
                                                tokenize=tokenize),
                                scanner=Scanner(workers=settings.server.scan_workers,
                                                timeout_s=settings.server.scan_timeout_s),
                                mirror=GroupMirror(settings.team_mirror, pool, clients[0]),
                                models=ModelsCache(settings.upstream.models_cache_max_age),
                                direct_conninfo=direct)
            holding = search_index and settings.retrieval.index_mb > 0
            outbox_task = asyncio.create_task(outbox.run(stop_outbox))
            uses_task = asyncio.create_task(services.uses.run(stop_outbox))
            limits_task = asyncio.create_task(services.limiter.run(stop_outbox))
            index_task = asyncio.create_task(services.indexes.run(direct, stop_outbox) if holding
                                             else stop_outbox.wait())
            await services.embedder.warm_up()  # before serving: the first turn retrieves within its budget
            try:
                yield services
            finally:
                stop_outbox.set()
                await asyncio.gather(outbox_task, uses_task, limits_task, index_task, services.models.close(), services.mirror.close())
                await services.scanner.close()
                if schema:
                    schema.cancel()
                    with suppress(asyncio.CancelledError):
                        await schema
                if http_client is None:
                    await upstream.aclose()
