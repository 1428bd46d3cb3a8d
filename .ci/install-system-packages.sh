#!/usr/bin/env bash
# System packages CI needs beyond Python: `prometheus` (tests/system/test_dashboard.py runs every Grafana panel's
# query against a real Prometheus), Debian's `chromium` with its driver (tests/api/test_browser.py drives
# the memory browser page), `pgbouncer` (tests/store/test_database.py: the pool behind PgBouncer 1.18 in
# transaction mode; tests/benchmarks/test_cluster.py) and `nginx` (the load balancer of `python -m benchmarks.cluster`).
# Debian/Ubuntu, as root (or with sudo). Idempotent and fast when
# everything is already there: apt is only touched for what is missing.
set -euo pipefail
export PATH="$PATH:/usr/sbin"  # pgbouncer and nginx live there; not on a non-root PATH

PACKAGES=(prometheus chromium chromium-driver pgbouncer nginx)
COMMANDS=(prometheus chromium chromedriver pgbouncer nginx)  # one command per package, to tell whether it is installed

missing=()
for i in "${!PACKAGES[@]}"; do
  command -v "${COMMANDS[$i]}" >/dev/null 2>&1 || missing+=("${PACKAGES[$i]}")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-system-packages: already installed: ${PACKAGES[*]}"
  exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
echo "install-system-packages: installing ${missing[*]}"
$SUDO apt-get update -qq
# --no-install-recommends: the tests need the binaries only, not exporters, web assets or extra fonts.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian packages enable services (prometheus on :9090, nginx on :80); the tests and benchmarks start
# their own, on free ports. Stop the packaged ones where a service manager runs (harmless where none does,
# e.g. containers).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus pgbouncer nginx >/dev/null 2>&1 || true
fi
for cmd in "${COMMANDS[@]}"; do
  command -v "$cmd" >/dev/null || { echo "install-system-packages: $cmd still missing" >&2; exit 1; }
done
prometheus --version 2>&1 | head -1
chromium --version
