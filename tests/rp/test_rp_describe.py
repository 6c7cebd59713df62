"""pilotfish.rp's translation of RP descriptions, states and directives (one piece each: no
pilot here; the scripts in scripts/ run the whole path)."""

from __future__ import annotations

import pytest

import pilotfish.rp as rp
from pilotfish import states as S
from pilotfish.rp import _states as RS


def test_rp_task_fields_and_legacy_names():
    td = rp.TaskDescription({"executable": "/bin/echo", "arguments": ["a", 4],
                             "cpu_processes": 2, "cpu_threads": 3, "gpu_processes": 1.0,
                             "threading_type": rp.OpenMP, "uid": "mine", "timeout": 30,
                             "pre_launch": "echo L", "post_exec": ["echo P"]})
    d = td.to_pf()
    assert (d.ranks, d.cores_per_rank, d.gpus_per_rank, d.name, d.timeout) == \
        (2, 3, 1, "mine", 30.0)
    assert d.arguments == ["a", "4"] and d.environment["OMP_NUM_THREADS"] == "3"
    assert d.pre_exec == ['export RP_RANK="$PILOTFISH_RANK"', "echo L"]
    assert d.post_exec == ["echo P"] and not d.shell
    posix = rp.TaskDescription(executable="x", ranks=2, cpu_process_type=rp.POSIX).to_pf()
    assert posix.launcher == "direct"


def test_rp_arguments_and_environment_expand_as_in_rp():
    d = rp.TaskDescription(executable="/bin/echo", arguments=["$RP_TASK_ID says \"hi\""],
                           environment={"A": "plain", "B": "$HOME/x"}).to_pf()
    assert d.shell and d.arguments == ['"$RP_TASK_ID says \\"hi\\""']
    assert d.environment == {"A": "plain"} and d.pre_exec == ['export B="$HOME/x"']


def test_rp_quoting_is_rp_1x():
    """RP >= 1.12 (LaunchMethod._create_arg_string): each argument through ru.sh_quote --
    double quotes, only backslash and double quote escaped -- so $ always expands in an
    argument; environment values are written as export K="<value>" untouched, so there a
    backslash escapes a $ (the way to hand an awk program over, via "$PROG")."""
    import subprocess

    d = rp.TaskDescription(executable="/usr/bin/printf",
                           arguments=["%s|", "{print $1}", 'a\\b"c', "$X"],
                           environment={"X": "ex", "PROG": "{print \\$2}"}).to_pf()
    script = "; ".join(d.pre_exec) + "; export X=ex; " + " ".join(
        [d.executable] + d.arguments) + '; printf "%s" "$PROG"'
    out = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True).stdout
    assert out == '{print }|a\\b"c|ex|{print $2}', out  # $1 expanded (empty), as in RP


def test_pythontask_and_download_translate_as_in_rp():
    @rp.pythontask
    def f(a, b=2):
        return a + b

    call = f(1, b=3)
    assert isinstance(call, rp.PythonTask) and (call.args, call.kwargs) == ((1,), {"b": 3})
    d = rp.TaskDescription(mode=rp.TASK_FUNCTION, function=call).to_pf()
    assert d.function(*d.args, **d.kwargs) == 4
    assert rp.PythonTask(f, [5]).args == (5,)  # RP's PythonTask(func, args, kwargs)
    with pytest.raises(rp.DescriptionError, match="must be empty"):
        rp.TaskDescription(mode=rp.TASK_FUNCTION, function=call, args=[1]).to_pf()
    d = rp.TaskDescription(executable="/bin/true", input_staging=[
        {"source": "http://example.invalid/x.dat", "target": "in/x.dat",
         "action": rp.DOWNLOAD}, "local.txt"]).to_pf()
    assert "urlretrieve" in d.pre_exec[0] and "in/x.dat" in d.pre_exec[0]
    assert [s["source"] for s in d.input_staging] == ["local.txt"]


@pytest.mark.parametrize("fields, field, why", [
    ({"mode": rp.TASK_FUNCTION, "function": "f"}, "function", "RAPTOR worker"),
    ({"mode": rp.TASK_EVAL, "code": "1"}, "mode", "RAPTOR master's workers"),
    ({"mode": rp.RAPTOR_MASTER}, "mode", "submit_raptors"),
    ({"input_staging": [{"source": "a", "action": rp.DOWNLOAD}], "output_staging":
      [{"source": "a", "action": rp.DOWNLOAD}]}, "output_staging", "input_staging only"),
    ({"environment": {"A": 'x"$B'}}, "environment", "cannot read"),
    ({"mode": rp.TASK_FUNCTION, "function": print}, "executable",  # (both given)
     "not for a function task"),
    ({"raptor_id": "master.0"}, "raptor_id", "RAPTOR"),
    ({"no_such_field": 1}, "no_such_field", "not a RADICAL-Pilot TaskDescription field"),
    ({"input_staging": [{"source": "a", "action": "Teleport"}]}, "input_staging",
     "rp.TRANSFER"),
    ({"input_staging": [{"source": "a", "where": "b"}]}, "input_staging", "unknown keys"),
    ({"cpu_process_type": "SPMD"}, "cpu_process_type", "rp.MPI or rp.POSIX"),
    ({"ranks": 0}, "ranks", ">= 1"),
    ({"output_staging": [{"source": "../../x", "target": "y"}]}, "output_staging", ""),
])
def test_bad_rp_task_descriptions_name_the_field(fields, field, why):
    with pytest.raises(rp.DescriptionError) as e:
        rp.TaskDescription({"executable": "/bin/true", **fields}).to_pf(index=3)
    assert e.value.field == field and why in str(e.value) and e.value.index == 3
    assert "rp.TaskDescription" in str(e.value)


def test_staging_directive_forms():
    def fail(field, why):
        return ValueError(why)
    assert rp._describe.staging(["a.dat", "b.dat > c.dat", "d.dat < e.dat", "f >> g",
                                 {"source": "client:///h", "target": "task:///i",
                                  "action": rp.TARBALL, "flags": rp.CREATE_PARENTS}],
                                "input_staging", fail) == [
        {"source": "a.dat", "action": "transfer"},
        {"source": "b.dat", "target": "c.dat", "action": "transfer"},
        {"source": "e.dat", "target": "d.dat", "action": "transfer"},
        {"source": "f", "target": "g", "action": "transfer"},
        {"source": "client:///h", "target": "task:///i", "action": "tarball"}]


def test_rp_pilot_descriptions():
    d = rp.PilotDescription({"resource": "local.localhost", "runtime": 15, "cores": 16,
                             "gpus": 2, "project": None, "queue": None,
                             "exit_on_error": True}).to_pf()
    assert (d.resource, d.runtime, d.nodes, d.cores_per_node, d.gpus_per_node) == \
        ("local", 900.0, 1, 16, 2)  # runtime: minutes, as in RP
    rp.add_resource("test.cluster", {"resource": "slurm", "cores_per_node": 48,
                                     "gpus_per_node": 4, "launcher": "prrte"})
    d = rp.PilotDescription(resource="test.cluster", cores=100, runtime=60,
                            project="p1", queue="q").to_pf()
    assert (d.resource, d.nodes, d.cores_per_node, d.launcher, d.project, d.queue) == \
        ("slurm", 3, 48, "prrte", "p1", "q")
    assert rp.PilotDescription(resource="test.cluster", gpus=9, cores=1).to_pf().nodes == 3
    for fields, field, why in (({"resource": "nowhere.x"}, "resource", "unknown resource"),
                               ({}, "resource", "is required"),
                               ({"resource": "local.localhost", "runtime": -1}, "runtime",
                                "minutes"),
                               ({"resource": "local.localhost", "bogus": 1}, "bogus", "")):
        with pytest.raises(rp.DescriptionError) as e:
            rp.PilotDescription(fields).to_pf()
        assert e.value.field == field and why in str(e.value)
    with pytest.raises(ValueError, match="unknown keys"):
        rp.add_resource("a.b", {"resource": "slurm", "cpn": 3})


def test_fresh_descriptions_have_rp_defaults():
    pd = rp.PilotDescription()
    pd["services"].append(rp.TaskDescription(executable="x"))
    assert len(pd.services) == 1 and pd.runtime == 10
    td = rp.TaskDescription()
    td.arguments.append("a")
    assert td["arguments"] == ["a"] and td.ranks == 1 and td.mode == rp.TASK_EXECUTABLE
    with pytest.raises(AttributeError):
        td.no_such_attribute


def test_state_maps():
    assert [RS.TASK_STATE[s] for s in S.TASK_STATES] == [
        rp.NEW, rp.TMGR_SCHEDULING, rp.AGENT_STAGING_INPUT, rp.AGENT_SCHEDULING,
        rp.AGENT_EXECUTING, rp.AGENT_STAGING_OUTPUT, rp.DONE, rp.FAILED, rp.CANCELED]
    # waiting for an RP state pilotfish has no twin of waits for the next one it has
    assert RS.task_states_to_pf([rp.AGENT_EXECUTING_PENDING, rp.TMGR_STAGING_OUTPUT,
                                 rp.DONE]) == [S.EXECUTING, rp.DONE, rp.DONE]
    assert RS.pilot_states_to_pf(rp.PMGR_ACTIVE_PENDING) == [S.ACTIVE]
    with pytest.raises(ValueError, match="no RADICAL-Pilot task state"):
        RS.task_states_to_pf("RUNNING")
    assert rp.FINAL == [rp.DONE, rp.FAILED, rp.CANCELED]
    assert (rp.TRANSFER, rp.TARBALL, rp.SCHEDULER_DEFAULT) == ("Transfer", "Tarball",
                                                               "round_robin")
    assert rp.states.TASK_STATES == rp.TASK_STATES and rp.states.CANCELED == "CANCELED"
    assert (rp.TASK_FUNC, rp.TASK_METH, rp.RAPTOR_MASTER, rp.RAPTOR_WORKER) == (
        "task.function", "task.method", "raptor.master", "raptor.worker")


def test_a_service_that_ran_and_ended_counts_as_started(tmp_path, monkeypatch):
    """RP's agent waits for each service to reach AGENT_EXECUTING; one that already ended
    has started (RP's own agent_services.py runs a service that exits at once). Whether its
    end was seen before the check was a race: the example failed 1 run in 8."""
    monkeypatch.setenv("PILOTFISH_SESSIONS", str(tmp_path))
    for _ in range(5):
        with rp.Session() as s:
            pd = rp.PilotDescription({"resource": "local.localhost", "cores": 2,
                                      "runtime": 10})
            pd["services"].append(rp.TaskDescription({"executable": "/bin/false"}))
            pilot = rp.PilotManager(s).submit_pilots(pd)
            tmgr = rp.TaskManager(s)
            tmgr.add_pilots(pilot)
            t = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true"}))
            assert tmgr.wait_tasks(t.uid, timeout=60) == rp.DONE
            assert [x.state for x in pilot.services] == [rp.FAILED]
