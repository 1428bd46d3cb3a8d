"""API keys: keys create, list, revoke."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..settings import Settings
from .common import run_with_services, user_id_argument

if TYPE_CHECKING:
    from ..services import Services


def _keys_create(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import keys

    async def create(services: Services) -> tuple[str, str]:
        async with services.pool.connection() as conn:
            return await keys.create_key(conn, user_id=None if args.admin else args.user, label=args.label)

    key_id, secret = run_with_services(settings, create)
    print(f"key id: {key_id}\nkey:    {secret}")
    print("Store the key now: it is not shown again (only its id is kept).", file=sys.stderr)
    return 0


def _keys_revoke(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import keys

    async def revoke(services: Services) -> bool:
        async with services.pool.connection() as conn:
            return await keys.revoke_key(conn, args.key_id)

    if not run_with_services(settings, revoke):
        print(f"error: no active key {args.key_id}", file=sys.stderr)
        return 1
    print(f"key {args.key_id} revoked")
    return 0


def _keys_list(settings: Settings, _: argparse.Namespace) -> int:
    from ..store import keys

    async def show(services: Services) -> list[dict[str, Any]]:
        async with services.pool.connection() as conn:
            return await keys.list_keys(conn)

    for row in run_with_services(settings, show):
        print("  ".join(f"{name}={value:%Y-%m-%d %H:%M:%S}" if isinstance(value, datetime) else f"{name}={value}"
                        for name, value in row.items()))
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
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
