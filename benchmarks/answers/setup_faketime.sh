#!/usr/bin/env bash
# libfaketime, with which benchmarks/answers runs the proxy (and its PostgreSQL) at a conversation's end. Installed
# with apt when missing (as root); prints the library's path. Idempotent.
set -euo pipefail
find_lib() { ls /usr/lib/*/faketime/libfaketimeMT.so.1 /usr/lib/faketime/libfaketimeMT.so.1 2>/dev/null | head -n 1; }
lib="$(find_lib || true)"
if [[ -z "$lib" ]]; then
    echo "setup_faketime: installing faketime with apt" >&2
    if ! apt-get install -y faketime >&2; then
        apt-get update >&2 && apt-get install -y faketime >&2
    fi
    lib="$(find_lib)"
fi
[[ -n "$lib" ]] || { echo "setup_faketime: libfaketimeMT.so.1 not found" >&2; exit 1; }
echo "$lib"
