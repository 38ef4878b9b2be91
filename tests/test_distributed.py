"""Multi-GPU trials on the CPU: gloo, 2 ranks, the toy workload (each torchrun launch takes a few seconds).

Real launches: a fake OOM on one rank makes the trial an OOM and both ranks exit; a hung rank is
ended by the process group's timeout, all ranks by the launcher's; a trial that fits commits on both
ranks and is timed as a group. Without launches: how rank records become a trial's outcome, the
per-GPU search and proof against a fake launcher, and the scaling arithmetic.
"""

from __future__ import annotations

import time

import pytest

from conftest import RecordingProgress
from fakes import TOY, FakeGroup, fake_group_opts, process_alive
from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.outcomes import CRASH, ERROR, FIT, OOM, TIMEOUT
from memprobe.core.process.rank_record import RankRecord, TimedSteps
from memprobe.core.records.results import read_result
from memprobe.core.workload.registry import Workload, load_registry
from memprobe.probe.child.rank import collective_outcome
from memprobe.probe.distributed.efficiency import scaling_efficiency, scaling_record
from memprobe.probe.distributed.launch import SAFE_ENV, LaunchRequest, LaunchResult, aggregate, launch, launch_env
from memprobe.probe.distributed.scan import DistributedScanError, scan_distributed, scan_precision_distributed
from memprobe.probe.multi import parse_gpus, parse_strategies

ROOMY = 50_000_000  # bytes: every toy batch used here fits
# Rank 1's budget: the toy model (603 kB of weights) builds and wraps, but a training step (gradients,
# Adam's two moments) passes it.
TIGHT = 3_000_000


def _pids(result: LaunchResult) -> list[int]:
    return [r.pid for r in result.ranks if r]


# --- real launches --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_fake_oom_on_one_rank_makes_the_trial_an_oom_and_both_ranks_exit():
    started = time.monotonic()
    result = launch(
        LaunchRequest(
            TOY,
            "fp32",
            "ddp",
            2,
            [1, 2],
            device="cpu",
            cpu_budget_bytes=ROOMY,
            rank_cpu_budget_bytes={"1": TIGHT},
            pg_timeout_s=20,
            timeout_s=120,
        )
    )
    assert [a.outcome for a in result.attempts] == [OOM]  # batch 2 never ran
    assert result.attempts[0].message.startswith("rank 1: OutOfMemoryError")
    assert result.ranks[1] is not None and result.ranks[1].failure.outcome == OOM
    assert result.returncode != 0 and not result.timed_out
    assert len(_pids(result)) == 2 and not any(process_alive(pid) for pid in _pids(result))
    assert time.monotonic() - started < 60


def _hanging() -> Workload:
    """The toy model whose rank $HANG_RANK sleeps when it makes its first batch (tests/hanging_rank.py)."""
    from pathlib import Path

    from memprobe.workloads.custom import resolve

    return resolve(f"{Path(__file__).parent / 'hanging_rank.py'}:build")


@pytest.mark.slow
def test_a_hung_rank_is_ended_by_the_process_group_timeout(monkeypatch):
    monkeypatch.setenv("HANG_RANK", "1")
    result = launch(
        LaunchRequest(
            _hanging(), "fp32", "ddp", 2, [1], device="cpu", cpu_budget_bytes=ROOMY, pg_timeout_s=3, timeout_s=120
        )
    )
    assert [a.outcome for a in result.attempts] == [TIMEOUT]
    assert result.attempts[0].message.startswith("rank 0:")  # rank 0 waited for rank 1 in a collective
    assert not result.timed_out and result.wall_seconds < 60
    assert not any(process_alive(pid) for pid in _pids(result))


@pytest.mark.slow
def test_ranks_that_all_hang_are_killed_by_the_launcher_timeout(monkeypatch):
    monkeypatch.setenv("HANG_RANK", "all")
    # 25 s: time for both ranks to import torch and say who they are before they hang, on a loaded machine too
    # (with 10 s, under 8 parallel test workers, neither had yet)
    result = launch(
        LaunchRequest(
            _hanging(), "fp32", "ddp", 2, [1], device="cpu", cpu_budget_bytes=ROOMY, pg_timeout_s=300, timeout_s=25
        )
    )
    assert result.timed_out and [a.outcome for a in result.attempts] == [TIMEOUT]
    assert result.wall_seconds < 60
    assert len(_pids(result)) == 2 and not any(process_alive(pid) for pid in _pids(result))


@pytest.mark.slow
def test_a_batch_fits_only_when_every_rank_committed_it_and_the_group_is_timed():
    result = launch(
        LaunchRequest(
            TOY,
            "bf16",
            "fsdp",
            2,
            [1, 3],
            device="cpu",
            cpu_budget_bytes=ROOMY,
            measure=TimedSteps(1, 2),
            pg_timeout_s=30,
            timeout_s=120,
        )
    )
    assert [(a.batch, a.outcome, a.fresh) for a in result.attempts] == [(1, FIT, True), (3, FIT, False)]
    assert all(r and r.done and [b.batch for b in r.batches] == [1, 3] for r in result.ranks)
    assert result.setup.wrap["strategy"] == "fsdp" and result.setup.wrap["block_type"] == ["Linear"]
    measured = result.measure
    slowest = max(m["median_s"] for m in measured.extra["per_rank"])
    assert measured.outcome == FIT and measured.extra["global_batch"] == 6
    assert measured.samples_per_s == pytest.approx(2 * 3 / slowest)


# --- rank records to outcomes (no launch) ---------------------------------------------------------


def _record(rank, batches=(), failure=None, done=False):
    return RankRecord.from_dict(
        {
            "rank": rank,
            "batches": [
                {
                    "batch": b,
                    "outcome": FIT,
                    "peak_allocated": 10 * b + rank,
                    "peak_reserved": 20 * b + rank,
                    "seconds": 0.1,
                    "steps": 3,
                }
                for b in batches
            ],
            "failure": failure,
            "done": done,
            "measure": None,
        }
    )


def _request(batches):
    return LaunchRequest(TOY, "fp32", "ddp", 2, list(batches), device="cpu")


def test_the_earliest_recorded_failure_is_the_outcome():
    records = [
        _record(0, [1], {"stage": "trial", "batch": 2, "outcome": CRASH, "message": "peer gone", "at": 20.0}),
        _record(1, [1], {"stage": "trial", "batch": 2, "outcome": OOM, "message": "OutOfMemoryError", "at": 10.0}),
    ]
    attempts, measure = aggregate(records, _request([1, 2]), 1, False)
    assert [(a.batch, a.outcome) for a in attempts] == [(1, FIT), (2, OOM)]
    assert attempts[0].peak_reserved == 21  # the largest peak of any rank
    assert attempts[1].message == "rank 1: OutOfMemoryError; then rank 0: crash" and measure is None


def test_a_batch_one_rank_did_not_commit_is_not_a_fit():
    records = [_record(0, [1, 2], done=True), None]  # rank 1 left nothing: it died
    attempts, _ = aggregate(records, _request([1, 2]), -9, False, "killed")
    assert [a.outcome for a in attempts] == [CRASH]
    assert "ranks [1]" in attempts[0].message
    attempts, _ = aggregate(records, _request([1, 2]), None, True)
    assert [a.outcome for a in attempts] == [TIMEOUT]


def test_collective_failures_are_timeouts_or_lost_peers_and_other_errors_stay():
    assert collective_outcome(ERROR, "RuntimeError: ... Timed out waiting 4000ms for recv operation") == TIMEOUT
    assert collective_outcome(ERROR, "RuntimeError: gloo ... Connection closed by peer") == CRASH
    assert collective_outcome(OOM, "OutOfMemoryError: CUDA out of memory") == OOM
    assert collective_outcome(ERROR, "ValueError: bad shape") == ERROR


def test_every_launch_gets_the_multicast_switches_unless_already_set(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    env = launch_env()
    assert env["NCCL_NVLS_ENABLE"] == "1"  # the user's choice is kept
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert set(SAFE_ENV) == {"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"}


# --- the per-GPU search against a fake launcher ---------------------------------------------------


def test_the_per_gpu_search_finds_the_edge_of_the_tightest_rank_and_proves_it():
    group = FakeGroup()
    result, _setup = scan_precision_distributed(
        TOY, "fp32", fake_group_opts(curve=False), 2, "ddp", RecordingProgress(), group
    )
    assert result.max_batch == 990  # rank 1: 1000 + 100 x 990 = 100,000 bytes; 991 does not fit
    assert result.proof.verified and (result.proof.fits, result.proof.fails) == (990, 991)
    assert all(req.world_size == 2 and req.strategy == "ddp" for req in group.requests[:-1])
    assert group.requests[0].batches == [1, 2]  # the first launch runs both model-fitting trials
    assert result.throughput.samples_per_s == pytest.approx(2 * 990 / 0.55)
    scaling = result.settings.scaling
    assert group.requests[-1].world_size == 1 and group.requests[-1].strategy == "none"
    assert scaling.per_gpu_batch == 990
    assert scaling.efficiency == pytest.approx(0.5 / 0.55)  # (2 x 990 / 0.55) / (2 x 990 / 0.5)


def test_when_the_per_gpu_edge_does_not_train_on_one_gpu_both_are_timed_at_a_halved_batch():
    group = FakeGroup(single_edge=400)  # as under FSDP: sharded state lets each GPU of the group take more
    result, _setup = scan_precision_distributed(
        TOY, "fp32", fake_group_opts(curve=False), 2, "fsdp", RecordingProgress(), group
    )
    scaling = result.settings.scaling
    assert result.max_batch == 990 and scaling.per_gpu_batch == 247  # 990 -> 495 -> 247
    assert "both timed at batch 247" in scaling.note
    assert scaling.efficiency == pytest.approx(0.5 / 0.55)


def test_a_distributed_scan_writes_world_size_strategy_and_nccl_facts(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    result, path = scan_distributed(TOY, fake_group_opts(), 2, "ddp", tmp_path, RecordingProgress(), FakeGroup())
    back = read_result(path)
    assert path.name.startswith("2x-cpu_toy-ddp_train_")
    dist = back.environment.distributed
    assert (dist.world_size, dist.strategy, dist.backend) == (2, "ddp", "gloo")
    assert dist.nccl_env["NCCL_DEBUG"] == "WARN" and dist.nccl_env["NCCL_NVLS_ENABLE"] == "0"
    assert back.settings.world_size == 2 and back.precisions["fp32"].max_batch == 990


def test_options_a_multi_gpu_scan_cannot_honour_are_user_errors(tmp_path):
    for opts, world, strategy in (
        (fake_group_opts(), 1, "ddp"),
        (fake_group_opts(), 2, "zero3"),
        (fake_group_opts(mode="infer"), 2, "ddp"),
        (fake_group_opts(compile=True), 2, "ddp"),
    ):
        with pytest.raises(DistributedScanError):
            scan_distributed(TOY, opts, world, strategy, tmp_path, RecordingProgress(), FakeGroup())


# --- arithmetic and option parsing ----------------------------------------------------------------


def test_scaling_efficiency_is_n_gpu_throughput_over_n_times_one_gpu():
    assert scaling_efficiency(180.0, 100.0, 2) == pytest.approx(0.9)
    assert scaling_efficiency(400.0, 100.0, 4) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        scaling_efficiency(100.0, 0.0, 2)
    with pytest.raises(ValueError):
        scaling_efficiency(100.0, 50.0, 0)
    record = scaling_record(
        2,
        64,
        {"outcome": FIT, "samples_per_s": 150.0, "units_per_s": 300.0, "unit": "tokens"},
        {"outcome": FIT, "samples_per_s": 100.0, "units_per_s": 200.0},
    )
    assert (record["speedup"], record["efficiency"], record["unit"]) == (1.5, 0.75, "tokens")
    missing = scaling_record(2, 64, {"outcome": FIT, "samples_per_s": 150.0}, {"outcome": OOM})
    assert missing["efficiency"] is None and missing["throughput_1"] is None


def test_gpus_and_strategy_options_parse_or_say_what_is_wrong():
    assert parse_gpus(None, lambda: 8) == [1]
    assert parse_gpus("1,2", lambda: 2) == [1, 2]
    assert parse_gpus("all", lambda: 4) == [4]
    for bad in ("0", "two", "3"):
        with pytest.raises(ValueError):
            parse_gpus(bad, lambda: 2)
    assert parse_strategies("ddp,fsdp,ddp") == ["ddp", "fsdp"]
    with pytest.raises(ValueError):
        parse_strategies("zero")


def test_fsdp_shards_the_repeated_blocks_and_the_root_keeps_the_rest():
    import torch

    from memprobe.training.wrap import shard_blocks
    from memprobe.workloads.families import family_builder

    registry = load_registry()
    expected = {
        "toy-bert-squad": ({"BertLayer"}, 2),
        "toy-transformer": ({"EncoderLayer", "DecoderLayer"}, 4),
        "toy": ({"Linear"}, 4),
    }
    for name, (types, count) in expected.items():
        w = registry[name]
        task = family_builder(w.family)(w.params, w.optimizer, torch.device("cpu"))
        blocks = shard_blocks(task.model)
        assert {type(b).__name__ for b in blocks} == types and len(blocks) == count, name


def test_a_workload_with_two_optimizers_is_refused_before_any_launch(tmp_path):
    group = FakeGroup()
    with pytest.raises(DistributedScanError, match="two optimizers"):
        scan_distributed(
            load_registry()["toy-pix2pixhd"], fake_group_opts(), 2, "ddp", tmp_path, RecordingProgress(), group
        )
    assert group.requests == []


def test_a_launch_that_fails_before_any_rank_builds_the_model_is_an_error_not_a_max_batch():
    def broken(req: LaunchRequest) -> LaunchResult:
        return LaunchResult(
            [Attempt(1, CRASH, message="launcher exit 1, ranks [0, 1] left no result: No module named x")],
            None,
            None,
            1,
            False,
            1.0,
            "No module named x",
            [None, None],
        )

    result, setup = scan_precision_distributed(TOY, "fp32", fake_group_opts(), 2, "ddp", RecordingProgress(), broken)
    assert result.status == "error" and "No module named x" in result.error
    assert result.max_batch is None and setup is None


def test_fsdp_relays_channels_last_parameters_and_gathers_batchnorm_models_in_float32(tmp_path):
    import torch
    import torch.distributed as dist
    from torch import nn

    from memprobe.training.wrap import wrap_model

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = nn.Sequential(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)), nn.Sequential(nn.Conv2d(4, 4, 3)))
        model = model.to(memory_format=torch.channels_last)
        described = wrap_model(model, "fsdp", "bf16", torch.device("cpu")).describe
        assert described["parameters_made_contiguous"] == 2 and described["param_dtype"] == "float32"
        assert described["param_dtype_note"] == "float32: the model has BatchNorm" and described["blocks"] == 2
        plain = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        described = wrap_model(plain, "fsdp", "bf16", torch.device("cpu")).describe
        assert described["param_dtype"] == "bfloat16" and described["param_dtype_note"] is None
    finally:
        dist.destroy_process_group()
