"""The agent never dies of a task: specs the client would have refused, sent straight down
the wire, fail alone with a reason; the pilot keeps serving. Real local pilots."""

from __future__ import annotations

import os
import time

import msgspec
import pytest

import pilotfish as pf
from pilotfish import _wire
from pilotfish.client import submit as client_submit


@pytest.fixture
def pilot_env(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(
            nodes=2, cores_per_node=4, gpus_per_node=1, mem_per_node=0, runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE
        yield s, pilot, tmgr


BAD_SPECS = {
    "huge memory on an untracked-memory pilot": dict(mem_per_rank=2 ** 40),
    "NUL in a staging path": dict(input_staging=({"source": "/etc/hostname", "target": "a\0b", "action": "copy"},)),
    "non-string staging target": dict(input_staging=({"source": "/etc/hostname", "target": 5, "action": "copy"},)),
    "staging escape": dict(input_staging=({"source": "/etc/hostname", "target": "../../x", "action": "copy"},)),
    "pilot file as output target": dict(output_staging=({"source": "f", "target": "{sandbox}/agent.events", "action": "copy"},)),
    "more GPUs than any node": dict(gpus_per_rank=100),
    "zero cores": dict(cores_per_rank=0),
    "NUL in an argument": dict(arguments=("a\0b",)),
    "unknown launcher": dict(launcher="teleport"),
    "sandbox escape": dict(sandbox="../../elsewhere"),
    "stdout onto the event log": dict(stdout="../agent.events"),
}


def test_bad_wire_specs_fail_alone(pilot_env, monkeypatch):
    s, pilot, tmgr = pilot_env
    real_spec = client_submit.spec

    def forged(uid, d, *args):  # what a broken or hostile client could send
        spec = real_spec(uid, d, *args)
        bad = BAD_SPECS.get(d.name)
        if bad is None:
            return spec
        fields = {k: v for k, v in msgspec.structs.asdict(spec).items()}
        for k, v in bad.items():
            if k == "output_staging":
                v = tuple({**x, "target": x["target"].format(sandbox=pilot.sandbox)} for x in v)
            fields[k] = v
        return msgspec.structs.replace(spec, **fields)  # (encoding does not check types)

    monkeypatch.setattr(client_submit, "spec", forged)
    tasks = tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true", name=n) for n in BAD_SPECS]
                              + [pf.TaskDescription(executable="/bin/echo", arguments=["alive"], name="good")])
    tmgr.wait_tasks(timeout=60)
    by_name = {t.name: t for t in tasks}
    for name in BAD_SPECS:
        t = by_name[name]
        assert t.state == pf.FAILED, (name, t.state)
        assert t.reason, name
    assert by_name["good"].state == pf.DONE and by_name["good"].stdout == "alive\n"
    assert os.path.getsize(os.path.join(pilot.sandbox, "agent.events")) > 0
    # garbage frames: dropped, the agent keeps serving
    for junk in (b"", b"\xc1", msgspec.msgpack.encode(["submit", [["x"]]]), os.urandom(64)):
        s.plane.bridge.send(pilot.uid, junk)
    monkeypatch.setattr(client_submit, "spec", real_spec)
    after = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true"))
    assert after.wait(timeout=30) == pf.DONE
    assert pilot.state == pf.ACTIVE


def test_colocated_task_that_never_fits_fails_at_once(pilot_env):
    _, _, tmgr = pilot_env
    first = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/sleep", arguments=["2"],
                                                 tags={"colocate": "g"}))
    first.wait(pf.EXECUTING, timeout=30)
    t0 = time.time()
    # 2 x 3 cores fit a 4-core node? No: can never share the group's node
    never = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", ranks=2, cores_per_rank=3,
                                                 tags={"colocate": "g"}))
    assert never.wait(timeout=10) == pf.FAILED
    assert "can never hold" in never.reason and time.time() - t0 < 5
    # and nothing else is held up: a whole-node task still runs
    wide = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/true", cores_per_rank=4))
    assert wide.wait(timeout=30) == pf.DONE


def test_setsid_children_die_with_their_task(pilot_env):
    _, pilot, tmgr = pilot_env
    t = tmgr.submit_tasks(pf.TaskDescription(
        executable="/bin/sh", arguments=["-c", "setsid sleep 300 & setsid sleep 301 & sleep 300"],
        timeout=1))
    assert t.wait(timeout=30) == pf.FAILED and "timed out" in t.reason
    deadline = time.time() + 10
    while time.time() < deadline and _marked(pilot.sandbox, t.uid):
        time.sleep(0.2)
    assert not _marked(pilot.sandbox, t.uid)


def test_setsid_leftovers_die_with_the_pilot(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pmgr = pf.PilotManager(s)
        pilot = pmgr.submit_pilots(pf.PilotDescription(runtime="5m"))
        tmgr = pf.TaskManager(s)
        tmgr.add_pilots(pilot)
        # the task ends only once its daemon has left the task's process group (else the
        # agent's end-of-task kill of that group can beat setsid on a busy machine)
        t = tmgr.submit_tasks(pf.TaskDescription(
            executable="/bin/sh", arguments=["-c", "setsid sh -c 'touch escaped; exec sleep 300' & "
                                             "while [ ! -e escaped ]; do sleep 0.05; done"]))
        assert t.wait(timeout=30) == pf.DONE
        assert _marked(pilot.sandbox, t.uid)  # a daemon the task left behind, still running
    deadline = time.time() + 10
    while time.time() < deadline and _marked(pilot.sandbox, t.uid):
        time.sleep(0.2)
    assert not _marked(pilot.sandbox, t.uid)


def test_submit_is_all_or_nothing(pilot_env):
    _, _, tmgr = pilot_env
    before = len(tmgr)
    with pytest.raises(pf.DescriptionError) as e:
        tmgr.submit_tasks([pf.TaskDescription(executable="/bin/true"),
                           {"executable": "/bin/true", "arguments": ["\ud800"]}])
    assert e.value.index == 1
    assert len(tmgr) == before
    assert tmgr.wait_tasks(timeout=5) is not None  # nothing left pending: returns at once


def _marked(sandbox: str, uid: str) -> bool:
    want = (f"PILOTFISH_SANDBOX={sandbox}".encode(), f"PILOTFISH_TASK_UID={uid}".encode())
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{p}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if all(w in env for w in want):
            return True
    return False


@pytest.mark.slow
def test_retries_with_backoff(pilot_env, tmp_path):
    _, _, tmgr = pilot_env
    marker = tmp_path / "m"
    flaky = tmgr.submit_tasks(pf.TaskDescription(  # fails its first attempt only
        executable="/bin/sh", arguments=["-c", f"[ -e {marker} ] || {{ touch {marker}; exit 3; }}"],
        retries=3))
    hopeless = tmgr.submit_tasks(pf.TaskDescription(executable="/bin/false", retries=2))
    assert flaky.wait(timeout=60) == pf.DONE
    assert hopeless.wait(timeout=60) == pf.FAILED and hopeless.exit_code == 1
    assert [s for s, _ in flaky.history].count("retry") == 1
    assert [s for s, _ in hopeless.history].count("retry") == 2
    retry_times = [t for s, t in hopeless.history if s in ("retry", pf.FAILED)]
    assert retry_times[2] - retry_times[1] >= 0.9  # backoff doubled: 0.5 s, then 1 s
