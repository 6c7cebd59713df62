"""The checks' own rules that ruff and mypy do not enforce (`make check` runs ruff and mypy).

Every `# noqa` and `# type: ignore` in the package names why on its line: `# noqa: CODE --
why` (or `# noqa: CODE (why)`), `# type: ignore[code]  # why`. A bare one fails here, but
for the temporary list below (files others are rewriting; each owner clears its lines).
"""

from __future__ import annotations

import pathlib
import re

PKG = pathlib.Path(__file__).resolve().parents[1] / "python" / "pilotfish"

# noqa: a code list, then ` -- why`, ` - why`, ` (why)` or a later `# why`
_NOQA = re.compile(r"#\s*noqa:\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*(?P<why>.*)$")
# type: ignore[codes], then `# why`
_IGNORE = re.compile(r"#\s*type:\s*ignore(?:\[[a-z, -]+\])?(?P<why>.*)$")

PENDING: dict[str, str] = {}  # rel path: why it is not fixed here


def _reasoned(why: str) -> bool:
    why = why.strip()
    return bool(re.match(r"(--|-|\(|#)\s*\S", why))


def test_every_suppression_says_why():
    bare = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        if rel in PENDING:
            continue
        for n, line in enumerate(p.read_text().splitlines(), 1):
            for rx in (_NOQA, _IGNORE):
                m = rx.search(line)
                if m and not _reasoned(m.group("why")):
                    bare.append(f"{rel}:{n}: {line.strip()}")
            if re.search(r"#\s*noqa\s*(?!:)", line):
                bare.append(f"{rel}:{n}: blanket noqa: {line.strip()}")
    assert not bare, "suppressions that do not say why:\n" + "\n".join(bare)


def test_the_pending_list_is_live():
    for rel, why in PENDING.items():
        assert (PKG / rel).exists() and why.endswith("pending"), rel


def test_the_fast_loop_leaves_out_what_is_marked_slow():
    """`make test-fast` (README) deselects the markers of what needs Slurm, PRRTE/MPI or a
    browser, and `slow`; each is registered in pyproject.toml (a typo'd marker selects
    nothing and says nothing)."""
    root = PKG.parents[1]
    toml = (root / "pyproject.toml").read_text()
    block = toml[toml.index("\nmarkers = ["):]
    registered = set(re.findall(r'^\s*"(\w+):', block[:block.index("\n]")], re.M))
    make = (root / "Makefile").read_text()
    rule = make[make.index("\ntest-fast:"):].split("\n\n")[0]
    expr = re.search(r'-m "([^"]+)"', rule)
    assert expr, rule
    left_out = set(re.findall(r"not (\w+)", expr.group(1)))
    assert left_out == {"slurm", "prrte", "mpi", "browser", "slow"}, left_out
    assert left_out <= registered, left_out - registered
