"""The HTTP door: routes, who may call them, and the middleware around the whole app.

- routes.py: the chat routes (`/v1/chat/completions`, `/v1/models`) and health (`/healthz`, `/readyz`), thin:
  they hand the request to chat/turn.py;
- guards.py: who may call a route (the proxy key for chat, any key for the API) and the `services` dependency;
- auth.py: the proxy's API keys (configured or generated) and the user's identity from OpenWebUI's headers;
- group_mirror.py: teams mirrored from OpenWebUI's groups (TEAM_MIRROR);
- head_as_get.py, request_id.py: ASGI middleware (HEAD answered as GET; a request id on every response and log line).
"""
