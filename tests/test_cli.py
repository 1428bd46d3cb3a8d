"""The `memory-proxy` command: serve on the embedded database, migrate, memories add, settings."""

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from proxy.__main__ import main
from proxy.settings import markdown_table
from tests.conftest import EMBEDDINGS, USER_A, free_port, vector_for, wait_ready


def test_memories_add_embeds_and_stores(env: dict, outside: Any, database_url: str, monkeypatch, capsys) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    text = "User is a software engineer who uses Bun."
    assert main(["memories", "add", "--user", USER_A, text]) == 0
    vector_id = capsys.readouterr().out.strip()
    request = outside.routes["embeddings"].calls.last.request
    assert str(request.url) == f"{EMBEDDINGS}/embeddings"
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT v.content, v.embedding_model, vector_dims(v.embedding), uv.user_id FROM vectors v "
                           "JOIN users_vectors uv ON uv.vector_id = v.id WHERE v.id = %s", [vector_id]).fetchone()
    assert row == (text, "mistral-embed", len(vector_for(text)), USER_A)


def test_memories_add_redacts_secrets_before_embedding(env: dict, outside: Any, database_url: str,
                                                       monkeypatch, capsys) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["memories", "add", "--user", USER_A, "The staging DB is postgres://app:Hunter2-xyz@db:5432/app"]) == 0
    vector_id = capsys.readouterr().out.strip()
    stored = "The staging DB is postgres://app:[REDACTED: connection_string]@db:5432/app"
    assert outside.routes["embeddings"].calls.last.request.read().decode().count("Hunter2") == 0
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT content FROM vectors WHERE id = %s", [vector_id]).fetchone() == (stored,)


def test_migrate_reports_an_up_to_date_database(env: dict, monkeypatch, capsys) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
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
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["memories", "add", "--user", USER_A, "  "]) == 2


async def test_serve_starts_on_the_embedded_database_with_a_generated_key(tmp_path: Path) -> None:
    """The README's run command, as a new user runs it: no DATABASE_URL, no PROXY_API_KEYS."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "PROXY_API_KEYS"))}
    env.update(MEMORY_PROXY_DATA_DIR=str(tmp_path / "data"), MEMORY_PROXY_PORT=str(port),
               UPSTREAM_BASE_URL="http://127.0.0.1:9/v1", UPSTREAM_API_KEY="x")
    process = subprocess.Popen([sys.executable, "-m", "proxy", "serve"], env=env,  # noqa: ASYNC220 — spawning returns at once
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        await wait_ready(f"http://127.0.0.1:{port}", process)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            key = (tmp_path / "data" / "api_key").read_text().strip()
            assert (await client.get("/v1/models")).status_code == 401  # never open
            response = await client.post("/v1/chat/completions", headers={"authorization": f"Bearer {key}"},
                                         json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
            assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_unavailable"
    finally:
        process.send_signal(signal.SIGTERM)
        output = process.communicate(timeout=30)[0].decode()
    assert key in output  # the generated key was printed for the operator
    assert (tmp_path / "data" / "postgres" / "PG_VERSION").exists()
    assert '"event": "stopped"' in output
    assert not (tmp_path / "data" / "postgres" / "postmaster.pid").exists()  # embedded PostgreSQL stopped too


def test_global_memories_from_a_file_and_by_hand(env: dict, outside: Any, database_url: str, tmp_path: Path,
                                                 monkeypatch, capsys) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    source = tmp_path / "globals.txt"
    source.write_text("# company facts\nEveryone on this server works at Acme.\n\nThe VPN is at vpn.acme.test.\n")
    assert main(["memories", "load-global", str(source)]) == 0
    assert "2 global memories loaded" in capsys.readouterr().out
    assert main(["memories", "load-global", str(source)]) == 0  # idempotent
    assert main(["memories", "add", "--global", "Support hours are 9 to 5."]) == 0
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM global_vectors").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM users_vectors").fetchone()[0] == 0


def test_jobs_list_and_retry(env: dict, database_url: str, monkeypatch, capsys) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
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


@pytest.mark.parametrize("command", [["serve"], ["worker"], ["migrate"], ["settings"], ["memories", "add"],
                                     ["memories", "load-global"], ["jobs", "list"], ["jobs", "retry"]])
def test_every_command_has_help(command: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0 and "usage: memory-proxy" in capsys.readouterr().out
