"""A live progress display of a TaskManager: done / running / failed, rate and ETA."""

from __future__ import annotations

import time

from .. import states as S
from ._ports import TaskCounts


def wait_with_progress(
    tmgr: TaskCounts,
    timeout: float | None = None,
    refresh: float = 0.2,
    console=None,
    transient: bool = False,
) -> list[str]:
    """Like tmgr.wait_tasks(), drawing a rich progress bar while it waits.

    Reads the manager's per-state counters (no per-task work), so it costs nothing per task.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    counts = tmgr.counts
    total = len(tmgr)
    columns = [
        TextColumn("[bold]tasks"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(
            "[green]{task.fields[done]} done[/] [red]{task.fields[failed]} failed[/] "
            "{task.fields[canceled]}[yellow]{task.fields[running]} running[/] "
            "{task.fields[rate]:.0f}/s"
        ),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    ]
    deadline = None if timeout is None else time.monotonic() + timeout
    t0 = time.monotonic()
    with Progress(*columns, console=console, transient=transient) as bar:
        job = bar.add_task("tasks", total=total, done=0, failed=0, canceled="", running=0, rate=0.0)
        while True:
            final = counts[S.DONE] + counts[S.FAILED] + counts[S.CANCELED]
            elapsed = max(1e-9, time.monotonic() - t0)
            bar.update(
                job,
                completed=final,
                done=counts[S.DONE],
                failed=counts[S.FAILED],  # (canceled: not failed, said once some are)
                canceled=f"[magenta]{counts[S.CANCELED]} canceled[/] "
                if counts[S.CANCELED]
                else "",
                running=counts[S.EXECUTING],
                rate=final / elapsed,
            )
            if final >= total:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            tmgr.wait_tasks(timeout=refresh if left is None else min(refresh, left))
    return [t.state for t in tmgr.get_tasks()]
