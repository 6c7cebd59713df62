"""Issue 41 phase 2: what RP's tutorials and examples/misc need of pilotfish.rp -- Task's
RP attributes (endpoint_fs, resource_sandbox, metadata, '' streams, register_callback), RP
1.60's aliases and unregister_callback, legacy fields read as RP gives them, colocate tags as
a dict, app_comm refused naming the alternative. One local pilot for the module."""

from __future__ import annotations

import threading

import pytest

import pilotfish.rp as rp
from pilotfish._errors import DescriptionError


@pytest.fixture(scope="module")
def rp_session(tmp_path_factory):
    s = rp.Session(path=str(tmp_path_factory.mktemp("rp41") / "session"))
    pmgr = rp.PilotManager(s)
    tmgr = rp.TaskManager(s)
    pilot = pmgr.submit_pilots(rp.PilotDescription(
        {"resource": "local.localhost", "cores": 2, "runtime": 10}))
    tmgr.add_pilots(pilot)
    yield s, pmgr, tmgr, pilot
    s.close()


def test_task_rp_attributes_and_empty_streams(rp_session):
    _, _, tmgr, pilot = rp_session
    t = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true",
                                              "metadata": {"k": 1}}))
    assert t.stdout == "" and t.stderr == ""  # (before it ran, too: RP's '')
    tmgr.wait_tasks(t.uid, timeout=60)
    assert t.state == rp.DONE and t.stdout == "" and t.stderr == ""
    assert t.metadata == {"k": 1} and t.endpoint_fs == "file://localhost/"
    assert t.pilot_sandbox.startswith(t.resource_sandbox)
    d = t.as_dict()
    assert d["endpoint_fs"] == t.endpoint_fs and d["resource_sandbox"] == t.resource_sandbox


def test_task_register_callback_and_unregister(rp_session):
    _, _, tmgr, _ = rp_session
    seen, other, done = [], [], threading.Event()

    def cb(task, state, data):
        seen.append((task.uid, state, data))
        if state in rp.FINAL:
            done.set()

    a, b = tmgr.submit_tasks([rp.TaskDescription({"executable": "/bin/true"})
                              for _ in range(2)])
    a.register_callback(cb, cb_data="x")
    tmgr.register_callback(lambda t, s: other.append(s))
    tmgr.unregister_callback()  # (all of them: neither fires after this)
    a.register_callback(cb, cb_data="x")
    tmgr.wait_tasks([a.uid, b.uid], timeout=60)
    assert done.wait(10)
    assert {u for u, _, _ in seen} == {a.uid} and all(d == "x" for _, _, d in seen)
    assert (a.uid, rp.DONE, "x") in seen and not other


def test_rp_1x_aliases(rp_session):
    s, pmgr, tmgr, pilot = rp_session
    [t] = tmgr.submit_units([rp.TaskDescription({"executable": "/bin/true"})])
    assert tmgr.wait_units(t.uid, timeout=60) == rp.DONE
    assert tmgr.get_units(t.uid) is t and t.uid in tmgr.list_units()
    assert tmgr.cancel_units is not None and pmgr.kill_pilots == pmgr.cancel_pilots
    # (remove_pilots: tests/rp/test_rp_issue41_phase3.py)
    pmgr.register_callback(lambda p, st: None)
    pmgr.unregister_callback()
    assert not pmgr._registered


def test_legacy_fields_read_as_rp():
    td = rp.TaskDescription({"executable": "x", "ranks": 2})
    assert td.cpu_threads == 0 and td["cpu_processes"] == 0 and td.gpu_process_type == ""
    assert td.to_pf().ranks == 2 and td.to_pf().cores_per_rank == 1  # (0: not given)
    with pytest.raises(AttributeError):
        _ = td.no_such_field


def test_colocate_tags_as_a_dict():
    pf = rp.TaskDescription({"executable": "x",
                             "tags": {"colocate": {"bag": 1, "size": 3}}}).to_pf()
    assert pf.tags == {"colocate": "1"}
    with pytest.raises(DescriptionError, match="bag"):
        rp.TaskDescription({"executable": "x", "tags": {"colocate": {"size": 3}}}).to_pf()


def test_app_comm_refused_naming_the_alternative():
    with pytest.raises(DescriptionError, match="not supported on pilotfish.*pilot service"):
        rp.PilotDescription({"resource": "local.localhost", "cores": 1,
                             "app_comm": ["work_queue"]}).to_pf()
    rp.PilotDescription({"resource": "local.localhost", "cores": 1, "app_comm": []}).to_pf()


def test_resource_configs(tmp_path, monkeypatch):
    import json

    monkeypatch.setenv("RADICAL_CONFIG_USER_DIR", str(tmp_path))
    d = tmp_path / ".radical" / "pilot" / "configs"
    d.mkdir(parents=True)
    (d / "resource_site.json").write_text(json.dumps({"m": {
        "default_schema": "local", "cores_per_node": 8, "resource_manager": "SLURM",
        "schemas": {"local": {"job_manager_endpoint": "slurm://m/",
                              "filesystem_endpoint": "file://m/"},
                    "ssh": {"job_manager_endpoint": "slurm+ssh://m/",
                            "filesystem_endpoint": "sftp://m/"},
                    "here": {"job_manager_endpoint": "fork://localhost/",
                             "filesystem_endpoint": "file://localhost/"}}}}))
    cfg = rp.utils.get_resource_config("site.m")
    assert cfg.cores_per_node == 8 and cfg["label"] == "site.m"
    assert rp.utils.get_resource_job_url("site.m", schema="ssh") == "slurm+ssh://m/"
    assert rp.utils.get_resource_fs_url("site.m") == "file://m/"
    assert "site.m" in rp.utils.list_resources() and "local.localhost" in rp.utils.list_resources()
    local = rp.utils.get_resource_config("local.localhost", schema="local")
    assert local.job_manager_endpoint == "fork://localhost/"
    pd = {"resource": "site.m", "cores": 16, "runtime": 10}
    assert rp.PilotDescription(pd).to_pf().resource == "slurm"
    assert rp.PilotDescription(pd).to_pf().nodes == 2
    assert rp.PilotDescription({**pd, "access_schema": "here"}).to_pf().resource == "local"
    with pytest.raises(DescriptionError, match="over ssh.*login node"):
        rp.PilotDescription({**pd, "access_schema": "ssh"}).to_pf()
    with pytest.raises(DescriptionError, match="no access schema 'nope'"):
        rp.PilotDescription({**pd, "access_schema": "nope"}).to_pf()
    with pytest.raises(KeyError, match="resource_other.json"):
        rp.utils.get_resource_config("other.x")


def test_pilot_input_staging_checked_at_submit():
    with pytest.raises(DescriptionError, match="input_staging"):
        rp.PilotDescription({"resource": "local.localhost", "cores": 1,
                             "input_staging": [42]}).to_pf()


def test_pilot_nodelist_and_slots(rp_session):
    _, _, _, pilot = rp_session
    pilot.wait(rp.PMGR_ACTIVE, timeout=60)
    nl = pilot.nodelist
    assert nl.uniform and nl.cores_per_node == 2 and len(nl.nodes) == 1
    assert pilot.resources == {"cpu": 2, "gpu": 0}
    assert pilot.resource_details["node_list"][0]["name"] == nl.nodes[0].name
    rr = rp.RankRequirements(n_cores=1)
    slots = nl.find_slots(rr, n_slots=2)
    assert [s.cores[0].index for s in slots] == [0, 1]
    assert nl.find_slots(rr) is None  # (all busy)
    nl.release_slots(slots)
    assert nl.find_slots(rr)[0].cores[0].occupation == rp.BUSY
    node = rp.Node({"index": 0, "name": "n", "cores": [rp.RO(index=i, occupation=rp.FREE)
                                                       for i in range(4)], "lfs": 0, "mem": 8})
    s = rp.Slot(node_index=0, node_name="n", cores=[3])
    node.allocate_slot(s)
    assert node.cores[3].occupation == rp.BUSY and node.find_slot(rp.RankRequirements(
        n_cores=3)).cores[2].index == 2
    node.deallocate_slot(s)
    assert node.as_dict()["cores"][3] == {"index": 3, "occupation": 0.0}


def test_radical_profile_writes_rp_task_profiles(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RADICAL_PROFILE", "TRUE")
    s = rp.Session(path=str(tmp_path / "session"))
    try:
        tmgr = rp.TaskManager(s)
        tmgr.add_pilots(rp.PilotManager(s).submit_pilots(rp.PilotDescription(
            {"resource": "local.localhost", "cores": 1, "runtime": 10})))
        t = tmgr.submit_tasks(rp.TaskDescription({"executable": "/bin/true"}))
        tmgr.wait_tasks(t.uid, timeout=60)
    finally:
        s.close()
    prof = tmp_path / "radical.pilot.sandbox" / s.uid / t.pilot / t.uid / f"{t.uid}.prof"
    rows = [line.split(",") for line in prof.read_text().splitlines()]
    events = {r[1]: float(r[0]) for r in rows}
    assert all(len(r) == 7 and r[4] == t.uid for r in rows)
    assert events["app_start"] <= events["app_stop"] and abs(events["app_stop"] - time.time()) < 60
