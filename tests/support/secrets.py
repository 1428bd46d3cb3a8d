"""The credential samples of fixtures/secrets.json, and the pieces of a secret that must not be found stored."""

from __future__ import annotations

import json

from tests.support.data import FIXTURES

SECRET_SAMPLES = json.loads((FIXTURES / "secrets.json").read_text())
POSITIVE = SECRET_SAMPLES["positive"]  # each with its text, the secret in it and its kind
NEGATIVE = SECRET_SAMPLES["negative"]  # look-alikes that are no secret


def pieces(secret: str, size: int = 8) -> list[str]:
    """The secret itself and every `size`-character piece of it."""
    return [secret] + [secret[i:i + size] for i in range(len(secret) - size + 1)]
