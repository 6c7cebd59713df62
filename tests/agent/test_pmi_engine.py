"""The PMI protocol engine (agent/pmi/engine.py) on plain bytes, no socket: a rank's input
fed in, its answers taken from its connection, the owner's callbacks recorded. PMI-1 and PMI-2
conversations as MPICH's and Slurm's libraries hold them; malformed and oversized input fails
that job only, with the reason the server gives (the same engine serves the sockets:
tests/agent/test_pmi.py)."""

from __future__ import annotations

import pytest

from pilotfish.agent.pmi import Engine, PmiServer
from pilotfish.agent.pmi.engine import PMI1, PMI2


class Owner:
    def __init__(self):
        self.events: list[tuple] = []

    def engine(self, **kw) -> Engine:
        return Engine(
            on_abort=lambda j, r, code, msg: self.events.append(("abort", j.kvsname, r, code, msg)),
            on_error=lambda j, r, why: self.events.append(("error", j.kvsname, r, why)),
            on_lost=lambda j, r: self.events.append(("lost", j.kvsname, r)),
            **kw,
        )


def frame(body: str) -> bytes:
    return f"{len(body):6d}{body}".encode()


def say(eng: Engine, c, data: bytes) -> bytes:
    eng.feed(c, data)
    return eng.take(c)


def test_a_pmi1_conversation():
    owner = Owner()
    eng = owner.engine()
    job = eng.add_job("pf.eng.1", 1, [0])
    c = job.conns[0]
    assert job.rank_fds == {}  # no socket: nothing to hand to a rank
    assert say(eng, c, b"cmd=init pmi_version=1 pmi_subversion=1\n") == (
        b"cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
    )
    assert say(eng, c, b"cmd=get_maxes\n") == (
        b"cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n"
    )
    assert say(eng, c, b"cmd=get_appnum\ncmd=get_my_kvsname\n") == (
        b"cmd=appnum rc=0 appnum=0\ncmd=my_kvsname rc=0 kvsname=pf.eng.1\n"
    )
    assert say(eng, c, b"cmd=put kvsname=pf.eng.1 key=card value=tcp://a\\ b\n") == (
        b"cmd=put_result rc=0\n"
    )
    # a line in pieces: answered once whole
    assert say(eng, c, b"cmd=barr") == b""
    assert say(eng, c, b"ier_in\n") == b"cmd=barrier_out rc=0\n"  # every rank here: no owner
    assert say(eng, c, b"cmd=get kvsname=pf.eng.1 key=card\n") == (
        b"cmd=get_result rc=0 value=tcp://a\\ b\n"
    )
    assert say(eng, c, b"cmd=get kvsname=pf.eng.1 key=none\n") == (
        b"cmd=get_result rc=-1 msg=key_not_found\n"
    )
    assert say(eng, c, b"cmd=get key=PMI_process_mapping\n") == (
        b"cmd=get_result rc=0 value=(vector,(0,1,1))\n"
    )
    assert say(eng, c, b"cmd=finalize\n") == b"cmd=finalize_ack rc=0\n"
    eng.eof(c)
    assert c.closed and job.finished and owner.events == []


def test_a_pmi1_barrier_waits_for_every_local_rank_and_the_owner():
    fences = []
    eng = Engine(on_fence=lambda job, epoch, new: fences.append((epoch, dict(new))))
    job = eng.add_job("pf.eng.2", 3, [0, 1], node_of_rank=[0, 0, 1])
    a, b = job.conns[0], job.conns[1]
    for c in (a, b):
        say(eng, c, b"cmd=init pmi_version=1 pmi_subversion=1\n")
    assert say(eng, a, b"cmd=put kvsname=pf.eng.2 key=k0 value=v0\ncmd=barrier_in\n") == (
        b"cmd=put_result rc=0\n"
    )
    assert fences == []
    assert say(eng, b, b"cmd=barrier_in\n") == b""
    assert fences == [(0, {"k0": "v0"})]  # once per node, with this node's new keys
    job.fence_done(0, {"k0": "v0", "k2": "v2"})  # the union, rank 2's key from its node
    assert eng.take(a) == eng.take(b) == b"cmd=barrier_out rc=0\n"
    assert say(eng, a, b"cmd=get kvsname=pf.eng.2 key=k2\n") == b"cmd=get_result rc=0 value=v2\n"


def test_a_pmi2_conversation():
    owner = Owner()
    eng = owner.engine()
    job = eng.add_job("pf.eng.3", 1, [0])
    c = job.conns[0]
    assert say(eng, c, b"cmd=init pmi_version=2 pmi_subversion=0\n") == (
        b"cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"
    )
    assert say(eng, c, frame("cmd=fullinit;pmirank=0;thrid=7;")) == frame(
        "cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=0;size=1;appnum=0;"
        "debugged=FALSE;pmiverbose=FALSE;rc=0;thrid=7;"
    )
    assert say(eng, c, frame("cmd=job-getid;")) == frame(
        "cmd=job-getid-response;jobid=pf.eng.3;rc=0;"
    )
    assert say(eng, c, frame("cmd=kvs-put;key=a;value=x;;y;")) == frame(
        "cmd=kvs-put-response;rc=0;"
    )
    assert say(eng, c, frame("cmd=kvs-fence;thrid=9;")) == frame(
        "cmd=kvs-fence-response;rc=0;thrid=9;"
    )
    assert say(eng, c, frame("cmd=kvs-get;jobid=pf.eng.3;key=a;")) == frame(
        "cmd=kvs-get-response;found=TRUE;value=x;;y;rc=0;"
    )
    assert say(eng, c, frame("cmd=kvs-get;key=b;")) == frame(
        "cmd=kvs-get-response;found=FALSE;rc=0;"
    )
    assert say(eng, c, frame("cmd=info-getjobattr;key=universeSize;")) == frame(
        "cmd=info-getjobattr-response;found=TRUE;value=1;rc=0;"
    )
    assert say(eng, c, frame("cmd=spawn;")) == frame(
        "cmd=spawn-response;rc=-1;errmsg=not supported;"
    )
    assert say(eng, c, frame("cmd=finalize;")) == frame("cmd=finalize-response;rc=0;")
    eng.eof(c)
    assert owner.events == [] and job.finished


def test_a_pmi2_wait_for_a_node_attribute_is_answered_by_a_local_put():
    eng = Engine()
    job = eng.add_job("pf.eng.4", 2, [0, 1])
    a, b = job.conns[0], job.conns[1]
    for c in (a, b):
        say(eng, c, b"cmd=init pmi_version=2 pmi_subversion=0\n")
    assert say(eng, a, frame("cmd=info-getnodeattr;key=seg;wait=TRUE;thrid=1;")) == b""
    assert say(eng, b, frame("cmd=info-putnodeattr;key=seg;value=42;")) == frame(
        "cmd=info-putnodeattr-response;rc=0;"
    )
    assert eng.take(a) == frame("cmd=info-getnodeattr-response;found=TRUE;value=42;rc=0;thrid=1;")


def test_an_abort_and_a_rank_lost_reach_the_owner():
    owner = Owner()
    eng = owner.engine()
    job = eng.add_job("pf.eng.5", 2, [0, 1])
    a, b = job.conns[0], job.conns[1]
    say(eng, a, b"cmd=init pmi_version=1 pmi_subversion=1\n")
    say(eng, a, b"cmd=abort exitcode=3 message=bad\\ thing\n")
    eng.eof(a)  # (after an abort: quiet)
    say(eng, b, b"cmd=init pmi_version=1 pmi_subversion=1\n")
    eng.eof(b)  # before finalize: lost
    assert owner.events == [("abort", "pf.eng.5", 0, 3, "bad thing"), ("lost", "pf.eng.5", 1)]


def _failed(data: list[bytes], **kw) -> tuple[list[tuple], bytes]:
    """Feed `data` to rank 0 of a fresh job beside another; the owner's events, what rank 0
    was answered -- and the other job goes on."""
    owner = Owner()
    eng = owner.engine(**kw)
    job = eng.add_job("pf.bad", 1, [0])
    other = eng.add_job("pf.good", 1, [0])
    c = job.conns[0]
    out = b""
    for d in data:
        eng.feed(c, d)
        out += eng.take(c)
    assert c.closed and job.failed is not None
    g = other.conns[0]
    assert say(eng, g, b"cmd=init pmi_version=1 pmi_subversion=1\n").startswith(
        b"cmd=response_to_init rc=0"
    )
    return owner.events, out


INIT1 = b"cmd=init pmi_version=1 pmi_subversion=1\n"
INIT2 = b"cmd=init pmi_version=2 pmi_subversion=0\n"


@pytest.mark.parametrize(
    "data, reason",
    [
        ([b"hello\n"], "malformed: hello\\n is neither a PMI-1 line (cmd=...) nor a PMI-2 frame"),
        ([b"cmd=put key=a value=b\n"], "cmd=put before init"),
        ([INIT1, b"cmd=put key=a\n"], "malformed: cmd=put without value="),
        ([INIT1, b"cmd=put key=a value=b junk\n"], "malformed: token junk in a PMI-1 line"),
        ([INIT1, b"cmd=get key=\xff\n"], "malformed: a PMI-1 line that is not ASCII"),
        ([INIT1, b"cmd=put key=k value=" + b"v" * 1025 + b"\n"], "put value of 1025 characters"),
        ([INIT1, b"cmd=put key=" + b"k" * 65 + b" value=v\n"], "put key of 65 characters"),
        ([INIT1, b"cmd=get key=" + b"k" * 70000], "a PMI-1 line longer than 65536 bytes"),
        ([INIT1, frame("cmd=fullinit;")], "a PMI-2 frame (cmd=fullinit) before init pmi_version=2"),
        ([INIT2, b"999999"], "a PMI-2 frame of 999999 bytes, over 65536"),
        ([INIT2, b"  xx12cmd=finalize;"], "is neither a PMI-1 line (cmd=...) nor a PMI-2 frame"),
        ([INIT2, frame("cmd=fullinit;pmirank=5;")], "fullinit as rank '5' on rank 0's connection"),
    ],
)
def test_bad_input_fails_that_job_alone_naming_why(data, reason):
    events, _ = _failed(data)
    assert len(events) == 1 and events[0][:3] == ("error", "pf.bad", 0), events
    assert reason in events[0][3], events[0][3]


def test_the_space_cap_refuses_the_put_that_would_pass_it():
    puts = [b"cmd=put key=k%d value=%s\n" % (i, b"v" * 200) for i in range(8)]
    events, out = _failed([INIT1, *puts], max_kvs_bytes=1024)  # (a failed job's unsent answers go)
    assert out.count(b"cmd=put_result rc=0\n") == 4  # (4 * (200 + 2 + 32) fit; the 5th not)
    assert "the key-value space is full" in events[0][3] and "max_kvs_bytes=1024" in events[0][3]


def test_a_flood_of_unknown_commands_is_answered_each_and_fails_nothing():
    owner = Owner()
    eng = owner.engine()
    job = eng.add_job("pf.eng.6", 1, [0])
    c = job.conns[0]
    say(eng, c, INIT1)
    out = say(eng, c, b"cmd=nosuch\n" * 100)
    assert out == b"cmd=nosuch_result rc=-1 msg=unknown_command\n" * 100
    assert owner.events == [] and not c.closed


def test_the_tables_name_every_command_the_server_answers():
    assert set(PMI1) == {
        "init", "get_maxes", "get_appnum", "get_my_kvsname", "get_universe_size", "put", "get",
        "barrier_in", "finalize", "abort", "publish_name", "unpublish_name", "lookup_name",
    }  # fmt: skip
    assert {"fullinit", "kvs-put", "kvs-fence", "kvs-get", "finalize", "abort"} <= set(PMI2)
    assert issubclass(PmiServer, Engine)  # the server is this engine on sockets
