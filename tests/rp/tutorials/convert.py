"""Regenerate the scripts in this directory from RADICAL-Pilot's sources (MIT licence:
LICENSE.radical.pilot here), as an RP user would: the code cells of each tutorial notebook
(docs/source/tutorials/*.ipynb, of RP 1.60 and of today's RP) in order, as one script, and
the scripts of examples/misc as they are -- with only the import line changed
(`import radical.pilot as rp` -> `import pilotfish.rp as rp`). IPython's magics become the
Python they stand for (as `jupyter nbconvert --to script` makes them get_ipython() calls):
`%env K=V`, `%cd DIR`, `!command` (with IPython's $name / {expr} expansion) and `%%bash`
cells, through the small helpers _ipy_* defined at the top of such a script; a notebook's
builtin display() prints.

    python tests/rp/tutorials/convert.py RP_GIT_DIR     # a clone or mirror of radical.pilot

It writes tutorials_160/<name>.py (tag v1.60.0), tutorials/<name>.py (CURRENT below) and
misc/<name> (examples/misc at CURRENT), each with a header naming its source. The tests
(tests/rp/test_rp_tutorials.py) run the committed scripts: this is only how they were made.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
CURRENT = "f9549f6f0e9c250ddb002469c8830a5d72979b73"  # radical.pilot devel, 2025-11-19
V160 = "v1.60.0"
IMPORT = re.compile(r"^(\s*)import radical\.pilot as rp\s*$", re.M)

HEADER = """\
# Converted from RADICAL-Pilot ({repo}), {path} at {ref}.
# RADICAL-Pilot is MIT-licensed, Copyright (C) 2011-2023 by the RADICAL-Cybertools Team:
# see tests/rp/tutorials/LICENSE.radical.pilot. {how}
# Changed: only the import line (`import radical.pilot as rp` -> `import pilotfish.rp as rp`).
"""

HELPERS = '''
# -- IPython's magics as Python (convert.py) --------------------------------------------------
import os as _ipy_os, re as _ipy_re, subprocess as _ipy_sp


def _ipy_expand(text, ns):
    """IPython's expansion of a magic's line: {expr}, and $name(.attr) of a Python name; the
    line as it is where that fails (as IPython's var_expand)."""
    try:
        return _ipy_expand1(text, ns)
    except Exception:
        return text


def _ipy_expand1(text, ns):
    text = _ipy_re.sub(r"\\{([^{}]+)\\}", lambda m: str(eval(m.group(1), ns)), text)

    def dollar(m):
        name, *attrs = m.group(1).split(".")
        if name not in ns:
            return m.group(0)
        v = ns[name]
        for a in attrs:
            v = getattr(v, a)
        return str(v)
    return _ipy_re.sub(r"(?<![$\\\\])\\$([A-Za-z_][\\w.]*\\w|[A-Za-z_])", dollar, text)


def _ipy_system(cmd, ns):
    _ipy_sp.run(_ipy_expand(cmd, ns), shell=True, executable="/bin/bash")


def _ipy_env(assign, ns):
    key, _, value = assign.partition("=")
    _ipy_os.environ[key.strip()] = _ipy_expand(value.strip(), ns)


def _ipy_cd(path, ns):
    _ipy_os.chdir(_ipy_os.path.expanduser(_ipy_expand(path.strip(), ns)))
# ----------------------------------------------------------------------------------------------
'''


def _cell(src: str) -> tuple[str, bool]:
    """A code cell as Python; and whether it used a magic."""
    if src.startswith("%%bash"):
        body = src.split("\n", 1)[1] if "\n" in src else ""
        return f"_ipy_sp.run(['bash', '-c', {body!r}])\n", True
    out, magic = [], False
    lines = src.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        if stripped.startswith("!") or re.match(r"%(env|cd)\b", stripped):
            while line.endswith("\\") and i + 1 < len(lines):  # (a continued shell line)
                i += 1
                line = line[:-1] + "\n" + lines[i]
            stripped = line.lstrip()
            magic = True
            if stripped.startswith("!"):
                out.append(f"{indent}_ipy_system({stripped[1:].strip()!r}, globals())")
            elif stripped.startswith("%env"):
                out.append(f"{indent}_ipy_env({stripped[4:].strip()!r}, globals())")
            else:
                out.append(f"{indent}_ipy_cd({stripped[3:].strip()!r}, globals())")
        else:
            out.append(line)
        i += 1
    return "\n".join(out).rstrip() + "\n", magic


def _import(text: str) -> str:
    new, n = IMPORT.subn(r"\1import pilotfish.rp as rp", text)
    return new


def _show(git: Path, ref: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={git}", "show", f"{ref}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def _ls(git: Path, ref: str, path: str) -> list[str]:
    return subprocess.run(["git", f"--git-dir={git}", "ls-tree", "--name-only", ref, path + "/"],
                          check=True, capture_output=True, text=True).stdout.split()


def convert(git: Path) -> None:
    repo = "https://github.com/radical-cybertools/radical.pilot"
    for ref, label, out in ((V160, "v1.60.0", HERE / "tutorials_160"),
                            (CURRENT, f"commit {CURRENT[:12]} (devel, 2025-11-19)",
                             HERE / "tutorials")):
        out.mkdir(exist_ok=True)
        for path in _ls(git, ref, "docs/source/tutorials"):
            if not path.endswith(".ipynb"):
                continue
            nb = json.loads(_show(git, ref, path))
            cells, magic = [], False
            for c in nb["cells"]:
                if c["cell_type"] != "code":
                    continue
                py, m = _cell("".join(c["source"]))
                cells.append(py)
                magic |= m
            if not cells:
                continue  # (today's submission.ipynb: no code)
            if any(re.search(r"^display\(", c, re.M) for c in cells):  # (a notebook's builtin)
                cells.insert(0, "def display(*objs):  # IPython's display(), as text (convert.py)"
                                "\n    print(*objs)\n")
            head = HEADER.format(repo=repo, path=path, ref=label,
                                 how="The notebook's code cells, in order"
                                     + (", its IPython magics as Python (the _ipy_* helpers)."
                                        if magic else "."))
            text = head + (HELPERS if magic else "") + "\n" + "\n\n".join(cells)
            (out / (Path(path).stem + ".py")).write_text(_import(text))
    out = HERE / "misc"
    out.mkdir(exist_ok=True)
    for path in _ls(git, CURRENT, "examples/misc"):
        text = _show(git, CURRENT, path)
        name = Path(path).name
        if name.endswith(".py"):
            lines = text.split("\n")
            at = 1 if lines and lines[0].startswith("#!") else 0
            head = HEADER.format(repo=repo, path=path, ref=f"commit {CURRENT[:12]}",
                                 how="The script as it is.")
            text = "\n".join(lines[:at] + [head.rstrip("\n")] + lines[at:])
            text = _import(text)
        (out / name).write_text(text)
        if name.endswith((".py", ".sh")):
            (out / name).chmod(0o755)
    (HERE / "config.json").write_text(_show(git, CURRENT, "examples/config.json"))
    (HERE / "LICENSE.radical.pilot").write_text(_show(git, CURRENT, "LICENSE.md"))


if __name__ == "__main__":
    convert(Path(sys.argv[1]))
