"""Files only the proxy's own user may read: the data dir holds chat text (the outbox spool), keys and the
embedded database, so directories are 0700 and files 0600 whatever the umask."""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path, *, ours: bool = True) -> Path:
    """`path` made (with its parents) and set to 0700. An existing directory is tightened too (an older
    version made the outbox 0755) unless it is not `ours` alone: the data dir an operator names may be a
    shared one (a home, even /tmp), which is made 0700 only when we create it."""
    existed = path.is_dir()
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if (ours or not existed) and path.stat().st_mode & 0o777 != DIR_MODE:
        path.chmod(DIR_MODE)
    return path


def create_private(path: Path) -> int:
    """A new file at `path`, 0600, opened for writing (its fd); FileExistsError when it is already there."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
