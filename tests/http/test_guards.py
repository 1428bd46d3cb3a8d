"""Every route declares who may call it through the guards of memory_proxy/http/guards.py, none by hand; what the
guards answer (401, 503, the OpenAI error format) is tested on the routes themselves, in test_api.py and
test_chat.py."""

from pathlib import Path

from memory_proxy.api.team_memory_routes import team_role
from memory_proxy.app import create_app
from memory_proxy.http.guards import require_any_key, require_metrics_key, require_proxy_key
from memory_proxy.settings import load_settings

OPEN = {"/healthz", "/readyz"}  # probes: no key, by design


def test_every_route_but_the_probes_and_the_page_is_guarded(tmp_path: Path) -> None:
    app = create_app(load_settings({"PROXY_API_KEYS": "k" * 32, "MEMORY_PROXY_DATA_DIR": str(tmp_path)}))
    guarded: dict[str, set[object]] = {}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            guarded.setdefault(route.path, set()).update(handler.resolve_guards())
    for path, guards in guarded.items():
        if path.startswith("/api/v1/schema") or path.startswith("/memories") or path in OPEN:
            assert not guards, path  # the schema and the browser's static files hold no data
        elif path == "/metrics":  # METRICS_KEY or a proxy key: its counts are not for anyone who reaches the port
            assert guards == {require_metrics_key}, path
        elif path.startswith("/api/v1/teams/") and ("/memories" in path or "/proposals" in path):  # the team's role
            assert guards == {require_any_key, team_role}, path
        elif path.startswith("/api/v1/"):
            assert guards == {require_any_key}, path
        else:
            assert guards == {require_proxy_key}, path
    assert {"/v1/chat/completions", "/v1/models", "/api/v1/memories", "/api/v1/erase",
            "/api/v1/teams/{team_id:str}/memories"} <= set(guarded)
