"""The `memory-proxy` command: serve | worker | migrate | memories | reembed | maintain | jobs | keys | teams | limits |
settings.

`build_parser` gathers the sub-commands of the modules beside this one; `main` reads the settings
(from the environment, with the flags of `serve` and `worker` in place of their variables), sets up
logging and runs the chosen command.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ..settings import SettingsError, load_settings
from . import (
    job_commands,
    key_commands,
    limit_commands,
    maintenance_commands,
    memory_commands,
    serve,
    team_commands,
)
from .common import given_setting_flags, log_user_id_key


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="memory-proxy",
        description="OpenAI-compatible chat proxy with long-term per-user memory. "
                    "Configured by environment variables: see `memory-proxy settings`.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (serve, memory_commands, maintenance_commands, job_commands, key_commands, team_commands,
                   limit_commands):
        module.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not getattr(args, "needs_settings", True):
        return int(args.run(None, args))
    flags = given_setting_flags(args)
    try:  # a flag is read as its variable would be: one validation, one way of reporting a mistake
        settings = load_settings({**os.environ, **{variable: value for _, variable, value in flags}})
    except SettingsError as exc:
        print(f"memory-proxy: {exc}", file=sys.stderr)
        for flag, variable, _ in flags:
            if f"{variable}=" in str(exc):
                print(f"memory-proxy: {variable} came from {flag}", file=sys.stderr)
        return 2
    from ..observability import configure_logging

    configure_logging(settings.log.level, settings.log.format, user_ids=settings.log.user_ids,
                      user_id_key=log_user_id_key(settings), memory_text=settings.log.memory_text)
    return int(args.run(settings, args))
