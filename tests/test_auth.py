import stat
from pathlib import Path

from proxy.auth import KeyChecker, bearer_token, load_api_keys
from proxy.settings import load_settings


def test_a_key_is_generated_once_stored_privately_and_reused(tmp_path: Path, capsys) -> None:
    server = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path)}).server
    (first,) = load_api_keys(server)
    assert first.startswith("mp-") and len(first) > 30
    assert first in capsys.readouterr().err  # printed once, on creation
    mode = stat.S_IMODE((tmp_path / "api_key").stat().st_mode)
    assert mode == 0o600
    assert load_api_keys(server) == (first,)
    assert first not in capsys.readouterr().err  # not printed again


def test_configured_keys_win_and_no_file_is_written(tmp_path: Path) -> None:
    server = load_settings({"MEMORY_PROXY_DATA_DIR": str(tmp_path),
                            "PROXY_API_KEYS": "key-one-0123456789, key-two-0123456789"}).server
    assert load_api_keys(server) == ("key-one-0123456789", "key-two-0123456789")
    assert not (tmp_path / "api_key").exists()


def test_key_checker() -> None:
    checker = KeyChecker(("key-one-0123456789", "key-two-0123456789"))
    assert checker.verify("key-two-0123456789")
    assert not checker.verify("key-two-012345678") and not checker.verify("")
    assert bearer_token("Bearer abc ") == "abc" and bearer_token("bearer abc") == "abc"
    assert bearer_token("Basic abc") == "" and bearer_token(None) == ""
