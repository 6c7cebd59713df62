#!/usr/bin/env bash
# Proves that the wheel installs and runs where there is no Rust: a fresh venv, a PATH with no
# cargo or rustc on it, `pip install dist/pilotfish-*.whl` (the base install: no extras), then
# `pilotfish --help` and examples/quickstart.py run from a directory outside the repository, so
# that nothing is imported from the source tree. Fails when:
#   - cargo or rustc is still reachable on the PATH it builds (the check would prove nothing),
#   - pip would build anything (--only-binary :all:: every dependency comes as a wheel too),
#   - pilotfish or pilotfish._core is imported from anywhere but the fresh venv,
#   - the base install pulled an optional dependency (vtk, mpi4py, parsl),
#   - `pilotfish --help` or the quickstart fails.
#
#   scripts/wheel.sh && scripts/wheel_check.sh [WHEEL]
#
# The venv and the run directory go to a temporary directory, removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PY=${PYTHON:-python3}
PY=$(command -v "$PY")
say() { echo "wheel_check: $*" >&2; }

whl=${1:-}
if [ -z "$whl" ]; then
    shopt -s nullglob
    found=(dist/pilotfish-*.whl)
    (( ${#found[@]} == 1 )) || { say "expected one dist/pilotfish-*.whl (found ${#found[@]}): run scripts/wheel.sh"; exit 1; }
    whl=${found[0]}
fi
whl=$(cd "$(dirname "$whl")" && pwd)/$(basename "$whl")

# a PATH without any directory that holds cargo or rustc
clean=()
IFS=: read -r -a dirs <<< "$PATH"
for d in "${dirs[@]}"; do
    [ -n "$d" ] || continue
    [ -e "$d/cargo" ] || [ -e "$d/rustc" ] && continue
    clean+=("$d")
done
NOCARGO_PATH=$(IFS=:; echo "${clean[*]}")
if PATH=$NOCARGO_PATH command -v cargo >/dev/null || PATH=$NOCARGO_PATH command -v rustc >/dev/null; then
    say "cargo/rustc still on the cleaned PATH ($NOCARGO_PATH)"; exit 1
fi

work=$(mktemp -d /tmp/pilotfish-wheel-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
venv=$work/venv
run=$work/run
mkdir -p "$run"
cp examples/quickstart.py "$run/"

export PATH=$NOCARGO_PATH
unset PYTHONPATH VIRTUAL_ENV CARGO_HOME RUSTUP_HOME
cd "$run"
t0=$(date +%s)
say "fresh venv in $venv (cargo and rustc off the PATH)"
"$PY" -m venv "$venv"
say "pip install $(basename "$whl") (binary wheels only)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary :all: "$whl"
say "installed in $(( $(date +%s) - t0 )) s"

"$venv/bin/python" - "$venv" "$REPO" <<'EOF'
import importlib.util, os, sys
venv, repo = (os.path.realpath(p) for p in sys.argv[1:3])
import pilotfish, pilotfish._core
for mod in (pilotfish, pilotfish._core):
    path = os.path.realpath(mod.__file__)
    if not path.startswith(venv + os.sep) or path.startswith(repo + os.sep):
        sys.exit(f"wheel_check: {mod.__name__} imported from {path}, not from the fresh venv {venv}")
extra = {"vtk": "insitu", "mpi4py": "mpi", "parsl": "parsl"}
pulled = [f"{m} (extra [{e}])" for m, e in extra.items() if importlib.util.find_spec(m)]
if pulled:
    sys.exit(f"wheel_check: the base install pulled optional dependencies: {', '.join(pulled)}")
print(f"wheel_check: pilotfish {pilotfish.__version__} from {os.path.dirname(pilotfish.__file__)}, "
      f"core {os.path.basename(pilotfish._core.__file__)}", file=sys.stderr)
EOF

"$venv/bin/pilotfish" --help >/dev/null
say "pilotfish --help: ok"
say "running quickstart.py in $run"
"$venv/bin/python" quickstart.py
say "ok: the wheel installs and runs without Rust ($(( $(date +%s) - t0 )) s)"
