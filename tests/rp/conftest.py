"""tests/rp: the marker of RP scripts that take more than ~10 s each (test_rp_tutorials.py;
they run with PILOTFISH_RP_SLOW=1)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "rp_slow: an RP tutorial or misc script that takes "
                                       "over 10 s (runs with PILOTFISH_RP_SLOW=1)")
