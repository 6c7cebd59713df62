#!/usr/bin/env bash
# Runs the pilotfish.amt benchmarks on a bigger machine that has python3 + numpy + mpi4py +
# an MPI (e.g. a lent 16-core node), without installing pilotfish: a stub `pilotfish` package
# holding only amt/ (which needs nothing else). Markdown tables and JSON go to ${OUT:-/tmp/amt-bench}.
#   bench/amt/device_run.sh [RANKS...]          (default: 2 4 8)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/amt-bench}
mkdir -p "$OUT" /tmp/pf-stub/pilotfish
: > /tmp/pf-stub/pilotfish/__init__.py
ln -sfn "$PWD/python/pilotfish/amt" /tmp/pf-stub/pilotfish/amt
export PYTHONPATH=/tmp/pf-stub OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${PY:-python3}
MPIEXEC=${MPIEXEC:-mpiexec}
ARGS=${MPIEXEC_ARGS:-}
if "$MPIEXEC" --version 2>&1 | grep -qi "open mpi\|open-mpi\|openrte\|prrte"; then
    ARGS=${MPIEXEC_ARGS:---allow-run-as-root --oversubscribe --bind-to none}
fi
{
    echo "machine: $(nproc) cores; $(uname -r); $("$PY" --version)"
    "$MPIEXEC" --version 2>&1 | head -1
    "$PY" -c "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])"
} | tee "$OUT/machine.txt"
for r in "${@:-2 4 8}"; do
    timeout 400 "$PY" bench/bench_amt.py pic --ranks "$r" --mpiexec "$MPIEXEC" \
        --mpiexec-args "$ARGS" ${PIC_ARGS:-} | tee "$OUT/pic_r$r.md"
done
if [ -n "${WITH_LB:-}" ]; then
    timeout 300 "$PY" bench/bench_amt.py lb --mpiexec "$MPIEXEC" --mpiexec-args "$ARGS" \
        | tee "$OUT/lb.md"
fi
if [ -n "${WITH_RATE:-}" ]; then
    timeout 200 "$PY" bench/bench_amt.py rate --mpiexec "$MPIEXEC" --mpiexec-args "$ARGS" \
        | tee "$OUT/rate.md"
fi
cp bench/results/*.json "$OUT/" 2>/dev/null || true
