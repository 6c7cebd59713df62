"""Load models on given histories (pure Python: no MPI)."""

from __future__ import annotations

import pytest

from pilotfish.amt._instrument import LoadModel

NEEDS_MPIEXEC = False  # pure Python: runs without MPICH too (see conftest)


def test_last_median_mean():
    h = [3.0, 3.0, 0.0]
    assert LoadModel("last").predict(h) == 0.0
    assert LoadModel("median:3").predict(h) == 3.0
    assert LoadModel("mean:3").predict(h) == 2.0
    assert LoadModel("last").predict([]) == 0.0


def test_linear_follows_a_drift_and_never_goes_negative():
    assert LoadModel("linear:3").predict([1.0, 2.0, 3.0]) == pytest.approx(4.0)
    assert LoadModel("linear:4").predict([9.0, 1.0, 2.0, 3.0, 4.0]) == pytest.approx(5.0)
    assert LoadModel("linear:3").predict([3.0, 2.0, 1.0]) == pytest.approx(0.0)
    assert LoadModel("linear:3").predict([4.0, 2.0, 0.5]) == 0.0       # clamped
    assert LoadModel("linear:5").predict([2.0]) == 2.0                 # one phase: persistence
    noisy = [10.0, 12.0, 10.0, 12.0]
    assert 10.0 < LoadModel("linear:4").predict(noisy) < 13.0


@pytest.mark.parametrize("spec, why", [("linear", "integer >= 2"), ("linear:1", "must be >= 2"),
                                       ("linear:0", "must be >= 2"),
                                       ("median:0", ">= 1"), ("last:2", "no argument"),
                                       ("cubic:3", "unknown load model")])
def test_bad_specs_say_why(spec, why):
    with pytest.raises(ValueError, match=why):
        LoadModel(spec)
