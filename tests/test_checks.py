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
