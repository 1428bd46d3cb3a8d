"""The `memory-proxy` command: serve on the embedded database, migrate, memories, reembed, maintain, jobs, keys,
settings."""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from memory_proxy.cli import build_parser, main
from memory_proxy.embedding.memory_document import embedding_text
from memory_proxy.settings import markdown_table
from tests.support.data import EMBEDDINGS, USER_A, USER_B
from tests.support.fakes import vector_for
from tests.support.proxy import set_env
from tests.support.servers import free_port, proxy_command, stop_process, wait_ready


@pytest.mark.slow
def test_memories_add_embeds_and_stores(env: dict, outside: Any, database_url: str, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    text = "User is a software engineer who uses Bun."
    assert main(["memories", "add", "--user", USER_A, text]) == 0
    vector_id = capsys.readouterr().out.strip()
    request = outside.routes["embeddings"].calls.last.request
    assert str(request.url) == f"{EMBEDDINGS}/embeddings"
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT v.content, v.embedding_model, vector_dims(v.embedding), uv.user_id FROM vectors v "
                           "JOIN users_vectors uv ON uv.vector_id = v.id WHERE v.id = %s", [vector_id]).fetchone()
    assert row == (text, "mistral-embed", len(vector_for(text)), USER_A)


@pytest.mark.slow
def test_memories_add_redacts_secrets_before_embedding(env: dict, outside: Any, database_url: str,
                                                       monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    assert main(["memories", "add", "--user", USER_A, "The staging DB is postgres://app:Hunter2-xyz@db:5432/app"]) == 0
    vector_id = capsys.readouterr().out.strip()
    stored = "The staging DB is postgres://app:[REDACTED: connection_string]@db:5432/app"
    assert outside.routes["embeddings"].calls.last.request.read().decode().count("Hunter2") == 0
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT content FROM vectors WHERE id = %s", [vector_id]).fetchone() == (stored,)


def test_migrate_reports_an_up_to_date_database(env: dict, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    assert main(["migrate"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_bad_settings_exit_2_with_every_problem(monkeypatch, capsys) -> None:
    monkeypatch.setenv("RETRIEVAL_TOP_K", "ten")
    monkeypatch.setenv("LOG_FORMAT", "xml")
    assert main(["migrate"]) == 2
    err = capsys.readouterr().err
    assert "RETRIEVAL_TOP_K='ten'" in err and "LOG_FORMAT='xml'" in err


def test_settings_prints_the_configuration_table(capsys) -> None:
    assert main(["settings"]) == 0
    assert capsys.readouterr().out.strip() == markdown_table()


def test_memories_add_refuses_empty_text(env: dict, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    assert main(["memories", "add", "--user", USER_A, "  "]) == 2


@pytest.mark.slow
def test_memories_add_and_load_global_refuse_text_over_the_size_limit(env: dict, outside: Any, tmp_path: Path,
                                                                      monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    assert main(["memories", "add", "--user", USER_A, "x" * 2049]) == 2
    assert "over 2048 bytes" in capsys.readouterr().err
    lines = tmp_path / "global.txt"
    lines.write_text("User likes tea.\n" + "y" * 3000 + "\n")
    assert main(["memories", "load-global", str(lines)]) == 0
    out = capsys.readouterr()
    assert "1 global memories loaded" in out.out and "line 2 skipped" in out.err


@pytest.mark.slow
async def test_serve_starts_on_the_embedded_database_with_a_generated_key(tmp_path: Path) -> None:
    """The README's run command, as a new user runs it: no DATABASE_URL, no PROXY_API_KEYS."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "PROXY_API_KEYS"))}
    env.update(MEMORY_PROXY_DATA_DIR=str(tmp_path / "data"), MEMORY_PROXY_PORT=str(port),
               UPSTREAM_BASE_URL="http://127.0.0.1:9/v1", UPSTREAM_API_KEY="x")
    process = proxy_command("serve", env=env)
    try:
        await wait_ready(f"http://127.0.0.1:{port}", process)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            key = (tmp_path / "data" / "api_key").read_text().strip()
            assert (await client.get("/v1/models")).status_code == 401  # never open
            response = await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                                         json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_unavailable"
    finally:
        output = stop_process(process)
    assert key in output  # the generated key was printed for the operator
    assert (tmp_path / "data" / "postgres" / "PG_VERSION").exists()
    assert '"event": "stopped"' in output
    assert not (tmp_path / "data" / "postgres" / "postmaster.pid").exists()  # embedded PostgreSQL stopped too


@pytest.mark.slow
def test_global_memories_from_a_file_and_by_hand(env: dict, outside: Any, database_url: str, tmp_path: Path,
                                                 monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    source = tmp_path / "globals.txt"
    source.write_text("# company facts\nEveryone on this server works at Acme.\n\nThe VPN is at vpn.acme.test.\n")
    assert main(["memories", "load-global", str(source)]) == 0
    assert "2 global memories loaded" in capsys.readouterr().out
    assert main(["memories", "load-global", str(source)]) == 0  # idempotent
    assert main(["memories", "add", "--global", "Support hours are 9 to 5."]) == 0
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM global_vectors").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM users_vectors").fetchone()[0] == 0


@pytest.mark.slow
def test_jobs_list_and_retry(env: dict, database_url: str, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO memory_jobs (user_id, payload, said_at, status, attempts, last_error)"
                     " VALUES ('u1', '{}', now(), 'dead', 5, 'LLM down'), ('u2', '{}', now(), 'queued', 0, NULL)")
        dead_id = conn.execute("SELECT id FROM memory_jobs WHERE status = 'dead'").fetchone()[0]
    assert main(["jobs", "list"]) == 0
    out = capsys.readouterr().out
    assert "queued: 1  running: 0  done: 0  dead: 1" in out and "error: LLM down" in out
    assert main(["jobs", "list", "--status", "dead"]) == 0
    assert "user=u2" not in capsys.readouterr().out
    assert main(["jobs", "retry", "--id", str(dead_id)]) == 0
    assert "1 dead job(s) queued again" in capsys.readouterr().out
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT status, attempts FROM memory_jobs WHERE id = %s", [dead_id]).fetchone() == (
            "queued", 0)


@pytest.mark.parametrize("command", [
    ["serve"], ["worker"], ["migrate"], ["settings"], ["memories"], ["memories", "add"], ["memories", "load-global"],
    ["memories", "list"], ["memories", "export"], ["memories", "import"], ["reembed"], ["maintain"], ["jobs"],
    ["jobs", "list"], ["jobs", "retry"], ["keys"], ["keys", "create"], ["keys", "revoke"], ["keys", "list"],
    ["teams"], ["teams", "create"], ["teams", "list"], ["teams", "show"], ["teams", "delete"], ["teams", "add"],
    ["teams", "remove"]])
def test_every_command_has_help(command: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0 and "usage: memory-proxy" in capsys.readouterr().out


def test_every_command_and_action_is_described() -> None:
    def described(parser: Any) -> None:
        for group in (a for a in parser._actions if isinstance(a, argparse._SubParsersAction)):
            helps = {action.dest: action.help for action in group._choices_actions}
            assert set(helps) == set(group.choices) and all(helps.values()), helps
            for child in group.choices.values():
                described(child)

    described(build_parser())


@pytest.mark.parametrize(("command", "present", "absent"), [
    ("serve", ["--host ADDRESS", "--port PORT", "--log-level LEVEL", "MEMORY_PROXY_HOST", "MEMORY_PROXY_PORT",
               "LOG_LEVEL"], []),
    ("worker", ["--log-level LEVEL", "LOG_LEVEL"], ["--host", "--port"]),  # the worker serves nothing over HTTP
])
def test_serve_and_worker_help_list_their_flags(command: str, present: list[str], absent: list[str], capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = capsys.readouterr().out
    assert all(text in out for text in present), out
    assert not any(text in out for text in absent), out


def _setting_env(monkeypatch, tmp_path: Path) -> None:
    """An environment that names a host, port and log level the flags must override."""
    monkeypatch.setenv("MEMORY_PROXY_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MEMORY_PROXY_HOST", "0.0.0.0")
    monkeypatch.setenv("MEMORY_PROXY_PORT", "8999")
    monkeypatch.setenv("LOG_LEVEL", "error")
    monkeypatch.setenv("UPSTREAM_BASE_URL", "http://from-the-environment.test/v1")


def _capture_logging(monkeypatch) -> list[str]:
    levels: list[str] = []
    monkeypatch.setattr("memory_proxy.observability.configure_logging", lambda level, *a, **kw: levels.append(level))
    return levels


def test_serve_flags_override_the_environment(tmp_path: Path, monkeypatch) -> None:
    """The flags reach the settings `serve` builds its app from and the address uvicorn binds; the rest of
    the configuration still comes from the environment."""
    _setting_env(monkeypatch, tmp_path)
    levels = _capture_logging(monkeypatch)
    apps: list[Any] = []
    binds: list[dict] = []
    monkeypatch.setattr("memory_proxy.app.create_app", lambda settings, **_: apps.append(settings) or "app")
    monkeypatch.setattr("uvicorn.run", lambda app, **kwargs: binds.append({"app": app, **kwargs}))

    assert main(["serve", "--host", "127.0.0.2", "--port", "18081", "--log-level", "DEBUG"]) == 0
    (settings,) = apps
    assert (settings.server.host, settings.server.port, settings.log.level) == ("127.0.0.2", 18081, "debug")
    assert (binds[0]["app"], binds[0]["host"], binds[0]["port"]) == ("app", "127.0.0.2", 18081)
    assert levels == ["debug"]
    assert settings.upstream.base_url == "http://from-the-environment.test/v1"

    assert main(["serve", "--port", "18082"]) == 0  # a flag left out keeps the environment's value
    assert (apps[1].server.host, apps[1].server.port, apps[1].log.level) == ("0.0.0.0", 18082, "error")
    assert (binds[1]["host"], binds[1]["port"]) == ("0.0.0.0", 18082) and levels[1] == "error"


def test_worker_log_level_flag_overrides_the_environment(tmp_path: Path, monkeypatch) -> None:
    _setting_env(monkeypatch, tmp_path)
    levels = _capture_logging(monkeypatch)
    opened: list[Any] = []
    ran: list[Any] = []

    @contextlib.asynccontextmanager
    async def open_services(settings: Any, *, wait_for_database: bool = True) -> Any:
        opened.append(settings)
        yield types.SimpleNamespace(ready="ready")

    class FakeWorker:
        worker_id = "w-1"

        async def run(self, stop: Any, timeout: float, ready: Any) -> None:
            ran.append(ready)

    monkeypatch.setattr("memory_proxy.services.open_services", open_services)
    monkeypatch.setattr("memory_proxy.formation.worker.Worker.from_services", staticmethod(lambda services: FakeWorker()))
    assert main(["worker", "--log-level", "warning"]) == 0
    assert [settings.log.level for settings in opened] == ["warning"] and levels == ["warning"]
    assert ran == ["ready"]  # the worker ran with those settings
    assert opened[0].server.port == 8999  # everything else from the environment


@pytest.mark.parametrize(("argv", "problem"), [
    (["serve", "--port", "0"], "MEMORY_PROXY_PORT='0': must be a TCP port between 1 and 65535"),
    (["serve", "--port", "70000"], "MEMORY_PROXY_PORT='70000': must be a TCP port between 1 and 65535"),
    (["serve", "--port", "abc"], "MEMORY_PROXY_PORT='abc': is not a number"),
    (["serve", "--log-level", "loud"], "LOG_LEVEL='loud': must be one of"),
    (["worker", "--log-level", "loud"], "LOG_LEVEL='loud': must be one of"),
])
def test_invalid_setting_flags_exit_2_with_a_message(argv: list[str], problem: str, tmp_path: Path,
                                                     monkeypatch, capsys) -> None:
    """Validated by load_settings as the variable would be, and the message names the flag too."""
    monkeypatch.setenv("MEMORY_PROXY_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("uvicorn.run", lambda *a, **kw: pytest.fail("serve started"))
    monkeypatch.setattr("memory_proxy.services.open_services", lambda *a, **kw: pytest.fail("worker started"))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert problem in err and f"came from {argv[1]}" in err


def test_an_empty_setting_flag_is_refused(capsys) -> None:
    """An empty variable means the default; an empty flag is a mistake, not a quiet default."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--port", ""])
    assert exited.value.code == 2 and "argument --port: must not be empty" in capsys.readouterr().err


def test_python_m_proxy_exits_2_on_an_invalid_port_without_a_traceback(tmp_path: Path) -> None:
    # a database that is not there: were the flag ignored, serve would not leave a PostgreSQL running
    env = {**os.environ, "MEMORY_PROXY_DATA_DIR": str(tmp_path),
           "DATABASE_URL": "postgresql://127.0.0.1:9/none"}
    done = subprocess.run([sys.executable, "-m", "memory_proxy", "serve", "--port", "70000"], env=env, check=False,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "MEMORY_PROXY_PORT='70000'" in done.stderr
    assert "came from --port" in done.stderr and "Traceback" not in done.stderr


def _store(database_url: str, user: str, content: str, *, model: str = "mistral-embed", memory_type: str = "preference",
           pinned: bool = False, stated_at: str = "2026-03-02T10:00:00+00:00", expires_at: str | None = None) -> str:
    """A memory written with plain SQL (as the database owner: no row-level security)."""
    with psycopg.connect(database_url) as conn:
        vector_id = f"v-{abs(hash((user, content))):x}"
        conn.execute("INSERT INTO vectors (id, embedding, embedding_model, content, stated_at, memory_type,"
                     " expires_at) VALUES (%s, %s::real[]::vector, %s, %s, %s, %s, %s)",
                     [vector_id, vector_for(content), model, content, stated_at, memory_type, expires_at])
        conn.execute("INSERT INTO users_vectors (user_id, vector_id, content_key, embedding_model, embedding_bq,"
                     " search_text, pinned) SELECT %s, id, content_key, embedding_model, binary_quantize(embedding),"
                     " search_text, %s FROM vectors"
                     " WHERE id = %s", [user, pinned, vector_id])
    return vector_id


@pytest.mark.slow
def test_memories_list_shows_active_memories(env: dict, database_url: str, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    _store(database_url, USER_A, "User lives in Berlin.", memory_type="identity", pinned=True)
    _store(database_url, USER_A, "User is in Rome this week.", memory_type="temporary",
           stated_at="2026-01-01T00:00:00+00:00", expires_at="2026-01-08T00:00:00+00:00")  # expired
    _store(database_url, USER_B, "User has a dog named Rex.")
    assert main(["memories", "list", "--user", USER_A]) == 0
    out = capsys.readouterr().out
    assert "2026-03-02" in out and "identity" in out and "pinned" in out and "User lives in Berlin." in out
    assert "Rome" not in out and "Rex" not in out
    assert main(["memories", "list", "--user", USER_A, "--json", "--limit", "5"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert item["content"] == "User lives in Berlin." and item["pinned"] is True
    assert item["memory_type"] == "identity" and item["stated_at"].startswith("2026-03-02")


@pytest.mark.slow
def test_memories_export_and_import_round_trip(env: dict, outside: Any, database_url: str, tmp_path: Path,
                                               monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    _store(database_url, USER_A, "User lives in Berlin.", memory_type="identity", pinned=True, model="old-model")
    _store(database_url, USER_A, "User prefers tea.", stated_at="2025-12-24T08:00:00+00:00")
    export = tmp_path / "a.json"
    assert main(["memories", "export", "--user", USER_A, "--output", str(export)]) == 0
    document = json.loads(export.read_text())
    assert document["user_id"] == USER_A and len(document["memories"]) == 2
    assert "embedding" not in json.dumps(document)  # text and attributes only: re-embedded on import
    assert main(["memories", "export", "--user", USER_A, "--format", "markdown"]) == 0
    markdown = capsys.readouterr().out
    assert "- **identity** (pinned): User lives in Berlin. — stated 2026-03-02 10:00 UTC" in markdown

    assert main(["memories", "import", str(export), "--user", USER_B]) == 0
    assert "2 memories imported for user-b, 0 already present" in capsys.readouterr().out
    sent = [json.loads(call.request.content)["input"] for call in outside.routes["embeddings"].calls]
    assert sent == [[embedding_text("User lives in Berlin.", datetime(2026, 3, 2, 10, tzinfo=UTC)),
                     embedding_text("User prefers tea.", datetime(2025, 12, 24, 8, tzinfo=UTC))]]
    assert main(["memories", "import", str(export), "--user", USER_B]) == 0  # idempotent
    assert "0 memories imported for user-b, 2 already present" in capsys.readouterr().out
    assert main(["memories", "import", str(export)]) == 0  # the file's own user already holds both
    assert "0 memories imported for user-a, 2 already present" in capsys.readouterr().out
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT v.content, v.memory_type, uv.pinned, v.stated_at::date::text, v.embedding_model"
            " FROM users_vectors uv JOIN vectors v ON v.id = uv.vector_id WHERE uv.user_id = %s ORDER BY 1",
            [USER_B]).fetchall()
    assert rows == [("User lives in Berlin.", "identity", True, "2026-03-02", "mistral-embed"),
                    ("User prefers tea.", "preference", False, "2025-12-24", "mistral-embed")]


def test_memories_import_refuses_what_is_not_an_export(env: dict, tmp_path: Path, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    bogus = tmp_path / "x.json"
    bogus.write_text('{"memories": []}')
    assert main(["memories", "import", str(bogus)]) == 2
    assert "not a memory-proxy export" in capsys.readouterr().err


@pytest.mark.slow
def test_reembed_command(env: dict, outside: Any, database_url: str, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    for text in ("User lives in Berlin.", "User prefers tea.", "User has a dog named Rex."):
        _store(database_url, USER_A, text, model="old-model")
    assert main(["reembed", "--dry-run"]) == 0
    assert "3 vector(s) to re-embed with mistral-embed (dry run" in capsys.readouterr().out
    assert main(["reembed", "--batch", "2"]) == 0
    assert "3 vector(s) re-embedded with mistral-embed" in capsys.readouterr().out
    assert outside.routes["embeddings"].call_count == 2
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT DISTINCT embedding_model FROM users_vectors").fetchall() == [("mistral-embed",)]


def test_maintain_command_is_wired(env: dict, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    seen = {}

    async def maintain(pool: Any, settings: Any, user_id: str | None = None) -> dict[str, int]:
        seen.update(pool=pool, settings=settings, user_id=user_id)
        return {"expired": 2, "merged": 1, "pruned": 0}

    monkeypatch.setitem(sys.modules, "memory_proxy.formation.maintain", types.SimpleNamespace(maintain=maintain))
    assert main(["maintain", "--user", USER_A]) == 0
    assert capsys.readouterr().out.strip() == "expired: 2  merged: 1  pruned: 0"
    assert seen["user_id"] == USER_A and seen["settings"].dedup_similarity == 0.95
    assert main(["maintain"]) == 0 and seen["user_id"] is None


@pytest.mark.slow
def test_maintain_expires_memories(env: dict, database_url: str, monkeypatch, capsys) -> None:
    """Against memory_proxy.formation.maintain itself: an expired, unpinned memory is retired; a pinned one stays."""
    set_env(env, monkeypatch)
    expired = _store(database_url, USER_A, "User is in Rome this week.", memory_type="temporary",
                     stated_at="2026-01-01T00:00:00+00:00", expires_at="2026-01-08T00:00:00+00:00")
    pinned = _store(database_url, USER_A, "User is in Oslo this week.", memory_type="temporary", pinned=True,
                    stated_at="2026-01-01T00:00:00+00:00", expires_at="2026-01-08T00:00:00+00:00")
    assert main(["maintain", "--user", USER_A]) == 0
    assert "expired: 1" in capsys.readouterr().out
    with psycopg.connect(database_url) as conn:
        active = {r[0] for r in conn.execute("SELECT vector_id FROM users_vectors WHERE superseded_at IS NULL")}
    assert pinned in active and expired not in active


def _fake_keys(monkeypatch) -> dict[str, Any]:
    made: dict[str, Any] = {}

    async def create_key(conn: Any, *, user_id: str | None, label: str) -> tuple[str, str]:
        made.update(user_id=user_id, label=label)
        return "key-1", "mp-secret-123"

    async def revoke_key(conn: Any, key_id: str) -> bool:
        return key_id == "key-1"

    async def list_keys(conn: Any) -> list[dict]:
        return [{"id": "key-1", "label": "laptop", "user_id": USER_A, "revoked": False}]

    for function in (create_key, revoke_key, list_keys):
        monkeypatch.setattr(f"memory_proxy.store.keys.{function.__name__}", function)
    return made


@pytest.mark.slow
def test_keys_commands_are_wired(env: dict, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    made = _fake_keys(monkeypatch)
    assert main(["keys", "create", "--user", USER_A, "--label", "laptop"]) == 0
    captured = capsys.readouterr()
    assert "key id: key-1" in captured.out and "mp-secret-123" in captured.out
    assert "not shown again" in captured.err and made == {"user_id": USER_A, "label": "laptop"}
    assert main(["keys", "list"]) == 0
    assert "id=key-1  label=laptop  user_id=user-a  revoked=False" in capsys.readouterr().out
    assert main(["keys", "revoke", "key-1"]) == 0 and "key key-1 revoked" in capsys.readouterr().out
    assert main(["keys", "revoke", "key-2"]) == 1 and "no active key key-2" in capsys.readouterr().err


@pytest.mark.slow
def test_keys_create_list_revoke(env: dict, monkeypatch, capsys) -> None:
    """Against memory_proxy.store.keys itself: the secret is printed once and never listed."""
    set_env(env, monkeypatch)
    assert main(["keys", "create", "--user", USER_A, "--label", "laptop"]) == 0
    lines = dict(line.split(":", 1) for line in capsys.readouterr().out.splitlines())
    key_id, secret = lines["key id"].strip(), lines["key"].strip()
    assert main(["keys", "list"]) == 0
    listed = capsys.readouterr().out
    assert key_id in listed and "laptop" in listed and secret not in listed
    assert main(["keys", "revoke", key_id]) == 0
    assert main(["keys", "revoke", "no-such-key"]) == 1


@pytest.mark.parametrize("argv", [["--user", ""], ["--user", "   "], [], ["--user", "a", "--admin"]])
def test_keys_create_never_makes_an_admin_key_by_accident(argv: list[str], env: dict, monkeypatch, capsys) -> None:
    """`keys create --user "$UNSET"` made an admin key (an empty user became NULL, which means admin)."""
    set_env(env, monkeypatch)
    made = _fake_keys(monkeypatch)
    with pytest.raises(SystemExit) as refused:
        main(["keys", "create", *argv])
    assert refused.value.code == 2 and made == {}


@pytest.mark.slow
def test_keys_create_admin_only_when_asked(env: dict, monkeypatch, capsys) -> None:
    set_env(env, monkeypatch)
    made = _fake_keys(monkeypatch)
    assert main(["keys", "create", "--admin", "--label", "ops"]) == 0
    assert made == {"user_id": None, "label": "ops"}


async def test_the_store_refuses_an_empty_user_id_for_a_key(db: Any) -> None:
    from memory_proxy.store.keys import create_key

    with pytest.raises(ValueError):
        await create_key(db, user_id="  ", label="x")
