"""The `memory-proxy` command: serve | worker | migrate | memories | jobs | settings."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .settings import Settings, SettingsError, load_settings, markdown_table

if TYPE_CHECKING:
    from .services import Services


def _serve(settings: Settings, _: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app

    app = create_app(settings)
    uvicorn.run(
        app, host=settings.server.host, port=settings.server.port,
        http="httptools", loop="uvloop" if sys.platform != "win32" else "asyncio",
        log_level="warning", access_log=False, lifespan="on",
        timeout_graceful_shutdown=settings.server.shutdown_timeout,  # a stuck stream cannot hold the exit
    )
    return 0


def _migrate(settings: Settings, _: argparse.Namespace) -> int:
    from .services import database
    from .store.database import migrate

    async def run() -> list[str]:
        async with database(settings) as conninfo:
            return await migrate(conninfo)

    applied = asyncio.run(run())
    print("applied: " + ", ".join(applied) if applied else "database is up to date")
    return 0


def _run_with_services(settings: Settings, work: Callable[[Services], Awaitable[Any]],
                       wait_for_database: bool = True) -> Any:
    """Open the database and outside clients, run `work`, close everything."""
    from .services import open_services

    async def run() -> Any:
        async with open_services(settings, wait_for_database=wait_for_database) as services:
            return await work(services)

    return asyncio.run(run())


def _memories_add(settings: Settings, args: argparse.Namespace) -> int:
    from .memory.embed import embed_one
    from .memory.redact import redact
    from .store import memories

    text = redact(" ".join(args.text).strip()).text
    if not text:
        print("error: the memory text is empty", file=sys.stderr)
        return 2

    async def add(services: Services) -> str:
        vector = await embed_one(services.embedder, text)
        async with services.pool.connection() as conn:
            if args.is_global:
                return await memories.insert_global_memory(conn, content=text, embedding=vector,
                                                           model=services.embedder.model)
            return await memories.insert_memory(conn, user_id=args.user, content=text, embedding=vector,
                                                model=services.embedder.model)

    print(_run_with_services(settings, add))
    return 0


def _memories_load_global(settings: Settings, args: argparse.Namespace) -> int:
    """One global memory per non-empty line of FILE (lines starting with # are comments); idempotent."""
    from .store import memories

    lines = [line.strip() for line in Path(args.file).read_text(encoding="utf-8").splitlines()]
    texts = [line for line in lines if line and not line.startswith("#")]

    async def load(services: Services) -> list[str]:
        vectors = await services.embedder.embed(texts) if texts else []
        async with services.pool.connection() as conn:
            return [await memories.insert_global_memory(conn, content=text, embedding=vector,
                                                        model=services.embedder.model)
                    for text, vector in zip(texts, vectors, strict=True)]

    ids = _run_with_services(settings, load)
    print(f"{len(ids)} global memories loaded ({len(set(ids))} distinct)")
    return 0


def _worker(settings: Settings, _: argparse.Namespace) -> int:
    """The formation worker as its own process; SIGTERM/SIGINT finish or release running jobs."""
    from .observability import log
    from .worker import Worker

    async def work(services: Services) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        worker = Worker(pool=services.pool, embedder=services.embedder, llm=services.llm,
                        settings=settings.formation)
        log.info("worker_started", worker_id=worker.worker_id, concurrency=settings.formation.concurrency)
        await worker.run(stop, settings.server.shutdown_timeout, services.ready)

    _run_with_services(settings, work, wait_for_database=False)  # a database down at start is waited for
    return 0


def _jobs_list(settings: Settings, args: argparse.Namespace) -> int:
    from .store import jobs

    async def show(services: Services) -> tuple[dict[str, int], list[dict[str, Any]]]:
        async with services.pool.connection() as conn:
            return await jobs.status_counts(conn), await jobs.list_jobs(conn, status=args.status, limit=args.limit)

    counts, rows = _run_with_services(settings, show)
    print("  ".join(f"{status}: {count}" for status, count in counts.items()))
    for row in rows:
        error = f"  error: {row['last_error']}" if row["last_error"] else ""
        print(f"{row['id']:>8}  {row['status']:<7} attempts={row['attempts']}  user={row['user_id']}"
              f"  created={row['created_at']:%Y-%m-%d %H:%M:%S}{error}")
    return 0


def _jobs_retry(settings: Settings, args: argparse.Namespace) -> int:
    from .store import jobs

    async def retry(services: Services) -> int:
        async with services.pool.connection() as conn:
            return await jobs.retry_dead(conn, args.id)

    print(f"{_run_with_services(settings, retry)} dead job(s) queued again")
    return 0


def _settings(_: Settings | None, args: argparse.Namespace) -> int:
    print(markdown_table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-proxy",
        description="OpenAI-compatible chat proxy with long-term per-user memory. "
                    "Configured by environment variables: see `memory-proxy settings`.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("serve", help="run the proxy (migrates the database first)").set_defaults(run=_serve)
    commands.add_parser("migrate", help="apply pending database migrations").set_defaults(run=_migrate)
    commands.add_parser("settings", help="print the configuration table (Markdown)").set_defaults(
        run=_settings, needs_settings=False)

    commands.add_parser("worker", help="run the formation worker as its own process").set_defaults(run=_worker)

    mem = commands.add_parser("memories", help="manage memories by hand")
    mem_commands = mem.add_subparsers(dest="memories_command", required=True, metavar="ACTION")
    add = mem_commands.add_parser("add", help="embed TEXT and store it as a memory of --user (or --global)")
    owner = add.add_mutually_exclusive_group(required=True)
    owner.add_argument("--user", help="the user id (as sent in the user id header)")
    owner.add_argument("--global", dest="is_global", action="store_true",
                       help="a global memory, seen by users with fewer than 5 memories of their own")
    add.add_argument("text", nargs="+", help="the memory, e.g. 'User is a software engineer.'")
    add.set_defaults(run=_memories_add)
    load = mem_commands.add_parser("load-global", help="load global (cold-start) memories from FILE, one per line")
    load.add_argument("file", help="a UTF-8 text file; empty lines and lines starting with # are skipped")
    load.set_defaults(run=_memories_load_global)

    job = commands.add_parser("jobs", help="inspect and retry formation jobs")
    job_commands = job.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    listing = job_commands.add_parser("list", help="job counts by status and the latest jobs")
    listing.add_argument("--status", choices=["queued", "running", "done", "dead"], help="only this status")
    listing.add_argument("--limit", type=int, default=20, help="how many jobs to show (default 20)")
    listing.set_defaults(run=_jobs_list)
    retry = job_commands.add_parser("retry", help="queue dead jobs again (all, or one by --id)")
    retry.add_argument("--id", type=int, help="only this job")
    retry.set_defaults(run=_jobs_retry)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not getattr(args, "needs_settings", True):
        return int(args.run(None, args))
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"memory-proxy: {exc}", file=sys.stderr)
        return 2
    from .observability import configure_logging

    configure_logging(settings.log.level, settings.log.format)
    return int(args.run(settings, args))


if __name__ == "__main__":
    sys.exit(main())
