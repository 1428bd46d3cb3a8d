"""Fair use (docs/LIMITS.md): the limits every API key, user and model gets unless an operator set its own
(`memory-proxy limits set`, `PUT /api/v1/limits/...`). Each is a list such as `rpm=60,tpm=200000,concurrent=4,
daily_tokens=2000000`; empty: no limit of that kind (the default: a single user's install is never limited)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .declaration import env

LIMIT_NAMES = ("rpm", "tpm", "concurrent", "daily_tokens")


def limit_values(value: str) -> dict[str, int]:
    """`rpm=60,tpm=200000` as {"rpm": 60, "tpm": 200000}: each a positive whole number, each named once."""
    found: dict[str, int] = {}
    for pair in filter(None, (p.strip() for p in value.split(","))):
        name, _, amount = pair.partition("=")
        name = name.strip().lower()
        if name not in LIMIT_NAMES:
            raise ValueError(f"unknown limit {name!r} (limits: {', '.join(LIMIT_NAMES)})")
        if name in found:
            raise ValueError(f"{name} is given twice")
        number = int(amount.strip())
        if not 1 <= number <= 2**62:
            raise ValueError(f"{name} must be a positive whole number")
        found[name] = number
    return found


_DOC = ("`rpm` requests a minute, `tpm` tokens a minute (prompt and completion), `concurrent` requests at once, "
        "`daily_tokens` tokens a UTC day; comma-separated, e.g. `rpm=60,tpm=200000`. Empty: none.")


@dataclass(frozen=True)
class LimitSettings:
    key: Mapping[str, int] = env("LIMITS_PER_KEY", "", "Limits of each proxy API key unless set for it: " + _DOC,
                              limit_values, unset=lambda _: {}, in_code=True)
    user: Mapping[str, int] = env("LIMITS_PER_USER", "", "Limits of each user (their chat turns, and their memory "
                               "work's tokens) unless set for them: " + _DOC, limit_values,
                                  unset=lambda _: {}, in_code=True)
    model: Mapping[str, int] = env("LIMITS_PER_MODEL", "", "Limits of each model requested, all users together, "
                                "unless set for it: " + _DOC, limit_values, unset=lambda _: {}, in_code=True)
