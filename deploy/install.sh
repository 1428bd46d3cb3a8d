#!/bin/sh
# The image's install steps, as one script: the Dockerfile RUNs it, and CI (or anyone) can run it
# without Docker to prove the image would build:
#
#     deploy/install.sh /tmp/mp-prefix          # installs into a fresh venv at that prefix
#
# 1. create a virtualenv at PREFIX (default /opt/memory-proxy) with PYTHON (default python3, >= 3.11)
# 2. `pip install` the project (a regular, non-editable install: what the container runs)
# 3. smoke-check the installed package from outside the source tree: it imports, it finds its prompts
#    and its database migrations, and the `memory-proxy` console script answers.
# Idempotent: running it again over the same prefix reinstalls the project.
set -eu

SRC="${MEMORY_PROXY_SRC:-$(cd "$(dirname "$0")/.." && pwd)}"
PREFIX="${1:-/opt/memory-proxy}"
PYTHON="${PYTHON:-python3}"

echo "install.sh: installing $SRC into $PREFIX with $("$PYTHON" --version 2>&1)"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11), "memory-proxy needs Python >= 3.11"'
"$PYTHON" -m venv "$PREFIX"
"$PREFIX/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check --upgrade pip
"$PREFIX/bin/python" -m pip install --quiet --no-cache-dir --disable-pip-version-check "$SRC"

# Smoke check, run from / so that the source tree cannot shadow the installed package.
cd /
"$PREFIX/bin/python" - <<'PY'
import sys

import memory_proxy
from memory_proxy.prompts import PROMPTS
from memory_proxy.store.database import MIGRATIONS

problems = []
if "site-packages" not in (memory_proxy.__file__ or ""):
    problems.append(f"memory_proxy was imported from {memory_proxy.__file__}, not from the installed package")
prompts = [p for p in PROMPTS.iterdir() if p.name.endswith(".md")]
migrations = [p for p in MIGRATIONS.iterdir() if p.name.endswith(".sql")]
if not prompts:
    problems.append(f"no prompts in {PROMPTS}: the wheel must ship memory_proxy/prompts/*.md")
if not migrations:
    problems.append(f"no migrations in {MIGRATIONS}: the wheel must ship memory_proxy/store/migrations/*.sql")
if problems:
    sys.exit("install.sh: the installed package is incomplete:\n  " + "\n  ".join(problems))
print(f"install.sh: ok: {len(prompts)} prompts, {len(migrations)} migrations")
PY
"$PREFIX/bin/memory-proxy" --help >/dev/null
echo "install.sh: memory-proxy installed in $PREFIX"
