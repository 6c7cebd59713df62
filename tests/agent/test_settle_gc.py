"""settle_gc (_util.py): what the agent's and the root's loops start with -- start-up's
objects out of the cyclic collector's view, the young generation collected less often, and
cycles made afterwards still collected. In a process of its own (it changes process-wide
state)."""

import subprocess
import sys

SCRIPT = r"""
import gc, weakref
from pilotfish._util import GC_YOUNG, run_profiled

class Cycle:
    pass

def loop():
    assert gc.get_freeze_count() > 1000, gc.get_freeze_count()  # (start-up: modules, ...)
    assert gc.get_threshold()[0] == GC_YOUNG, gc.get_threshold()
    a, b = Cycle(), Cycle()
    a.other, b.other = b, a  # a cycle the loop makes: still collected
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
    return 7

assert run_profiled(loop, "PILOTFISH_TEST_NO_PROFILE") == 7
gc.unfreeze()
gc.set_threshold(0)
run_profiled(lambda: 0, "PILOTFISH_TEST_NO_PROFILE")
assert gc.get_threshold()[0] == 0, gc.get_threshold()  # collection turned off: left so
print("ok")
"""


def test_loop_starts_with_startup_frozen_and_fewer_young_collections():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
