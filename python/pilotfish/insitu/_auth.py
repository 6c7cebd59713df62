"""Who may speak to a staging server, and how each side proves it (the one place that says).

Three modes, chosen per area (StagingArea(secure=..., encrypt=...)), announced by each server
with its endpoint (info["auth"]) so that clients follow:

  "plain-auth" (the default)  every connection is authenticated in ZeroMQ's handshake (the
      PLAIN mechanism, checked by the server's ZAP handler) and nothing is encrypted: a
      client's password is HMAC(group client secret, "request", server uid), a server's to a
      peer HMAC(group member secret, "peer", its uid, the peer's uid); every reply to a
      client carries HMAC(client secret, "reply", server uid), which the client checks before
      it reads the reply. The secrets never cross a socket in the clear: the agent hands them
      out over CURVE (the client secret with the group's views, to the program and to the
      pilot's tasks; the member secret with each member's announcement answer). A password
      is bound to the server it is for, so a process that took over a dead server's port
      learns nothing it can use against another server, and cannot answer as that server.
      What crosses the wire can be read by whoever can read the network (root on a node,
      the fabric), not by another user of a node: that is the price of staging at the
      machine's speed (CURVE moves ~0.7 GB/s here, a plain socket ~2.7 GB/s).
  "curve" (encrypt=True)  every connection is CURVE: encrypted and authenticated. Each server
      makes a key pair at start and announces its public key; clients prove themselves with
      the group's client key pair, servers to one another with their own keys.
  "none" (secure=False)  anyone who reaches the port may speak (measurements only).
"""

from __future__ import annotations

import os

import hashlib
import hmac

PLAIN_AUTH, CURVE, NONE = "plain-auth", "curve", "none"
MODES = (PLAIN_AUTH, CURVE, NONE)
ENV = "PILOTFISH_INSITU_SECURE"  # the servers' mode (set by StagingArea)
ZAP_DOMAIN = b"pilotfish-insitu"
# the largest frame a client or peer may send a staging server (one staged block, one image):
# what a stranger can make a server allocate before its handshake, times the door's 8
# unproven connections (_door.py); the client refuses a larger one at once, naming it
MAX_FRAME = int(os.environ.get("PILOTFISH_INSITU_FRAME_MB", "64")) << 20


def _token(secret: bytes, *parts: str) -> bytes:
    msg = "\0".join(parts).encode()
    return hmac.new(secret, msg, hashlib.sha256).hexdigest()[:32].encode()


def request_password(client_secret: bytes, server_uid: str) -> bytes:
    """A client's PLAIN password at server_uid (user name "client")."""
    return _token(client_secret, "request", server_uid)


def reply_proof(client_secret: bytes, server_uid: str) -> bytes:
    """What every reply of server_uid to a client carries."""
    return _token(client_secret, "reply", server_uid)


def peer_password(member_secret: bytes, sender: str, receiver: str) -> bytes:
    """A server's PLAIN password at another server (user name "peer <sender uid>")."""
    return _token(member_secret, "peer", sender, receiver)


def same(a: bytes | None, b: bytes | None) -> bool:
    return a is not None and b is not None and hmac.compare_digest(a, b)
