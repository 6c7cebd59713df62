"""Errors of pilotfish.amt. Every one names the collection, the element and the method."""

from __future__ import annotations


class AmtError(RuntimeError):
    """Base class of every pilotfish.amt error."""


class UnknownHandlerError(AmtError, AttributeError):
    """A message names a method the element's class does not have."""


class IndexOutOfRangeError(AmtError, IndexError):
    """A message to an index outside the collection's shape."""


class MigrationError(AmtError):
    """An element could not be serialised for migration; nothing was moved."""


class CollectiveMismatchError(AmtError):
    """A collective (rebalance, phase, reduce, ...) was not entered by every rank in time,
    or ranks entered different collectives."""


class HandlerError(AmtError):
    """A handler raised; reported on every rank when the epoch that ran it ends."""

    def __init__(self, message: str, failures: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.failures = failures or []  # (rank, formatted traceback)
