"""Private files and directories (memory_proxy/private_files.py): 0700 and 0600 whatever the umask."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory_proxy.http.auth import stored_secret
from memory_proxy.private_files import create_private, private_dir


def test_directories_and_files_are_private_under_a_permissive_umask(tmp_path: Path) -> None:
    old_umask = os.umask(0)
    try:
        made = private_dir(tmp_path / "a" / "b")
        os.close(create_private(made / "f"))
        secret_path = tmp_path / "keys" / "api_key"
        stored_secret(secret_path)
    finally:
        os.umask(old_umask)
    assert made.stat().st_mode & 0o777 == 0o700
    assert (made / "f").stat().st_mode & 0o777 == 0o600
    assert secret_path.parent.stat().st_mode & 0o777 == 0o700
    assert secret_path.stat().st_mode & 0o777 == 0o600


def test_an_existing_open_directory_is_closed_and_an_existing_file_is_not_reused(tmp_path: Path) -> None:
    opened = tmp_path / "data"
    opened.mkdir(mode=0o755)
    opened.chmod(0o755)
    assert private_dir(opened).stat().st_mode & 0o777 == 0o700
    os.close(create_private(opened / "f"))
    with pytest.raises(FileExistsError):  # a file planted in advance is never written into
        create_private(opened / "f")


def test_an_existing_data_dir_named_by_the_operator_is_left_as_it_is(tmp_path: Path) -> None:
    """MEMORY_PROXY_DATA_DIR may name a shared directory (a home, /tmp): never chmod what we did not make."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    private_dir(shared, ours=False)
    assert shared.stat().st_mode & 0o7777 == 0o1777
    made = private_dir(tmp_path / "new-data-dir", ours=False)
    assert made.stat().st_mode & 0o777 == 0o700
