"""The `memory-proxy` command: serve | migrate | memories add | settings."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import httpx

from .settings import Settings, SettingsError, load_settings, markdown_table


def _serve(settings: Settings, _: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app

    app = create_app(settings)
    uvicorn.run(
        app, host=settings.server.host, port=settings.server.port,
        http="httptools", loop="uvloop" if sys.platform != "win32" else "asyncio",
        log_level="warning", access_log=False, lifespan="on",
    )
    return 0


def _migrate(settings: Settings, _: argparse.Namespace) -> int:
    from .services import database_url
    from .store.database import migrate

    async def run() -> list[str]:
        return await migrate(await database_url(settings))

    applied = asyncio.run(run())
    print("applied: " + ", ".join(applied) if applied else "database is up to date")
    return 0


def _memories_add(settings: Settings, args: argparse.Namespace) -> int:
    from .services import database_url
    from .memory.embed import build_embedder, embed_one
    from .store import memories
    from .store.database import make_pool, migrate

    text = " ".join(args.text).strip()
    if not text:
        print("error: the memory text is empty", file=sys.stderr)
        return 2

    async def run() -> str:
        conninfo = await database_url(settings)
        await migrate(conninfo)
        async with httpx.AsyncClient(timeout=30) as client:
            embedder = build_embedder(settings.embedding, client)
            vector = await embed_one(embedder, text)
        async with make_pool(conninfo, 1) as pool, pool.connection() as conn:
            return await memories.insert_memory(
                conn, user_id=args.user, content=text, embedding=vector, model=embedder.model)

    print(asyncio.run(run()))
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

    mem = commands.add_parser("memories", help="manage memories by hand")
    mem_commands = mem.add_subparsers(dest="memories_command", required=True, metavar="ACTION")
    add = mem_commands.add_parser("add", help="embed TEXT and store it as a memory of --user")
    add.add_argument("--user", required=True, help="the user id (as sent in the user id header)")
    add.add_argument("text", nargs="+", help="the memory, e.g. 'User is a software engineer.'")
    add.set_defaults(run=_memories_add)
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
