"""The proxy's error tree and its mapping to OpenAI-style error bodies.

    ProxyError                      → {"error": {"message", "type", "param", "code"}}, HTTP status
    ├── BadRequest            400   invalid_request_error   malformed JSON, wrong types, no messages
    ├── AuthenticationFailed  401   authentication_error    missing or wrong proxy key
    ├── Forbidden             403   permission_error        a user identity naming another user (API)
    ├── NotFound              404   not_found_error         no such memory *of this user* (API)
    ├── Conflict              409   invalid_request_error   restore / edit onto an active twin (API)
    ├── Unavailable           503   server_error            the API needs the embedder and it failed
    └── UpstreamError               the upstream could not be used (its own error replies are relayed as-is)
        ├── UpstreamUnavailable 502 upstream_error          refused, reset, DNS, dropped mid-reply
        └── UpstreamTimeout     504 upstream_error          connect / read timeout

    MemoryUnavailable               memory side failed (embedder, database); never reaches a client:
                                    the turn is relayed without memories and the failure is counted.

Foreign exceptions (httpx, psycopg, SDKs) are translated at the boundary that meets them
(`raise UpstreamTimeout(...) from exc`), so the rest of the code only knows this tree.
"""

from __future__ import annotations

from typing import Any


class ProxyError(Exception):
    status_code = 500
    error_type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def to_body(self) -> dict[str, Any]:
        return openai_error(self.message, self.error_type, code=self.code, param=self.param)


class BadRequest(ProxyError):
    status_code = 400
    error_type = "invalid_request_error"


class AuthenticationFailed(ProxyError):
    status_code = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class Forbidden(ProxyError):
    status_code = 403
    error_type = "permission_error"
    code = "other_user"


class NotFound(ProxyError):
    status_code = 404
    error_type = "not_found_error"
    code = "memory_not_found"


class Conflict(ProxyError):
    status_code = 409
    error_type = "invalid_request_error"
    code = "conflict"


class Unavailable(ProxyError):
    status_code = 503
    error_type = "server_error"
    code = "memory_unavailable"


class UpstreamError(ProxyError):
    status_code = 502
    error_type = "upstream_error"


class UpstreamUnavailable(UpstreamError):
    code = "upstream_unavailable"


class UpstreamTimeout(UpstreamError):
    status_code = 504
    code = "upstream_timeout"


class MemoryUnavailable(Exception):
    """The memory side (embedder, database) failed; `reason` labels the fail-open metric."""

    def __init__(self, reason: str, message: str = "") -> None:
        super().__init__(message or reason)
        self.reason = reason


def openai_error(message: str, error_type: str, *, code: str | None = None,
                 param: str | None = None) -> dict[str, Any]:
    """The OpenAI error envelope every client (and OpenWebUI's UI) understands."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}
