"""What a batch job's environment says about its allocation: its nodes (Slurm, PBS and LSF
variables and node files, host files, compressed host lists) and Slurm's time strings.

Shared by the agent (agent/resources.py: discovery) and the batch layer (batch/holder.py: the
nodes of a second allocation a pilot grows by) -- neither imports the other. Every function
raises ValueError naming the variable or file and the value that could not be read.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping

from ._util import machine_shape
from ._wire import NodeInfo

# A compressed host list may describe a huge machine; this bounds a typo like n[0-999999999].
MAX_HOSTS = 1_000_000


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
            if "[" in expr[open_at + 1 : close_at]:
                raise bad(f"nested '[' in {expr!r}")
            parts.append([expr[pos:open_at]])
            parts.append(_expand_ranges(expr[open_at + 1 : close_at], bad))
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


def slurm_nodes(env: Mapping[str, str]) -> list[NodeInfo]:
    var = "SLURM_JOB_NODELIST" if "SLURM_JOB_NODELIST" in env else "SLURM_NODELIST"
    if var not in env:
        raise ValueError("SLURM_JOB_NODELIST is not set: not inside a Slurm allocation")
    names = expand_hostlist(env[var], var)

    # Slurm counts CPUs as configured (hardware threads where CPUs= says so): taken as cores.
    if "SLURM_JOB_CPUS_PER_NODE" in env:
        cores = expand_counts(env["SLURM_JOB_CPUS_PER_NODE"], "SLURM_JOB_CPUS_PER_NODE")
        if len(cores) != len(names):
            raise ValueError(
                f"SLURM_JOB_CPUS_PER_NODE = {env['SLURM_JOB_CPUS_PER_NODE']!r} "
                f"describes {len(cores)} nodes but {var} has {len(names)}"
            )
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


def pbs_nodes(env: Mapping[str, str]) -> list[NodeInfo]:
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
        pairs = _count_slot_lines(
            _read_lines(path, "LSB_DJOB_HOSTFILE"), f"LSB_DJOB_HOSTFILE ({path})"
        )
    elif "LSB_HOSTS" in env:
        pairs = _count_slot_lines(env["LSB_HOSTS"].split(), "LSB_HOSTS")
    else:
        raise ValueError("LSB_MCPU_HOSTS is not set: not inside an LSF allocation")
    _, gpus, mem = machine_shape()
    return [NodeInfo(h, n, gpus, mem) for h, n in pairs]


# -- host files -----------------------------------------------------------------------------


def hostfile_nodes(path: str) -> list[NodeInfo]:
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


# -- Slurm's time strings ------------------------------------------------------------------


def parse_slurm_time(text: str) -> float | None:
    """Slurm's time format ("[D-]HH:MM:SS", "MM:SS", "SS") in seconds; None for
    "UNLIMITED", "NOT_SET" or anything else."""
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
    parts = text.split(":")
    if not text or len(parts) > 3 or not all(p.isdigit() for p in parts):
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return days * 86400.0 + seconds
