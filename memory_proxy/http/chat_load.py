"""Chat turns this process is serving, counted from the request to its reply's last byte (a pure ASGI wrapper,
outside the app, like head_as_get.py), so that the formation worker running in the same process gives them the
CPU first (formation/worker.py `yielding_to`): memory work is background, chat is not.
"""

from __future__ import annotations

from typing import Any

CHAT_PATH = "/v1/chat/completions"


class ChatLoad:
    def __init__(self) -> None:
        self.in_flight = 0

    def busy(self) -> bool:
        return self.in_flight > 0


class CountChatTurns:
    def __init__(self, app: Any, load: ChatLoad) -> None:
        self.app, self.load = app, load

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != CHAT_PATH:
            await self.app(scope, receive, send)
            return
        self.load.in_flight += 1
        counted = True

        async def counting(message: dict[str, Any]) -> None:
            nonlocal counted
            await send(message)
            if counted and message["type"] == "http.response.body" and not message.get("more_body"):
                counted = False  # the reply's last byte is sent; what follows (its formation job) is not chat
                self.load.in_flight -= 1

        try:
            await self.app(scope, receive, counting)
        finally:
            if counted:  # an error, or the client gone before the end
                self.load.in_flight -= 1
