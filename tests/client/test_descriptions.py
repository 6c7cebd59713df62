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
])
def test_pilot_description_rejects(kwargs, field, why):
    with pytest.raises(pf.DescriptionError) as info:
        pf.PilotDescription(**kwargs)
    assert info.value.field == field
    assert why in str(info.value)


def test_durations():
    assert parse_duration(90) == 90
    assert parse_duration("90s") == 90
    assert parse_duration("30m") == 1800
    assert parse_duration("2h") == 7200
    assert parse_duration("01:30:00") == 5400
    assert parse_duration("1-00:00:00") == 86400
    assert parse_duration("500ms") == 0.5


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
