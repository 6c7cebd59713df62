"""_frames.py, the one framing of pilotfish's files: what is packed is split back, and a last
frame cut short (a killed writer) is never taken for a whole one."""

from __future__ import annotations

from pilotfish import _frames


def test_frames_round_trip_and_a_torn_tail_is_left_out():
    payloads = [b"", b"a", b"bc" * 300]
    data = _frames.pack_all(payloads)
    assert data == b"".join(_frames.pack(p) for p in payloads)
    assert [data[s:e] for s, e in _frames.spans(data)] == payloads
    assert _frames.whole(data) == len(data)
    for cut in range(1, len(_frames.pack(b"xyz"))):  # a header or a payload cut short
        torn = data + _frames.pack(b"xyz")[:cut]
        assert [torn[s:e] for s, e in _frames.spans(torn)] == payloads
        assert _frames.whole(torn) == len(data)
    assert _frames.length_at(data, len(_frames.pack(b"")) + len(_frames.pack(b"a"))) == 600
    assert list(_frames.spans(b"")) == [] and _frames.whole(b"\x05\x00") == 0
