"""prepare_env's 'path' (issue 47, rows 8 and 9): an existing venv whose bin/activate every task
of the pilot sources, as the pilot's user. Refused at the call, naming the path (each test
failed before the fix):

- a venv another user (nobody) owns, or that others may write to, or that lies in a directory
  another user controls: before, accepted silently -- its activate ran in every task as the
  pilot's owner (root here);
- a path holding a quote, `$(...)`, a backquote, a newline...: before, accepted, and every task
  FAILED "Unterminated quoted string" (venv's own activate quotes its path in double quotes:
  a `$(...)` alone there would run in every task).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

import pytest

import pilotfish.rp as rp
from pilotfish.rp._venv import existing_venv

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a venv to nobody")


def _venv(path) -> str:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return str(path)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One venv made, copied for each case (a venv is ~0.5 s to make, a copy ~ms)."""
    return _venv(tmp_path_factory.mktemp("ve") / "ve")


def _copy(made, to) -> str:
    shutil.copytree(made, to, symlinks=True)
    # (venv writes its path into activate: the copy's own)
    act = os.path.join(to, "bin", "activate")
    with open(act) as f:
        text = f.read().replace(made, str(to))
    with open(act, "w") as f:
        f.write(text)
    return str(to)


def _nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


@pytest.fixture(scope="module")
def pilot(tmp_path_factory):
    s = rp.Session(path=str(tmp_path_factory.mktemp("rp47") / "session"))
    p = rp.PilotManager(s).submit_pilots(
        rp.PilotDescription({"resource": "local.localhost", "cores": 1, "runtime": 10})
    )
    yield s, p
    s.close()


@root_only
def test_a_venv_another_user_owns_is_refused_at_the_call(pilot, made, tmp_path):
    s, p = pilot
    ve = _copy(made, tmp_path / "theirs")
    planted = tmp_path / "planted"
    with open(os.path.join(ve, "bin", "activate"), "a") as f:
        f.write(f"\necho ran as $(id -u) > {planted}\n")
    for top, dirs, files in os.walk(ve):
        for n in [top] + [os.path.join(top, x) for x in files]:
            os.lchown(n, _nobody(), -1)
    with pytest.raises(ValueError, match=rf"path '{ve}'.*is owned by uid {_nobody()} \(nobody\)"):
        p.prepare_env("theirs", {"type": "venv", "path": ve})
    tm = rp.TaskManager(s)
    tm.add_pilots(p)
    with pytest.raises(ValueError, match="named_env = 'theirs': no environment of that name"):
        tm.submit_tasks(rp.TaskDescription({"executable": "/bin/true", "named_env": "theirs"}))
    assert not planted.exists()  # their activate never ran as us (before: "ran as 0")


@root_only
@pytest.mark.parametrize("part", ["bin/activate", "bin", "", "bin/python3"])
def test_each_part_a_task_runs_must_be_ours(made, tmp_path, part):
    ve = _copy(made, tmp_path / "ve")
    os.lchown(os.path.join(ve, part) if part else ve, _nobody(), -1)
    with pytest.raises(ValueError, match=r"owned by uid \d+ \(nobody\)"):
        existing_venv("e", ve, {})


@pytest.mark.parametrize(
    "part, mode", [("bin/activate", 0o666), ("bin", 0o775), ("", 0o757), ("lib", 0o777)]
)
def test_a_venv_others_may_write_to_is_refused(made, tmp_path, part, mode):
    ve = _copy(made, tmp_path / "ve")
    where = os.path.join(ve, part) if part else ve
    os.chmod(where, mode)
    with pytest.raises(ValueError, match=rf"{where.rstrip('/')}.* is writable by .*mode 0{mode:o}"):
        existing_venv("e", ve, {})


@root_only
def test_a_venv_in_a_directory_another_user_controls_is_refused(made, tmp_path):
    d = tmp_path / "their_dir"
    d.mkdir()
    ve = _copy(made, d / "ve")
    os.chown(d, _nobody(), -1)  # (they could move ve away and put theirs in its place)
    with pytest.raises(ValueError, match=f"{d}.*is owned by uid {_nobody()}"):
        existing_venv("e", ve, {})
    os.chown(d, 0, -1)
    link = tmp_path / "link"
    os.symlink(ve, link)
    os.lchown(link, _nobody(), -1)  # (a link of theirs: they may point it anywhere)
    with pytest.raises(ValueError, match=f"{link}.*symbolic link owned by uid {_nobody()}"):
        existing_venv("e", str(link), {})


def test_a_venv_of_ours_is_taken(made, tmp_path):
    ve = _copy(made, tmp_path / "ours")
    rec = existing_venv("e", ve + "/", {"pre_exec": ["export A=1"]})
    assert rec == {"type": "shell", "pre_exec": [f". {ve}/bin/activate", "export A=1"]}


@pytest.mark.parametrize(
    "name",
    [
        "it's",
        'say "hi"',
        "$(touch MARK)",
        "`touch MARK`",
        "a\nb",
        "back\\slash",
        "a:b",
        "semi;colon",
        "tab\there",
    ],
)
def test_a_path_the_activation_cannot_carry_is_refused_at_the_call(pilot, made, tmp_path, name):
    _, p = pilot
    ve = _copy(made, tmp_path / name)
    with pytest.raises(ValueError) as e:
        p.prepare_env("odd", {"type": "venv", "path": ve})
    assert "cannot carry" in str(e.value) and repr(ve) in str(e.value), str(e.value)
    assert not (tmp_path / "MARK").exists()
