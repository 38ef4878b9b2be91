"""How many steps a scan runs at a fit (core/workload/run_length.py), shared by the scan's options and predict's replay."""

from __future__ import annotations

import pytest

from memprobe.core.workload.run_length import INFER_TRIAL_STEPS, TIMED_STEPS, TRIAL_STEPS, WARMUP_STEPS, steps_at_fit
from memprobe.probe.options import ScanOptions


def test_a_training_fit_is_sixteen_steps_of_one_run():
    assert steps_at_fit("train") == 3 + 3 + 10
    assert steps_at_fit("train", trial_steps=5) == 5 + 3 + 10


def test_an_inference_fit_is_thirteen_forward_passes():
    assert steps_at_fit("infer") == 2 + 1 + 10
    assert steps_at_fit("infer", trial_steps=3) == INFER_TRIAL_STEPS + 1 + 10


def test_the_scan_runs_what_predict_replays():
    options = ScanOptions(precisions=["bf16"])
    assert (options.steps, options.warmup, options.timed_steps) == (TRIAL_STEPS, WARMUP_STEPS, TIMED_STEPS)
    assert options.trial_steps + options.warmup_steps + options.timed_steps == steps_at_fit("train")
    infer = ScanOptions(precisions=["bf16"], mode="infer")
    assert infer.trial_steps + infer.warmup_steps + infer.timed_steps == steps_at_fit("infer")


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown mode 'finetune'"):
        steps_at_fit("finetune")
