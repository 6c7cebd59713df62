"""A grown unit's batch job (Pilot.grow on Slurm): it holds its nodes for the pilot.

The job's script runs `python -m pilotfish.batch.holder NODES.json`: it writes the nodes it
was given (as the agent reads a pilot's own: SLURM_JOB_NODELIST and friends) and waits. The
client passes them to the pilot's agent, which launches onto them with `srun --jobid=<this
job>`; shrink cancels the job.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def submit_holder(pilot, unit: str, nodes: int, deadline: float | None):
    """Submit the holder job of `unit` and wait until it runs: (job, [NodeInfo])."""
    from .. import _wire
    from .. import states as S
    from .._errors import PilotfishError
    from ..descriptions import PilotDescription
    from .psij_job import PsijBatchJob

    d = pilot.description
    active = next((t for s, t in pilot.history if s == "ACTIVE"), time.time())
    left = float(d.runtime) - (time.time() - active)
    desc = PilotDescription(
        resource="slurm",
        nodes=nodes,
        runtime=max(60.0, left),
        queue=d.queue,
        project=d.project,
        reservation=d.reservation,
        environment=d.environment,
    )
    sandbox = os.path.join(pilot.sandbox, "grow", unit)
    os.makedirs(sandbox, mode=0o700, exist_ok=True)
    path = os.path.join(sandbox, "nodes.json")
    job = PsijBatchJob(
        f"{pilot.uid}.{unit}", desc, sandbox, [sys.executable, "-m", "pilotfish.batch.holder", path]
    )
    job.submit()
    try:
        while not os.path.exists(path):
            if pilot.state in S.FINAL:
                raise PilotfishError(f"grow: {pilot.uid} ended ({pilot.state})")
            state, message = job.poll()
            if state not in ("QUEUED", "RUNNING"):
                raise PilotfishError(
                    f"grow: the batch job of {unit} ended ({state}) before "
                    f"it ran: {message or job.stderr_tail()}"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise PilotfishError(
                    f"grow: the batch job of {unit} ({job.native_id}) did not start in time"
                )
            time.sleep(0.05)
        with open(path) as f:
            found = json.load(f)
    except BaseException:
        job.cancel()
        raise
    infos = [
        _wire.NodeInfo(
            name,
            d.cores_per_node if d.cores_per_node is not None else cores,
            d.gpus_per_node if d.gpus_per_node is not None else gpus,
            d.mem_per_node if d.mem_per_node is not None else mem,
        )
        for name, cores, gpus, mem in found["nodes"]
    ]
    return job, infos


def main(argv: list[str]) -> int:
    from .slurm import slurm_nodes

    if len(argv) != 1:
        print("usage: python -m pilotfish.batch.holder NODES.json", file=sys.stderr)
        return 2
    nodes = slurm_nodes(os.environ)
    tmp = argv[0] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(
            {
                "job": os.environ.get("SLURM_JOB_ID"),
                "nodes": [[n.name, n.cores, n.gpus, n.mem] for n in nodes],
            },
            f,
        )
    os.replace(tmp, argv[0])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:  # held until the job is canceled (shrink) or its walltime ends
        signal.pause()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
