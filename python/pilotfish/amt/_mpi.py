"""MPI for amt: pilotfish._mpi, with amt's error for a world of the wrong size."""

from __future__ import annotations

from .._mpi import expected_world_size, mpi, select_libmpi  # noqa: F401 -- re-exported: amt reads them here
from .._mpi import check_world as _check_world
from ._errors import AmtError


def check_world(MPI) -> None:
    _check_world(MPI, AmtError)
