"""RP's Session over pilotfish's: its directory, RP's client.log, RP's task links (_layout),
and what its managers ask of its close.

Its managers (_pilot_manager.py, _api.py's TaskManager) come after it: they join it through
`add_pilot_manager` / `add_task_manager` (what each does at the close, handed in as
callables) and take what they need of it -- pilotfish's session, the linker -- through
`pf_session` and `linker`, so the session names none of their insides.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Callable

from .. import client as _pf
from ._layout import Linker

log = logging.getLogger("pilotfish.rp")


class Session:
    """rp.Session(uid=None, cfg=None, ...): a pilotfish session in ./pilotfish-sessions/<uid>
    (or $PILOTFISH_SESSIONS). `close(download=True)` gathers every pilot's logs and events
    into the session directory."""

    def __init__(
        self,
        proxy_url: str | None = None,
        uid: str | None = None,
        cfg: dict | None = None,
        _primary: bool = True,
        **kwargs: Any,
    ):
        path = kwargs.pop("path", None)
        kwargs.pop("cfg_file", None)
        if kwargs:
            raise TypeError(f"rp.Session: unknown arguments {sorted(kwargs)}")
        self._pf = _pf.Session(path=path, uid=uid)
        self.uid = self._pf.uid
        self.path = self._pf.path
        self.cfg = dict(cfg or {})
        self._pmgrs: list = []  # its rp.PilotManagers
        # what its managers do at its close (add_pilot_manager, add_task_manager), in order
        self._closing: list[Callable[[], None]] = []  # callbacks off, early tasks canceled
        self._closed: list[Callable[[], None]] = []  # <uid>.err of tasks failed at launch
        self._profiles: list[Callable[[str], None]] = []  # RADICAL_PROFILE's, under a root
        self._downloads: list[Callable[[str], None]] = []  # the pilots' files, into a dir
        self._log = _ClientLog(self.path)
        self._linker = Linker()  # RP's <pilot sandbox>/<uid> links

    def close(
        self, download: bool = False, cleanup: bool | None = None, terminate: bool = True
    ) -> None:
        # RP closes its TaskManagers first: no task callback fires for what the close itself
        # cancels (scripts that stop on a CANCELED task would stop on their own close)
        for closing in self._closing:
            closing()
        try:
            self._pf.close(terminate=terminate)
            self._linker.close()
        finally:
            self._log.close()
        for closed in self._closed:
            closed()
        if os.environ.get("RADICAL_PROFILE", "").lower() in ("true", "yes", "1"):
            # RP's per-task profiles where RP's local sandbox puts them (_task.write_profile)
            root = os.path.join(os.path.expanduser("~"), "radical.pilot.sandbox", self.uid)
            for profiles in self._profiles:
                profiles(root)
        if download:
            for pilots_files in self._downloads:
                pilots_files(self.path)

    def get_pilot_managers(self):
        return list(self._pmgrs)

    def get_resource_config(self, resource: str, schema: str | None = None):
        """RP's: the resource's config (rp.utils.get_resource_config), with that access
        schema's endpoints at the top when a schema is given."""
        from ._resources import get_resource_config

        return get_resource_config(resource, schema)

    def list_resources(self) -> list[str]:
        """RP's: the resource labels known (pilotfish's table, the user's RP site files)."""
        from ._resources import list_resources

        return list_resources()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _ClientLog:
    """RP's client-side log in the session's directory (<client sandbox>/<sid>/client.log:
    `grep ERROR *log` there finds what went wrong): pilotfish's own log records, from the
    level $RADICAL_LOG_LVL names (RP's switch; default WARNING), until the session closes.
    Where nothing else handles pilotfish's records (Python's last resort would print its
    warnings on stderr), they still reach stderr from WARNING on, as before."""

    def __init__(self, path: str):
        level = logging.getLevelName(os.environ.get("RADICAL_LOG_LVL", "WARNING").upper())
        if not isinstance(level, int):
            level = logging.WARNING
        self.logger = logging.getLogger("pilotfish")
        self.level = self.logger.level  # (given back at close)
        self.handlers: list[logging.Handler] = []
        name = os.path.join(path, "client.log")
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))  # private
            file = logging.FileHandler(name)
        except OSError as e:
            log.warning("no client.log in %s: %s", path, e)
            return
        file.setLevel(level)
        file.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s %(threadName)s: %(message)s")
        )
        if not self.logger.hasHandlers():
            console = logging.StreamHandler()  # (as logging.lastResort: stderr, WARNING)
            console.setLevel(logging.WARNING)
            self.handlers.append(console)
        self.handlers.append(file)
        if self.logger.getEffectiveLevel() > level:
            self.logger.setLevel(level)
        for h in self.handlers:
            self.logger.addHandler(h)

    def close(self) -> None:
        for h in self.handlers:
            self.logger.removeHandler(h)
            h.close()
        if self.handlers:
            self.logger.setLevel(self.level)
        self.handlers = []


def add_pilot_manager(session: Session, pmgr: Any, download: Callable[[str], None]) -> None:
    """An rp.PilotManager of the session (get_pilot_managers); `download(into)` brings its
    pilots' files into the session directory at close(download=True)."""
    session._pmgrs.append(pmgr)
    session._downloads.append(download)


def add_task_manager(
    session: Session,
    closing: Callable[[], None],
    closed: Callable[[], None],
    profiles: Callable[[str], None],
) -> None:
    """An rp.TaskManager of the session: at its close, `closing()` before pilotfish's session
    closes (RP closes its TaskManagers first), `closed()` after it, `profiles(root)` with
    RADICAL_PROFILE set; each manager in the order they were made."""
    session._closing.append(closing)
    session._closed.append(closed)
    session._profiles.append(profiles)


def pf_session(session: Session) -> _pf.Session:
    """The pilotfish session behind an rp.Session."""
    return session._pf


def linker(session: Session) -> Linker:
    """The session's maker of RP's task links (_layout.Linker)."""
    return session._linker
