"""Bad input is rejected at construction or submit, naming the field, the value and why."""

import pytest

import pilotfish as pf
from pilotfish._util import parse_duration


@pytest.mark.parametrize("kwargs, field, why", [
    ({"executabel": "/bin/true"}, "executabel", "did you mean 'executable'"),
    ({"ranks": 0}, "ranks", ">= 1"),
    ({"cores_per_rank": -2}, "cores_per_rank", ">= 1"),
    ({"gpus_per_rank": -1}, "gpus_per_rank", ">= 0"),
    ({"mem_per_rank": -5}, "mem_per_rank", ">= 0"),
    ({"ranks": 1.5}, "ranks", "integer"),
    ({"ranks": True}, "ranks", "integer"),
    ({"timeout": "soon"}, "timeout", "not a duration"),
    ({"timeout": 0}, "timeout", "> 0"),
    ({"arguments": "a b"}, "arguments", "list of strings"),
    ({"environment": {"A=B": "x"}}, "environment", "bad variable name"),
    ({"stdout": 3}, "stdout", "True (capture)"),
    ({"launcher": "qsub"}, "launcher", "must be one of"),
    ({"tags": {"colocate": ""}}, "tags", "colocate"),
    ({"input_staging": [{"target": "x"}]}, "input_staging", "source"),
    # limits the agent's placer can represent; each error says the limit
    ({"ranks": 2**26 + 1}, "ranks", "<= 67108864"),
    ({"cores_per_rank": 65537}, "cores_per_rank", "<= 65536"),
    ({"gpus_per_rank": 65}, "gpus_per_rank", "<= 64"),
    ({"mem_per_rank": 2**40}, "mem_per_rank", "<= 4294967295 MiB"),
    ({"timeout": "3651d"}, "timeout", "at most 10 years"),
    ({"timeout": float("nan")}, "timeout", "finite"),
    # text that cannot cross a boundary (UTF-8, C strings)
    ({"arguments": ["a", "\ud800"]}, "arguments", "UTF-8"),
    ({"name": "\ud800"}, "name", "UTF-8"),
    ({"environment": {"A": "\udc80"}}, "environment", "UTF-8"),
    ({"metadata": {"x": object()}}, "metadata", "msgpack"),
    ({"metadata": 2**64}, "metadata", "msgpack"),
    ({"tags": {"x": [float("inf")]}}, "tags", "finite"),
    ({"output_staging": [{"source": "../f", "target": "/tmp/f"}]}, "output_staging", "leaves the task sandbox"),
])
def test_task_description_rejects(kwargs, field, why):
    with pytest.raises(pf.DescriptionError) as info:
        pf.TaskDescription(executable="/bin/true", **kwargs)
    e = info.value
    assert e.field == field
    assert why in str(e)
    assert repr(kwargs[field])[:20] in str(e)  # the value is named


@pytest.mark.parametrize("kwargs, field, why", [
    ({"nodes": 0}, "nodes", ">= 1"),
    ({"nodes": -3}, "nodes", ">= 1"),
    ({"cores_per_node": 0}, "cores_per_node", ">= 1"),
    ({"runtime": "forever"}, "runtime", "not a duration"),
    ({"runtime": -1}, "runtime", "> 0"),
    ({"resource": "cloud"}, "resource", "must be one of"),
    ({"nodez": 3}, "nodez", "did you mean 'nodes'"),
    ({"nodes": 10**12}, "nodes", "<= 1000000"),
    ({"cores_per_node": 2**40}, "cores_per_node", "<= 65536"),
    ({"gpus_per_node": 100}, "gpus_per_node", "<= 64"),
    ({"mem_per_node": 2**32}, "mem_per_node", "<= 4294967295"),
    ({"nodes": 100_000, "cores_per_node": 65_536}, "nodes", "<= 1073741824"),
    ({"runtime": 1e12}, "runtime", "at most 10 years"),
    ({"runtime": 15}, "runtime", "write '15m', or '15s'"),  # RP's runtime is minutes
    ({"launcher_options": {"srun": {"mpi": "\0"}}}, "launcher_options", "NUL"),
    ({"queue": "\ud800"}, "queue", "UTF-8"),
])
def test_pilot_description_rejects(kwargs, field, why):
    with pytest.raises(pf.DescriptionError) as info:
        pf.PilotDescription(**kwargs)
    assert info.value.field == field
    assert why in str(info.value)


@pytest.mark.parametrize("kwargs, field, why", [
    ({"timeout": 10**400}, "timeout", "too large"),
    ({"arguments": [10**5000]}, "arguments", "too long"),
    ({"ranks": 10**5000}, "ranks", "<= 67108864"),
    ({"executable": "/bin/\0x"}, "executable", "NUL"),
])
def test_values_that_repr_cannot_show_or_exec_cannot_take(kwargs, field, why):
    with pytest.raises(pf.DescriptionError) as info:
        pf.TaskDescription(**kwargs)
    assert info.value.field == field and why in str(info.value)
    assert "bits>" in str(info.value) or "\\x00" in str(info.value)  # huge ints named by size


def test_from_dict_with_non_str_keys():
    with pytest.raises(pf.DescriptionError) as info:
        pf.TaskDescription({"executable": "/bin/true", 3: "x"})
    assert "field names must be strings" in str(info.value)


def test_error_messages_are_printable_and_short():
    for kwargs in ({"ranks": 10**5000}, {"name": "\ud800" * 10_000}, {"bogus\ud800": 1}):
        with pytest.raises(pf.DescriptionError) as info:
            pf.TaskDescription(**kwargs)
        text = str(info.value)
        text.encode("utf-8")
        assert len(text) < 600


def test_durations():
    assert parse_duration(90) == 90
    assert parse_duration("90s") == 90
    assert parse_duration("30m") == 1800
    assert parse_duration("2h") == 7200
    assert parse_duration("01:30:00") == 5400
    assert parse_duration("1-00:00:00") == 86400
    assert parse_duration("500ms") == 0.5
    for bad in (10**400, "9" * 5000 + ":00", float("inf"), "soon", True):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_missing_executable_field_rejected_at_submit(emulated):
    _, _, tmgr = emulated
    with pytest.raises(pf.DescriptionError) as info:
        tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true"), pf.TaskDescription()])
    assert info.value.field == "executable" and info.value.index == 1


@pytest.mark.parametrize("kwargs, field", [
    ({"cores_per_rank": 17}, "cores_per_rank"),     # larger than the largest node (16)
    ({"gpus_per_rank": 3}, "gpus_per_rank"),        # nodes have 2 GPUs
    ({"ranks": 65}, "ranks"),                       # 4 x 16 cores hold 64 one-core ranks
    ({"ranks": 5, "gpus_per_rank": 2}, "ranks"),    # 4 nodes x 2 GPUs hold 4 such ranks
])
def test_request_larger_than_pilot_rejected_at_submit(emulated, kwargs, field):
    _, _, tmgr = emulated
    before = len(tmgr.tasks)
    good = pf.TaskDescription(executable="/bin/true")
    with pytest.raises(pf.DescriptionError) as info:
        tmgr.submit_tasks([good, pf.TaskDescription(executable="/bin/true", **kwargs)])
    assert info.value.field == field
    assert "pilot.0000" in str(info.value)
    assert len(tmgr.tasks) == before  # nothing of the rejected batch was submitted


def test_dict_descriptions_and_copy_on_submit(emulated):
    _, _, tmgr = emulated
    d = pf.TaskDescription(executable="/bin/echo", arguments=["a"])
    t = tmgr.submit_tasks(d)
    d.arguments.append("changed-after-submit")
    t2 = tmgr.submit_tasks({"executable": "/bin/echo", "arguments": ["b"]})
    tmgr.wait_tasks([t.uid, t2.uid], timeout=60)
    assert t.stdout == "a\n" and t2.stdout == "b\n"


def test_wire_spec_is_derived_from_the_description():
    """One source of truth for task fields: every TaskSpec field (but the derived ones) is a
    TaskDescription field with the same default, and a description's values reach the
    agent unchanged."""
    import msgspec

    from pilotfish import _wire
    from pilotfish.client.submit import SPEC_COPIED, spec
    from pilotfish.descriptions import TaskDescription

    fields = {f.name: f for f in msgspec.structs.fields(_wire.TaskSpec)}
    for name in SPEC_COPIED:
        assert name in TaskDescription._fields, f"TaskSpec.{name} is no TaskDescription field"
        default = TaskDescription._fields[name][0]
        default = default() if callable(default) else default
        f = fields[name]
        wire = (f.default if f.default is not msgspec.NODEFAULT else
                f.default_factory() if f.default_factory is not msgspec.NODEFAULT else None)
        if isinstance(wire, tuple):
            wire = list(wire)
        assert wire == default or name == "executable", (name, wire, default)
    d = TaskDescription(executable="x", arguments=["a"], ranks=2, cores_per_rank=3, timeout=5,
                        duration="2m", priority=-1, retries=2, shell=True, stdout="o.txt",
                        tags={"colocate": "g"}, launcher="direct", environment={"A": "1"})
    s = spec("task.000001", d)
    assert (s.executable, tuple(s.arguments), s.ranks, s.cores_per_rank, s.timeout, s.duration,
            s.priority, s.retries, s.shell, s.stdout, s.colocate, s.launcher, s.environment) == \
        ("x", ("a",), 2, 3, 5.0, 120.0, -1, 2, True, "o.txt", "g", "direct", {"A": "1"})
    assert spec("u", TaskDescription(executable="y")) == _wire.TaskSpec(uid="u", executable="y")


@pytest.mark.parametrize("kind, field, hint", [
    ("TaskDescription", "cores", "'cores_per_rank'"),
    ("TaskDescription", "cpu_processes", "'ranks'"),
    ("TaskDescription", "gpus", "'gpus_per_rank'"),
    ("TaskDescription", "runtime", "'timeout'"),
    ("PilotDescription", "cores", "'cores_per_node'"),
    ("PilotDescription", "walltime", "'runtime'"),
])
def test_names_from_other_systems_get_the_right_hint(kind, field, hint):
    cls = getattr(pf, kind)
    with pytest.raises(pf.DescriptionError) as e:
        cls(**{field: 1})
    assert e.value.field == field and f"did you mean {hint}" in str(e.value)
    assert "'nodes'" not in str(e.value) and "'priority'" not in str(e.value)


def test_task_pinned_to_a_pilot(session):
    pmgr = pf.PilotManager(session)
    a, b = pmgr.submit_pilots([pf.PilotDescription(nodes=1, cores_per_node=4, runtime="5m")
                               for _ in range(2)])
    tmgr = pf.TaskManager(session)
    tmgr.add_pilots([a, b])
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true", pilot=b.uid)
                               for _ in range(6)])
    assert {t.pilot for t in tasks} == {b.uid}
    tmgr.wait_tasks(timeout=60)
    assert {t.state for t in tasks} == {pf.DONE}
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", pilot="pilot.9999"))
    assert e.value.field == "pilot" and "not a live pilot" in str(e.value)
