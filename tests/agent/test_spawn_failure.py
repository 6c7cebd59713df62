"""Issue 41, papercut 2: a spawn that fails because the child cannot open its output file
names that file, not the executable (executor.spawn_failure; the core reports only the
errno). The end-to-end repro: tests/test_issue41_papercuts.py::
test_missing_output_directory_is_named."""

from __future__ import annotations

from pilotfish.agent.task_runner import spawn_failure


def test_output_path_is_named(tmp_path):
    missing = str(tmp_path / "nodir" / "x.txt")
    r = spawn_failure("/bin/echo", missing, None, "No such file or directory", 2)
    assert r.startswith(f"cannot open stdout {missing!r}: its directory does not exist")
    r = spawn_failure("/bin/echo", True, str(tmp_path), "Is a directory", 21)
    assert r.startswith(f"cannot open stderr {str(tmp_path)!r}: it is a directory")


def test_else_the_executable(tmp_path):
    ok = str(tmp_path / "out.txt")
    r = spawn_failure("/no/such", ok, None, "No such file or directory", 2)
    assert r == "cannot execute '/no/such': No such file or directory (errno 2)"
