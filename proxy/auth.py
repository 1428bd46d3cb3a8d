"""Caller authentication: the proxy's API keys, and where they come from.

Keys come from PROXY_API_KEYS; when none is configured a key is generated on first start, stored in
the data dir (mode 0600) and printed once, so the proxy never runs open by accident. Presented keys are
compared as SHA-256 digests with `hmac.compare_digest` against every configured key (no early exit),
so neither the key nor the number of keys leaks through timing. Keys are never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
from pathlib import Path

from .settings import ServerSettings

KEY_FILE = "api_key"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class KeyChecker:
    def __init__(self, keys: tuple[str, ...]) -> None:
        if not keys:
            raise ValueError("at least one API key is required")
        self._digests = [_digest(k) for k in keys]

    def verify(self, presented: str) -> bool:
        candidate = _digest(presented)
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(candidate, digest)
        return matched


def _create_key_file(path: Path) -> str | None:
    """Write a new key to `path` unless it exists; return the new key, or None if another process won."""
    key = "mp-" + secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return None
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


def load_api_keys(server: ServerSettings) -> tuple[str, ...]:
    if server.api_keys:
        return server.api_keys
    path = server.data_dir / KEY_FILE
    created = _create_key_file(path)
    if created:
        print(f"memory-proxy: no PROXY_API_KEYS set, generated an API key (stored in {path}):\n"
              f"  {created}\nClients must send 'Authorization: Bearer <key>'.", file=sys.stderr, flush=True)
        return (created,)
    return (path.read_text().strip(),)


def bearer_token(authorization: str | None) -> str:
    scheme, _, token = (authorization or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
