"""Generation trials cut short: the search's trials stop each generation after the prefill and a few decode forwards
(core/run_length.GENERATE_SEARCH_DECODE), the fresh runs that prove a fit go on to a whole timed generation in the
same process, and the trial process cuts what it was asked to (the worker's step plan), on the CPU."""

from __future__ import annotations

import functools

import pytest

from fakes import World, run_scan
from memprobe.core.workload.run_length import GENERATE_SEARCH_DECODE
from memprobe.probe.options import ScanOptions

CUT = GENERATE_SEARCH_DECODE


def test_the_options_cut_search_trials_and_keep_fresh_proofs_whole():
    opts = ScanOptions(precisions=["bf16"], mode="generate")
    assert opts.trial_decode(fresh=False) == CUT >= 2  # enough decode forwards to reach the steady peak
    assert opts.trial_decode(fresh=True) == CUT  # a whole timed generation follows in the same process
    whole = ScanOptions(precisions=["bf16"], mode="generate", measure=False)
    assert whole.trial_decode(fresh=False) == CUT and whole.trial_decode(fresh=True) is None
    assert ScanOptions(precisions=["bf16"], mode="infer").trial_decode(fresh=False) is None
    assert ScanOptions(precisions=["bf16"]).trial_decode(fresh=True) is None


@pytest.mark.parametrize("measure", [True, False])
def test_a_generate_scan_cuts_its_search_trials_and_proves_b_with_whole_generations(measure):
    world = World(inproc_edge=40)
    result, _progress, _envs = run_scan(world, forks=True, mode="generate", measure=measure)
    assert result.max_batch == 40
    shared = [(b, d) for n, b, d in world.decode_cuts if n == 1]
    assert shared[:2] == [(1, CUT), (2, CUT)] and {d for _b, d in shared} == {CUT}
    fresh = [(b, d) for n, b, d in world.decode_cuts if n != 1]
    assert fresh, "the trials near the edge run fresh"
    # with throughput on, a fresh fit's whole generation is the timed run that follows its cut trial
    assert {d for _b, d in fresh} == ({CUT} if measure else {None})
    if measure:
        timed = [entry[2] for entry in world.log if entry[0] == "measure"]
        assert 40 in timed  # B completed a whole generation in a fresh process
    assert "whole" in result.proof.fit_check


def test_a_training_scan_never_cuts():
    world = World(inproc_edge=40)
    run_scan(world, forks=True)
    assert {d for _n, _b, d in world.decode_cuts} == {None}


@pytest.mark.slow
def test_the_trial_process_runs_the_decode_forwards_it_was_asked_for():
    """The worker's step plan: a cut trial runs the prefill and `decode_steps` decode forwards per generation, a
    trial without it and the timed run that follows the whole generation."""
    pytest.importorskip("torch")
    from memprobe.core.process.protocol import MeasureRequest, Ready, SetupRequest, TrialRequest
    from memprobe.core.records.generation import GenerationRequest, generation_variant
    from memprobe.core.workload.registry import load_registry
    from memprobe.probe.child.worker import Session

    new = 6
    workload = generation_variant(load_registry()["toy-llama"], GenerationRequest(8, new))
    session = Session()
    try:
        ready = session.setup(SetupRequest(workload, "fp32", "generate", "cpu", 1 << 24))
        assert isinstance(ready, Ready), ready
        model = session.task.model
        calls = []
        forward = model.forward
        model.forward = functools.wraps(forward)(lambda *a, **k: calls.append(1) or forward(*a, **k))
        assert session.trial(TrialRequest(batch=2, steps=2, decode_steps=2, keep=True)).outcome == "fit"
        assert len(calls) == 2 * (1 + 2) and session.task.decode_steps is None
        calls.clear()
        timed = session.measure(MeasureRequest(batch=2, warmup=0, steps=1, cont=True))
        assert timed.outcome == "fit" and len(calls) == 1 + (new - 1)
        calls.clear()
        assert session.trial(TrialRequest(batch=2, steps=2)).outcome == "fit"
        assert len(calls) == 2 * (1 + (new - 1))
    finally:
        session.close()
