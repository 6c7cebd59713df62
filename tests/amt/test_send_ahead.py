"""Send before you compute (issue 31), under real MPI (2 ranks): what the main program and
each handler post for another rank has been sent when the next local handler that is new or
known to be long starts, a departing element's state before its on_migrated_out() runs, while
known-short handlers in a row still share one batch (progs/sendahead.py; counts of pending and
sent batches, no timing); a forwarded message's location hint is posted and sent before its
handler runs (progs/sendahead_hint.py, 3 ranks: the hint counter inside the handler). Each
program fails on the tree before issue 31."""

from __future__ import annotations

import pytest
from amt_helpers import mpirun

pytestmark = pytest.mark.mpi


def test_messages_for_other_ranks_leave_before_local_work():
    r = mpirun("sendahead.py", 2)
    for what in ("main", "handler", "handler-new", "hook", "batching", "config"):
        assert r.out.count(f"OK {what} rank") == 2, (what, r)


def test_forwarding_hint_leaves_before_its_handler():
    # 3 ranks: the sender (2) is neither the element's home (0) nor its host (1)
    r = mpirun("sendahead_hint.py", 3)
    for what in ("moved", "hint", "direct"):
        assert r.out.count(f"OK {what} rank") == 3, (what, r)
