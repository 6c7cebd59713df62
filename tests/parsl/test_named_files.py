"""The files tests/parsl names exist (issue 41, papercut 13: pilotfish_parsl_config.py
named a file test_parsl_suite.py there, which never existed)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_files_named_in_tests_parsl_exist():
    named = {m for f in Path(__file__).parent.glob("*.py")
             for m in re.findall(r"\btests/[\w/]+\.py\b", f.read_text())}
    assert named, "the check found nothing to check"
    assert not [n for n in sorted(named) if not (REPO / n).exists()]
