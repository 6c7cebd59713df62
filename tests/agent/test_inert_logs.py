"""What a task or a peer writes cannot flood or forge the agent's log, nor drive a terminal
(issue 47, rows 5 and 7; _inert.py). Each test failed before the fix:

- a rank of a real local pilot sending unknown PMI-1 commands of 60 KB for 10 s grew agent.log
  by ~1.8 GB (each logged at full length, no rate limit); now <= 1 MB, with a summary of what
  was dropped;
- an MPI_Abort message (a PMI-2 frame) holding a newline, CR, ESC, BEL and DEL: the task's
  reason kept them and agent.log showed a forged "WARNING pilotfish.agent: FAKE" line; now
  the reason and the log carry them escaped;
- `pilotfish logs` passed a task's OSC (terminal title), BEL and C1 bytes to the terminal;
  now every control character but newline and tab is escaped.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import pilotfish as pf
from pilotfish.cli import main

NOISE = str(Path(__file__).resolve().parent / "pmi_progs" / "pmi_noise.py")
FLOOD_S = 10
LOG_BOUND = 1024 * 1024  # what the 10 s flood may add to agent.log, bytes
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # (newline and tab may end/indent lines)


def _pilot(s, cores: int = 2):
    pilot = pf.PilotManager(s).submit_pilots(
        pf.PilotDescription(resource="local", cores_per_node=cores, runtime="5m")
    )
    tmgr = pf.TaskManager(s)
    tmgr.add_pilots(pilot)
    assert pilot.wait(pf.ACTIVE, timeout=60) == pf.ACTIVE, pilot.reason
    return pilot, tmgr


@pytest.mark.slow
def test_a_rank_flooding_unknown_pmi_commands_cannot_flood_the_log(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = _pilot(s)
        log = Path(pilot.sandbox, "agent.log")
        before = log.stat().st_size
        t = tmgr.submit_tasks(
            pf.TaskDescription(
                executable=sys.executable,
                arguments=[NOISE, "unknown", str(FLOOD_S)],
                ranks=2,
                launcher="pmi",
            )
        )
        assert t.wait(timeout=FLOOD_S + 60) == pf.DONE, (t.state, t.reason, t.stderr)
        sent = sum(int(n) for n in t.stdout.split())
    grown = log.stat().st_size - before  # (the agent has ended: its last summaries are in)
    text = log.read_text(errors="replace")
    assert sent > 200, t.stdout  # (the flood was real: each command logged whole is 60 KB)
    assert grown <= LOG_BOUND, (grown, sent)
    print(f"agent.log +{grown} bytes for {sent} unknown commands of 60 KB in {FLOOD_S} s")
    # what was dropped is said, with how many
    dropped = [int(n) for n in re.findall(r"(\d+) lines like .*unknown PMI-1 command", text)]
    assert dropped and sum(dropped) > sent // 2, text[-3000:]


@pytest.mark.slow
def test_an_abort_message_cannot_forge_a_log_line_or_keep_control_bytes(tmp_path):
    with pf.Session(path=tmp_path / "s") as s:
        pilot, tmgr = _pilot(s)
        t = tmgr.submit_tasks(
            pf.TaskDescription(
                executable=sys.executable, arguments=[NOISE, "abort", "30"], ranks=2, launcher="pmi"
            )
        )
        assert t.wait(timeout=60) == pf.FAILED, (t.state, t.reason)
        pilot.cancel()
    assert "MPI_Abort" in t.reason, t.reason
    assert not CONTROL.search(t.reason) and "\n" not in t.reason, repr(t.reason)
    # (escaped, not lost: what the rank said can still be read)
    assert "x\\n2024-01-01" in t.reason and "\\x1b]0;owned\\x07" in t.reason, t.reason
    raw = Path(pilot.sandbox, "agent.log").read_bytes()
    assert b"MPI_Abort" in raw, raw[-2000:]
    lines = raw.decode(errors="replace").splitlines()
    assert not [ln for ln in lines if "FAKE: node n9 lost" in ln and ln.startswith("2024-")], lines
    assert not CONTROL.search(raw.decode(errors="replace")), raw[-2000:]


PRINTS = (
    "import sys; sys.stdout.write('title \\x1b]0;owned\\x07 red \\x1b[31mX\\x1b[0m c1 \\x9b2J "
    "bell \\x07 cr \\r del \\x7f\\nline two\\tend\\n'); "
    "sys.stderr.write('err \\x1b]2;x\\x1b\\\\ \\x1bc\\n'); sys.exit(3)"
)


def test_pilotfish_logs_passes_no_terminal_controls(tmp_path):
    with pf.Session(path=str(tmp_path / "s")) as s:
        pilot, tmgr = _pilot(s, cores=1)
        t = tmgr.submit_tasks(
            pf.TaskDescription(executable=sys.executable, arguments=["-c", PRINTS], name="noisy")
        )
        assert t.wait(timeout=60) == pf.FAILED
        assert "\x1b" in t.stdout  # (the task's own output is kept as it printed it)
    # color=True: as to a terminal (click strips CSI, and only CSI, when it is not one)
    r = CliRunner().invoke(main, ["logs", str(tmp_path / "s")], color=True, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "task.000000 (noisy): FAILED" in out and "line two\tend\n" in out, out
    assert not CONTROL.search(out), repr(out)
    assert "\\x1b]0;owned\\x07" in out and "\\x9b2J" in out, repr(out)  # (escaped, shown)
