"""What tests/rp/test_rp_examples.py needs from the package index, fetched once into
$PILOTFISH_RP_CACHE (default ~/.cache/pilotfish-rp): RP's source distribution (its examples),
RP's radical.utils (installed with --target), and the wheels example 12 installs into its
task venv (numpy), so that pip there needs no network (PIP_NO_INDEX + PIP_FIND_LINKS).

scripts/test.sh runs it before the suite enters the test cluster's network namespace, which
has no route out: `python tests/rp/rp_cache.py` (exit 0: all there; 1: something could not be
fetched, and the test skips saying what).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

RP_VERSION = "1.103.2"
RU_VERSION = "1.103.1"
CACHE = Path(os.environ.get("PILOTFISH_RP_CACHE", Path.home() / ".cache" / "pilotfish-rp"))
EXAMPLE_WHEELS = ("numpy", "psutil")  # what RP's examples and tutorials install into task
# environments (describing_tasks: prepare_env with setup psutil)


def _pip(*args) -> bool:
    r = subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check",
                        *args], capture_output=True, timeout=600)
    return r.returncode == 0


def paths() -> tuple[Path, Path, Path]:
    """(RP's examples, the radical.utils --target directory, the wheels directory)."""
    return (CACHE / f"radical_pilot-{RP_VERSION}" / "examples", CACHE / "ru",
            CACHE / "wheels")


def fetch() -> str | None:
    """Fetch what is missing; None when all is there, else what could not be fetched."""
    examples, ru, wheels = paths()
    if not examples.is_dir():
        CACHE.mkdir(parents=True, exist_ok=True)
        if not _pip("download", "--no-deps", "--no-binary", ":all:", "-d", str(CACHE),
                    f"radical.pilot=={RP_VERSION}"):
            return "radical.pilot's source distribution (RP's examples)"
        with tarfile.open(CACHE / f"radical_pilot-{RP_VERSION}.tar.gz") as t:
            t.extractall(CACHE, filter="data")
    if not (ru / "radical" / "utils").is_dir():
        if not _pip("install", "--target", str(ru), f"radical.utils=={RU_VERSION}",
                    "colorama", "msgpack", "ntplib", "regex", "setproctitle", "netifaces",
                    "rc.process", "--no-deps"):
            return "radical.utils"
    for name in EXAMPLE_WHEELS:
        if not any(wheels.glob(f"{name}-*.whl")):
            if not _pip("download", "--only-binary", ":all:", "-d", str(wheels), name):
                return f"a {name} wheel (RP's example 12 installs it in a task venv)"
    return None


if __name__ == "__main__":
    missing = fetch()
    if missing:
        print(f"tests/rp/rp_cache.py: could not fetch {missing} into {CACHE}: "
              "tests/rp/test_rp_examples.py will skip", file=sys.stderr)
    sys.exit(1 if missing else 0)
