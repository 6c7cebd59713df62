"""Send before you compute (issue 31), under real MPI on 2 ranks: what the main program and
each handler post for another rank has been sent when the next local handler that is new or
known to be long starts, a departing element's state before its on_migrated_out() runs, while
known-short handlers in a row still share one batch (progs/sendahead.py; counts of pending and
sent batches, no timing)."""

from __future__ import annotations

import pytest
from amt_helpers import mpirun

pytestmark = pytest.mark.mpi


def test_messages_for_other_ranks_leave_before_local_work():
    r = mpirun("sendahead.py", 2)
    for what in ("main", "handler", "handler-new", "hook", "batching", "config"):
        assert r.out.count(f"OK {what} rank") == 2, (what, r)
