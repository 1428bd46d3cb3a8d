"""Keeping stored memories in shape: reembed, maintain."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..settings import Settings
from .common import run_with_services, user_id_argument

if TYPE_CHECKING:
    from ..services import Services


def _reembed(settings: Settings, args: argparse.Namespace) -> int:
    from ..embedding.reembed import reembed

    async def run(services: Services) -> int:
        return await reembed(services.pool, services.embedder, batch=args.batch, dry_run=args.dry_run)

    count = run_with_services(settings, run)
    model = settings.embedding.model
    print(f"{count} vector(s) to re-embed with {model} (dry run: nothing changed)" if args.dry_run
          else f"{count} vector(s) re-embedded with {model}")
    return 0


def _maintain(settings: Settings, args: argparse.Namespace) -> int:
    from ..formation.maintain import maintain

    async def run(services: Services) -> dict[str, int]:
        return await maintain(services.pool, settings.maintenance, user_id=args.user)

    counts = run_with_services(settings, run)
    print("  ".join(f"{action}: {count}" for action, count in counts.items()) or "nothing to do")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
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
