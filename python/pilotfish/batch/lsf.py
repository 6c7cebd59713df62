"""resource="lsf": IBM Spectrum LSF, through PSI/J's "lsf" executor; its job's nodes from
LSB_MCPU_HOSTS (lsf_nodes), its tasks launched by jsrun. A project is LSF's `-P`
only (PSI/J's account would add `-G`, a fair-share group, which LSF checks)."""

from __future__ import annotations

from collections.abc import Mapping

from .._batch_env import count_slot_lines, read_lines
from .._util import machine_shape
from .._wire import NodeInfo
from .registry import BatchSystem, register


def lsf_nodes(env: Mapping[str, str]) -> list[NodeInfo]:
    # LSB_MCPU_HOSTS = "host1 n1 host2 n2 ...". On machines like Summit the first host is the
    # batch (launch) node where the job script and so the agent run; it is kept in the list
    # (with its slot count) -- callers that must not place tasks there drop nodes[0].
    if "LSB_MCPU_HOSTS" in env:
        value = env["LSB_MCPU_HOSTS"]
        words = value.split()
        if not words or len(words) % 2:
            raise ValueError(f"LSB_MCPU_HOSTS = {value!r}: expected pairs 'host count'")
        slots: dict[str, int] = {}
        for host, count in zip(words[::2], words[1::2]):
            if not count.isdigit():
                raise ValueError(
                    f"LSB_MCPU_HOSTS = {value!r}: count {count!r} of {host} is not a number"
                )
            slots[host] = slots.get(host, 0) + int(count)
        pairs = list(slots.items())
    elif "LSB_DJOB_HOSTFILE" in env:
        path = env["LSB_DJOB_HOSTFILE"]
        pairs = count_slot_lines(
            read_lines(path, "LSB_DJOB_HOSTFILE"), f"LSB_DJOB_HOSTFILE ({path})"
        )
    elif "LSB_HOSTS" in env:
        pairs = count_slot_lines(env["LSB_HOSTS"].split(), "LSB_HOSTS")
    else:
        raise ValueError("LSB_MCPU_HOSTS is not set: not inside an LSF allocation")
    _, gpus, mem = machine_shape()
    return [NodeInfo(h, n, gpus, mem) for h, n in pairs]


LSF = register(
    BatchSystem(
        name="lsf",
        psij_executor="lsf",
        job_name_attribute="lsf.J",
        node_failure_directives=("#BSUB -rn",),  # not rerunnable (no option against the kill)
        project_attribute="lsf.P",
        nodes=lsf_nodes,
        source="lsf",
        default_launcher="jsrun",
        rp_schemes=("lsf",),
    )
)

__all__ = ["LSF", "lsf_nodes"]
