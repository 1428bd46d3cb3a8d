#!/usr/bin/env bash
# System packages CI needs beyond Python: `prometheus` (tests/test_dashboard.py runs every Grafana panel's
# query against a real Prometheus), Debian's `chromium` with its driver (tests/test_browser.py drives
# the memory browser page) and `pgbouncer` (tests/test_database.py: the pool behind PgBouncer 1.18 in
# transaction mode). Debian/Ubuntu, as root (or with sudo). Idempotent and fast when
# everything is already there: apt is only touched for what is missing.
set -euo pipefail
export PATH="$PATH:/usr/sbin"  # pgbouncer lives there; not on a non-root PATH

PACKAGES=(prometheus chromium chromium-driver pgbouncer)
COMMANDS=(prometheus chromium chromedriver pgbouncer)  # one command per package, to tell whether it is installed

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
# The Debian package enables a prometheus service listening on :9090; the tests start their own, on a
# free port. Stop the packaged one where a service manager runs (harmless where none does, e.g. containers).
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus pgbouncer >/dev/null 2>&1 || true
fi
for cmd in "${COMMANDS[@]}"; do
  command -v "$cmd" >/dev/null || { echo "install-system-packages: $cmd still missing" >&2; exit 1; }
done
prometheus --version 2>&1 | head -1
chromium --version
