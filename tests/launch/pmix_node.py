"""One node's PMIx server for tests/launch/test_pmix_lib.py: a process of its own (OpenPMIx
has one server per process) that registers world NS (rank r on NODES[r]) through
agent/pmix_lib.py, spawns its ranks of PROGRAM with the environment the server gives, and
speaks JSON lines: out {"fence": key, "blob": hex} when all its ranks are in a fence,
{"rcs": [...]} when its ranks ended; in {"key": key, "blob": hex} -- the world's blob, every
node's in node order -- completes that fence.

    python pmix_node.py HERE NODES(comma list) NS PROGRAM [ARG ...]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading

from pilotfish.agent.pmix_lib import PmixLib

VENV = os.path.dirname(os.path.dirname(sys.executable))


def main() -> int:
    here, nodes, ns, argv = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4:]
    lock = threading.Lock()

    def say(obj: dict) -> None:
        with lock:
            sys.stdout.write(json.dumps(obj) + "\n")
            sys.stdout.flush()

    tmp = tempfile.mkdtemp(prefix="pmixnode.")
    lib = PmixLib(tmp, lambda ns, key, blob: say({"fence": key, "blob": blob.hex()}))
    envs = lib.register(ns, nodes, here)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PMIX_", "OMPI_", "PRTE_"))}
    base.update(OPAL_PREFIX=VENV, PRTE_PREFIX=VENV, PMIX_PREFIX=VENV)
    base.update(OMPI_MCA_pml="ob1", OMPI_MCA_btl="self,sm,tcp", OMPI_MCA_btl_tcp_if_include="lo")
    base.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    procs = [subprocess.Popen(argv, env={**base, **e}, stdout=sys.stderr) for e in envs]

    def reader() -> None:
        for line in sys.stdin:
            m = json.loads(line)
            lib.fence_done(int(m["key"]), bytes.fromhex(m["blob"]))

    threading.Thread(target=reader, daemon=True).start()
    say({"rcs": [p.wait(timeout=120) for p in procs]})
    lib.drop(ns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
