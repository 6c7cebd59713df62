"""The dashboard in headless Chromium, on a live run: a real local pilot runs tasks while
the page is loaded twice; the page renders (its script drew the counts, no console message)
and the counts it shows move between the loads; after the session closes it shows the run
finished, every task counted.

Chromium is the Debian package `chromium` (scripts/install-chromium.sh); without it this
test fails, as test_report_browser does.
"""

import html
import json
import urllib.request
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

import pilotfish as pf
from pilotfish.analytics.dashboard import make_server, url

pytestmark = pytest.mark.browser

N_TASKS = 48
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]


def run_chromium(args: list[str], profile: str) -> subprocess.CompletedProcess:
    """Chromium with a new, empty profile (the flags of test_report_browser)."""
    path = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if p), None)
    if path is None:
        pytest.fail("headless Chromium not found (Debian package `chromium`); install it with "
                    "scripts/install-chromium.sh", pytrace=False)
    os.makedirs(profile, exist_ok=True)
    return subprocess.run([path, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


def console_messages(stderr: str) -> list[str]:
    """Every console message of the page (the dashboard writes none: any is a failure)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def load(link: str, profile: str) -> dict:
    """The page's <body> data after its script ran (dump-dom with a virtual-time budget:
    the fetches complete, the first poll draws)."""
    r = run_chromium(["--virtual-time-budget=2500", "--dump-dom", link], profile)
    assert r.returncode == 0, r.stderr[-2000:]
    assert console_messages(r.stderr) == []
    m = re.search(r"<body([^>]*)>", r.stdout)
    assert m, r.stdout[:2000]
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', m.group(1)))
    assert int(attrs.get("refreshes", "0")) >= 1, "the page's poll did not draw"
    assert 'id="n-DONE"' in r.stdout and "<canvas" in r.stdout
    return {"states": json.loads(html.unescape(attrs["states"])), "live": attrs["live"],
            "dom": r.stdout}


def test_dashboard_follows_a_live_run_in_chromium(tmp_path):
    session_dir = str(tmp_path / "session")
    with pf.Session(path=session_dir) as session:
        pmgr = pf.PilotManager(session)
        pilot = pmgr.submit_pilots(pf.PilotDescription(
            resource="local", nodes=2, cores_per_node=2, gpus_per_node=1, runtime="10m"))
        tmgr = pf.TaskManager(session)
        tmgr.add_pilots(pilot)
        # ~12 s of work on 4 cores, and a task that fails with its reason
        tasks = tmgr.submit_tasks(
            [pf.TaskDescription(executable="/bin/sleep", arguments=["1"], name="sleep")
             for _ in range(N_TASKS)] +
            [pf.TaskDescription(executable="/bin/false", name="fails")])
        server, dash = make_server(session_dir)
        th = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              daemon=True)
        th.start()
        link = url(server, dash)
        while sum(t.state == "DONE" for t in tasks) < 2:   # the run is under way
            time.sleep(0.1)
        first = load(link, str(tmp_path / "p1"))
        # the agent names each rank's node when it places it: the heatmap is live
        with urllib.request.urlopen(link.replace("/?", "/api/nodes?"), timeout=30) as r:
            nodes = json.loads(r.read())
        assert nodes["live"] is True, nodes
        (rec,) = nodes["pilots"]
        assert rec["mode"] == "now" and sum(rec["busy_cores"]) > 0, rec
        time.sleep(2.5)
        second = load(link, str(tmp_path / "p2"))
        tmgr.wait_tasks(timeout=240)
        assert first["live"] == "true" and second["live"] == "true"
        assert sum(first["states"].values()) == N_TASKS + 1
        assert first["states"] != second["states"], "the counts did not move"
        assert second["states"]["DONE"] > first["states"]["DONE"]
        assert first["states"]["DONE"] < N_TASKS
    try:
        time.sleep(1.0)  # (the page refreshes at most every 0.5 s)
        final = load(link, str(tmp_path / "p3"))
        assert final["live"] == "false"
        assert final["states"]["DONE"] == N_TASKS and final["states"]["FAILED"] == 1
        failed = final["dom"].split('id="failed"', 1)[1]
        assert '<td class="">exit code 1</td>' in failed       # the failed task's reason
        assert '<td class="">fails</td>' in failed             # and its name
    finally:
        server.shutdown()
        server.server_close()
