"""OpenWebUI 0.12.4's own API, called as its web UI calls it (read from backend/open_webui/main.py,
routers/, socket/main.py and the frontend's src/lib/components/chat/Chat.svelte, shipped as a source map).

A browser chat turn in 0.12.4:
1. the page holds a socket.io connection (path ``/ws/socket.io``, ``auth={"token"}``, then ``user-join`` and a
   ``heartbeat`` every 30 s); the server puts it in the room ``user:<id>``, and every event of that user's
   chats comes to it;
2. ``POST /api/chat/completions`` with the model, ``session_id`` (the socket's sid), ``id`` (the assistant
   message's new uuid), ``parent_id`` (null for a new chat, else the previous assistant message) and
   ``user_message`` (the new message with its uuid), ``chat_id`` only for an existing chat, and
   ``background_tasks`` (title + tags on a chat's first turn, follow-ups on every turn). No ``messages``
   (but a system prompt): the server creates the chat (new) or appends the turn, and reads the history
   from its database. It answers at once ``{"status", "task_ids", "chat_id"}``;
3. the reply comes as ``events`` on the socket, ``{"chat_id", "message_id", "data": {"type", "data"}}``:
   ``response:completion`` deltas, then ``chat:completion`` with ``done: true``; then the background
   tasks' ``chat:message:follow_ups``, ``chat:title``, ``chat:tags``, and ``chat:active`` false at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from .stack import import_socketio


@dataclass
class Turn:
    """One chat turn as the browser lives it: times are seconds from the POST."""
    text: str
    chat_id: str | None
    user_message_id: str
    message_id: str  # the assistant's
    started: float = field(default_factory=time.monotonic)
    sent_at: float = field(default_factory=time.time)  # wall clock, to match the proxy's log
    first_token_s: float | None = None
    done_s: float | None = None
    error: Any = None
    task_events: dict[str, float] = field(default_factory=dict)  # follow_ups, title, tags, inactive → seconds
    event_types: list[str] = field(default_factory=list)
    content: str = ""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    idle: asyncio.Event = field(default_factory=asyncio.Event)  # chat:active false: its tasks are over

    def on_event(self, data: dict) -> None:
        kind, payload = data.get("type", ""), data.get("data")
        now = time.monotonic() - self.started
        self.event_types.append(kind)
        payload = payload if isinstance(payload, dict) else {}
        if self.first_token_s is None and kind in ("response:completion", "chat:completion") and (
                str(payload.get("type", "")).endswith(".delta") or payload.get("content")):
            self.first_token_s = now
        if kind == "chat:message:error" or (kind == "chat:completion" and payload.get("error")):
            self.error = payload.get("error")
        if kind in ("chat:completion", "chat:message:error") and (payload.get("done") or self.error):
            self.done_s = self.done_s or now
            self.done.set()
        names = {"chat:message:follow_ups": "follow_ups", "chat:title": "title", "chat:tags": "tags"}
        if kind in names:
            self.task_events[names[kind]] = round(now, 2)
        if kind == "chat:active" and payload.get("active") is False:
            self.task_events.setdefault("inactive", round(now, 2))
            self.idle.set()


class WebUI:
    """A signed-in browser session: the HTTP API with the user's token and a socket.io connection."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = httpx.AsyncClient(base_url=base_url, timeout=120)
        self.user: dict[str, Any] = {}
        self.turns: dict[str, Turn] = {}
        self.sio: Any = None
        self._heartbeat: asyncio.Task[None] | None = None

    async def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        if self.sio is not None and self.sio.connected:
            await self.sio.disconnect()
        await self.http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"OpenWebUI {method} {path}: {response.status_code} {response.text[:500]}")
        return response.json()

    async def signup(self, name: str, email: str, password: str) -> dict[str, Any]:
        """The sign-up form (the first user becomes admin); then the page's socket connects and joins."""
        self.user = await self._call("POST", "/api/v1/auths/signup",
                                     json={"name": name, "email": email, "password": password})
        token = self.user["token"]
        self.http.headers["Authorization"] = f"Bearer {token}"
        self.sio = import_socketio().AsyncClient(reconnection=True)
        self.sio.on("events", self._on_event)
        await self.sio.connect(self.base_url, socketio_path="/ws/socket.io", auth={"token": token},
                               transports=["websocket"], wait_timeout=30)
        await self.sio.call("user-join", {"auth": {"token": token}}, timeout=30)
        self._heartbeat = asyncio.create_task(self._beat())
        return self.user

    async def _beat(self) -> None:
        """The page's heartbeat (every 30 s): without it the server reaps the session from its pool."""
        while True:
            await asyncio.sleep(30)
            with contextlib.suppress(Exception):
                await self.sio.emit("heartbeat", {})

    async def _on_event(self, payload: dict) -> None:
        turn = self.turns.get(payload.get("message_id") or "")
        if turn is not None and isinstance(payload.get("data"), dict):
            turn.on_event(payload["data"])

    # ---- what an admin sets in Admin Settings
    async def set_connection_headers(self, headers: dict[str, str]) -> None:
        """Admin → Settings → Connections → the OpenAI connection → Headers (stored in its config "0")."""
        config = await self._call("GET", "/openai/config")
        configs = dict(config.get("OPENAI_API_CONFIGS") or {})
        configs["0"] = {**configs.get("0", {}), "enable": True, "headers": headers}
        await self._call("POST", "/openai/config/update", json={**config, "OPENAI_API_CONFIGS": configs})

    async def disable_builtin_tools(self, model_id: str) -> None:
        """Admin → Settings → Models → the model → Capabilities: "Builtin Tools" off. In 0.12.4 "Function
        Calling: Default" is native (backend: ``… or 'native'``), so only this, or "Legacy", keeps the ~30
        built-in tools out of a browser chat's request."""
        await self._call("POST", "/api/v1/models/create", json={
            "id": model_id, "base_model_id": None, "name": model_id, "is_active": True, "params": {},
            "meta": {"capabilities": {"builtin_tools": False}}, "access_grants": []})

    async def models(self) -> list[dict[str, Any]]:
        """The model list as the page loads it (OpenWebUI asks its connections: 1 s cache)."""
        return list((await self._call("GET", "/api/models", params={"refresh": "true"}))["data"])

    # ---- a chat turn
    async def send(self, text: str, model: dict[str, Any], chat_id: str | None, parent_id: str | None,
                   within_s: float) -> Turn:
        """Send ``text`` as the page does (a new chat when ``chat_id`` is None) and wait for the reply."""
        turn = Turn(text, chat_id, str(uuid.uuid4()), str(uuid.uuid4()))
        self.turns[turn.message_id] = turn
        first = chat_id is None
        user_message = {"id": turn.user_message_id, "parentId": parent_id, "childrenIds": [], "role": "user",
                        "user": {"id": self.user["id"], "name": self.user["name"]}, "user_id": self.user["id"],
                        "content": text, "timestamp": int(time.time()), "models": [model["id"]]}
        body: dict[str, Any] = {
            "stream": True, "model": model["id"], "params": {"model_controls": {}},
            "tool_ids": [], "tool_servers": [],
            "features": {"voice": False, "image_generation": False, "code_interpreter": False, "web_search": False},
            "variables": {"{{USER_NAME}}": self.user["name"], "{{USER_EMAIL}}": self.user["email"],
                          "{{CURRENT_DATE}}": time.strftime("%Y-%m-%d"), "{{USER_LANGUAGE}}": "en-US"},
            "model_item": model, "session_id": self.sio.get_sid("/"),
            "id": turn.message_id, "parent_id": parent_id, "user_message": user_message,
            "background_tasks": {**({"title_generation": True, "tags_generation": True} if first else {}),
                                 "follow_up_generation": True},
        }
        if chat_id:
            body["chat_id"] = chat_id
        turn.started, turn.sent_at = time.monotonic(), time.time()
        answer = await self._call("POST", "/api/chat/completions", json=body)
        turn.chat_id = answer.get("chat_id") or chat_id
        await asyncio.wait_for(turn.done.wait(), within_s)
        chat = await self._call("GET", f"/api/v1/chats/{turn.chat_id}")
        message = chat["chat"]["history"]["messages"].get(turn.message_id, {})
        turn.content = message.get("content") or ""
        turn.error = turn.error or message.get("error")
        return turn
