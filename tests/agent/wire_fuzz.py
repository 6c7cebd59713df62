"""Hypothesis strategies for frames a broken or hostile client could send an agent, and the
check that the agent survives them. Shared by tests/agent/test_wire_fuzz.py and
bench/bench_wire_fuzz.py.

Safety: nothing generated can become a command. Executables come from a fixed harmless set
(or are not strings at all), and shell lines (pre_exec, post_exec, shell) are never generated.
"""

from __future__ import annotations

import msgspec
from hypothesis import strategies as st

from pilotfish._wire import TaskSpec

FIELDS = list(TaskSpec.__struct_fields__)
SAFE_EXECUTABLES = ["/bin/true", "true", "/nonexistent/prog", "", "a\x00b", "/"]

text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 63), 2 ** 64 - 1),
                   st.floats(allow_nan=True, allow_infinity=True), text, st.binary(max_size=8))
garbage = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)), max_leaves=6)
small_int = st.one_of(st.integers(-3, 9), st.integers(-(2 ** 63), 2 ** 64 - 1))
path = st.one_of(text, st.sampled_from(["../../x", "/etc/passwd", "agent.events", "a\x00b", ""]))
staging = st.lists(st.dictionaries(st.sampled_from(["source", "target", "action", "junk"]),
                                   st.one_of(path, garbage), max_size=4), max_size=2)

PLAUSIBLE = {
    "uid": st.one_of(text, st.just("")),
    "executable": st.sampled_from(SAFE_EXECUTABLES),
    "arguments": st.lists(text, max_size=3),
    "environment": st.dictionaries(text, text, max_size=3),
    "sandbox": st.one_of(st.none(), path),
    "pre_exec": st.just([]),
    "post_exec": st.just([]),
    "shell": st.just(False),
    "ranks": small_int, "cores_per_rank": small_int, "gpus_per_rank": small_int,
    "mem_per_rank": small_int,
    "launcher": st.one_of(st.none(), st.sampled_from(["direct", "teleport", ""])),
    "stdout": st.one_of(st.booleans(), path), "stderr": st.one_of(st.booleans(), path),
    "timeout": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    "priority": small_int, "retries": small_int,
    "colocate": st.one_of(st.none(), text),
    "input_staging": staging, "output_staging": staging,
    "duration": st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    "stage_on_error": st.one_of(st.booleans(), garbage),
    # a function task: bytes that are no pickle at all (a worker fails the call), or nothing
    "function": st.one_of(st.none(), st.none(), st.binary(max_size=16)),
    "call": st.one_of(st.none(), st.binary(max_size=16)),
    "restartable": st.one_of(st.booleans(), garbage),
    # a callable's digest: often one no callable ever came with (its calls wait for it)
    "fn_ref": st.one_of(st.none(), st.binary(max_size=16)),
}
UNSAFE = {"executable", "pre_exec", "post_exec", "shell"}  # never garbage that is a string


@st.composite
def spec_item(draw):
    """A TaskSpec as the wire carries it (a list by position), each field plausible or
    garbage, sometimes cut short or too long."""
    item = []
    for name in FIELDS:
        value = draw(PLAUSIBLE[name])
        if name not in UNSAFE and draw(st.integers(0, 9)) == 0:
            value = draw(garbage)
        item.append(value)
    cut = draw(st.integers(0, 30))
    if cut < 3:
        item = item[:cut]
    elif cut == 30:
        item.append(draw(garbage))
    return item


node = st.one_of(st.tuples(text, small_int, small_int, small_int).map(list), garbage)
group_name = st.one_of(st.sampled_from(["g", "h", ""]), garbage)
frame = st.one_of(
    st.tuples(st.just("submit"), st.lists(spec_item(), max_size=12)).map(list),
    # service groups (members from the same harmless executables) and elastic pilots
    st.tuples(st.just("group_start"), st.tuples(group_name, spec_item(), small_int,
                                                st.one_of(st.sampled_from(["never", "x"]),
                                                          garbage),
                                                small_int, st.floats(0.1, 5)).map(list)
              ).map(list),
    st.tuples(st.just("group_resize"), group_name, small_int).map(list),
    st.tuples(st.just("group_hold"), group_name, st.one_of(text, garbage)).map(list),
    st.tuples(st.just("group_release"), group_name, st.one_of(text, garbage)).map(list),
    st.tuples(st.just("grow"), st.one_of(text, garbage), st.lists(node, max_size=2),
              st.one_of(st.none(), st.sampled_from(["direct", "teleport"]))).map(list),
    st.tuples(st.just("shrink"), st.lists(st.one_of(text, garbage), max_size=2)).map(list),
    st.tuples(st.just("cancel"), st.lists(text, max_size=4)).map(list),
    st.tuples(st.just("resync"), st.lists(text, max_size=4)).map(list),
    st.tuples(st.just("beat"), garbage).map(list),
    garbage,
)


def encode(value) -> bytes | None:
    """The frame's bytes, or None if msgpack cannot carry it (never sent)."""
    try:
        return msgspec.msgpack.encode(value)
    except Exception:
        return None


def count(value) -> int:
    """Messages in a frame: the specs of a submit, else 1."""
    if isinstance(value, list) and len(value) == 2 and value[0] == "submit" and isinstance(value[1], list):
        return max(1, len(value[1]))
    return 1
