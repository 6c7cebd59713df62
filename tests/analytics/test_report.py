"""`report_main` (what `pilotfish report` calls): files, JSON, errors, odd sessions."""

import json
import os

import pytest

from pilotfish.analytics import analyze
from pilotfish.analytics.report import report_main
from pilotfish.analytics.synthetic import write_synthetic_session
from pilotfish.analytics.utilization import PHASE_KEYS

PLOTS = ("utilization", "ru_breakdown", "concurrency", "throughput", "setup_histogram",
         "durations")


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    root = tmp_path_factory.mktemp("report") / "s"
    return write_synthetic_session(str(root), n_tasks=400, nodes=2, cores_per_node=8,
                                   gpus_per_node=1, n_pilots=2, seed=3)


def test_report_files_and_json(session, tmp_path, capsys):
    out = tmp_path / "out"
    assert report_main(session, str(out), as_json=True) == 0
    for name in PLOTS:
        data = (out / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(PLOTS)
    m = json.loads((out / "metrics.json").read_text())
    for kind in ("cores", "gpus"):
        phases = m["utilization"][kind]["phases"]
        assert set(phases) == set(PHASE_KEYS)
        assert sum(p["share"] for p in phases.values()) == pytest.approx(1, abs=1e-9)
        assert all(p["resource_s"] >= -1e-6 for p in phases.values())
    assert m["tasks"]["total"] == 400
    assert m["ttx_s"] > 0
    assert set(m["durations"]) == {"queue_wait", "scheduling", "setup", "run", "output", "total"}
    assert {"mean", "median", "q3", "max"} <= set(m["durations"]["setup"])
    waits = m["waits_by_shape"]          # who waited: every task that reached an agent
    assert waits and sum(w["tasks"] for w in waits) == 400
    assert sum(w["share"] for w in waits) == pytest.approx(1, abs=1e-9)
    assert [w["total"] for w in waits] == sorted((w["total"] for w in waits), reverse=True)
    assert "Waiting by task shape" in html and waits[0]["shape"] in html
    printed = capsys.readouterr()
    assert json.loads(printed.out) == m                # --json: the metrics on stdout
    assert "report.html" in printed.err                # the file list on stderr


def test_report_default_out_dir_without_json(session, capsys):
    assert report_main(session, None, as_json=False) == 0
    assert os.path.exists(os.path.join(session, "report", "report.html"))
    assert not os.path.exists(os.path.join(session, "report", "metrics.json"))
    assert "report.html" in capsys.readouterr().out


def test_not_a_session(tmp_path, capsys):
    assert report_main(str(tmp_path / "nope"), None, as_json=True) == 2
    assert "not a session directory" in capsys.readouterr().err


def test_empty_session_directory(tmp_path):
    """No events at all: a report that says so, not a crash. (A session all the same: it has
    its session.json; a directory without one is refused, test_cli_papercuts.py.)"""
    (tmp_path / "session.json").write_text("{}")
    assert report_main(str(tmp_path), str(tmp_path / "out"), as_json=True) == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["tasks"]["total"] == 0 and m["ttx_s"] is None
    assert any("no events" in w for w in m["warnings"])


def test_analysis_matches_simulation(session):
    """The synthetic run's own invariants: every placed task is accounted for."""
    a = analyze(session)
    t = a.data.tasks
    assert len(t) == 400
    placed = t["schedule_ok"].notna()
    assert (t.loc[placed, "unschedule"] >= t.loc[placed, "schedule_ok"]).all()
    u = a.utilization["cores"]
    busy = sum(u.phases[k] for k in ("prepare_execution", "exec_runtime", "exec_launcher",
                                     "exec_cmd", "unschedule"))
    assert busy == pytest.approx(((t["unschedule"] - t["schedule_ok"]) * t["cores"])[placed].sum())
    assert u.oversubscribed == 0
