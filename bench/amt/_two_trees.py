"""Shared by bench/amt's before/after benchmarks.

Two pilotfish.amt trees in one job (rate_ab.py, pic_ab.py): `staged` copies each tree's
`pilotfish/amt` (and the `_mpi.py` it imports) into a temporary folder as the packages
`pf_before` and `pf_after`, so that both runtimes can be imported side by side into the same
processes; `run_job` starts a worker job under mpiexec (without PYTHONPATH: the worker imports
the copies) and returns the JSON of its last line.

The message-rate element (msgrate_amt.py, rate_ab.py): `rate_element(amt)` is the element
class both measure, built on the given pilotfish.amt module.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIDES = ("before", "after")


def find_mpiexec() -> str:
    sys.path.insert(0, str(REPO / "bench"))
    from bench_amt import find_mpiexec as find

    return find()


@contextmanager
def staged(trees: dict[str, str], prefix: str):
    """trees: side -> a tree's python/ folder. Yields the folder holding pf_<side> packages;
    removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        for side in SIDES:
            src = Path(trees[side]).resolve() / "pilotfish"
            pkg = tmp / f"pf_{side}"
            pkg.mkdir()
            (pkg / "__init__.py").write_text("")
            shutil.copy(src / "_mpi.py", pkg / "_mpi.py")
            shutil.copytree(src / "amt", pkg / "amt",
                            ignore=shutil.ignore_patterns("__pycache__"))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_job(argv: list[str], timeout: float):
    """Run a worker job; its last stdout line is JSON. A failure stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"failed (rc={p.returncode})\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def rate_element(amt):
    """The element of the message-rate cases, on this pilotfish.amt module:
      burst(partner, k)        send k small messages to partner (remote or local case)
      relay_burst(partner, k)  queue k local messages to itself, each of whose handlers
                               (relay) posts one small message on to partner (relay case)
      take(arr)                receive an array (bulk case)"""

    class W(amt.Element):
        def __init__(self):
            self.n = 0
            self.bytes = 0

        def burst(self, partner, k):
            send = self.collection.send
            for i in range(k):
                send(partner, "hit", i)

        def hit(self, i):
            self.n += 1

        def relay_burst(self, partner, k):
            send = self.collection.send
            me = self.index
            for i in range(k):
                send(me, "relay", partner, i)

        def relay(self, partner, i):
            self.collection.send(partner, "hit", i)

        def take(self, arr):
            self.bytes += arr.nbytes

    return W
