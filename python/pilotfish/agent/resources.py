"""Resource discovery: which nodes, cores, GPUs and memory a pilot holds.

`discover()` reads what the batch system tells the job (environment variables and node files),
or takes a declared shape for a local or emulated machine. It never probes other nodes: for
batch systems the GPU count and memory of a node come from the variables that carry them, else
from this node (nodes of one allocation are assumed alike), else from the declaration.

Declared numbers (cores_per_node, gpus_per_node, mem_per_node) override what is found on
every node: that is how a pilot fakes larger nodes. `Resources.overrides` names what was
declared instead of found, so that launchers that ask the batch system for resources (srun)
know not to ask it for things it does not have.

Sources:
  local     one node that fits this machine, named by socket.gethostname()
  declared  an emulated machine (more nodes, or nodes larger than this one): node0000, ...
  slurm     SLURM_JOB_NODELIST (compressed host list), SLURM_JOB_CPUS_PER_NODE, ...
  pbs       PBS_NODEFILE (a line per slot), PBS_NUM_PPN or NCPUS
  lsf       LSB_MCPU_HOSTS ("host n host n ..."), else LSB_DJOB_HOSTFILE / LSB_HOSTS
  hostfile  a file of "host slots=N", "host:N" or repeated "host" lines (any resource)
"""

from __future__ import annotations

import itertools
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .._util import machine_shape
from .._wire import NodeInfo

SOURCES = ("declared", "local", "slurm", "pbs", "lsf", "hostfile")

# A compressed host list may describe a huge machine; this bounds a typo like n[0-999999999].
MAX_HOSTS = 1_000_000


@dataclass
class Resources:
    nodes: list[NodeInfo]
    source: str
    # quantities taken from the declaration rather than found: subset of ("cores", "gpus", "mem")
    overrides: tuple[str, ...] = ()

    @property
    def emulated(self) -> bool:
        """True when every node is this machine or a stand-in for it (tasks run here)."""
        return self.source in ("local", "declared")


def discover(resource: str, nodes: int | None = None, cores_per_node: int | None = None,
             gpus_per_node: int | None = None, mem_per_node: int | None = None,
             env: Mapping[str, str] = os.environ, hostfile: str | None = None) -> Resources:
    """The nodes this pilot holds.

    resource: "local", "slurm", "pbs" or "lsf" ("flux" needs a hostfile). A hostfile, when
    given, is the node list whatever the resource. `nodes`, when given for a batch system,
    keeps the first `nodes` nodes found; finding fewer is an error.
    Raises ValueError naming the variable or file and the value that could not be read.
    """
    if resource == "simulated":  # nothing runs: the declared shape, nothing found
        r = _local(nodes, cores_per_node, gpus_per_node, mem_per_node)
        return Resources([NodeInfo(f"node{i:04d}", n.cores, n.gpus, n.mem)
                          for i, n in enumerate(r.nodes)], "simulated", r.overrides)
    if hostfile is None and resource == "local":
        return _local(nodes, cores_per_node, gpus_per_node, mem_per_node)
    if hostfile is not None:
        found, source = _from_hostfile(hostfile), "hostfile"
    elif resource == "slurm":
        found, source = _from_slurm(env), "slurm"
    elif resource == "pbs":
        found, source = _from_pbs(env), "pbs"
    elif resource == "lsf":
        found, source = _from_lsf(env), "lsf"
    elif resource == "flux":
        # Flux gives a job no node-list variable; `flux resource` would need the broker.
        raise ValueError("resource 'flux': node discovery is not supported; pass a hostfile "
                         "(e.g. written by `flux hostlist`) or declare the nodes")
    else:
        raise ValueError(f"unknown resource {resource!r}; expected one of local, slurm, pbs, lsf")
    if nodes is not None:
        if nodes < 1:
            raise ValueError(f"nodes = {nodes}: must be >= 1")
        if len(found) < nodes:
            raise ValueError(f"{nodes} nodes requested but {source} gives {len(found)}: "
                             f"{', '.join(n.name for n in found[:8])}")
        found = found[:nodes]
    return _override(found, source, cores_per_node, gpus_per_node, mem_per_node)


# -- local and emulated machines ----------------------------------------------------------

def _local(nodes: int | None, cores: int | None, gpus: int | None, mem: int | None) -> Resources:
    m_cores, m_gpus, m_mem = machine_shape()
    n = 1 if nodes is None else nodes
    if n < 1:
        raise ValueError(f"nodes = {n}: must be >= 1")
    c = m_cores if cores is None else cores
    g = m_gpus if gpus is None else gpus
    mb = m_mem if mem is None else mem
    overrides = tuple(k for k, v in (("cores", cores), ("gpus", gpus), ("mem", mem)) if v is not None)
    fits = n == 1 and c <= m_cores and g <= m_gpus and (m_mem == 0 or mb <= m_mem)
    if fits:
        return Resources([NodeInfo(socket.gethostname(), c, g, mb)], "local", overrides)
    return Resources([NodeInfo(f"node{i:04d}", c, g, mb) for i in range(n)], "declared", overrides)


def _override(found: list[NodeInfo], source: str, cores: int | None, gpus: int | None,
              mem: int | None) -> Resources:
    out = [NodeInfo(n.name,
                    n.cores if cores is None else cores,
                    n.gpus if gpus is None else gpus,
                    n.mem if mem is None else mem) for n in found]
    overrides = tuple(k for k, v in (("cores", cores), ("gpus", gpus), ("mem", mem)) if v is not None)
    return Resources(out, source, overrides)


# -- host lists -----------------------------------------------------------------------------

def expand_hostlist(text: str, what: str = "host list") -> list[str]:
    """Expand a Slurm-style compressed host list, keeping order and zero padding.

    "nid[001-003,010]" -> nid001 nid002 nid003 nid010; "a[1-2]b[3-4]" -> a1b3 a1b4 a2b3 a2b4
    (several bracket groups: the cartesian product, first group slowest); "n1,n[3-5],login-7".
    Commas inside brackets separate ranges, outside they separate hosts. `what` names the
    source (e.g. the variable) in the ValueError raised for an empty or garbled list.
    """
    def bad(why: str) -> ValueError:
        return ValueError(f"{what} = {text!r}: {why}")

    if not text or not text.strip():
        raise bad("empty node list")
    hosts: list[str] = []
    for expr in _split_top_level(text, bad):
        expr = expr.strip()
        if not expr:
            raise bad("empty host name (stray comma?)")
        parts: list[list[str]] = []  # literal text and range groups, in order
        pos = 0
        while pos < len(expr):
            open_at = expr.find("[", pos)
            if open_at < 0:
                parts.append([expr[pos:]])
                break
            close_at = expr.find("]", open_at)
            if close_at < 0:
                raise bad(f"unclosed '[' in {expr!r}")
            if "[" in expr[open_at + 1:close_at]:
                raise bad(f"nested '[' in {expr!r}")
            parts.append([expr[pos:open_at]])
            parts.append(_expand_ranges(expr[open_at + 1:close_at], bad))
            pos = close_at + 1
        count = 1
        for p in parts:
            count *= len(p)
        if len(hosts) + count > MAX_HOSTS:
            raise bad(f"more than {MAX_HOSTS} hosts")
        hosts.extend("".join(combo) for combo in itertools.product(*parts))
    for h in hosts:
        if not h or any(ch.isspace() for ch in h):
            raise bad(f"bad host name {h!r}")
    return hosts


def _split_top_level(text: str, bad) -> list[str]:
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise bad("unmatched ']'")
        elif ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise bad("unclosed '['")
    out.append(text[start:])
    return out


_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def _expand_ranges(body: str, bad) -> list[str]:
    out: list[str] = []
    for item in body.split(","):
        item = item.strip()
        m = _RANGE.match(item)
        if not m:
            raise bad(f"bad range {item!r} in [{body}]")
        lo_s, hi_s = m.group(1), m.group(2)
        lo, hi = int(lo_s), int(hi_s if hi_s is not None else lo_s)
        if hi < lo:
            raise bad(f"range {item!r} runs backwards")
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise bad(f"more than {MAX_HOSTS} hosts")
        width = len(lo_s)  # Slurm keeps the low bound's width: [08-10] -> 08 09 10
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def expand_counts(text: str, what: str = "count list") -> list[int]:
    """Expand Slurm's per-node count lists: "64(x4),32" -> [64, 64, 64, 64, 32]."""
    out: list[int] = []
    if not text or not text.strip():
        raise ValueError(f"{what} = {text!r}: empty")
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", item)
        if not m:
            raise ValueError(f"{what} = {text!r}: bad item {item!r} (expected N or N(xK))")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


# -- Slurm ----------------------------------------------------------------------------------

def _from_slurm(env: Mapping[str, str]) -> list[NodeInfo]:
    var = "SLURM_JOB_NODELIST" if "SLURM_JOB_NODELIST" in env else "SLURM_NODELIST"
    if var not in env:
        raise ValueError("SLURM_JOB_NODELIST is not set: not inside a Slurm allocation")
    names = expand_hostlist(env[var], var)

    # Slurm counts CPUs as configured (hardware threads where CPUs= says so): taken as cores.
    if "SLURM_JOB_CPUS_PER_NODE" in env:
        cores = expand_counts(env["SLURM_JOB_CPUS_PER_NODE"], "SLURM_JOB_CPUS_PER_NODE")
        if len(cores) != len(names):
            raise ValueError(f"SLURM_JOB_CPUS_PER_NODE = {env['SLURM_JOB_CPUS_PER_NODE']!r} "
                             f"describes {len(cores)} nodes but {var} has {len(names)}")
    elif "SLURM_CPUS_ON_NODE" in env:
        cores = [_int_var(env, "SLURM_CPUS_ON_NODE")] * len(names)
    else:
        cores = [machine_shape()[0]] * len(names)

    gpus = _slurm_gpus(env)
    if "SLURM_MEM_PER_NODE" in env:
        mem = _int_var(env, "SLURM_MEM_PER_NODE")  # MiB
    else:
        mem = machine_shape()[2]
    return [NodeInfo(n, c, gpus, mem) for n, c in zip(names, cores)]


def _slurm_gpus(env: Mapping[str, str]) -> int:
    if "SLURM_GPUS_ON_NODE" in env:
        return _int_var(env, "SLURM_GPUS_ON_NODE")
    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        if var in env:
            return len([g for g in env[var].split(",") if g.strip()])
    return machine_shape()[1]


def _int_var(env: Mapping[str, str], var: str) -> int:
    value = env[var]
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError(f"{var} = {value!r}: not an integer") from None
    if n < 0:
        raise ValueError(f"{var} = {value!r}: must be >= 0")
    return n


# -- PBS ------------------------------------------------------------------------------------

def _from_pbs(env: Mapping[str, str]) -> list[NodeInfo]:
    if "PBS_NODEFILE" not in env:
        raise ValueError("PBS_NODEFILE is not set: not inside a PBS allocation")
    path = env["PBS_NODEFILE"]
    slots = _count_slot_lines(_read_lines(path, "PBS_NODEFILE"), f"PBS_NODEFILE ({path})")
    # A node file has a line per MPI process (PBS Pro: mpiprocs), which may be fewer than the
    # cores held; PBS_NUM_PPN (Torque) or NCPUS (PBS Pro, cores per chunk) says the cores.
    per_node = None
    for var in ("PBS_NUM_PPN", "NCPUS"):
        if var in env:
            per_node = _int_var(env, var)
            break
    _, gpus, mem = machine_shape()
    return [NodeInfo(h, per_node if per_node is not None else n, gpus, mem) for h, n in slots]


# -- LSF ------------------------------------------------------------------------------------

def _from_lsf(env: Mapping[str, str]) -> list[NodeInfo]:
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
                raise ValueError(f"LSB_MCPU_HOSTS = {value!r}: count {count!r} of {host} "
                                 "is not a number")
            slots[host] = slots.get(host, 0) + int(count)
        pairs = list(slots.items())
    elif "LSB_DJOB_HOSTFILE" in env:
        path = env["LSB_DJOB_HOSTFILE"]
        pairs = _count_slot_lines(_read_lines(path, "LSB_DJOB_HOSTFILE"),
                                  f"LSB_DJOB_HOSTFILE ({path})")
    elif "LSB_HOSTS" in env:
        pairs = _count_slot_lines(env["LSB_HOSTS"].split(), "LSB_HOSTS")
    else:
        raise ValueError("LSB_MCPU_HOSTS is not set: not inside an LSF allocation")
    _, gpus, mem = machine_shape()
    return [NodeInfo(h, n, gpus, mem) for h, n in pairs]


# -- host files -----------------------------------------------------------------------------

def _from_hostfile(path: str) -> list[NodeInfo]:
    """Lines "host", "host slots=N" (Open MPI), "host:N" (MPICH); '#' starts a comment.

    A host listed on several lines gets the sum of its slots; a bare host counts one slot.
    """
    lines = _read_lines(path, "hostfile")
    slots: dict[str, int] = {}
    for lineno, line in enumerate(lines, 1):
        words = line.split()
        host, count = words[0], 1
        if ":" in host:
            host, _, n = host.partition(":")
            if not n.isdigit():
                raise ValueError(f"hostfile {path}:{lineno}: bad slot count in {line!r}")
            count = int(n)
        for w in words[1:]:
            key, _, val = w.partition("=")
            if key in ("slots", "max_slots", "max-slots"):
                if not val.isdigit():
                    raise ValueError(f"hostfile {path}:{lineno}: bad {key} in {line!r}")
                if key == "slots":
                    count = int(val)
            # other keys (e.g. Open MPI's rank/cpu hints) are not placement we use
        if not host:
            raise ValueError(f"hostfile {path}:{lineno}: no host name in {line!r}")
        slots[host] = slots.get(host, 0) + count
    if not slots:
        raise ValueError(f"hostfile {path}: no hosts")
    _, gpus, mem = machine_shape()
    return [NodeInfo(h, n, gpus, mem) for h, n in slots.items()]


def _read_lines(path: str, what: str) -> list[str]:
    """Non-empty lines without comments."""
    try:
        with open(path) as f:
            raw = f.read()
    except OSError as e:
        raise ValueError(f"{what} = {path!r}: cannot read ({e.strerror})") from None
    lines = [ln.split("#", 1)[0].strip() for ln in raw.splitlines()]
    return [ln for ln in lines if ln]


def _count_slot_lines(lines: Iterable[str], what: str) -> list[tuple[str, int]]:
    """One line (or word) per slot -> [(host, slots)] in order of first appearance."""
    counts: dict[str, int] = {}
    for ln in lines:
        host = ln.split()[0]
        counts[host] = counts.get(host, 0) + 1
    if not counts:
        raise ValueError(f"{what}: no hosts")
    return list(counts.items())


__all__ = ["SOURCES", "Resources", "discover", "expand_counts", "expand_hostlist"]
