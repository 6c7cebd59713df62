"""Run one of RADICAL-Pilot's own example scripts, unchanged, with `radical.pilot` resolved to
pilotfish.rp (the import shim; radical.utils is RP's real package, found on PYTHONPATH).

    python tests/rp/run_rp_example.py EXAMPLE.py [args...]

tests/rp/test_rp_examples.py obtains the examples from RP's own source distribution (PyPI's
radical.pilot, which ships them) and runs each through this in its own process.
"""

import runpy
import sys

import pilotfish.rp as rp

if __name__ == "__main__":
    import radical  # (radical.utils' namespace package)

    sys.modules["radical.pilot"] = rp
    radical.pilot = rp
    path = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(path, run_name="__main__")
