"""tests/rp: the marker of RP scripts that take more than ~10 s each (test_rp_tutorials.py
runs them side by side, SLOW_AT_ONCE at a time)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "rp_slow: an RP tutorial or misc script that takes "
                                       "over 10 s (run side by side with the other slow ones)")
