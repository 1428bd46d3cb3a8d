"""Helpers shared by the command modules: running work with services, --user values, setting flags, the
log pseudonym key."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..services import Services
    from ..settings import Settings


def run_with_services(settings: Settings, work: Callable[[Services], Awaitable[Any]],
                      wait_for_database: bool = True) -> Any:
    """Open the database and outside clients, run `work`, close everything."""
    from ..services import open_services

    async def run() -> Any:
        async with open_services(settings, wait_for_database=wait_for_database) as services:
            return await work(services)

    return asyncio.run(run())


def with_connection(settings: Settings, work: Callable[[Any], Awaitable[Any]]) -> Any:
    """`work(conn)`'s result, on a connection of the services' pool."""
    async def run(services: Services) -> Any:
        async with services.pool.connection() as conn:
            return await work(conn)

    return run_with_services(settings, run)


def api_argument(check: Callable[..., Any], *args: Any) -> Any:
    """The API's check as an argparse type: the same rule, reported as a bad argument."""
    from ..errors import BadRequest

    try:
        return check(*args)
    except BadRequest as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc


def user_id_argument(raw: str) -> str:
    """A --user value, checked as every user id is (an empty one is an error, never "any user")."""
    from ..http.auth import checked_user_id

    user_id: str = api_argument(checked_user_id, raw, "--user")
    return user_id


def log_user_id_key(settings: Settings) -> str:
    """LOG_USER_ID_KEY, or one generated on first start and kept in the data dir: a fixed key would let
    anyone recompute the pseudonym of a guessable id (an e-mail)."""
    from ..http.auth import LOG_KEY_FILE, stored_secret

    return settings.log.user_id_key or stored_secret(settings.server.data_dir / LOG_KEY_FILE)[0]


def _not_blank(raw: str) -> str:
    # an empty variable means "the default" to load_settings; an empty flag is a mistake
    if not raw.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return raw


def add_setting_flag(parser: argparse.ArgumentParser, flag: str, variable: str, help: str,
                     metavar: str) -> None:
    """Add `flag`, which stands in for the environment variable `variable` for this run.

    The value is not checked here: `main` passes it to `load_settings` under the variable's name, so it
    is validated (and reported) exactly as the variable would be."""
    parser.add_argument(flag, dest=_dest(flag), metavar=metavar, type=_not_blank,
                        help=f"{help} (overrides {variable})")
    parser.set_defaults(setting_flags={**(parser.get_default("setting_flags") or {}), flag: variable})


def given_setting_flags(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(flag, variable, value) of every setting flag on the command line."""
    return [(flag, variable, value) for flag, variable in getattr(args, "setting_flags", {}).items()
            if (value := getattr(args, _dest(flag))) is not None]


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")
