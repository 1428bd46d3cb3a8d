"""The embedded PostgreSQL (memory_proxy/store/embedded.py) with real processes: a proxy killed with SIGKILL leaves
its postmaster running, and the next proxy on that data dir adopts it; that one's clean stop must stop it.
(The supervisor's restarts are in test_services.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memory_proxy.store.embedded import EmbeddedPostgres
from tests.support.data import ROOT
from tests.support.servers import running

pytestmark = pytest.mark.slow

HOLDER = ("import sys, time; from pathlib import Path; from memory_proxy.store.embedded import EmbeddedPostgres; "
          "EmbeddedPostgres(Path(sys.argv[1])); print('ready', flush=True); time.sleep(600)")


def postmaster_pid(pgdata: Path) -> int | None:
    pid_file = pgdata / "postmaster.pid"
    return int(pid_file.read_text().split()[0]) if pid_file.exists() else None


def holder(pgdata: Path) -> subprocess.Popen[bytes]:
    """Another proxy process holding the embedded server on `pgdata`, once it says it is ready."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(pgdata)], stdout=subprocess.PIPE,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert process.stdout is not None and process.stdout.readline() == b"ready\n"  # b"": it failed and exited
    return process


def test_a_postmaster_left_by_a_killed_proxy_is_stopped_by_the_next_one_s_stop(tmp_path: Path) -> None:
    """pgserver counts the processes holding the server (<pgdata>/.handle_pids.json) and stops it with the last.
    A holder killed with SIGKILL never leaves the count, so the next proxy adopted its postmaster and never
    stopped it, nor did any later clean stop."""
    pgdata = tmp_path / "postgres"
    killed = holder(pgdata)
    killed.send_signal(signal.SIGKILL)
    killed.wait(10)
    orphan = postmaster_pid(pgdata)
    assert orphan is not None and running(orphan)
    assert json.loads((pgdata / ".handle_pids.json").read_text()) == [killed.pid]  # the dead holder, still counted

    try:
        adopted = EmbeddedPostgres(pgdata)
        assert postmaster_pid(pgdata) == orphan  # adopted, not started anew
        adopted.stop()
        assert postmaster_pid(pgdata) is None  # pg_ctl stop -w returns once the pid file is gone …
        deadline = time.monotonic() + 10  # … and the process exits right after
        while running(orphan) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(orphan)
    finally:
        if running(orphan):
            os.kill(orphan, signal.SIGINT)  # not left behind by a failed run


def test_a_postmaster_another_live_proxy_holds_is_left_running(tmp_path: Path) -> None:
    pgdata = tmp_path / "postgres"
    other = holder(pgdata)
    try:
        shared = EmbeddedPostgres(pgdata)
        shared.stop()
        pid = postmaster_pid(pgdata)
        assert pid is not None and running(pid)  # the other proxy still uses it
    finally:
        other.send_signal(signal.SIGKILL)
        other.wait(10)
        pid = postmaster_pid(pgdata)
        if pid is not None and running(pid):
            os.kill(pid, signal.SIGINT)  # not left behind by the test
