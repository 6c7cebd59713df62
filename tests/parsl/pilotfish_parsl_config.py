"""A Parsl config with pilotfish's executor, for Parsl's own test suite:
    pytest --pyargs parsl.tests.test_python_apps --config tests/parsl/pilotfish_parsl_config.py
(tests/parsl/test_parsl_executor.py, test_parsls_own_tests_with_a_pilotfish_config, runs the
chosen subset)."""

from parsl.config import Config

from pilotfish.descriptions import PilotDescription
from pilotfish.parsl import PilotfishExecutor


def fresh_config():
    return Config(executors=[PilotfishExecutor(
        label="pilotfish", pilot=PilotDescription(nodes=1, cores_per_node=4, runtime="1h"))])
