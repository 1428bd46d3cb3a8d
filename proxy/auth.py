"""Caller authentication (the proxy's API keys, and where they come from) and the user's signed identity.

Keys come from PROXY_API_KEYS; when none is configured a key is generated on first start, stored in
the data dir (mode 0600) and printed once, so the proxy never runs open by accident. Presented keys are
compared as SHA-256 digests with `hmac.compare_digest` against every configured key (no early exit),
so neither the key nor the number of keys leaks through timing. Keys are never logged.

With USER_JWT_SECRET set (the value of OpenWebUI's FORWARD_USER_INFO_HEADER_JWT_SECRET), the user is
whoever OpenWebUI's signed `X-OpenWebUI-User-Jwt` names (HS256, issuer "open-webui", `exp` required;
PyJWT checks signature, algorithm, expiry and issuer), and a bare user-id header is refused: anyone who
can reach the proxy with a key could otherwise read another user's memories by naming them.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

import jwt

from .errors import AuthenticationFailed
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


USER_JWT_HEADER = "x-openwebui-user-jwt"
JWT_ISSUER = "open-webui"
JWT_LEEWAY_S = 10  # clock skew between OpenWebUI and us; its tokens live 300 s


class UserJwtVerifier:
    def __init__(self, secret: str) -> None:
        if not secret:
            raise ValueError("the JWT secret is empty")
        self._secret = secret

    def user_id(self, token: str) -> str:
        try:
            claims = jwt.decode(token, self._secret, algorithms=["HS256"], issuer=JWT_ISSUER,
                                leeway=JWT_LEEWAY_S, options={"require": ["exp", "iss", "sub"]})
        except jwt.InvalidTokenError as exc:
            raise AuthenticationFailed(f"invalid {USER_JWT_HEADER}: {exc}", code="invalid_user_jwt") from exc
        subject = claims["sub"]
        if not isinstance(subject, str) or not subject.strip():
            raise AuthenticationFailed(f"{USER_JWT_HEADER} names no user", code="invalid_user_jwt")
        return subject.strip()


def signed_user_id(headers: Mapping[str, str], verifier: UserJwtVerifier, user_id_header: str) -> str | None:
    """The user named by a valid signed token; None when neither a token nor a user header is sent."""
    token = headers.get(USER_JWT_HEADER)
    if token:
        return verifier.user_id(token)
    if headers.get(user_id_header):
        raise AuthenticationFailed(f"an unsigned {user_id_header} header is refused: this proxy only accepts "
                                   f"users named by a signed {USER_JWT_HEADER}", code="unsigned_user_id")
    return None
