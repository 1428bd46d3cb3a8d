"""OpenWebUI 0.12.4 → memory-proxy → llama.cpp, driven as a browser would: ``python -m benchmarks.openwebui``.

- ``stack.py``: installs OpenWebUI in its own venv, starts (and always stops) the model server(s), the
  embeddings server for OpenWebUI's RAG setting, the /v1/models shim, memory-proxy and OpenWebUI;
- ``webui.py``: OpenWebUI's own HTTP API and socket.io, as its web UI calls them (sign-up, admin
  settings, a chat turn with its background tasks);
- ``session.py``: the scripted user and the checks; ``__main__.py``: options, figures, the table.
"""
