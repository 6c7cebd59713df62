"""Path confinement: the one place that says which paths a task may name.

A task works in its sandbox (by default the pilot's `tasks/` directory, or a directory under
it). Paths of a description have two sides:

* the sandbox side -- an input's `target`, an output's `source`, a relative `stdout`/`stderr`
  and a relative task `sandbox` -- is relative to its base and may not leave it: not absolute,
  no `..` that climbs above the base, no symlink that leads out of it;
* the outer side -- an input's `source`, an output's `target` -- may be any path (users stage
  from and to shared filesystems) except the pilot's own files: everything in the pilot
  sandbox outside `tasks/` (agent.events, agent.log, agent.json, pilot.json, journal, keys,
  the launchers' directories).

`sandbox_relative` is the syntactic check made when a description is built; `confined` and
`protected` are the checks in context, made by the client at submit and by the agent on
receipt (the wire is an API too), after resolving symlinks.
"""

from __future__ import annotations

import os

from ._errors import DescriptionError, show

TASKS_DIR = "tasks"  # the part of a pilot sandbox that belongs to tasks


def clean_text(s: str) -> str | None:
    """None if s can cross every boundary (UTF-8 encodable, no NUL), else what is wrong."""
    if s.isascii():  # the common case: one C-level scan
        return "must not contain NUL bytes" if "\0" in s else None
    if "\0" in s:
        return "must not contain NUL bytes"
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid text (UTF-8 encodable; no lone surrogates)"
    return None


def sandbox_relative(kind: str, field: str, value: object, path: object) -> str:
    """`path` as a normalised relative path that stays inside its base, or DescriptionError.

    kind/field/value name the description, the field and its whole value for the error;
    `path` is the one path checked (e.g. one staging directive's target). "." (the base
    itself) is allowed; "", absolute paths and `..` that climbs above the base are not.
    """
    if not isinstance(path, str):
        raise DescriptionError(kind, field, value, f"path {_show(path)} must be a string")
    why = clean_text(path)
    if why is not None:
        raise DescriptionError(kind, field, value, f"path {_show(path)} {why}")
    if not path.strip():
        raise DescriptionError(kind, field, value, "path must not be empty")
    if path.startswith("/"):
        raise DescriptionError(
            kind, field, value, f"path {_show(path)} must be relative to the task sandbox"
        )
    norm = os.path.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise DescriptionError(
            kind, field, value, f"path {_show(path)} leaves the task sandbox ('..')"
        )
    return norm


def confined(base: str, rel: str) -> str:
    """base/rel as an absolute path with its parent directories' symlinks resolved; ValueError
    if rel is not a clean relative path or the result is outside base.

    The last component is kept as named (so that unlinking or replacing it acts on the entry
    itself), but when it exists and is a symlink, where it leads must be inside base too (a
    copy onto it would write there).
    """
    if not isinstance(rel, str) or not rel or clean_text(rel) is not None:
        raise ValueError(f"{_show(rel)} is not a path")
    if os.path.isabs(rel):
        raise ValueError(f"{_show(rel)} must be relative to {base}")
    base_real = os.path.realpath(base)
    joined = os.path.normpath(os.path.join(base_real, rel))
    if not _inside(joined, base_real):
        raise ValueError(f"{_show(rel)} leaves {base}")
    if joined == base_real:
        return base_real
    parent, name = os.path.split(joined)
    resolved = os.path.join(os.path.realpath(parent), name)
    if not _inside(resolved, base_real) or resolved == base_real:
        raise ValueError(f"{_show(rel)} leaves {base} (through a symlink)")
    if os.path.islink(resolved) and not _inside(os.path.realpath(resolved), base_real):
        raise ValueError(f"{_show(rel)} is a symlink out of {base}")
    return resolved


def protected(path: str, pilot_sandbox: str, *, ancestors: bool = False) -> bool:
    """True if path names the pilot's own files: the pilot sandbox itself, its `tasks/`
    directory itself, or anything else inside the sandbox that is not inside `tasks/`.

    A relative path is taken relative to the pilot sandbox (the agent's working directory).
    The path is judged as written, with its parents resolved, and fully resolved: any of the
    three naming the pilot's files is enough. ancestors=True also protects the directories
    above the pilot sandbox (for directory copies, which would read or overwrite the
    pilot's files through them). ValueError if path is not a clean string (NUL, surrogates).
    """
    if not isinstance(path, str) or not path or clean_text(path) is not None:
        raise ValueError(f"{_show(path)} is not a path")
    sandbox = os.path.realpath(pilot_sandbox)
    sandbox_lexical = os.path.normpath(os.path.abspath(pilot_sandbox))
    full = path if os.path.isabs(path) else os.path.join(sandbox, path)
    lexical = os.path.normpath(full)
    parent, name = os.path.split(lexical)
    candidates = {lexical, os.path.join(os.path.realpath(parent), name), os.path.realpath(lexical)}
    for root in {sandbox, sandbox_lexical}:
        tasks = os.path.join(root, TASKS_DIR)
        for p in candidates:
            if _inside(p, root) and (p == tasks or not _inside(p, tasks)):
                return True
            if ancestors and _inside(root, p):
                return True
    return False


def resolve(base: str, path: str, pilot_sandbox: str) -> str:
    """path -- absolute, or relative to base and confined to it -- as an absolute path;
    ValueError if it leaves base or names the pilot's own files (also through a base that is
    itself above the pilot sandbox). The agent's one check for every path it is handed."""
    full = path if isinstance(path, str) and os.path.isabs(path) else confined(base, path)
    if protected(full, pilot_sandbox):
        raise ValueError(f"{_show(path)} names the pilot's own files")
    return full


def own_directory(task) -> bool:
    """Does a task without `sandbox` get a directory of its own? Yes when it declares files:
    staging, output files, shell, pre/post_exec (a TaskDescription or a wire TaskSpec: the
    same field names). Not every task: mkdir costs 130-240 us of kernel time on this
    machine's ext4 (measured), more than a whole null task."""
    return bool(
        task.input_staging
        or task.output_staging
        or task.shell
        or task.pre_exec
        or task.post_exec
        or isinstance(task.stdout, str)
        or isinstance(task.stderr, str)
    )


def task_cwd(task, uid: str, tasks_dir: str) -> str:
    """A task's working directory: its `sandbox` (absolute, or relative to the pilot's tasks/
    directory); else tasks/<uid>/ when own_directory(task) (made when it starts); else the
    shared tasks/. One rule for the agent (where it runs) and the client (task.sandbox)."""
    sb = task.sandbox
    if sb:
        return sb if os.path.isabs(sb) else os.path.join(tasks_dir, sb)
    return os.path.join(tasks_dir, uid) if own_directory(task) else tasks_dir


def _inside(path: str, base: str) -> bool:
    """path is base or below it (both absolute and normalised)."""
    if path == base:
        return True
    prefix = base if base.endswith(os.sep) else base + os.sep
    return path.startswith(prefix)


def _show(value: object) -> str:
    return show(value, 80)


__all__ = [
    "TASKS_DIR",
    "clean_text",
    "sandbox_relative",
    "confined",
    "own_directory",
    "protected",
    "resolve",
    "task_cwd",
]
