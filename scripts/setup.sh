#!/usr/bin/env bash
# Sets everything up on a fresh machine: .venv with pilotfish (Rust core built by maturin in
# release mode) and its dependencies. Idempotent: a second run only rebuilds what changed.
#
#   scripts/setup.sh                  # the base install + [test]: all the test suite needs (VTK, MPI, Parsl)
#   scripts/setup.sh --base           # the base install only (what `make example` needs; no VTK)
#   scripts/setup.sh --extras insitu,mpi
#
# It takes minutes on a fresh machine (downloads; cargo builds the core in release mode), so
# it says what it is doing: one line per step, with the seconds since it started; pip's full
# output goes to build/setup.log (shown when pip fails).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
EXTRAS=test
while (( $# )); do
    case "$1" in
        --base) EXTRAS= ;;
        --extras) EXTRAS=${2:?--extras needs a list, e.g. insitu,mpi}; shift ;;
        --extras=*) EXTRAS=${1#--extras=} ;;
        -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
        *) echo "setup: unknown argument $1 (see scripts/setup.sh --help)" >&2; exit 2 ;;
    esac
    shift
done
T0=$(date +%s)
say() { printf 'setup [%3ds] %s\n' "$(( $(date +%s) - T0 ))" "$*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || {
    echo "setup: cargo (Rust) is needed to build pilotfish._core: https://rustup.rs" \
         "(or install a wheel, no Rust needed: README, \"Install from a wheel\")" >&2; exit 1; }

if [ -x .venv/bin/python ]; then
    say "using .venv ($(.venv/bin/python -V 2>&1))"
else
    say "creating .venv ($("$PY" -V 2>&1))"
    "$PY" -m venv .venv
fi
say "updating pip"
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null

target=.
[ -n "$EXTRAS" ] && target=".[$EXTRAS]"
say "installing pilotfish${EXTRAS:+ [$EXTRAS]} and its dependencies (editable; pip's log: build/setup.log)"
mkdir -p build
log=build/setup.log
# pip's own lines, boiled down, as they come (PYTHONUNBUFFERED; read line by line here, where
# awk would read the pipe in blocks): the count of packages, downloads of 10 MB and more, the
# Rust build's start and end, the install.
digest() {
    local line n=0 have=0 got=0 b0=0 f k words
    local big='^ *Downloading ([^ ]+) \(([0-9]+)(\.[0-9]+)? MB\)'
    while IFS= read -r line; do
        case "$line" in
            "Collecting "*) n=$((n + 1)); (( n % 25 )) || say "  $n packages resolved..." ;;
            "Requirement already satisfied: "*) have=$((have + 1)) ;;
            *"Installing build dependencies: started"*) say "  fetching the build tools (maturin)" ;;
            *"Preparing "*"metadata"*"started"*)
                say "  reading the Rust crate's metadata (cargo; fetches crates the first time)" ;;
            *"Building "*" for pilotfish"*"started"*)
                b0=$(date +%s)
                say "  building the Rust core (cargo, release; a few minutes the first time)" ;;
            *"Building "*" for pilotfish"*"finished"*)
                say "  Rust core built ($(( $(date +%s) - b0 )) s)" ;;
            "Installing collected packages: "*)
                k=${line#Installing collected packages: }; k=${k//[^,]/}
                say "  installing $(( ${#k} + 1 )) packages" ;;
            "Successfully installed "*) read -ra words <<< "$line"; got=$(( ${#words[@]} - 2 )) ;;
            *)
                if [[ $line =~ $big ]] && (( BASH_REMATCH[2] >= 10 )); then
                    f=${BASH_REMATCH[1]##*/}
                    say "  downloading ${f%%-[0-9]*} (${BASH_REMATCH[2]} MB)"
                fi ;;
        esac
    done
    say "  $((n + have)) requirements: $have already there, $got installed"
}
if ! PYTHONUNBUFFERED=1 .venv/bin/python -m pip install --disable-pip-version-check \
        --progress-bar off -e "$target" 2>&1 | tee "$log" | digest; then
    echo "setup: pip failed; its full output: $log" >&2
    tail -n 30 "$log" >&2
    exit 1
fi
.venv/bin/python -c "import pilotfish, pilotfish._core; print('pilotfish', pilotfish.__version__, 'ready in .venv')"
say "done"
