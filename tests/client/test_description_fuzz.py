"""Fuzzing the descriptions: every keyword set, however odd, gives a description or a
DescriptionError -- never TypeError, OverflowError, UnicodeEncodeError, RecursionError...

What is accepted must also cross every boundary it will meet: msgpack (wire, journal), JSON
(agent.json) and the placer (misfit() None means the Rust placer takes the request).
bench/bench_fuzz.py runs the same strategies for 100,000 examples.
"""

from __future__ import annotations

import json
import math

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pilotfish as pf
from pilotfish import descriptions as D
from pilotfish._core import Placer
from pilotfish._validate import STAGING_ACTIONS

TASK_FIELDS = sorted(pf.TaskDescription._fields)
PILOT_FIELDS = sorted(pf.PilotDescription._fields)


# -- garbage: every type, every size, every encoding trap ----------------------------------

class _BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")

    __str__ = __repr__


class _BadEq:
    def __eq__(self, other):
        raise RuntimeError("no eq")

    __hash__ = object.__hash__


class _IntLike(int):  # an int subclass whose str() lies
    def __str__(self):
        return "not a number"


def _deep(depth):
    v = []
    for _ in range(depth):
        v = [v]
    return v


def _cyclic():
    v = []
    v.append(v)
    return v


_BIG_INTS = [2**64, 2**64 - 1, 2**63, -(2**63) - 1, 2**40, 2**32, 2**32 - 1, 2**31,
             2**26 + 1, 2**26, 10**12, 1_000_001, 65_537, 65]
# over 4300 digits: made by a map, since hypothesis reprs its strategies (and repr() fails)
huge_int = st.sampled_from([(10, 4301, 1), (-10, 4400, 0), (2, 14500, 0)]).map(
    lambda t: t[0] ** t[1] + t[2])
_FLOATS = [math.nan, math.inf, -math.inf, 1e308, -1e308, 1e-300, -0.0, 0.5, 1.0, 3.0, 4e9]
_STRINGS = ["", " ", "\0", "a\0b", "\ud800", "x\udfff", "é", "✓", "\U0001f41f", "x" * 5000,
            "9" * 5000, "9" * 5000 + "s", "9" * 5000 + ":00", "1e400", "-5", "0", "nan", "inf",
            "90s", "30m", "2h", "01:30:00", "1-00:00:00", "500ms", "soon"]
_PATHS = ["out.txt", "a/b", "./a//b/", "..", "../x", "a/../../x", "/etc/passwd", "/tmp/ok",
          "agent.events", "tasks/../agent.events", ".", "", "  ", "a\0b", "x\ud800", "dir/", "/",
          "~/x", "é/ü"]
_NAMES = ["local", "slurm", "direct", "srun", "mpirun", "prrte", "copy", "link", "move",
          "colocate", "source", "target", "action", "Local", "SRUN", "cloud", "qsub"]

any_text = st.text(st.characters(blacklist_categories=()), max_size=12)  # surrogates, NUL included
odd_scalar = st.one_of(
    st.integers(), st.integers(-(2**70), 2**70), st.sampled_from(_BIG_INTS), huge_int,
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_FLOATS),
    st.booleans(), st.none(), any_text, st.sampled_from(_STRINGS + _PATHS + _NAMES),
    st.binary(max_size=8), st.builds(bytearray, st.binary(max_size=4)),
    st.sampled_from([object, _BadRepr, _BadEq]).map(lambda make: make()),  # (made in a map:
    st.sampled_from([_IntLike(3), complex(1, 2), Ellipsis,                 # hypothesis reprs)
                     int, print, range(3), frozenset({1}), {1, 2}]),
    st.builds(_deep, st.sampled_from([40, 500, 5000])), st.builds(_cyclic),
)
odd_key = st.one_of(any_text, st.sampled_from(_NAMES + _STRINGS[:8]), st.integers(-3, 3),
                    st.none(), st.booleans(), st.tuples(st.integers(0, 2)), st.floats(),
                    st.binary(max_size=3), st.just(_IntLike(1)), st.builds(_BadEq))
# containers two levels deep (deeper ones come from _deep): a recursive strategy would cost
# hypothesis several times more per example
garbage = st.one_of(
    odd_scalar, odd_scalar,
    st.lists(odd_scalar, max_size=4), st.tuples(odd_scalar, odd_scalar),
    st.dictionaries(odd_key, odd_scalar, max_size=4),
    st.lists(st.lists(odd_scalar, max_size=2) | st.dictionaries(odd_key, odd_scalar, max_size=2),
             max_size=2))


# -- valid values, field by field: the fuzz also walks deep into accepted descriptions -----

clean_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                     max_size=12)
number = st.one_of(st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=False, allow_infinity=False))
json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), number, clean_text),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(clean_text, inner, max_size=3),
    max_leaves=6)
path = st.one_of(st.sampled_from(_PATHS), clean_text)
duration = st.one_of(st.sampled_from(_STRINGS[-8:] + ["10y", "3650d", "3651d"]),
                     st.floats(0, 4e8), st.integers(0, 4 * 10**8))
staging_item = st.one_of(
    path, st.fixed_dictionaries({"source": path}, optional={
        "target": st.one_of(path, st.none()), "action": st.sampled_from(STAGING_ACTIONS)}))
env = st.dictionaries(st.one_of(st.sampled_from(["PATH", "OMP_X", "A=B", ""]), clean_text),
                      st.one_of(clean_text, st.integers(), st.floats()), max_size=3)


def _limit(hi):  # in range, at the edges, just past them
    return st.one_of(st.integers(-2, 8), st.integers(0, hi), st.sampled_from([hi, hi + 1]))


VALID_TASK = {
    "executable": st.one_of(st.sampled_from(["/bin/true", "echo", "python3"]), clean_text),
    "arguments": st.lists(st.one_of(clean_text, st.integers(), st.floats()), max_size=4),
    "environment": env,
    "sandbox": path,
    "pre_exec": st.lists(clean_text, max_size=2),
    "post_exec": st.lists(clean_text, max_size=2),
    "shell": st.booleans(),
    "ranks": _limit(D.MAX_RANKS),
    "cores_per_rank": _limit(D.MAX_CORES_PER_NODE),
    "gpus_per_rank": _limit(D.MAX_GPUS_PER_NODE),
    "mem_per_rank": _limit(D.MAX_MEM_MIB),
    "launcher": st.sampled_from(D.LAUNCHERS + (None, "qsub")),
    "stdout": st.one_of(st.booleans(), path),
    "stderr": st.one_of(st.booleans(), path),
    "timeout": duration,
    "priority": st.integers(-(2**32), 2**32),
    "tags": st.one_of(st.fixed_dictionaries({"colocate": clean_text}),
                      st.dictionaries(clean_text, json_like, max_size=2)),
    "name": clean_text,
    "metadata": json_like,
    "input_staging": st.lists(staging_item, max_size=3),
    "output_staging": st.lists(staging_item, max_size=3),
}
VALID_PILOT = {
    "resource": st.sampled_from(D.RESOURCES + ("cloud",)),
    "nodes": _limit(D.MAX_NODES),
    "cores_per_node": _limit(D.MAX_CORES_PER_NODE),
    "gpus_per_node": _limit(D.MAX_GPUS_PER_NODE),
    "mem_per_node": _limit(D.MAX_MEM_MIB),
    "runtime": duration,
    "sandbox": path,
    "queue": clean_text,
    "project": clean_text,
    "reservation": clean_text,
    "launcher": st.sampled_from(D.LAUNCHERS + (None, "qsub")),
    "launcher_options": st.dictionaries(st.sampled_from(D.LAUNCHERS + ("qsub",)),
                                        st.dictionaries(clean_text, json_like, max_size=2),
                                        max_size=2),
    "environment": env,
    "name": clean_text,
}

# fields added later are fuzzed too: small numbers and garbage until they get their own entry
for _fields, _valid in ((TASK_FIELDS, VALID_TASK), (PILOT_FIELDS, VALID_PILOT)):
    for _name in _fields:
        _valid.setdefault(_name, st.one_of(st.integers(-2, 200), st.booleans(), clean_text))


def _near_miss(name: str) -> st.SearchStrategy[str]:
    """The field's name, misspelled: a letter dropped, doubled, swapped, or case changed."""
    return st.integers(0, len(name) - 1).flatmap(lambda i: st.sampled_from([
        name[:i] + name[i + 1:], name[:i] + name[i] + name[i:], name.upper(), name + "s",
        name[:i] + name[i + 1:i + 2] + name[i:i + 1] + name[i + 2:]]))


def keyword_sets(valid: dict, str_keys_only: bool = False) -> st.SearchStrategy[dict]:
    """Dicts of fields: mostly real field names with valid or garbage values, some near
    misses and random names; non-str keys unless str_keys_only (for **kwargs)."""
    names = sorted(valid)
    real = st.one_of([st.tuples(st.just(name), st.one_of([strategy] * 5 + [garbage]))
                      for name, strategy in valid.items()])
    misspelled = st.tuples(st.sampled_from(names).flatmap(_near_miss), garbage)
    random_name = st.tuples(any_text if str_keys_only else st.one_of(any_text, odd_key), garbage)
    pair = st.one_of([real] * 8 + [misspelled, random_name])
    return st.lists(pair, max_size=7).map(dict)


_node = st.tuples(st.sampled_from([1, 2, 3, 16, 64, 128, D.MAX_CORES_PER_NODE]),
                  st.sampled_from([0, 0, 1, 2, 8, D.MAX_GPUS_PER_NODE]),
                  st.sampled_from([0, 0, 1, 1024, 256_000, D.MAX_MEM_MIB]))
node_shape = st.one_of(  # homogeneous (the usual pilot) or mixed nodes
    st.tuples(_node, st.integers(1, 16)).map(lambda t: [t[0]] * t[1]),
    st.lists(_node, min_size=1, max_size=6))

# How a keyword set reaches the descriptions: every public entry point.
MODES = ("kwargs", "from_dict", "setattr", "check_descriptions", "not_a_dict")


def _attempt(cls, mode: str, kw: dict):
    """The description (or list of them) the mode builds; DescriptionError passes through."""
    if mode == "kwargs":
        return cls(**{k: v for k, v in kw.items() if type(k) is str})
    if mode == "from_dict":
        return cls(kw)
    if mode == "setattr":
        d = cls()
        for k, v in kw.items():
            if isinstance(k, str):
                setattr(d, k, v)
            else:
                d.__setattr__(k, v)  # what setattr() itself would refuse with TypeError
        return d
    if mode == "check_descriptions":
        return D.check_descriptions([kw], cls)[0]
    return cls(kw.get("executable", kw) if cls is pf.TaskDescription else list(kw))


def outcome(cls, mode: str, kw: dict, shape: list) -> tuple[str, str]:
    """("accepted", kind) or ("rejected", field); anything else raised is a bug. Checks what
    an accepted description promises."""
    try:
        d = _attempt(cls, mode, kw)
    except pf.DescriptionError as e:
        message = str(e)  # the message is always printable
        message.encode("utf-8")
        if not isinstance(e.field, str):
            raise AssertionError(f"field {e.field!r} is not a str") from e
        if e.field in cls._fields or e.field == "(itself)":
            return "rejected", e.field
        if e.why.startswith("unknown field"):
            return "rejected", "(unknown field)"
        assert e.why == "field names must be strings", e
        return "rejected", "(field name not a str)"
    values = d.as_dict()
    repr(d)
    if cls is pf.TaskDescription:
        # the wire and the journal (a function task's callable and arguments go by pickle,
        # checked at submit; the journal keeps the callable's name: client/task.py)
        msgspec.msgpack.encode({k: v for k, v in values.items()
                                if k not in ("function", "args", "kwargs")})
        if mode == "check_descriptions":  # complete: a program or a function
            assert (d.executable is None) != (d.function is None), values
        check_placeable(d.ranks, d.cores_per_rank, d.gpus_per_rank, d.mem_per_rank, shape)
    else:
        json.dumps(values, allow_nan=False)  # agent.json, pilot.json
        msgspec.msgpack.encode(values)
        cores = values["cores_per_node"]
        assert cores is None or values["nodes"] * cores <= D.MAX_TOTAL_CORES
    return "accepted", cls._kind


def check_placeable(ranks, cores, gpus, mem, shape) -> None:
    """misfit() never raises; None means the Rust placer takes the request (small ones are
    really placed and released)."""
    problem = D.misfit(ranks, cores, gpus, mem, shape)
    if problem is not None:
        field, why = problem
        assert field in ("ranks", "cores_per_rank", "gpus_per_rank", "mem_per_rank") and why
        return
    if ranks * (cores + gpus) > 4096 or max(c for c, _, _ in shape) > 1024:
        return  # placeable, but too big to place in a fuzz loop
    p = Placer([c for c, _, _ in shape], [g for _, g, _ in shape], [m for _, _, m in shape])
    placed = p.place_batch([7], [ranks], [cores], [gpus], [mem])
    assert placed[0] is not None, (ranks, cores, gpus, mem, shape)  # empty nodes: it fits
    p.release_batch([7])


def cases(cls) -> st.SearchStrategy[tuple]:
    """(cls, mode, keyword set, node shape): one call of the descriptions' API."""
    valid = VALID_TASK if cls is pf.TaskDescription else VALID_PILOT
    shape = node_shape if cls is pf.TaskDescription else st.just([(1, 0, 0)])  # (unused)
    return st.one_of(
        [st.tuples(st.just(cls), st.just("kwargs"), keyword_sets(valid, str_keys_only=True), shape)]
        + [st.tuples(st.just(cls), st.just(mode), keyword_sets(valid), shape) for mode in MODES[1:]])


all_cases = st.one_of(cases(pf.TaskDescription), cases(pf.TaskDescription), cases(pf.PilotDescription))

_FUZZ = settings(max_examples=2000, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))


@pytest.mark.slow
@_FUZZ
@given(all_cases)
@example((pf.TaskDescription, "check_descriptions", {"function": int}, [(1, 0, 0)]))
def test_every_keyword_set_is_a_description_or_a_description_error(case):
    outcome(*case)


@settings(max_examples=500, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(st.integers(-5, 2**33), st.integers(), st.booleans(), st.floats(),
                          st.none(), st.sampled_from([2**40, 2**26 + 1, 2**32, 65, 65_537])),
                min_size=4, max_size=4),
       node_shape)
def test_misfit_takes_any_request_the_wire_can_carry(request_fields, shape):
    # the agent calls misfit() on what arrives over the wire before the placer sees it
    ranks, cores, gpus, mem = request_fields
    check_placeable(ranks, cores, gpus, mem, shape)


# -- the cases of the reliability issue, one by one -----------------------------------------

@pytest.mark.parametrize("cls, kw", [
    (pf.TaskDescription, {1: "x"}),
    (pf.TaskDescription, {"ranks": 10**4301}),
    (pf.TaskDescription, {"timeout": 10**400}),
    (pf.TaskDescription, {"timeout": "999999999d"}),
    (pf.TaskDescription, {"timeout": math.nan}),
    (pf.TaskDescription, {"arguments": ["ok", "\ud800"]}),
    (pf.TaskDescription, {"name": "\ud800"}),
    (pf.TaskDescription, {"environment": {"A": "\0"}}),
    (pf.TaskDescription, {"metadata": {"deep": _deep(5000)}}),
    (pf.TaskDescription, {"metadata": {"x": object()}}),
    (pf.TaskDescription, {"mem_per_rank": 2**40}),
    (pf.PilotDescription, {"nodes": 10**12}),
    (pf.PilotDescription, {"cores_per_node": 2**40}),
    (pf.PilotDescription, {"gpus_per_node": 100}),
    (pf.PilotDescription, {"nodes": D.MAX_NODES, "cores_per_node": D.MAX_CORES_PER_NODE}),
    (pf.PilotDescription, {"launcher_options": {"srun": {"mpi": "\ud800"}}}),
])
def test_issue_cases_are_description_errors(cls, kw):
    with pytest.raises(pf.DescriptionError):
        cls(kw)


def test_in_place_edits_are_checked_again_at_submit():
    d = pf.TaskDescription(executable="/bin/true", arguments=["a"])
    d.arguments.append("\ud800")
    with pytest.raises(pf.DescriptionError) as info:
        D.check_descriptions([d], pf.TaskDescription)
    assert info.value.field == "arguments" and info.value.index == 0
    d = pf.TaskDescription(executable="/bin/true", arguments=["a"])
    d.arguments.append(5)  # normalised to text, as at construction
    D.check_descriptions([d], pf.TaskDescription)
    assert d.arguments == ["a", "5"]


def test_rejected_pilot_assignment_changes_nothing():
    p = pf.PilotDescription(nodes=D.MAX_NODES)
    with pytest.raises(pf.DescriptionError):
        p.cores_per_node = D.MAX_CORES_PER_NODE
    assert p.cores_per_node is None and p.nodes == D.MAX_NODES


def test_misfit_rejects_what_killed_the_agent():
    # mem_per_rank beyond the placer's u32 on a pilot that does not track memory
    assert D.misfit(1, 1, 0, 2**40, [(4, 0, 0)])[0] == "mem_per_rank"
    with pytest.raises(ValueError):
        Placer([4], [0], [0]).place_batch([1], [1], [1], [0], [2**40])
    # more numbers than the placer encodes for one task
    assert D.misfit(2**25, 8, 0, 0, [(65_536, 0, 0)] * 16_384)[0] == "ranks"
