#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command):
#   .venv with pilotfish; Slurm (4 emulated nodes), munge, PRRTE/Open MPI, MPICH, mpi4py;
#   a private network namespace that all daemons and the tests run in.
#   scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/substrates/install.sh
scripts/install-chromium.sh >/dev/null   # the report's browser test
# RP's own examples and what they install (the cluster's namespace has no route out)
.venv/bin/python tests/rp/rp_cache.py || true
scripts/substrates/slurm.sh start
trap 'scripts/substrates/slurm.sh stop >/dev/null 2>&1 || true' EXIT
scripts/substrates/slurm.sh exec .venv/bin/python -m pytest -q -p no:cacheprovider --durations=25 "$@"
