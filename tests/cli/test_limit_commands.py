"""`memory-proxy limits`: set, list, usage, remove and key-id, by the API's rules."""

from __future__ import annotations

import io
from typing import Any

import psycopg
import pytest

from memory_proxy.cli import main
from memory_proxy.limits.limiter import key_id
from tests.support.data import PROXY_KEY, USER_A
from tests.support.proxy import set_env


def test_an_operator_sets_lists_and_removes_limits(env: dict[str, str], database_url: str, monkeypatch: Any,
                                                   capsys: Any) -> None:
    set_env({**env, "LIMITS_PER_USER": "rpm=60"}, monkeypatch)
    assert main(["limits", "set", "user", USER_A, "--rpm", "5", "--daily-tokens", "1000"]) == 0
    assert main(["limits", "set", "model", "qwen/qwen2.5:1.5b", "--concurrent", "2"]) == 0
    capsys.readouterr()
    assert main(["limits", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert "default user: rpm=60" in listed and "default key: none" in listed
    assert f"user {USER_A}: rpm=5  daily_tokens=1000" in listed and "model qwen/qwen2.5:1.5b: concurrent=2" in listed
    assert main(["limits", "remove", "user", USER_A]) == 0
    assert main(["limits", "remove", "user", USER_A]) == 1
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT kind, subject FROM limits").fetchall() == [("model", "qwen/qwen2.5:1.5b")]


def test_a_subject_or_a_value_the_api_would_refuse_is_refused(env: dict[str, str], monkeypatch: Any,
                                                              capsys: Any) -> None:
    set_env(env, monkeypatch)
    assert main(["limits", "set", "key", PROXY_KEY, "--rpm", "5"]) == 2  # the key itself: never
    assert "fingerprint" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["limits", "set", "user", USER_A, "--rpm", "0"])
    assert "positive whole number" in capsys.readouterr().err


def test_key_id_names_a_key_as_limits_do_from_an_argument_or_stdin(monkeypatch: Any, capsys: Any) -> None:
    assert main(["limits", "key-id", PROXY_KEY]) == 0
    monkeypatch.setattr("sys.stdin", io.StringIO(PROXY_KEY + "\n"))
    assert main(["limits", "key-id", "-"]) == 0
    assert capsys.readouterr().out.split() == [key_id(PROXY_KEY)] * 2
