"""Step functions and the sort-free bin means / peaks agree with brute force."""

import numpy as np
import pytest

from pilotfish.analytics.steps import Step, boundary_bin_means, interval_bin_means, interval_peak


def brute_level(start, end, weight, t):
    return np.array([np.sum(weight * ((start <= x) & (x < end))) for x in t])


def test_step_from_intervals_matches_brute_force():
    rng = np.random.default_rng(0)
    start = np.round(rng.random(300) * 50, 1)          # many shared edges
    end = start + np.round(rng.exponential(5, 300), 1)
    weight = rng.integers(1, 4, 300).astype(float)
    step = Step.from_intervals(start, end, weight)
    t = np.linspace(-1, 80, 2001)
    np.testing.assert_allclose(step.at(t), brute_level(start, end, weight, t))
    assert step.integral() == pytest.approx(np.sum(weight * (end - start)))
    assert step.maximum() == pytest.approx(brute_level(start, end, weight, np.unique(start)).max())


def test_ties_do_not_spike():
    """A release and a placement at the same time: the level never shows both."""
    step = Step.from_intervals([0.0, 1.0], [1.0, 2.0], [4.0, 4.0])
    assert step.maximum() == 4.0


def test_bin_means_agree():
    rng = np.random.default_rng(1)
    start = rng.random(5000) * 100 - 10                  # some before the first edge
    end = start + rng.exponential(8, 5000)
    end[:30] = start[:30]                                # empty intervals
    weight = rng.integers(1, 5, 5000).astype(float)
    edges = np.linspace(0, 100, 401)
    exact = Step.from_intervals(start, end, weight).bin_means(edges)
    np.testing.assert_allclose(interval_bin_means(start, end, weight, edges), exact,
                               rtol=1e-9, atol=1e-7)
    bounds = np.stack([start, start + 1, np.maximum(end, start + 1), end + 3], axis=1)
    means = boundary_bin_means(bounds, weight, edges)
    for j in range(3):
        ref = Step.from_intervals(bounds[:, j], bounds[:, j + 1], weight).bin_means(edges)
        np.testing.assert_allclose(means[j], ref, rtol=1e-9, atol=1e-7)


def test_interval_peak():
    rng = np.random.default_rng(2)
    start = np.round(rng.random(2000) * 100)
    end = start + np.round(rng.exponential(3, 2000))
    assert interval_peak(start, end) == Step.from_intervals(start, end).maximum()
    assert interval_peak([0, 1], [1, 2]) == 1            # back to back: never two at once
    assert interval_peak([], []) == 0
