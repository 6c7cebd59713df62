"""The agent's keeper (agent/keeper.py) with a stand-in agent that dies mid-spawn.

The stand-in writes the records the real agent and its Rust core write (journal spawn records;
intent / spawn / exit records in agent.exits), starts task processes with the environment marks
the launchers set, and SIGKILLs itself at chosen moments -- including the ones a real kill can
only hit by chance: a child whose spawn record was never written, alive or already a zombie."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from pilotfish._exit_log import read_exit_log
from pilotfish._journal import agent_finals, keeper_state

FAKE_AGENT = textwrap.dedent("""
    import os, signal, struct, sys, time
    from pilotfish._journal import Journal
    sandbox, side, plan = sys.argv[1], sys.argv[2], sys.argv[3]
    rec = struct.Struct("<qiid")
    log = os.open(os.path.join(sandbox, "agent.exits"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    journal = Journal(os.path.join(sandbox, "agent.journal"))
    tasks = {  # uid -> [(key, script, what the core wrote: "spawn" | "intent")]
        "A": [(1, "sleep 0.6; echo A >> %s", "spawn")],       # named by its spawn record
        "B": [(2, "echo B >> %s", "intent")],                 # a zombie nobody named
        "C": [(3, "sleep 0.6; echo C >> %s", "intent")],      # alive, named by its environment
        "D": [(4, "sleep 0.6; echo D0 >> %s", "spawn"),       # two ranks, one named each way
              (5, "sleep 0.6; echo D1 >> %s", "intent")],
    }
    if plan == "unspawned":  # one more key whose spawn was tried but made no child
        tasks["E"] = [(6, "echo E >> %s", "none")]
    journal.write([["spawn", uid, [k for k, _, _ in procs], True] for uid, procs in tasks.items()])
    for uid, procs in tasks.items():
        for rank, (key, script, wrote) in enumerate(procs):
            os.write(log, rec.pack(key, 0, -2, 0.0))
            if wrote == "none":
                continue
            env = dict(os.environ, PILOTFISH_SANDBOX=sandbox, PILOTFISH_TASK_UID=uid,
                       PILOTFISH_RANK=str(rank))
            pid = os.posix_spawn("/bin/sh", ["/bin/sh", "-c", script % side], env,
                                 setpgroup=0)
            if wrote == "spawn":
                os.write(log, rec.pack(key, pid, -1, time.time()))
            elif uid == "B":  # pids wrap: an earlier, finished task's process had B's pid
                journal.write([["spawn", "Z", [99], True], ["final", "Z", "DONE", 0, None, "", 0.0]])
                os.write(log, rec.pack(99, pid, -1, 0.0) + rec.pack(99, 0, 0, 0.0))
    time.sleep(0.3)  # B is a zombie by now
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _run_keeper(tmp_path, plan: str):
    sandbox, side = tmp_path / "pilot.0000", tmp_path / "side"
    sandbox.mkdir()
    cfg = sandbox / "agent.json"
    cfg.write_text(json.dumps({"description": {"runtime": 600}}))
    agent = [sys.executable, "-c", FAKE_AGENT, str(sandbox), str(side), plan]
    keeper = subprocess.run(
        [sys.executable, "-c", "import sys; from pilotfish.agent.keeper import Keeper; "
                               "Keeper(sys.argv[1], sys.argv[2:]).run()", str(cfg), *agent],
        capture_output=True, text=True, timeout=60)
    lines = side.read_text().split() if side.exists() else []
    return sandbox, keeper, lines


def test_keeper_adopts_named_unnamed_and_zombie_children(tmp_path):
    sandbox, keeper, lines = _run_keeper(tmp_path, "all")
    assert keeper.returncode == -9, keeper.stderr  # it ends as its agent did
    assert sorted(lines) == ["A", "B", "C", "D0", "D1"]  # each ran once, and only once
    state = keeper_state(str(sandbox))
    assert state["agent_status"] == "killed by signal 9" and state["done"]
    assert state["adopted"] == ["A", "B", "C", "D"]
    finals = agent_finals(str(sandbox))
    assert {u: f[2] for u, f in finals.items()} == {u: "DONE" for u in "ABCDZ"}
    exits, _ = read_exit_log(str(sandbox))
    assert sorted(exits) == [1, 2, 3, 4, 5, 99] and all(e[:2] == (0, 0) for e in exits.values())


def test_keeper_does_not_guess_when_zombies_and_doubts_do_not_match(tmp_path):
    """E's spawn was tried but made no child: one zombie, two keys in doubt. The keeper cannot
    know whose the zombie was, so neither B nor E gets a final (both run again on resume);
    the named ones are still adopted."""
    sandbox, keeper, lines = _run_keeper(tmp_path, "unspawned")
    assert keeper.returncode == -9, keeper.stderr
    state = keeper_state(str(sandbox))
    assert state["adopted"] == ["A", "C", "D"]
    finals = agent_finals(str(sandbox))
    assert sorted(finals) == ["A", "C", "D", "Z"]


def test_agent_that_ends_cleanly_leaves_no_keeper_state(tmp_path):
    sandbox = tmp_path / "pilot.0000"
    sandbox.mkdir()
    cfg = sandbox / "agent.json"
    cfg.write_text("{}")
    t0 = time.monotonic()
    keeper = subprocess.run(
        [sys.executable, "-c", "import sys; from pilotfish.agent.keeper import Keeper; "
                               "Keeper(sys.argv[1], sys.argv[2:]).run()", str(cfg),
         "/bin/sh", "-c", "sleep 30 & exit 3"], capture_output=True, text=True, timeout=60)
    # exit 3 with a child left: adopted? no -- nothing of it is a task; it is stopped
    assert keeper.returncode == 3
    assert time.monotonic() - t0 < 20
    assert keeper_state(str(sandbox))["adopted"] == []
    keeper = subprocess.run(
        [sys.executable, "-c", "import sys; from pilotfish.agent.keeper import Keeper; "
                               "Keeper(sys.argv[1], sys.argv[2:]).run()", str(cfg),
         "/bin/true"], capture_output=True, text=True, timeout=60)
    assert keeper.returncode == 0
    assert not os.path.exists(sandbox / "keeper.json.tmp")


def test_a_done_keepers_tasks_are_still_followed_live_but_run_again_on_resume(tmp_path):
    """A pilot noticed dead only after its keeper finished: the live client still learns the
    kept tasks' ends from keeper.journal (live_only=False); a resume asks only live keepers
    (a kept task without a final runs again)."""
    from pilotfish._journal import keeper_adopted

    sandbox, keeper, lines = _run_keeper(tmp_path, "all")
    assert keeper_state(str(sandbox))["done"]
    assert keeper_adopted(str(sandbox), live_only=False) == {"A", "B", "C", "D"}
    assert keeper_adopted(str(sandbox)) == set()
