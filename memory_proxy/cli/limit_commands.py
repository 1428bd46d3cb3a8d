"""Fair use: limits list, set, remove, usage, key-id (docs/LIMITS.md). The rules of the API's (api/limit_routes.py)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..settings import Settings
from .common import with_connection

LIMIT_FLAGS = {"rpm": "requests a minute", "tpm": "tokens a minute (prompt and completion)",
               "concurrent": "requests at once", "daily_tokens": "tokens a UTC day"}


def _positive(raw: str) -> int:
    try:
        number = int(raw)
    except ValueError:
        number = 0
    if not 1 <= number <= 2**62:
        raise argparse.ArgumentTypeError("must be a positive whole number")
    return number


def _shown(values: dict[str, Any]) -> str:
    return "  ".join(f"{name}={values[name]}" for name in LIMIT_FLAGS if values.get(name) is not None) or "none"


def _list(settings: Settings, _: argparse.Namespace) -> int:
    from ..store import limits

    for kind, values in (("key", settings.limits.key), ("user", settings.limits.user),
                         ("model", settings.limits.model)):
        print(f"default {kind}: {_shown(dict(values))}")
    for limit in with_connection(settings, limits.list_limits):
        print(f"{limit.kind} {limit.subject}: {_shown(limit.as_dict())}")
    return 0


def _set(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import limits

    limit = limits.Limit(args.kind, args.subject, **{name: getattr(args, name) for name in LIMIT_FLAGS})
    with_connection(settings, lambda conn: limits.set_limit(conn, limit))
    print(f"{args.kind} {args.subject}: {_shown(limit.as_dict()) if limit.limits_anything else 'the defaults'} "
          "(in force on every replica within seconds)")
    return 0


def _remove(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import limits

    if not with_connection(settings, lambda conn: limits.delete_limit(conn, args.kind, args.subject)):
        print(f"error: no limits of their own for {args.kind} {args.subject}", file=sys.stderr)
        return 1
    print(f"{args.kind} {args.subject}: the defaults again")
    return 0


def _usage(settings: Settings, args: argparse.Namespace) -> int:
    from ..store import limits

    for use in with_connection(settings, lambda conn: limits.usage(conn, args.kind, args.subject, args.limit)):
        print(f"{use.kind} {use.subject}: today {use.requests_today} requests, {use.tokens_today} tokens; "
              f"last minute {use.requests_minute:.0f} requests, {use.tokens_minute:.0f} tokens; "
              f"{use.in_flight} places at once held")
    return 0


def _key_id(_: Settings | None, args: argparse.Namespace) -> int:
    from ..limits.limiter import key_id

    key = sys.stdin.readline().strip() if args.key == "-" else args.key
    print(key_id(key))
    return 0


def _checked(run: Any) -> Any:
    """`run` with its kind and subject checked by the API's rule (a mistake: exit status 2)."""
    def checked(settings: Settings, args: argparse.Namespace) -> int:
        from ..api.limit_routes import checked_subject
        from ..errors import BadRequest

        try:
            args.kind, args.subject = checked_subject(args.kind, args.subject)
        except BadRequest as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
        result: int = run(settings, args)
        return result
    return checked


def add_commands(commands: argparse._SubParsersAction) -> None:
    from ..store.limits import KINDS

    limit = commands.add_parser("limits", help="fair use: limits per API key, user and model, and their use")
    actions = limit.add_subparsers(dest="limits_command", required=True, metavar="ACTION")
    actions.add_parser("list", help="the defaults and every limit set").set_defaults(run=_list)
    for name, run, what in (("set", _set, "set a subject's limits (none given: the defaults again)"),
                            ("remove", _remove, "remove a subject's own limits")):
        action = actions.add_parser(name, help=what)
        action.add_argument("kind", choices=KINDS)
        action.add_argument("subject", help="a key's fingerprint (`limits key-id`), a user id or a model; "
                            "`*`: every one of that kind without its own")
        if name == "set":
            for flag, meaning in LIMIT_FLAGS.items():
                action.add_argument(f"--{flag.replace('_', '-')}", dest=flag, type=_positive, metavar="N",
                                    help=meaning)
        action.set_defaults(run=_checked(run))
    usage = actions.add_parser("usage", help="use today and in the last minute, busiest first")
    usage.add_argument("--kind", choices=KINDS)
    usage.add_argument("--subject")
    usage.add_argument("--limit", type=int, default=50)
    usage.set_defaults(run=_usage)
    key = actions.add_parser("key-id", help="a proxy API key's fingerprint, how limits name it ('-': read stdin)")
    key.add_argument("key")
    key.set_defaults(run=_key_id, needs_settings=False)
