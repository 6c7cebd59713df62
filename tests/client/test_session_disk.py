"""A session on a full or read-only file system: real tmpfs mounts (small, or mounted
read-only), real sessions and local pilots. Every failure is a pilotfish error naming the
path and the cause; a submit is all or nothing; close() never raises for a full disk."""

from __future__ import annotations

import errno
import logging
import os
import re
import subprocess
import sys

import pytest

import pilotfish as pf
from substrate_helpers import start_pilot  # tests/substrates (on the path: conftest)


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size, ro=False): a fresh tmpfs of that size under tmp_path; unmounted after."""
    mounted = []

    def mount(size: str, ro: bool = False):
        d = tmp_path / f"fs{len(mounted)}"
        d.mkdir()
        opts = f"size={size},mode=0755" + (",ro" if ro else "")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(d)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): "
                        f"{r.stderr.strip()}")
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], capture_output=True)


def _fill(fs) -> str:
    """Fill the file system to the last byte; returns the filler's path."""
    filler = os.path.join(fs, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * (1 << 16)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        for size in (4096, 512, 1):  # what is left of the last page
            try:
                while True:
                    os.write(fd, chunk[:size])
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def _true(n):
    return [pf.TaskDescription(executable="/bin/true") for _ in range(n)]


def test_full_disk_submit_is_all_or_nothing(tmpfs):
    fs = tmpfs("16m")
    path = fs / "s"
    journal = path / "journal"
    with pf.Session(path=path) as s, pf.Session(path=fs / "other") as other:
        pilot, tm = start_pilot(s, runtime="5m")
        size = os.path.getsize(journal)
        filler = _fill(fs)
        with pytest.raises(pf.PilotfishError) as e:
            tm.submit_tasks(_true(300))
        msg = str(e.value)
        assert str(journal) in msg and "No space left" in msg, msg
        assert isinstance(e.value, pf.SessionError) and e.value.errno == errno.ENOSPC
        # nothing registered, nothing sent, nothing half-written
        assert tm.list_tasks() == [] and s.tasks == {} and sum(tm.counts.values()) == 0
        assert os.path.getsize(journal) == size
        pmgr = pf.PilotManager(other)  # (its journal is empty: no page to spare)
        with pytest.raises(pf.PilotfishError, match=re.escape(str(fs / "other" / "journal"))):
            pmgr.submit_pilots(pf.PilotDescription(runtime="5m"))
        assert pmgr.pilots == {}
        os.unlink(filler)
        tasks = tm.submit_tasks(_true(300))
        tm.wait_tasks(timeout=120)
        assert [t.state for t in tasks] == [pf.DONE] * 300, \
            {t.state: t.reason for t in tasks}
    with pf.Session(path=path, resume=True) as s:  # the journal is whole
        assert len(s._resume.tasks) == 300


def test_close_on_a_full_disk_reports_and_does_not_raise(tmpfs, caplog):
    fs = tmpfs("16m")
    path = fs / "s"
    s = pf.Session(path=path)
    pilot, tm = start_pilot(s, runtime="5m")
    tm.submit_tasks(_true(50))
    tm.wait_tasks(timeout=60)
    filler = _fill(fs)
    with caplog.at_level(logging.WARNING, logger="pilotfish"):
        s.close()  # (the code before: OSError from the event log's last write)
    assert "No space left" in caplog.text and str(path) in caplog.text
    os.unlink(filler)
    with pf.Session(path=path, resume=True) as again:
        assert len(again._resume.tasks) == 50


def test_read_only_sessions_directory_is_a_pilotfish_error(tmpfs, monkeypatch):
    ro = tmpfs("1m", ro=True)
    with pytest.raises(pf.PilotfishError, match=re.escape(str(ro / "s")) + ".*[Rr]ead-only"):
        pf.Session(path=ro / "s")
    monkeypatch.setenv("PILOTFISH_SESSIONS", str(ro / "base"))
    with pytest.raises(pf.PilotfishError, match=re.escape(str(ro / "base"))):
        pf.Session()


@pytest.mark.parametrize("command", ["run", "simulate"])
def test_cli_on_a_read_only_sessions_directory_exits_2(tmpfs, tmp_path, command):
    ro = tmpfs("1m", ro=True)
    wl = tmp_path / "w.yaml"
    wl.write_text("pilot: {runtime: 5m}\ntasks:\n  - {count: 1, executable: /bin/true, "
                  "duration: 1}\n")
    r = subprocess.run([sys.executable, "-m", "pilotfish.cli", command,
                        *(["-q"] if command == "run" else []), "--sessions",
                        str(ro / "sessions"), str(wl)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and str(ro / "sessions") in r.stderr, r.stderr
