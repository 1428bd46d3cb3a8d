"""Where the prompts and migrations live: beside the package in a checkout (top-level `prompts/`,
`db/migrations/`), inside it in an installed wheel (`memory_proxy/_bundled/…`, see pyproject.toml)."""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).resolve().parent


def resource_dir(relative: str) -> Path:
    checkout = _HERE.parent / relative
    return checkout if checkout.is_dir() else _HERE / "_bundled" / relative
