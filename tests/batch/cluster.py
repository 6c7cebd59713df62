"""What the tests on the project's cluster of real hosts share (scripts/substrates/slurm.sh: a
login host and compute hosts n1..n4, each its own network and UTS namespace): the skip when
the cluster is not one of hosts, a Slurm pilot from the login host, its agent's events, a
host's namespace."""

from __future__ import annotations

import os

import pytest

import pilotfish as pf
from pilotfish._events import read_all_events

WHERE = 'echo "$(hostname) $PILOTFISH_NODE"'  # a task that says where it ran


@pytest.fixture(autouse=True)
def hosts(slurm):
    """(autouse where imported) skip unless the cluster is one of hosts."""
    if os.environ.get("PILOTFISH_CLUSTER") != "hosts":
        pytest.skip("needs the cluster of hosts (scripts/substrates/slurm.sh start, "
                    "PILOTFISH_CLUSTER=hosts)")


def agent_events(pilot, name=None) -> list:
    evs = read_all_events(os.path.join(pilot.sandbox, "agent.events"))
    return [e for e in evs if name is None or e[2] == name]


def slurm_pilot(s, nodes=4, active_timeout=120, **kw):
    """A Slurm pilot of `nodes` hosts, ACTIVE, and a TaskManager on it."""
    pmgr = pf.PilotManager(s)
    pilot = pmgr.submit_pilots(pf.PilotDescription(resource="slurm", nodes=nodes,
                                                   runtime="15m", **kw))
    tmgr = pf.TaskManager(s)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=active_timeout) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


def netns(node: str) -> str:
    """The network namespace of compute host `node`."""
    return f"{os.environ.get('PILOTFISH_NETNS', 'pilotfish')}-{node}"
