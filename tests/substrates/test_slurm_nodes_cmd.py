"""`scripts/substrates/slurm.sh nodes` names each compute host as the cluster was started
(issue 41, papercut 11: the shape file gained a GPU column, and `read -r n _ mode` put
"hosts 0" into mode, so every host printed as `nK pilotfish 127.0.0.1`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "substrates" / "slurm.sh"


@pytest.mark.slurm
def test_nodes_subcommand_follows_the_shape(slurm):
    import os

    base = Path(os.environ.get("PILOTFISH_SUBSTRATE_DIR", REPO / ".substrates"))
    n, _cpus, mode, *_ = (base / "slurm" / "shape").read_text().split()
    r = subprocess.run([str(SCRIPT), "nodes"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines()]
    assert [row[0] for row in rows] == [f"n{k}" for k in range(1, int(n) + 1)], r.stdout
    if mode == "hosts":  # a namespace and an address per host
        ns = {row[1] for row in rows}
        addrs = {row[2] for row in rows}
        assert len(ns) == len(rows) and len(addrs) == len(rows), r.stdout
        assert all(row[1].endswith("-" + row[0]) for row in rows), r.stdout
        assert "127.0.0.1" not in addrs, r.stdout
    else:
        assert all(row[2] == "127.0.0.1" for row in rows), r.stdout
