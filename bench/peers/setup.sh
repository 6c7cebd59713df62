#!/usr/bin/env bash
# Creates bench/peers/.venv with the peer systems used as baselines:
#   hyperqueue 0.27.x (Python API; LocalCluster runs server+worker in-process)
#   parsl (HighThroughputExecutor)
# Idempotent: a no-op (a couple of seconds) when both are already installed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$HERE/.venv"
PY="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi

if "$VENV/bin/python" - <<'PYEOF' 2>/dev/null
import importlib.metadata as md, sys
v = md.version("hyperqueue")
md.version("parsl")
sys.exit(0 if v.startswith("0.27.") else 1)
PYEOF
then
    echo "peers venv ready: $VENV"
    exit 0
fi

"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "hyperqueue>=0.27,<0.28" parsl
"$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md
print("hyperqueue", md.version("hyperqueue"), "| parsl", md.version("parsl"))
PYEOF
echo "peers venv ready: $VENV"
