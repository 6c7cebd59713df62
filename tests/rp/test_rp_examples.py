"""RADICAL-Pilot's own examples (00-12, agent_services.py, error_handling.py and the simple
RAPTOR example), unchanged, through pilotfish.rp: the scripts come from RP's source
distribution on PyPI (radical.pilot ships its examples there), radical.utils is RP's real
package, and `radical.pilot` resolves to pilotfish.rp (tests/rp/run_rp_example.py). They are
fetched once with pip into $PILOTFISH_RP_CACHE (tests/rp/rp_cache.py; scripts/test.sh does it
before the suite enters the cluster's network namespace); without the package index the test
is skipped, saying so. (Example 05's one download URL is pointed at a loopback server:
OFF_MACHINE_URLS.) Each example must exit 0 and print what RP's
run prints for its tasks (their final states)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import rp_cache  # noqa: E402

RUNNER = Path(__file__).parent / "run_rp_example.py"
EXAMPLES = ["00_getting_started.py", "01_task_details.py", "02_failing_tasks.py",
            "03_multiple_pilots.py", "04_scheduler_selection.py", "05_task_input_data.py",
            "06_task_output_data.py", "07_shared_task_data.py", "08_task_environment.py",
            "09_mpi_tasks.py", "10_pre_and_post_exec.py", "11_task_input_data_tar.py",
            "11_task_input_folder.py", "12_task_env.py", "agent_services.py",
            "error_handling.py", "misc/raptor_simple.py"]


@pytest.fixture(scope="module")
def rp_tree():
    missing = rp_cache.fetch()  # (scripts/test.sh fetched it before the netns: no network)
    if missing:
        pytest.skip(f"{missing} could not be fetched from the package index into "
                    f"{rp_cache.CACHE}")
    return rp_cache.paths()


# Example 05 downloads https://1.1.1.1/ (rp.DOWNLOAD) into each task's sandbox. Tests never
# send traffic off this machine: here that one URL is replaced by a server on the loopback
# (http://127.0.0.1:PORT/, started by the test); the rest of the script runs unchanged, and
# the test checks that its tasks fetched from that server.
OFF_MACHINE_URLS = {"05_task_input_data.py": "https://1.1.1.1/"}


@pytest.fixture
def loopback_server(tmp_path):
    """An HTTP server on 127.0.0.1 serving one small file at /; yields (url, requests)."""
    import http.server
    import threading

    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"served on the loopback for RP's example 05\n"
            requests.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", EXAMPLES)
def test_rp_example_runs_unchanged(name, rp_tree, tmp_path, loopback_server):
    if name == "09_mpi_tasks.py":
        pytest.importorskip("mpi4py")
    examples, ru, wheels = rp_tree
    script = examples / name
    if name in OFF_MACHINE_URLS:  # (see OFF_MACHINE_URLS: the one line changed)
        text = script.read_text()
        assert text.count(OFF_MACHINE_URLS[name]) == 1, f"{name} changed upstream"
        script = tmp_path / name
        script.write_text(text.replace(OFF_MACHINE_URLS[name], loopback_server[0]))
    for f in glob.glob(str(examples / "*.json")) + glob.glob(str(examples / "*.sh")):
        os.symlink(f, tmp_path / os.path.basename(f))
    env = {**os.environ, "PYTHONPATH": f"{ru}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PILOTFISH_SESSIONS": str(tmp_path / "sessions"), "RADICAL_REPORT_ANIME": "0",
           # pip in a task venv (example 12) installs from the fetched wheels, offline
           "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
    r = subprocess.run([sys.executable, str(RUNNER), str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{name} rc={r.returncode}\n{out[-4000:]}"
    assert "Traceback" not in out, out[-4000:]
    assert "caught Exception" not in out, out[-4000:]
    if name in OFF_MACHINE_URLS:  # its tasks fetched from the loopback server
        assert loopback_server[1], f"{name}: nothing fetched from {loopback_server[0]}\n{out[-2000:]}"
