"""Path confinement (pilotfish._paths): the sandbox side stays in its sandbox, the outer side
never names the pilot's own files."""

import os

import pytest

import pilotfish as pf
from pilotfish._paths import clean_text, confined, protected, sandbox_relative


def _rel(path):
    return sandbox_relative("TaskDescription", "input_staging", [path], path)


# -- sandbox_relative: syntactic, at construction ----------------------------------------

@pytest.mark.parametrize("path, normalised", [
    ("out.txt", "out.txt"),
    ("./a//b/", "a/b"),
    ("a/../b", "b"),
    ("a/..", "."),          # the base itself
    (".", "."),
    (" lead", " lead"),     # a leading space is a name, not nothing
    ("..x/y", "..x/y"),     # a name starting with dots is not '..'
])
def test_sandbox_relative_accepts_and_normalises(path, normalised):
    assert _rel(path) == normalised


@pytest.mark.parametrize("path, why", [
    ("/etc/passwd", "must be relative"),
    ("//x", "must be relative"),
    ("..", "leaves the task sandbox"),
    ("../x", "leaves the task sandbox"),
    ("a/../../x", "leaves the task sandbox"),
    ("a/b/../../../x", "leaves the task sandbox"),
    ("", "must not be empty"),
    ("   ", "must not be empty"),
    ("a\0b", "NUL"),
    ("a\ud800", "UTF-8"),
    (5, "must be a string"),
    (None, "must be a string"),
])
def test_sandbox_relative_rejects(path, why):
    with pytest.raises(pf.DescriptionError) as info:
        _rel(path)
    assert info.value.field == "input_staging"
    assert why in str(info.value)


def test_clean_text():
    assert clean_text("plain") is None
    assert clean_text("héllo ✓") is None
    assert "NUL" in clean_text("a\0")
    assert "NUL" in clean_text("é\0")
    assert "surrogate" in clean_text("\udc80")


# -- confined: in context, with symlinks ---------------------------------------------------

def test_confined_joins_inside(tmp_path):
    base = tmp_path / "task"
    base.mkdir()
    assert confined(str(base), "a/b.txt") == str(base / "a" / "b.txt")
    assert confined(str(base), "a/../c") == str(base / "c")
    assert confined(str(base), ".") == str(base)


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "/etc/passwd", "", "a\0b", "\ud800"])
def test_confined_rejects(tmp_path, rel):
    with pytest.raises(ValueError):
        confined(str(tmp_path), rel)


def test_confined_rejects_symlinked_directory_escape(tmp_path):
    base, outside = tmp_path / "task", tmp_path / "outside"
    base.mkdir()
    outside.mkdir()
    (base / "link").symlink_to(outside)
    with pytest.raises(ValueError, match="symlink"):
        confined(str(base), "link/x.txt")


def test_confined_rejects_symlinked_file_escape(tmp_path):
    base = tmp_path / "task"
    base.mkdir()
    (tmp_path / "secret").write_text("s")
    (base / "f").symlink_to(tmp_path / "secret")  # a copy onto f would write the secret
    with pytest.raises(ValueError, match="symlink"):
        confined(str(base), "f")


def test_confined_allows_symlinks_that_stay_inside(tmp_path):
    base = tmp_path / "task"
    (base / "real").mkdir(parents=True)
    (base / "alias").symlink_to(base / "real")
    (base / "file").write_text("x")
    (base / "flink").symlink_to(base / "file")
    assert confined(str(base), "alias/x") == str(base / "real" / "x")
    assert confined(str(base), "flink") == str(base / "flink")  # the entry itself, not its target


def test_confined_base_behind_symlink(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    assert confined(str(tmp_path / "via"), "x") == str(real / "x")


# -- protected: the pilot's own files --------------------------------------------------------

@pytest.fixture
def pilot_sandbox(tmp_path):
    sb = tmp_path / "session" / "pilot.0000"
    (sb / "tasks" / "t1").mkdir(parents=True)
    for name in ("agent.events", "agent.log", "agent.json", "pilot.json"):
        (sb / name).write_text("")
    (sb / "prrte").mkdir()
    return sb


@pytest.mark.parametrize("rel", ["agent.events", "agent.log", "agent.json", "pilot.json",
                                 "agent.journal", "keys/client.key", "prrte/dvm.uri", ".",
                                 "tasks", "tasks/../agent.events"])
def test_protected_pilot_files(pilot_sandbox, rel):
    assert protected(os.path.join(str(pilot_sandbox), rel), str(pilot_sandbox))


def test_protected_relative_paths_are_in_the_pilot_sandbox(pilot_sandbox):
    assert protected("agent.events", str(pilot_sandbox))
    assert not protected("tasks/t1/out", str(pilot_sandbox))


@pytest.mark.parametrize("path", ["tasks/t1", "tasks/t1/out.txt", "tasks/new/deep/file"])
def test_task_files_are_not_protected(pilot_sandbox, path):
    assert not protected(os.path.join(str(pilot_sandbox), path), str(pilot_sandbox))


def test_elsewhere_is_not_protected(pilot_sandbox, tmp_path):
    assert not protected(str(tmp_path / "data" / "in.txt"), str(pilot_sandbox))
    assert not protected("/etc/hosts", str(pilot_sandbox))
    assert not protected(str(pilot_sandbox) + "-other/agent.events", str(pilot_sandbox))
    assert not protected(str(pilot_sandbox.parent), str(pilot_sandbox))


@pytest.mark.parametrize("path", ["", "a\0b", "\ud800", None, 5])
def test_protected_refuses_what_is_not_a_path(pilot_sandbox, path):
    with pytest.raises(ValueError):
        protected(path, str(pilot_sandbox))


def test_protected_ancestors_on_request(pilot_sandbox):
    assert protected(str(pilot_sandbox.parent), str(pilot_sandbox), ancestors=True)
    assert protected("/", str(pilot_sandbox), ancestors=True)
    assert not protected("/etc", str(pilot_sandbox), ancestors=True)


def test_protected_through_symlinks(pilot_sandbox, tmp_path):
    # a path outside that leads to the pilot's files
    (tmp_path / "innocent").symlink_to(pilot_sandbox / "agent.events")
    assert protected(str(tmp_path / "innocent"), str(pilot_sandbox))
    (tmp_path / "dir").symlink_to(pilot_sandbox)
    assert protected(str(tmp_path / "dir" / "agent.log"), str(pilot_sandbox))
    # a task file that is a symlink to the pilot's files
    (pilot_sandbox / "tasks" / "t1" / "ev").symlink_to(pilot_sandbox / "agent.events")
    assert protected(str(pilot_sandbox / "tasks" / "t1" / "ev"), str(pilot_sandbox))


def test_protected_sandbox_given_through_a_symlink(pilot_sandbox, tmp_path):
    (tmp_path / "sb").symlink_to(pilot_sandbox)
    assert protected(str(pilot_sandbox / "agent.events"), str(tmp_path / "sb"))
    assert protected(str(tmp_path / "sb" / "agent.events"), str(pilot_sandbox))
    assert not protected(str(tmp_path / "sb" / "tasks" / "t1" / "x"), str(pilot_sandbox))


# -- the description side: staging, stdout/stderr, sandbox -----------------------------------

@pytest.mark.parametrize("kwargs, field", [
    ({"input_staging": [{"source": "/data/x", "target": "../x"}]}, "input_staging"),
    ({"input_staging": [{"source": "/data/x", "target": "/tmp/x"}]}, "input_staging"),
    ({"output_staging": [{"source": "../../agent.events", "target": "/tmp/x"}]}, "output_staging"),
    ({"output_staging": [{"source": "/etc/passwd", "target": "/tmp/x"}]}, "output_staging"),
    ({"output_staging": ["../x"]}, "output_staging"),
    ({"input_staging": ["/"]}, "input_staging"),          # no name: a target is needed
    ({"input_staging": [{"source": "/x", "target": ""}]}, "input_staging"),
    ({"stdout": "../out"}, "stdout"),
    ({"stderr": "a/../../err"}, "stderr"),
    ({"sandbox": "../elsewhere"}, "sandbox"),
])
def test_descriptions_confine_the_sandbox_side(kwargs, field):
    with pytest.raises(pf.DescriptionError) as info:
        pf.TaskDescription(executable="/bin/true", **kwargs)
    assert info.value.field == field


def test_descriptions_keep_outer_paths_and_absolute_outputs():
    d = pf.TaskDescription(
        executable="/bin/true", sandbox="/scratch/run", stdout="/scratch/out", stderr="logs/./err",
        input_staging=["/shared/in.dat", {"source": "/shared/dir/", "target": "./sub//dir"}],
        output_staging=[{"source": "res.txt", "target": "/shared/results/res.txt", "action": "move"}])
    assert d.sandbox == "/scratch/run" and d.stdout == "/scratch/out" and d.stderr == "logs/err"
    assert d.input_staging == [
        {"source": "/shared/in.dat", "target": "in.dat", "action": "copy"},
        {"source": "/shared/dir/", "target": "sub/dir", "action": "copy"}]
    assert d.output_staging[0]["target"] == "/shared/results/res.txt"


def test_resolve_is_the_agents_one_path_check(tmp_path):
    from pilotfish._paths import resolve

    pilot = tmp_path / "pilot"
    (pilot / "tasks" / "t1").mkdir(parents=True)
    tasks = str(pilot / "tasks")
    assert resolve(tasks, "t1/out.txt", str(pilot)) == str(pilot / "tasks" / "t1" / "out.txt")
    assert resolve(tasks, "/elsewhere/x", str(pilot)) == "/elsewhere/x"
    for bad in ("../agent.events", str(pilot / "agent.journal")):
        with pytest.raises(ValueError):
            resolve(tasks, bad, str(pilot))
    # a task sandbox above the pilot sandbox: confined there, yet naming the pilot's files
    with pytest.raises(ValueError, match="pilot's own files"):
        resolve(str(tmp_path), "pilot/agent.events", str(pilot))
