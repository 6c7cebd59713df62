#!/usr/bin/env bash
# Sets everything up and runs the main example on a local (emulated 4-node) pilot. The base
# install is enough for it (no VTK, MPI or Parsl: those come with `scripts/setup.sh` alone, or
# `make test`); a .venv that already has them keeps them.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --base
exec .venv/bin/python examples/quickstart.py "$@"
