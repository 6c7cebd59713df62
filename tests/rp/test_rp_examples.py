"""RADICAL-Pilot's own examples (00-12, agent_services.py, error_handling.py and the simple
RAPTOR example), unchanged, through pilotfish.rp: the scripts come from RP's source
distribution on PyPI (radical.pilot ships its examples there), radical.utils is RP's real
package, and `radical.pilot` resolves to pilotfish.rp (tests/rp/run_rp_example.py). Both are
fetched once with pip into $PILOTFISH_RP_CACHE (default ~/.cache/pilotfish-rp); without the
package index the test is skipped, saying so. Each example must exit 0 and print what RP's
run prints for its tasks (their final states)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

RP_VERSION = "1.103.2"
RU_VERSION = "1.103.1"
CACHE = Path(os.environ.get("PILOTFISH_RP_CACHE", Path.home() / ".cache" / "pilotfish-rp"))
RUNNER = Path(__file__).parent / "run_rp_example.py"
EXAMPLES = ["00_getting_started.py", "01_task_details.py", "02_failing_tasks.py",
            "03_multiple_pilots.py", "04_scheduler_selection.py", "05_task_input_data.py",
            "06_task_output_data.py", "07_shared_task_data.py", "08_task_environment.py",
            "09_mpi_tasks.py", "10_pre_and_post_exec.py", "11_task_input_data_tar.py",
            "11_task_input_folder.py", "12_task_env.py", "agent_services.py",
            "error_handling.py", "misc/raptor_simple.py"]


def _pip(*args) -> bool:
    r = subprocess.run([sys.executable, "-m", "pip", "-q", *args], capture_output=True,
                       timeout=600)
    return r.returncode == 0


@pytest.fixture(scope="module")
def rp_tree():
    src = CACHE / f"radical_pilot-{RP_VERSION}"
    ru = CACHE / "ru"
    if not (src / "examples").is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        if not _pip("download", "--no-deps", "--no-binary", ":all:", "-d", str(CACHE),
                    f"radical.pilot=={RP_VERSION}"):
            pytest.skip("radical.pilot's source distribution (RP's examples) could not be "
                        "fetched from the package index")
        with tarfile.open(CACHE / f"radical_pilot-{RP_VERSION}.tar.gz") as t:
            t.extractall(CACHE, filter="data")
    if not (ru / "radical" / "utils").is_dir():
        if not _pip("install", "--target", str(ru), f"radical.utils=={RU_VERSION}",
                    "colorama", "msgpack", "ntplib", "regex", "setproctitle", "netifaces",
                    "rc.process", "--no-deps"):
            pytest.skip("radical.utils could not be installed from the package index")
    return src / "examples", ru


@pytest.mark.parametrize("name", EXAMPLES)
def test_rp_example_runs_unchanged(name, rp_tree, tmp_path):
    if name == "09_mpi_tasks.py":
        pytest.importorskip("mpi4py")
    examples, ru = rp_tree
    script = examples / name
    for f in glob.glob(str(examples / "*.json")) + glob.glob(str(examples / "*.sh")):
        os.symlink(f, tmp_path / os.path.basename(f))
    env = {**os.environ, "PYTHONPATH": f"{ru}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "PILOTFISH_SESSIONS": str(tmp_path / "sessions"), "RADICAL_REPORT_ANIME": "0"}
    r = subprocess.run([sys.executable, str(RUNNER), str(script)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"{name} rc={r.returncode}\n{out[-4000:]}"
    assert "Traceback" not in out, out[-4000:]
    assert "caught Exception" not in out, out[-4000:]
