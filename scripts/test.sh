#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command).
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
