"""Resource labels ('local.localhost', 'purdue.anvil', ...) -> pilotfish pilot settings.

RP keeps per-site JSON configs; pilotfish needs only what its PilotDescription takes: the
batch system (`resource`), cores/GPUs per node, and optionally a launcher. The table ships the
local labels; users add their sites with `rp.add_resource(label, {...})` or a JSON file named
by $PILOTFISH_RP_RESOURCES ({label: config}). A config: resource ('local', 'slurm', 'pbs',
'lsf', 'flux'), cores_per_node, gpus_per_node, launcher, launcher_options, partitions,
fake_resources (True: one node of whatever was asked for, as RP's localhost).
"""

from __future__ import annotations

import json
import os

_KEYS = ("resource", "cores_per_node", "gpus_per_node", "launcher", "launcher_options",
         "partitions", "fake_resources")

RESOURCES: dict[str, dict] = {
    "local.localhost": {"resource": "local", "fake_resources": True},
    "local.localhost_test": {"resource": "local", "fake_resources": True},
    "local.localhost_flux": {"resource": "local", "fake_resources": True},
    # a batch allocation on this machine's own Slurm (the project's substrate, or any site
    # whose nodes the client's Slurm reaches); cores per node are learned from the job
    "local.slurm": {"resource": "slurm"},
}


def add_resource(label: str, config: dict) -> None:
    """Register (or replace) a resource label. ValueError for unknown keys or a missing
    'resource'."""
    if not isinstance(label, str) or "." not in label:
        raise ValueError(f"resource label {label!r} must look like 'site.machine'")
    unknown = sorted(set(config) - set(_KEYS))
    if unknown:
        raise ValueError(f"resource {label!r}: unknown keys {unknown} (known: "
                         f"{', '.join(_KEYS)})")
    if "resource" not in config:
        raise ValueError(f"resource {label!r}: 'resource' (the batch system) is required")
    RESOURCES[label] = dict(config)


def resource_config(label: str) -> dict:
    """The config of a label; KeyError(message) for an unknown one."""
    if label in RESOURCES:
        return RESOURCES[label]
    extra = os.environ.get("PILOTFISH_RP_RESOURCES")
    if extra:
        with open(extra) as f:
            for k, v in json.load(f).items():
                add_resource(k, v)
        if label in RESOURCES:
            return RESOURCES[label]
    raise KeyError(f"unknown resource label (known: {', '.join(sorted(RESOURCES))}; add a "
                   f"site with rp.add_resource(label, config) or $PILOTFISH_RP_RESOURCES)")
