"""Formation jobs: jobs list, retry."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ..settings import Settings
from .common import run_with_services

if TYPE_CHECKING:
    from ..services import Services


def _jobs_list(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import jobs

    async def show(services: Services) -> tuple[dict[str, int], list[dict[str, Any]]]:
        async with services.pool.connection() as conn:
            return await jobs.status_counts(conn), await jobs.list_jobs(conn, status=args.status, limit=args.limit)

    counts, rows = run_with_services(settings, show)
    print("  ".join(f"{status}: {count}" for status, count in counts.items()))
    for row in rows:
        error = f"  error: {row['last_error']}" if row["last_error"] else ""
        print(f"{row['id']:>8}  {row['status']:<7} attempts={row['attempts']}  user={row['user_id']}"
              f"  created={row['created_at']:%Y-%m-%d %H:%M:%S}{error}")
    return 0


def _jobs_retry(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import jobs

    async def retry(services: Services) -> int:
        async with services.pool.connection() as conn:
            return await jobs.retry_dead(conn, args.id)

    print(f"{run_with_services(settings, retry)} dead job(s) queued again")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    job = commands.add_parser("jobs", help="inspect and retry formation jobs")
    job_commands = job.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    listing = job_commands.add_parser("list", help="job counts by status and the latest jobs")
    listing.add_argument("--status", choices=["queued", "running", "done", "dead"], help="only this status")
    listing.add_argument("--limit", type=int, default=20, help="how many jobs to show (default 20)")
    listing.set_defaults(run=_jobs_list)
    retry = job_commands.add_parser("retry", help="queue dead jobs again (all, or one by --id)")
    retry.add_argument("--id", type=int, help="only this job")
    retry.set_defaults(run=_jobs_retry)
