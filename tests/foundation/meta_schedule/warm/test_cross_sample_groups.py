"""The cross-hardware model's labels compare a sample only with samples whose times compare: one
workload's, on one fingerprint, timed in one cache state."""

from __future__ import annotations

import numpy as np
import pytest

from foundation.meta_schedule.warm.cross_model import normalised_speeds
from foundation.meta_schedule.warm.cross_samples import CrossSample


def test_a_sample_is_labelled_against_the_fastest_of_its_own_timing_context():
    program = np.zeros((1, 4), dtype="float32")
    samples = [CrossSample("cpu-a", 1, "w1", program, 1e-3), CrossSample("cpu-a", 1, "w2", program, 2e-3),
               # The same workload timed with its weights flushed: slower on paper, fastest of its own.
               CrossSample("cpu-a", 1, "f1", program, 4e-3, "weights"),
               CrossSample("cpu-a", 1, "f2", program, 8e-3, "weights")]
    assert normalised_speeds(samples).tolist() == pytest.approx([1.0, 0.5, 1.0, 0.5])
    assert samples[0].group == "1@cpu-a" and samples[2].group == "1@cpu-a/weights"
