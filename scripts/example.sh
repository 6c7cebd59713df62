#!/usr/bin/env bash
# Sets everything up and runs the main example on a local (emulated 4-node) pilot.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python examples/quickstart.py "$@"
