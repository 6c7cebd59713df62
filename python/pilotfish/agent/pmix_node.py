"""A node executor's side of PMIx worlds across hosts (launch method `pmix`, issue 51 item 2):
the ranks of a world on this node are served by this node's own OpenPMIx server, a process
of its own (agent/pmix_server.py, through launch/pmix.PmixHelper), started on first need.

A rank reaches the executor as an ordinary spawn spec whose argv is [RANK_ARGV0, WORLD,
program ...] (launch/pmix.py builds it; only the agent's authenticated link carries specs):
WORLD is JSON {ns, nodes, rank, relay, token}. The first rank of a world here registers it
with this node's server (its fences go to the agent's relay, agent/pmix_relay.py, with the
pilot's token); each rank is then spawned as [program ...] with the environment that server
gives it (PMIX_NAMESPACE, PMIX_RANK, its URIs). The world is let go when its last rank here
is reaped. A spec this cannot serve fails alone, with its reason (the executor's spawn).
"""

from __future__ import annotations

import json
import os
import time

from typing import Any

# argv[0] of such a rank spec: launch/pmix.RANK_ARGV0, the same (tests/launch/test_pmix_lib.py
# checks; not imported: the executor does not load the launch methods)
RANK_ARGV0 = "pilotfish:pmix-rank"
MAX_WORLD = 4 << 20  # the WORLD argument (a node list of 65,536 names)
START_S = 30.0
REGISTER_S = 30.0

__all__ = ["RANK_ARGV0", "NodePmix"]


class NodePmix:
    def __init__(self, node: str, directory: str):
        self.node = node
        self.dir = directory
        self.helper: Any = None  # its server (launch/pmix.PmixHelper), once started
        self.envs: dict[str, dict[int, dict[str, str]]] = {}  # ns -> local rank -> its env
        self.of_key: dict[int, str] = {}  # spawned key -> its world
        self.live: dict[str, set[int]] = {}  # ns -> keys here not reaped yet

    def _server(self) -> Any:
        if self.helper is None:
            from ..launch.pmix import PmixHelper

            helper = PmixHelper(self.dir, os.path.join(self.dir, "pmix.log"))
            end = time.monotonic() + START_S
            while not helper.poll():
                if time.monotonic() > end or helper.proc.poll() is not None:
                    helper.close()
                    raise OSError("this node's PMIx server did not start (see pmix.log)")
                time.sleep(0.005)
            self.helper = helper
        return self.helper

    def rank(self, key: int, argv: list, env: list | None) -> tuple[list, list]:
        """(argv, env) of a rank spec [RANK_ARGV0, WORLD, program ...] to spawn as key."""
        if len(argv) < 3 or len(str(argv[1])) > MAX_WORLD:
            raise ValueError("a PMIx rank spec without its world or program")
        w = json.loads(argv[1])
        ns, rank, nodes = w["ns"], int(w["rank"]), w["nodes"]
        if ns not in self.envs:
            mine = [r for r, n in enumerate(nodes) if n == self.node]
            req = {
                "ns": ns,
                "nodes": nodes,
                "here": self.node,
                "relay": w.get("relay"),
                "token": w.get("token"),
            }
            got = self._server().register_world(req, len(mine), REGISTER_S)
            self.envs[ns] = dict(zip(mine, got))
        e = self.envs[ns].get(rank)
        if e is None:
            raise ValueError(f"rank {rank} of {ns[:80]} is not on node {self.node}")
        self.of_key[key] = ns
        self.live.setdefault(ns, set()).add(key)
        return [str(a) for a in argv[2:]], list(env or ()) + [f"{k}={v}" for k, v in e.items()]

    def reaped(self, key: int) -> None:
        ns = self.of_key.pop(key, None)
        if ns is None:
            return
        keys = self.live.get(ns)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.live[ns]
                self.envs.pop(ns, None)
                if self.helper is not None:
                    self.helper.drop(ns)

    def close(self) -> None:
        if self.helper is not None:
            self.helper.close()
            self.helper = None
