"""Session: one run of a user's program -- its directory, its events, its managers.

The session directory is the user's alone: made 0700 by an exclusive mkdir (or an existing
one of the user's that no one else can write to; one another user owns or can write to is
refused), every file in it opened without following links and created 0600 (_util's
private files). One live session per directory: `session.lock` is flock()ed for the
session's life (a killed session's lock goes with it, so a resume is never blocked by a
dead holder), and a new session claims the directory by creating `session.json`
exclusively. Failures of the file system (full, read-only, ...) are SessionErrors naming the
path and the cause; close() reports them and does not raise.

The session owns the one way in from the agents: bridge (_bridge.Bridge: the socket, the IO
thread) -> router (_router.Router) -> the task registry (_registry.TaskRegistry: Updates), the
pilots' listeners (PilotManager: Hello, Bye, ...) and the service groups (GroupView, ...).
That machinery is one object, `session.plane` (plane.Plane), which the managers use. A
resumed session reads its journal once (resume.Resumed, `session.resumed`).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from .. import _events as E
from .. import _json, _wire
from .._version import __version__
from .._errors import PilotfishError, SessionError
from .._events import EventWriter, TaskRecord
from .._journal import Journal
from .._util import hostname, open_private, private_dir, read_private, write_private
from ._bridge import Bridge
from ._registry import TaskRegistry
from ._router import Router
from .plane import Plane
from .resume import Resumed

log = logging.getLogger("pilotfish.client")

DEFAULT_SESSIONS_DIR = "pilotfish-sessions"


class Session:
    """Owns the session directory (`path`), the event log and the ZeroMQ endpoint.

    Use as a context manager: leaving it shuts pilots down and writes the task records.

    path      the session directory (default: $PILOTFISH_SESSIONS or ./pilotfish-sessions,
              plus the session uid)
    profile   record every state change as an event (cheap; on by default)
    bind      "ipc" (a unix socket: agents on this host, or sharing its filesystem and
              network namespace-independent) or "tcp" (agents on other hosts)
    interface with bind="tcp": the IP address or interface name agents reach (default:
              $PILOTFISH_INTERFACE, else the address of this host's name; never all of them)
    secure    encrypt and authenticate every agent connection (ZeroMQ CURVE; default True)
    resume    continue the session in `path`: re-attach to its pilots that are still alive
              (or start new ones), and re-run only the tasks that did not finish -- submit
              the same pilots and tasks again, in the same order, and pilotfish matches them
              against the journal
    heartbeat_s, agent_timeout, client_timeout
              agents and client tell each other they are alive every heartbeat_s; a pilot
              whose agent is silent for agent_timeout FAILS; an agent whose client is silent
              for client_timeout drains and ends its batch job (defaults 5, 60, 60 s)
    journal   keep the journal (descriptions and final states, fsynced about once a second)

    Its managers use `plane` (plane.Plane: the bridge, the router, the task registry, ...);
    `router` is the plane's router; `resumed` is what a resumed session's journal says.
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        uid: str | None = None,
        profile: bool = True,
        bind: str = "ipc",
        *,
        interface: str | None = None,
        secure: bool = True,
        resume: bool = False,
        heartbeat_s: float = _wire.HEARTBEAT_S,
        agent_timeout: float = _wire.AGENT_TIMEOUT_S,
        client_timeout: float = _wire.CLIENT_TIMEOUT_S,
        journal: bool = True,
    ):
        self._lock_fd = -1
        self._closed = True  # (until it is open)
        self._lock = threading.Lock()
        fresh_path = path is None and uid is None  # ours to name again if it is taken
        if path is None:
            if resume:
                raise PilotfishError("resume=True needs the path of the session to resume")
            base = os.environ.get("PILOTFISH_SESSIONS", DEFAULT_SESSIONS_DIR)
            if not base:
                raise SessionError(
                    "$PILOTFISH_SESSIONS is set but empty: set it to the "
                    "directory sessions go in, or unset it (./pilotfish-sessions)"
                )
            uid = uid or new_session_uid()
            path = os.path.join(base, uid)
        elif not os.fspath(path):
            raise SessionError(
                "Session(path=''): an empty path names no directory (it would "
                "be the current one); give the session directory, or leave "
                "path out for a new one under $PILOTFISH_SESSIONS or "
                "./pilotfish-sessions"
            )
        self.path = os.path.abspath(os.fspath(path))
        meta_path = os.path.join(self.path, "session.json")
        if resume and not os.path.lexists(meta_path):
            raise PilotfishError(f"nothing to resume: {meta_path} does not exist")
        with _os_errors("make the session directory", self.path):
            made = private_dir(self.path)
            while fresh_path and not made:  # a name someone took: another, never theirs
                uid = new_session_uid()
                self.path = os.path.join(os.path.dirname(self.path), uid)
                meta_path = os.path.join(self.path, "session.json")
                made = private_dir(self.path)
        claimed = False
        try:
            self._lock_fd = _lock(self.path)
            previous = _read_meta(meta_path)
            if previous is not None and not resume:
                raise PilotfishError(
                    f"{self.path} already holds session {previous.get('uid')}: pass "
                    f"resume=True to continue it (nothing finished is run again), or use "
                    f"another path"
                )
            if previous is None and resume:
                raise PilotfishError(f"nothing to resume: {meta_path} does not exist")
            self.uid = previous["uid"] if previous else (uid or new_session_uid())
            self.created = previous["created"] if previous else time.time()
            if previous is None:
                claimed = _claim(meta_path, self.uid, self.created)
            self.profile = profile
            self.heartbeat_s = float(heartbeat_s)
            self.agent_timeout = float(agent_timeout)
            self.client_timeout = float(client_timeout)
            self._resume = Resumed.load(self.path) if previous else None
            keys = _session_keys(self.path) if secure else None
            self.events = _SessionEvents(os.path.join(self.path, "client.events"), enabled=profile)
            self.events.record("session", E.SESSION_RESUME if previous else E.SESSION_START)
            registry = TaskRegistry(self._resume)
            self.tasks: Mapping[str, Any] = registry.view
            """Every task (task.Task) of the session, by uid (read-only)."""
            # what agents send: bridge -> router -> the registry, the pilots, the groups
            self.router = Router(registry)
            bridge = Bridge(
                self.path,
                self.uid,
                bind=bind,
                keys=keys,
                interface=interface,
                address=previous.get("address") if previous else None,
                tcp_address=previous.get("tcp_address") if previous else None,
                on_refused=lambda what: self.events.record("session", E.REFUSED, what),
                heartbeat_s=self.heartbeat_s,
                pilot_keys=self._resume.pilot_keys() if self._resume else None,
                deliver=self.router.dispatch,
            )
            try:
                with _os_errors("write", meta_path):
                    write_private(
                        meta_path,
                        json.dumps(
                            {
                                "uid": self.uid,
                                "created": self.created,
                                "version": __version__,
                                "host": hostname(),
                                "pid": os.getpid(),
                                "address": bridge.address,
                                "secure": keys is not None,
                            },
                            indent=1,
                        ).encode(),
                    )
                journal_path = os.path.join(self.path, "journal")
                with _os_errors("open the journal", journal_path):
                    self.journal = Journal(
                        journal_path, enabled=journal, repair=previous is not None
                    )
            except BaseException:
                bridge.close()
                raise
        except BaseException:
            self._abandon(made, claimed)
            raise
        r = self._resume
        self.plane = Plane(
            self.uid,
            bridge,
            self.router,
            registry,
            self.journal,
            _session_error,
            next_task=r.next_task if r else 0,
            next_pilot=r.next_pilot if r else 0,
        )
        """The session's machinery (plane.Plane), which its managers use."""
        self._closed = False

    def _abandon(self, made: bool, claimed: bool) -> None:
        """A session that failed to open leaves the directory as it found it: one it made is
        removed, a session.json it claimed is taken back; its lock is let go. (Only once it
        held the lock: else the directory is another session's, which locked it first.)"""
        events = getattr(self, "events", None)
        if events is not None:
            events.close()
        if self._lock_fd < 0:
            return
        if made:
            shutil.rmtree(self.path, ignore_errors=True)
        elif claimed:
            try:
                os.unlink(os.path.join(self.path, "session.json"))
            except OSError:
                pass
        _unlock(self._lock_fd)
        self._lock_fd = -1

    @property
    def address(self) -> str:
        """Where agents connect."""
        return self.plane.bridge.address

    def reachable_address(self) -> str:
        """Where agents on other hosts connect: TCP on one interface (bound on first need,
        kept in session.json for a resume)."""
        bridge = self.plane.bridge
        first = bridge.tcp_address is None
        address = bridge.reachable_address()
        if first and address != bridge.address:
            meta_path = os.path.join(self.path, "session.json")
            meta = _read_meta(meta_path) or {}
            meta["tcp_address"] = address
            with _os_errors("write", meta_path):
                write_private(meta_path, json.dumps(meta, indent=1).encode())
        return address

    @property
    def resumed(self) -> "Resumed | None":
        """What the journal of the session this one resumes says (its managers match what
        is submitted again with it), or None for a new session."""
        return self._resume

    def close(self, terminate: bool = True) -> None:
        """Shut the pilots down (canceling what still runs), write task records, stop IO.

        Never raises for the file system (a full disk, a read-only one): what cannot be
        written is logged as an error, naming the file, and the rest of close() goes on."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            plane = self.plane
            plane.closed = True
        try:
            for close_tasks in plane.task_closers:
                close_tasks()
            for close_pilots in plane.pilot_closers:
                self._quietly("stop the pilots of", self.path, close_pilots, terminate=terminate)
            self._quietly("stop the adopted tasks of", self.path, plane.adopter.close, terminate)
            self.events.record("session", E.SESSION_STOP)
            self._write_task_records()
            plane.bridge.close()
            self._quietly("close the journal", self.journal.path, self.journal.close)
            self._quietly("write the events to", self.events.path, self.events.close)
        finally:
            if self._lock_fd >= 0:  # the directory is free for a resume
                _unlock(self._lock_fd)
                self._lock_fd = -1

    def _quietly(self, what: str, path: str | None, fn, *args, **kwargs) -> None:
        try:
            fn(*args, **kwargs)
        except OSError as e:
            log.error("session %s: cannot %s %s: %s", self.uid, what, path, e.strerror or e)

    def _write_task_records(self) -> None:
        records = []
        for t in self.tasks.values():
            d = t.description
            records.append(
                TaskRecord(
                    t.uid,
                    d.name,
                    t.pilot,
                    d.ranks,
                    d.cores_per_rank,
                    d.gpus_per_rank,
                    t.state,
                    t.exit_code,
                    [s.node_index for s in t.slots] if t.slots else [],
                )
            )
        path = os.path.join(self.path, "tasks.msgpack")
        try:  # (read by _events.read_task_records)
            write_private(path, _encode_records(records))
        except Exception as e:  # noqa: BLE001 -- never lose the rest of close() to one record
            log.error(
                "session %s: cannot write the task records %s: %s",
                self.uid,
                path,
                getattr(e, "strerror", None) or e,
            )

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.uid!r}, path={self.path!r})"


_encode_records = msgspec.msgpack.Encoder().encode


def new_session_uid(prefix: str = "pf") -> str:
    """A session uid: 'pf.20250131.142502.123.9f86d081884c' -- the local time to the
    millisecond (readable; uids sort by time) and 48 random bits (unique across processes,
    hosts and containers whose pids are alike)."""
    t = time.time()
    return (
        time.strftime(f"{prefix}.%Y%m%d.%H%M%S.", time.localtime(t))
        + f"{int(t * 1000) % 1000:03d}.{secrets.token_hex(6)}"
    )


class _os_errors:
    """with _os_errors(what, path): an OSError inside becomes a SessionError naming the path
    and the cause (a SessionError passes as it is)."""

    def __init__(self, what: str, path: str):
        self.what, self.path = what, path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, e, tb) -> Literal[False]:
        if e is not None and isinstance(e, OSError) and not isinstance(e, SessionError):
            raise _session_error(e, self.what, self.path) from e
        return False


_ADVICE = {
    errno.ENOSPC: "the disk is full: free space there, or use another directory",
    errno.EDQUOT: "your disk quota is used up: free space there, or use another directory",
    errno.EROFS: "the file system is read-only: use a directory on a writable one "
    "($PILOTFISH_SESSIONS or path=)",
    errno.EACCES: "you may not write there: use a directory of your own ($PILOTFISH_SESSIONS "
    "or path=)",
}


def _session_error(e: OSError, what: str, path: str) -> SessionError:
    where = e.filename if isinstance(e.filename, str) and e.filename != path else None
    text = f"cannot {what} {path}" + (f" ({where})" if where else "") + f": {e.strerror or e}"
    advice = _ADVICE.get(e.errno)  # type: ignore[arg-type]  # errno: None reads as no advice
    return SessionError(text + (f" -- {advice}" if advice else ""), path, e.errno)


_LOCK_FDS: set[int] = set()  # the session.lock descriptors of this process's live sessions


def _drop_locks_in_child() -> None:
    """A forked child does not hold its parent's sessions open: its copies of their lock
    descriptors are closed (the lock stays with the parent, and goes when the parent's does)."""
    for fd in list(_LOCK_FDS):
        try:
            os.close(fd)
        except OSError:
            pass
    _LOCK_FDS.clear()


os.register_at_fork(after_in_child=_drop_locks_in_child)


def _unlock(fd: int) -> None:
    """Let the directory go now: LOCK_UN first -- a child forked a moment ago shares the
    lock until its after-fork hook closes its copy, which under load may be later than the
    next open of this directory (a close alone left it locked: a race seen in the suite)."""
    _LOCK_FDS.discard(fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        pass
    os.close(fd)


def _lock(path: str) -> int:
    """flock() `path`/session.lock for this session's life: the descriptor. Another live
    session holding it is refused (SessionError naming its pid and host); a file system
    without locks is let through with a warning."""
    lock_path = os.path.join(path, "session.lock")
    with _os_errors("lock", lock_path):
        fd = open_private(lock_path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise SessionError(
                f"{path} is in use by a live session (pid {holder}): two sessions never "
                f"share a directory; close that one (or wait for it to end), or use another "
                f"path",
                path,
                errno.EBUSY,
            ) from None
        except OSError as e:
            if e.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise
            log.warning(
                "cannot lock %s (%s): this file system has no flock(); two sessions "
                "resuming this directory at once would not be told apart",
                lock_path,
                e.strerror,
            )
        with _os_errors("write", lock_path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()} on {hostname()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    _LOCK_FDS.add(fd)
    return fd


def _read_meta(meta_path: str) -> dict | None:
    """The session.json of a session that was here, or None."""
    try:
        with _os_errors("read", meta_path):
            data = read_private(meta_path)
    except SessionError as e:
        if e.errno == errno.ENOENT:
            return None
        raise
    try:
        meta = _json.loads(data)
    except ValueError as e:
        meta = e
    if (
        not isinstance(meta, dict)
        or not isinstance(meta.get("uid"), str)
        or not isinstance(meta.get("created"), (int, float))
    ):
        raise SessionError(
            f"{meta_path} is not a session's description (a JSON object with "
            f"its uid and time); was this directory made by pilotfish? Use "
            f"another path",
            meta_path,
        )
    return meta


def _claim(meta_path: str, uid: str, created: float) -> bool:
    """Create session.json exclusively: of two new sessions on one path, one wins (also where
    flock does not work). Its address is written once the session is bound."""
    with _os_errors("write", meta_path):
        try:
            fd = open_private(meta_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            raise SessionError(
                f"{os.path.dirname(meta_path)} was just taken by another session; use another path",
                meta_path,
                errno.EEXIST,
            ) from None
        try:
            try:
                os.write(
                    fd,
                    json.dumps(
                        {
                            "uid": uid,
                            "created": created,
                            "version": __version__,
                            "host": hostname(),
                            "pid": os.getpid(),
                        }
                    ).encode(),
                )
            finally:
                os.close(fd)
        except BaseException:  # (a full disk) no half-written claim left behind
            os.unlink(meta_path)
            raise
    return True


class _SessionEvents(EventWriter):
    """The client's event log: client.events made 0600 without following a link, and a full
    disk stops the recording (logged once) instead of failing what recorded the event."""

    def __init__(self, path: str, enabled: bool = True):
        if enabled:
            with _os_errors("open the event log", path):
                os.close(open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
            # EventWriter opens it again by name: in a directory only we can write, the same
            # file
        super().__init__(path, enabled=enabled)

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as e:
            self.enabled = False  # events are a profile: the run goes on without them
            log.error(
                "cannot write the session's events to %s: %s; no more events are recorded",
                self.path,
                e.strerror or e,
            )

    def close(self) -> None:
        try:
            super().close()
        except OSError as e:
            log.error(
                "cannot write the session's last events to %s: %s", self.path, e.strerror or e
            )


def _session_keys(path: str) -> tuple[bytes, bytes]:
    """The session's CURVE key pair, made once and kept 0600 in the session directory (a
    resumed session must present the same public key to the agents it re-attaches to)."""
    import zmq

    key_path = os.path.join(path, "session.key")
    try:
        with _os_errors("read", key_path):
            data = read_private(key_path)
    except SessionError as e:
        if e.errno != errno.ENOENT:
            raise
    else:
        try:
            k = _json.loads(data)
            return k["public"].encode(), k["secret"].encode()
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SessionError(
                f"{key_path} is not a session key (JSON with its public and "
                f"secret key); use another path",
                key_path,
            ) from None
    public, secret = zmq.curve_keypair()
    with _os_errors("write", key_path):
        write_private(
            key_path, json.dumps({"public": public.decode(), "secret": secret.decode()}).encode()
        )
    return public, secret
