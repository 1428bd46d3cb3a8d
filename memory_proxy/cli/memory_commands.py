"""Memories by hand: memories add, load-global, list, export, import."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..settings import Settings
from .common import run_with_services, user_id_argument

if TYPE_CHECKING:
    from ..services import Services


def _storable(raw: str) -> tuple[str, str | None]:
    """A memory's text as every stored memory is (memory.content), and why it cannot be stored, if so."""
    from ..formation.memory_text import memory_content

    content = memory_content(raw)
    return content.text, content.problem


def _memories_add(settings: Settings, args: argparse.Namespace) -> int:
    from ..embedding.embedders import embed_one
    from ..embedding.memory_document import embedding_text
    from ..store import memories

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
                return await memories.add_global_memory(conn, content=text, embedding=vector,
                                                           model=services.embedder.model)
            return await memories.add_or_find_memory(conn, user_id=args.user, content=text, embedding=vector,
                                                model=services.embedder.model, stated_at=stated_at)

    print(run_with_services(settings, add))
    return 0


def _memories_load_global(settings: Settings, args: argparse.Namespace) -> int:
    """One global memory per non-empty line of FILE (lines starting with # are comments); idempotent."""
    from ..store import memories

    lines = [_storable(line) for line in Path(args.file).read_text(encoding="utf-8").splitlines()]
    texts = [text for text, problem in lines if not problem and not text.startswith("#")]
    for number, (_, problem) in enumerate(lines, 1):
        if problem and problem != "the memory text is empty":
            print(f"warning: line {number} skipped: {problem}", file=sys.stderr)

    async def load(services: Services) -> list[str]:
        vectors = await services.embedder.embed(texts) if texts else []
        async with services.pool.connection() as conn:
            return [await memories.add_global_memory(conn, content=text, embedding=vector,
                                                        model=services.embedder.model)
                    for text, vector in zip(texts, vectors, strict=True)]

    ids = run_with_services(settings, load)
    print(f"{len(ids)} global memories loaded ({len(set(ids))} distinct)")
    return 0


def _memories_list(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import transfer

    async def show(services: Services) -> list[dict[str, Any]]:
        async with services.pool.connection() as conn:
            return await transfer.active_memories(conn, args.user, limit=args.limit)

    rows = run_with_services(settings, show)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False, default=datetime.isoformat))
        return 0
    for row in rows:
        print(f"{row['id']}  {row['stated_at']:%Y-%m-%d}  {row['memory_type']:<12} "
              f"{'pinned' if row['pinned'] else '      '}  {row['content']}")
    print(f"{len(rows)} active memor{'y' if len(rows) == 1 else 'ies'} of {args.user}", file=sys.stderr)
    return 0


def _memories_export(settings: Settings, args: argparse.Namespace) -> int:
    from ..api import export_format
    from ..store import manage

    async def read(services: Services) -> dict[str, Any]:
        async with services.pool.connection() as conn:
            return await manage.export(conn, args.user)

    document = export_format.document(args.user, run_with_services(settings, read), datetime.now(UTC))
    if args.format == "markdown":
        text = export_format.markdown(document)
    else:
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"{len(document['memories'])} memories of {args.user} written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


IMPORT_EMBED_BATCH = 64


def _memories_import(settings: Settings, args: argparse.Namespace) -> int:
    from ..api import export_format
    from ..embedding.memory_document import embedding_text
    from ..store import transfer

    try:
        file_user, items = export_format.read(json.loads(Path(args.file).read_text(encoding="utf-8")))
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

    added, skipped = run_with_services(settings, load)
    print(f"{added} memories imported for {user_id}, {skipped} already present (skipped)")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
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
    export = mem_commands.add_parser("export", help="write everything held for a user as JSON (the API's export, "
                                                    "re-importable) or Markdown (to read)")
    export.add_argument("--user", required=True, type=user_id_argument, help="the user id")
    export.add_argument("--format", choices=["json", "markdown"], default="json", help="default json")
    export.add_argument("--output", metavar="FILE", help="write to FILE instead of standard output")
    export.set_defaults(run=_memories_export)
    importing = mem_commands.add_parser(
        "import", help="import a JSON export: re-embedded with the configured model, dates, types and pins kept; "
                       "memories the user already holds are skipped (idempotent)")
    importing.add_argument("file", help="a JSON export (`memories export` or GET /api/v1/export)")
    importing.add_argument("--user", type=user_id_argument, help="import for this user instead of the one named in the file")
    importing.set_defaults(run=_memories_import)
