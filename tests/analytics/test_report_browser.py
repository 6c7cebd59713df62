"""The HTML report opens in headless Chromium and shows its plots.

Chromium is the Debian package `chromium` (scripts/install-chromium.sh). Without it this test
fails -- it does not skip -- so a CI image without the browser is noticed.

The session is synthetic for now (1,000 tasks, simulated). To check the report of a real
1,000-task run instead, set SESSION_SOURCE = "real" (`real_run_session` runs one with
`pilotfish run` on a local pilot, ~10 s).
"""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pilotfish.analytics.report import report_main
from pilotfish.analytics.synthetic import write_synthetic_session

pytestmark = pytest.mark.browser

N_PLOTS = 6
# plot-only colors (the page's CSS uses them only in 11 px swatches): the workload's teal in
# the utilization plots (first plot) and the setup histogram's fill, red at alpha 0.75 over
# white (last plots)
PLOT_COLORS = {"exec_cmd teal": (0x17, 0x87, 0x7B),
               "setup histogram red": tuple(round(0.75 * c + 0.25 * 255) for c in (0xD7, 0x30, 0x1F))}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                  "--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000"]


SESSION_SOURCE = "real"    # or "synthetic"

REAL_WORKLOAD = """\
pilot: {resource: local, nodes: 2, cores_per_node: 8, gpus_per_node: 1, runtime: 10m}
tasks:
  - {name: sleep, count: 900, executable: /bin/sleep, arguments: ["0.05"]}
  - {name: mpi, count: 50, ranks: 2, cores_per_rank: 2, executable: /bin/true}
  - {name: gpu, count: 50, gpus_per_rank: 1, executable: /bin/sleep, arguments: ["0.1"]}
"""


def real_run_session(root) -> str:
    """Run 1,000 tasks with `pilotfish run` on a local pilot; returns the session directory."""
    os.makedirs(root)
    workload = os.path.join(root, "workload.yaml")
    with open(workload, "w") as fh:
        fh.write(REAL_WORKLOAD)
    sessions = os.path.join(root, "sessions")
    # the agent runs in its own sandbox: make sure it imports this pilotfish (PYTHONPATH may
    # be relative in a checkout)
    import pilotfish
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(pilotfish.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root] + [os.path.abspath(p) for p in
                          os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    r = subprocess.run([sys.executable, "-c", "from pilotfish.cli import main; main()", "run",
                        workload, "--sessions", sessions, "--quiet", "--timeout", "240"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    (name,) = os.listdir(sessions)
    return os.path.join(sessions, name)


@pytest.fixture(scope="module")
def report_session(tmp_path_factory):
    """The session whose report is checked."""
    root = tmp_path_factory.mktemp("browser") / "session"
    if SESSION_SOURCE == "real":
        return real_run_session(str(root))
    return write_synthetic_session(str(root), n_tasks=1000, nodes=4, cores_per_node=16,
                                   gpus_per_node=2, n_pilots=2)


def make_report_for(session_dir: str) -> str:
    """Run what `pilotfish report SESSION_DIR --json` runs; returns the report.html path."""
    out_dir = os.path.join(os.path.dirname(os.path.abspath(session_dir)), "report")
    assert report_main(session_dir, out_dir, as_json=True) == 0
    path = os.path.join(out_dir, "report.html")
    assert os.path.exists(path) and os.path.exists(os.path.join(out_dir, "metrics.json"))
    return path


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium not found (Debian package `chromium`); "
                "install it with scripts/install-chromium.sh", pytrace=False)


def run_chromium(args: list[str], profile: str) -> subprocess.CompletedProcess:
    os.makedirs(profile, exist_ok=True)  # a new, empty profile per run
    return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


def console_messages(stderr: str) -> list[str]:
    """Every page console message (Chromium logs them all as INFO:CONSOLE, whatever their
    level); the report writes none, so any is a failure -- CSP violations included."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


@pytest.fixture(scope="module")
def report_html(report_session):
    return make_report_for(report_session)


def test_report_is_self_contained(report_html):
    with open(report_html, encoding="utf-8") as fh:
        text = fh.read()
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', text)) == N_PLOTS
    assert not re.search(r'(src|href)\s*=\s*"(https?:)?//', text), "external reference"
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", text), "external CSS reference"
    assert "Content-Security-Policy" in text


def test_report_renders_in_chromium(report_html, tmp_path):
    url = "file://" + os.path.abspath(report_html)

    dom = run_chromium(["--dump-dom", url], str(tmp_path / "profile-dom"))
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    m = re.search(r'data-plots-rendered="(\d+)/(\d+)"', dom.stdout)
    assert m, "the report's load handler did not run"
    assert (int(m.group(1)), int(m.group(2))) == (N_PLOTS, N_PLOTS)

    shot = tmp_path / "report.png"
    r = run_chromium(["--window-size=1400,8000", f"--screenshot={shot}", url],
                     str(tmp_path / "profile-shot"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert console_messages(r.stderr) == []
    assert shot.exists()

    import matplotlib.image as mpimg
    img = mpimg.imread(str(shot))[:, :, :3]           # floats in [0, 1]
    assert img.shape[0] >= 1000 and img.shape[1] >= 1000
    assert float(img.std()) > 0.05, "screenshot is blank"
    nonwhite = float((img.min(axis=2) < 0.94).mean())
    assert nonwhite > 0.10, f"screenshot mostly empty ({nonwhite:.1%} non-white)"
    rgb = np.rint(img * 255).astype(np.int16)
    for what, color in PLOT_COLORS.items():
        near = np.all(np.abs(rgb - np.array(color)) <= 8, axis=2).sum()
        assert near > 10_000, f"plot color {what} barely on screen ({near} px): plots not rendered?"
