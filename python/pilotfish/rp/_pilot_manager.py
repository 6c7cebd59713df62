"""RP's PilotManager over pilotfish's: submit_pilots (RP's descriptions translated,
_describe.py; their input_staging at submit), wait/cancel, pilot callbacks in RP's states,
exit_on_error (a FAILED pilot interrupts the main thread).
"""

from __future__ import annotations

import logging
import os
from typing import Callable

from .. import client as _pf
from .. import states as S
from . import _states as RS
from ._api import setup_task_manager
from ._callbacks import PILOT_STATE, Registered, listify, unregister, wrap_callback
from ._describe import PilotDescription
from ._layout import download
from ._pilot import Pilot
from ._session import Session, add_pilot_manager, pf_session

log = logging.getLogger("pilotfish.rp")


class PilotManager:
    def __init__(self, session: Session, uid: str | None = None, cfg: dict | None = None):
        self.session = session
        self._pf = _pf.PilotManager(pf_session(session))
        self._pilots: dict[str, Pilot] = {}
        self._registered: list[Registered] = []
        self.uid = uid or "pmgr.0000"
        add_pilot_manager(session, self, self._download)
        self._pf.register_callback(self._on_state)

    def _on_state(self, p, state: str) -> None:
        """RP's exit_on_error (default True): a pilot that FAILS interrupts the main thread
        (KeyboardInterrupt there), which RP scripts catch to close their session."""
        pilot = self._pilots.get(p.uid)
        if state == S.FAILED and pilot is not None and pilot.description.get("exit_on_error", True):
            log.error(
                "pilot %s failed (%s): interrupting the main thread (exit_on_error)",
                p.uid,
                p.reason,
            )
            import _thread

            _thread.interrupt_main()

    def submit_pilots(self, descriptions):
        descs, many = listify(descriptions)
        rp_descs = [d if isinstance(d, PilotDescription) else PilotDescription(d) for d in descs]
        pf_descs = [d.to_pf(i) for i, d in enumerate(rp_descs)]  # all checked first
        pilots = [
            Pilot(self, p, d, setup_task_manager)
            for p, d in zip(self._pf.submit_pilots(pf_descs), rp_descs)
        ]
        for p in pilots:  # RP stages these before the pilot's first task: here, at submit
            if p.description.get("input_staging"):
                p.stage_in(p.description["input_staging"])
        for p in pilots:
            self._pilots[p.uid] = p
        return pilots if many else pilots[0]

    def get_pilots(self, uids=None):
        if uids is None:
            return list(self._pilots.values())
        sel, many = listify(uids)
        out = [self._pilots[u] for u in sel]
        return out if many else out[0]

    def list_pilots(self) -> list[str]:
        return list(self._pilots)

    def wait_pilots(self, uids=None, state=None, timeout: float | None = None):
        sel, many = listify(uids if uids is not None else list(self._pilots))
        pf_states = None if state is None else RS.pilot_states_to_pf(state)
        self._pf.wait_pilots(sel, state=pf_states, timeout=timeout)
        out = [self._pilots[u].state for u in sel]
        return out if many or uids is None else out[0]

    def cancel_pilots(self, uids=None, _timeout=None) -> None:
        self._pf.cancel_pilots(uids)

    kill_pilots = cancel_pilots  # (RP 0.x-1.x's name)

    def register_callback(self, cb: Callable, cb_data=None, metric: str = PILOT_STATE) -> None:
        """cb(pilot, state) -- cb(pilot, state, cb_data) when cb_data is given -- on every
        pilot state change."""
        if metric != PILOT_STATE:
            raise ValueError(f"callback metric {metric!r}: only rp.PILOT_STATE exists here")
        f = wrap_callback(cb, cb_data)
        reg = Registered(cb, PILOT_STATE, None)

        def relay(p, state: str) -> None:
            if reg.on:
                f(self._pilots.get(p.uid) or p, RS.PILOT_STATE[state])

        reg.relay = relay
        self._registered.append(reg)
        self._pf.register_callback(relay)

    def unregister_callback(self, cb: Callable | None = None, metrics=None) -> None:
        """RP's: the callbacks registered with cb (None: all of them), of these metrics."""
        unregister(self._registered, self._pf.unregister_callback, cb, metrics, None)

    def close(self, terminate: bool = True) -> None:
        pass  # the session closes the pilots

    def _download(self, into: str) -> None:
        """session.close(download=True): each pilot's own files into <into>/<pilot uid>."""
        for p in self._pilots.values():
            download(p._pf.sandbox, os.path.join(into, p.uid))
