"""The `memory-proxy` command: serve | worker | migrate | memories | reembed | maintain | jobs | keys | settings."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
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


def _storable(raw: str) -> tuple[str, str | None]:
    """A memory's text as every stored memory is (memory.content), and why it cannot be stored, if so."""
    from .memory.content import memory_content

    content = memory_content(raw)
    return content.text, content.problem


def _memories_add(settings: Settings, args: argparse.Namespace) -> int:
    from .memory.document import embedding_text
    from .memory.embed import embed_one
    from .store import memories

    text, problem = _storable(" ".join(args.text))
    stated_at = datetime.now(UTC)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2

    async def add(services: Services) -> str:
        # a user's memory is embedded as formation embeds it (with its date); a global one bare, as load-global
        vector = await embed_one(services.embedder, text if args.is_global else embedding_text(text, stated_at))
        async with services.pool.connection() as conn:
            if args.is_global:
                return await memories.insert_global_memory(conn, content=text, embedding=vector,
                                                           model=services.embedder.model)
            return await memories.insert_memory(conn, user_id=args.user, content=text, embedding=vector,
                                                model=services.embedder.model, stated_at=stated_at)

    print(_run_with_services(settings, add))
    return 0


def _memories_load_global(settings: Settings, args: argparse.Namespace) -> int:
    """One global memory per non-empty line of FILE (lines starting with # are comments); idempotent."""
    from .store import memories

    lines = [_storable(line) for line in Path(args.file).read_text(encoding="utf-8").splitlines()]
    texts = [text for text, problem in lines if not problem and not text.startswith("#")]
    for number, (_, problem) in enumerate(lines, 1):
        if problem and problem != "the memory text is empty":
            print(f"warning: line {number} skipped: {problem}", file=sys.stderr)

    async def load(services: Services) -> list[str]:
        vectors = await services.embedder.embed(texts) if texts else []
        async with services.pool.connection() as conn:
            return [await memories.insert_global_memory(conn, content=text, embedding=vector,
                                                        model=services.embedder.model)
                    for text, vector in zip(texts, vectors, strict=True)]

    ids = _run_with_services(settings, load)
    print(f"{len(ids)} global memories loaded ({len(set(ids))} distinct)")
    return 0


def _memories_list(settings: Settings, args: argparse.Namespace) -> int:
    from .store import transfer

    async def show(services: Services) -> list[dict[str, Any]]:
        async with services.pool.connection() as conn:
            return await transfer.active_memories(conn, args.user, limit=args.limit)

    rows = _run_with_services(settings, show)
    if args.json:
        print(json.dumps(transfer.export_document(args.user, rows, datetime.now(UTC))["memories"], indent=2,
                         ensure_ascii=False))
        return 0
    for row in rows:
        print(f"{row['id']}  {row['stated_at']:%Y-%m-%d}  {row['memory_type']:<12} "
              f"{'pinned' if row['pinned'] else '      '}  {row['content']}")
    print(f"{len(rows)} active memor{'y' if len(rows) == 1 else 'ies'} of {args.user}", file=sys.stderr)
    return 0


def _memories_export(settings: Settings, args: argparse.Namespace) -> int:
    from .store import transfer

    async def read(services: Services) -> list[dict[str, Any]]:
        async with services.pool.connection() as conn:
            return await transfer.active_memories(conn, args.user, with_expired=True)

    rows = _run_with_services(settings, read)
    if args.format == "markdown":
        text = transfer.export_markdown(args.user, rows)
    else:
        text = json.dumps(transfer.export_document(args.user, rows, datetime.now(UTC)), indent=2,
                          ensure_ascii=False) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{len(rows)} memories of {args.user} written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


IMPORT_EMBED_BATCH = 64


def _memories_import(settings: Settings, args: argparse.Namespace) -> int:
    from .memory.document import embedding_text
    from .store import transfer

    try:
        file_user, items = transfer.parse_export(json.loads(Path(args.file).read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 2
    if not (args.user or file_user):
        print("error: the export names no user: pass --user", file=sys.stderr)
        return 2
    try:
        user_id = args.user or user_id_argument(file_user or "")
    except argparse.ArgumentTypeError as exc:
        print(f"error: {args.file}: {exc}", file=sys.stderr)
        return 2
    now = datetime.now(UTC)
    storable = []
    for item in items:
        item["content"], problem = _storable(item["content"])  # as every stored memory: before embedding
        item["stated_at"] = item["stated_at"] or now
        if problem:
            print(f"warning: skipped ({problem}): {item['content'][:60]!r}", file=sys.stderr)
        else:
            storable.append(item)
    items = storable

    async def load(services: Services) -> tuple[int, int]:
        added = skipped = 0
        for start in range(0, len(items), IMPORT_EMBED_BATCH):
            chunk = items[start:start + IMPORT_EMBED_BATCH]
            vectors = await services.embedder.embed([embedding_text(m["content"], m["stated_at"]) for m in chunk])
            async with services.pool.connection() as conn:
                for memory, vector in zip(chunk, vectors, strict=True):
                    new_id = await transfer.import_memory(conn, user_id=user_id, memory=memory, embedding=vector,
                                                          model=services.embedder.model)
                    added, skipped = (added + 1, skipped) if new_id else (added, skipped + 1)
        return added, skipped

    added, skipped = _run_with_services(settings, load)
    print(f"{added} memories imported for {user_id}, {skipped} already present (skipped)")
    return 0


def _reembed(settings: Settings, args: argparse.Namespace) -> int:
    from .memory.reembed import reembed

    async def run(services: Services) -> int:
        return await reembed(services.pool, services.embedder, batch=args.batch, dry_run=args.dry_run)

    count = _run_with_services(settings, run)
    model = settings.embedding.model
    print(f"{count} vector(s) to re-embed with {model} (dry run: nothing changed)" if args.dry_run
          else f"{count} vector(s) re-embedded with {model}")
    return 0


def _maintain(settings: Settings, args: argparse.Namespace) -> int:
    from .memory.maintain import maintain

    async def run(services: Services) -> dict[str, int]:
        return await maintain(services.pool, settings.maintenance, user_id=args.user)

    counts = _run_with_services(settings, run)
    print("  ".join(f"{action}: {count}" for action, count in counts.items()) or "nothing to do")
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
        worker = Worker.from_services(services)
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


def user_id_argument(raw: str) -> str:
    """A --user value, checked as every user id is (an empty one is an error, never "any user")."""
    from .auth import checked_user_id
    from .errors import BadRequest

    try:
        return checked_user_id(raw, "--user")
    except BadRequest as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


def _keys_create(settings: Settings, args: argparse.Namespace) -> int:
    from .store import keys

    async def create(services: Services) -> tuple[str, str]:
        async with services.pool.connection() as conn:
            return await keys.create_key(conn, user_id=None if args.admin else args.user, label=args.label)

    key_id, secret = _run_with_services(settings, create)
    print(f"key id: {key_id}\nkey:    {secret}")
    print("Store the key now: it is not shown again (only its id is kept).", file=sys.stderr)
    return 0


def _keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    from .store import keys

    async def revoke(services: Services) -> bool:
        async with services.pool.connection() as conn:
            return await keys.revoke_key(conn, args.key_id)

    if not _run_with_services(settings, revoke):
        print(f"error: no active key {args.key_id}", file=sys.stderr)
        return 1
    print(f"key {args.key_id} revoked")
    return 0


def _keys_list(settings: Settings, _: argparse.Namespace) -> int:
    from .store import keys

    async def show(services: Services) -> list[dict[str, Any]]:
        async with services.pool.connection() as conn:
            return await keys.list_keys(conn)

    for row in _run_with_services(settings, show):
        print("  ".join(f"{name}={value:%Y-%m-%d %H:%M:%S}" if isinstance(value, datetime) else f"{name}={value}"
                        for name, value in row.items()))
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
    owner.add_argument("--user", type=user_id_argument, help="the user id (as sent in the user id header)")
    owner.add_argument("--global", dest="is_global", action="store_true",
                       help="a global memory, seen by users with fewer than 5 memories of their own")
    add.add_argument("text", nargs="+", help="the memory, e.g. 'User is a software engineer.'")
    add.set_defaults(run=_memories_add)
    load = mem_commands.add_parser("load-global", help="load global (cold-start) memories from FILE, one per line")
    load.add_argument("file", help="a UTF-8 text file; empty lines and lines starting with # are skipped")
    load.set_defaults(run=_memories_load_global)
    show = mem_commands.add_parser("list", help="list a user's active memories (id, stated date, type, pin, text)")
    show.add_argument("--user", required=True, type=user_id_argument, help="the user id (as sent in the user id header)")
    show.add_argument("--limit", type=int, help="at most N memories, newest statement first (default: all)")
    show.add_argument("--json", action="store_true", help="print a JSON array instead of a table")
    show.set_defaults(run=_memories_list)
    export = mem_commands.add_parser("export", help="write a user's active memories as JSON (re-importable) "
                                                    "or Markdown (to read)")
    export.add_argument("--user", required=True, type=user_id_argument, help="the user id")
    export.add_argument("--format", choices=["json", "markdown"], default="json", help="default json")
    export.add_argument("--output", metavar="FILE", help="write to FILE instead of standard output")
    export.set_defaults(run=_memories_export)
    importing = mem_commands.add_parser(
        "import", help="import a JSON export: re-embedded with the configured model, dates, types and pins kept; "
                       "memories the user already holds are skipped (idempotent)")
    importing.add_argument("file", help="a file written by `memories export --format json`")
    importing.add_argument("--user", type=user_id_argument, help="import for this user instead of the one named in the file")
    importing.set_defaults(run=_memories_import)

    reembed = commands.add_parser(
        "reembed", help="re-embed stored memories with the configured EMBEDDING_MODEL (run after changing it)",
        description="Re-embed every stored vector whose model is not EMBEDDING_MODEL, in batches (one "
                    "transaction each). Until it has run, memories of the old model are not retrieved. "
                    "Idempotent and resumable: run it again after an interruption.")
    reembed.add_argument("--batch", type=int, default=64, help="vectors per embeddings call and transaction "
                                                               "(default 64)")
    reembed.add_argument("--dry-run", action="store_true", help="only count the vectors to re-embed")
    reembed.set_defaults(run=_reembed)

    maintain = commands.add_parser(
        "maintain", help="run memory maintenance now: expire, merge near-duplicates, prune",
        description="Run maintenance once (what a worker does every MAINTENANCE_INTERVAL_SECONDS) and print "
                    "how many memories each action touched.")
    maintain.add_argument("--user", type=user_id_argument, help="only this user's memories (default: every user)")
    maintain.set_defaults(run=_maintain)

    job = commands.add_parser("jobs", help="inspect and retry formation jobs")
    job_commands = job.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    listing = job_commands.add_parser("list", help="job counts by status and the latest jobs")
    listing.add_argument("--status", choices=["queued", "running", "done", "dead"], help="only this status")
    listing.add_argument("--limit", type=int, default=20, help="how many jobs to show (default 20)")
    listing.set_defaults(run=_jobs_list)
    retry = job_commands.add_parser("retry", help="queue dead jobs again (all, or one by --id)")
    retry.add_argument("--id", type=int, help="only this job")
    retry.set_defaults(run=_jobs_retry)

    key = commands.add_parser("keys", help="create, list and revoke API keys")
    key_commands = key.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = key_commands.add_parser("create", help="create an API key; its secret is printed once")
    whose = create.add_mutually_exclusive_group(required=True)
    whose.add_argument("--user", type=user_id_argument, help="a key that acts only for this user id")
    whose.add_argument("--admin", action="store_true", help="an admin key: read, write and erase for every user")
    create.add_argument("--label", default="", help="a note saying whose or what the key is for")
    create.set_defaults(run=_keys_create)
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id (clients using it get 401)")
    revoke.add_argument("key_id", help="the key id shown by `keys create` or `keys list`")
    revoke.set_defaults(run=_keys_revoke)
    key_commands.add_parser("list", help="list keys (ids, labels, users; never secrets)").set_defaults(run=_keys_list)
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

    configure_logging(settings.log.level, settings.log.format, user_ids=settings.log.user_ids,
                      user_id_key=log_user_id_key(settings), memory_text=settings.log.memory_text)
    return int(args.run(settings, args))


def log_user_id_key(settings: Settings) -> str:
    """LOG_USER_ID_KEY, or one generated on first start and kept in the data dir: a fixed key would let
    anyone recompute the pseudonym of a guessable id (an e-mail)."""
    from .auth import LOG_KEY_FILE, stored_secret

    return settings.log.user_id_key or stored_secret(settings.server.data_dir / LOG_KEY_FILE)[0]


if __name__ == "__main__":
    sys.exit(main())
