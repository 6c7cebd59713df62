#!/usr/bin/env bash
# Builds the binary wheel of pilotfish: the Python package with its Rust core (pilotfish._core)
# inside, so that `pip install dist/pilotfish-*.whl` needs no Rust on the machine it lands on.
#
#   scripts/wheel.sh            # -> dist/pilotfish-<version>-cp310-abi3-manylinux_2_28_<arch>.whl
#
# abi3 (the stable ABI, from pyo3's "abi3-py310" feature in rust/Cargo.toml): one wheel for
# CPython 3.10 and every later 3.x. manylinux_2_28: installs on any Linux with glibc >= 2.28
# (RHEL/Rocky 8, Debian 10+, Ubuntu 18.10+; most HPC login nodes); maturin audits the built
# library against that policy (symbol versions, linked libraries) and refuses to tag a wheel
# that does not meet it.
#
# A library linked here against a newer glibc (Debian 12: 2.36) binds newer symbol versions
# (pthread_create@GLIBC_2.34, stat64@GLIBC_2.33, ...) and fails that audit, so when this
# machine's glibc is newer than the tag, the link goes through zig (PyPI `ziglang`, maturin
# --zig), which links against glibc 2.28's symbol versions; no container, no root.
# PILOTFISH_WHEEL_COMPAT overrides the tag (e.g. manylinux_2_34; "linux" for an untagged wheel
# for this machine only, built without zig).
#
# Needs cargo (https://rustup.rs) and Python >= 3.10 here; maturin (the version range of
# pyproject.toml's build-system) and ziglang go into build/wheel-tools, not into .venv.
# CARGO_TARGET_DIR is honoured (default: rust/target, shared with the editable install).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
COMPAT=${PILOTFISH_WHEEL_COMPAT:-manylinux_2_28}
TOOLS=build/wheel-tools
ZIG="ziglang>=0.13,<0.18"   # 0.17.1: tested with maturin 1.16
say() { echo "wheel: $*" >&2; }

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { say "cargo (Rust) is needed to build pilotfish._core: https://rustup.rs"; exit 1; }

# maturin's version range, read from the one place that declares it
MATURIN=$("$PY" - <<'EOF'
import re
text = open("pyproject.toml").read()
m = re.search(r'requires\s*=\s*\[\s*"(maturin[^"]*)"', text)
print(m.group(1) if m else "maturin>=1.7,<2")
EOF
)
if [ ! -x "$TOOLS/bin/maturin" ]; then
    say "installing $MATURIN into $TOOLS"
    "$PY" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check "$MATURIN"
fi

# zig when this machine's glibc is newer than the manylinux tag asks
zig=()
if [[ $COMPAT =~ ^manylinux_([0-9]+)_([0-9]+)$ ]]; then
    want=$(( BASH_REMATCH[1] * 1000 + BASH_REMATCH[2] ))
    have=$("$PY" -c 'import os; a, b = os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2]; print(int(a) * 1000 + int(b))')
    if (( have > want )); then
        if ! "$TOOLS/bin/python" -c 'import ziglang' 2>/dev/null; then
            say "this glibc is newer than $COMPAT asks: installing $ZIG to link against the older one"
            "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check "$ZIG"
        fi
        zig=(--zig)
        export PATH="$PWD/$TOOLS/bin:$PATH"   # maturin finds zig through the ziglang package
    fi
fi

say "building the Rust core (release) and the wheel ($COMPAT, abi3${zig:+, linked with zig}); takes a few minutes"
t0=$(date +%s)
rm -f dist/pilotfish-*.whl
"$TOOLS/bin/maturin" build --release --compatibility "$COMPAT" "${zig[@]}" --out dist \
    --interpreter "$TOOLS/bin/python" 2> >(grep -vE '^\s+Compiling ' >&2)
whl=$(ls dist/pilotfish-*.whl)
say "built $whl ($(du -h "$whl" | cut -f1), $(( $(date +%s) - t0 )) s)"
echo "$whl"
