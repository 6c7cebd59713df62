#!/usr/bin/env bash
# Sets everything up on a fresh machine: .venv with pilotfish (Rust core built by maturin in
# release mode) and its dependencies. Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "setup: cargo (Rust) is needed to build pilotfish._core: https://rustup.rs" >&2; exit 1; }
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
.venv/bin/python -c "import pilotfish, pilotfish._core; print('pilotfish', pilotfish.__version__, 'ready in .venv')"
