"""Running the proxy: serve, worker, migrate, settings."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import TYPE_CHECKING

from ..settings import Settings, markdown_table
from .common import add_setting_flag, run_with_services

if TYPE_CHECKING:
    from ..services import Services


def _serve(settings: Settings, _: argparse.Namespace) -> int:
    import uvicorn

    from ..app import create_app

    app = create_app(settings, warm_scanner=True)
    uvicorn.run(
        app, host=settings.server.host, port=settings.server.port,
        http="httptools", loop="uvloop" if sys.platform != "win32" else "asyncio",
        log_level="warning", access_log=False, lifespan="on",
        log_config=None,  # uvicorn's lines go through our handler (observability.configure_logging): JSON too
        timeout_graceful_shutdown=settings.server.shutdown_timeout,  # a stuck stream cannot hold the exit
    )
    return 0


def _migrate(settings: Settings, _: argparse.Namespace) -> int:
    from ..services import database, direct_conninfo
    from ..store.database import migrate

    async def run() -> list[str]:
        async with database(settings) as conninfo:
            return await migrate(direct_conninfo(settings, conninfo))

    applied = asyncio.run(run())
    print("applied: " + ", ".join(applied) if applied else "database is up to date")
    return 0


def _worker(settings: Settings, _: argparse.Namespace) -> int:
    """The formation worker as its own process; SIGTERM/SIGINT finish or release running jobs."""
    from ..formation.worker import Worker
    from ..observability import log

    async def work(services: Services) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        worker = Worker.from_services(services)
        log.info("worker_started", worker_id=worker.worker_id, concurrency=settings.formation.concurrency)
        await worker.run(stop, settings.server.shutdown_timeout, services.ready)

    run_with_services(settings, work, wait_for_database=False)  # a database down at start is waited for
    return 0


def _settings(_: Settings | None, args: argparse.Namespace) -> int:
    print(markdown_table())
    return 0


def _add_log_level(parser: argparse.ArgumentParser) -> None:
    add_setting_flag(parser, "--log-level", "LOG_LEVEL", "debug, info, warning or error", metavar="LEVEL")


def add_commands(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="run the proxy (migrates the database first)")
    add_setting_flag(serve, "--host", "MEMORY_PROXY_HOST", "address to listen on", metavar="ADDRESS")
    add_setting_flag(serve, "--port", "MEMORY_PROXY_PORT", "port to listen on", metavar="PORT")
    _add_log_level(serve)
    serve.set_defaults(run=_serve)
    commands.add_parser("migrate", help="apply pending database migrations").set_defaults(run=_migrate)
    commands.add_parser("settings", help="print the configuration table (Markdown)").set_defaults(
        run=_settings, needs_settings=False)

    # the worker serves nothing over HTTP: no --host or --port
    worker = commands.add_parser("worker", help="run the formation worker as its own process")
    _add_log_level(worker)
    worker.set_defaults(run=_worker)
