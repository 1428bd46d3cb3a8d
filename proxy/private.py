"""Files only the proxy's own user may read: the data dir holds chat text (the outbox spool), keys and the
embedded database, so directories are 0700 and files 0600 whatever the umask."""

from __future__ import annotations

import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`path` made (with its parents) and set to 0700, also when an older version made it 0755."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o777 != DIR_MODE:
        path.chmod(DIR_MODE)
    return path


def create_private(path: Path) -> int:
    """A new file at `path`, 0600, opened for writing (its fd); FileExistsError when it is already there."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
