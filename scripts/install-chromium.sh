#!/usr/bin/env bash
# Installs headless Chromium (Debian package `chromium`), used by tests/analytics/test_report_browser.py
# to check that `pilotfish report` output renders. Idempotent; needs root (or sudo).
set -euo pipefail

if command -v chromium >/dev/null 2>&1; then
    echo "chromium already installed: $(chromium --version 2>/dev/null || true)"
    exit 0
fi

SUDO=""
if [ "$(id -u)" != "0" ]; then
    SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
# Another installer (the project setup, a neighbour session) may hold the dpkg lock: wait for it.
$SUDO apt-get -o DPkg::Lock::Timeout=600 update
# fonts-dejavu-core: so text in the page renders without fetching anything.
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends chromium fonts-dejavu-core
chromium --version
