#!/usr/bin/env bash
# The checks every commit passes (`make check`, .ci/run before the suite): ruff lint and
# format check over the package, mypy over the whole package (pyproject.toml), the tests of
# the code's shape, cargo fmt --check, cargo clippy -D warnings, cargo test (no Python).
# About a minute on 2 cores with warm caches. Installs ruff and mypy into .venv if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if ! "$PY" -m ruff --version >/dev/null 2>&1 || ! "$PY" -m mypy --version >/dev/null 2>&1; then
    "$PY" -m pip install -q "ruff>=0.15" "mypy>=1.15"
fi
echo "== ruff check"; "$PY" -m ruff check python/pilotfish
echo "== ruff format --check"; "$PY" -m ruff format --check python/pilotfish
echo "== mypy"; "$PY" -m mypy
echo "== shape tests"
"$PY" -m pytest -q -p no:cacheprovider tests/test_layers.py tests/test_checks.py \
    tests/client/test_client_shape.py
CARGO=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
if [ ! -x "$CARGO" ]; then
    echo "!! cargo not found: the Rust checks (fmt, clippy, test) did NOT run" >&2
    exit 1
fi
cd rust
for tool in fmt clippy; do
    if ! "$CARGO" "$tool" --version >/dev/null 2>&1; then
        echo "!! cargo $tool missing: rustup component add $(test $tool = fmt && echo rustfmt || echo clippy)" >&2
        exit 1
    fi
done
echo "== cargo fmt --check"; "$CARGO" fmt --check
echo "== cargo clippy -D warnings"
"$CARGO" clippy --all-targets -- -D warnings
"$CARGO" clippy --all-targets --no-default-features -- -D warnings
echo "== cargo test --no-default-features"; "$CARGO" test -q --no-default-features
echo "== checks passed"
