"""`memprobe predict --gpus N --strategy ddp|fsdp`: rank 0 of N GPUs traced in a fake process group, on the CPU.

What the wrappers hold on a rank is known from their design: DDP (gradient_as_bucket_view=False) keeps
gradient buckets as large as the gradients beside the weights; FSDP2 keeps 1/N of each parameter. The
weights live at trial start in the trace are checked against that, on the toy MLP and the 2-layer BERT.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from fakes import toy_scan  # noqa: E402
from memprobe.cli import main  # noqa: E402
from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.core.workload.strategies import StrategyError  # noqa: E402
from memprobe.predict.allocator import ALLOC, FREE, MARK  # noqa: E402
from memprobe.predict.data_parallel import World  # noqa: E402
from memprobe.predict.sessions import world_wraps  # noqa: E402
from memprobe.predict.summary import MemorySize, predict  # noqa: E402
from memprobe.predict.trace import TRIAL_MARK, TraceSession  # noqa: E402
from memprobe.workloads.base import Amp  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def _live_at_trial_start(events: list[tuple]) -> int:
    """Bytes allocated by the build (and the wrapper) and still alive when the trial starts."""
    live: dict[int, int] = {}
    for event in events:
        if event[0] == MARK and event[1] == TRIAL_MARK:
            break
        if event[0] == ALLOC:
            live[event[1]] = event[2]
        elif event[0] == FREE:
            live.pop(event[1], None)
    return sum(live.values())


def _weights_and_params(registry, name: str, world: World | None, precision: str = "bf16") -> tuple[int, int]:
    with world_wraps(world) as wrap_for:
        with TraceSession(registry[name], wrap=wrap_for(precision), fresh=world is not None) as session:
            trace = session.trace(precision, 2)
    parameter_bytes = None
    with TraceSession(registry[name]) as plain:
        parameter_bytes = sum(p.numel() * p.element_size() for p in plain.task.model.parameters())
    return _live_at_trial_start(trace.events), parameter_bytes


@pytest.mark.parametrize("name", ["toy", "toy-bert-squad"])
def test_ddp_keeps_gradient_buckets_beside_the_weights(registry, name):
    single, params = _weights_and_params(registry, name, None)
    ddp, _ = _weights_and_params(registry, name, World(2, "ddp"))
    assert single >= params
    assert ddp - single == pytest.approx(params, rel=0.01)


@pytest.mark.parametrize("name", ["toy", "toy-bert-squad"])
def test_fsdp_keeps_a_shard_of_the_weights(registry, name):
    single, params = _weights_and_params(registry, name, None)
    for size in (2, 4):
        sharded, _ = _weights_and_params(registry, name, World(size, "fsdp"))
        # Each parameter is padded to a multiple of the world size: a shard is at least 1/N.
        assert params / size <= sharded <= single / size + 64 * 1024


def test_fsdp_traces_align_across_batches_and_world_is_left_clean(registry):
    import torch.distributed as dist

    sizes = [MemorySize("1GiB", 1 << 30, 1 << 30)]
    prediction = predict(registry["toy"], ["fp16"], sizes, world=World(2, "fsdp"))
    assert prediction.world == "2 GPUs, fsdp"
    assert prediction.safe_margin == 0.10  # FSDP2's per-stream pools are not in the allocator model
    assert prediction.precisions["fp16"].how == "checked"  # a fresh build per traced batch: traces align
    assert prediction.precisions["fp16"].max_batch["1GiB"] > 0
    assert not dist.is_initialized()
    assert type(Amp("fp16", torch.device("cpu")).scaler) is torch.amp.GradScaler  # fsdp's scaler stays on its task


def test_fsdp_fp16_gives_its_own_task_the_sharded_loss_scaler(registry):
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    with world_wraps(World(2, "fsdp")) as wrap_for:
        with TraceSession(registry["toy"], wrap=wrap_for("fp16"), fresh=True) as session:
            session.trace("fp16", 2)
            assert session.task.scaler_class is ShardedGradScaler
    with TraceSession(registry["toy"]) as plain:  # a task of one GPU, built after it, keeps the default
        assert plain.task.scaler_class is None
    assert type(Amp("fp16", torch.device("cpu"), scaler_class=ShardedGradScaler).scaler) is ShardedGradScaler


@pytest.mark.slow
def test_ddp_predicts_a_smaller_batch_and_fsdp_a_larger_one(registry):
    # batch ~40: DDP's buckets (the 2-layer BERT's gradients) cost a few samples, FSDP's sharded state gains a few.
    # (At some caps all three tie: the allocator's segments make the edge a staircase, 60 for each at 60-65 MiB.)
    cap = 50 * MiB
    sizes = [MemorySize("cap", cap, cap)]
    got = {}
    for world in (None, World(2, "ddp"), World(2, "fsdp")):
        got[world.strategy if world else "1"] = (
            predict(registry["toy-bert-squad"], ["bf16"], sizes, world=world).precisions["bf16"].max_batch["cap"]
        )
    assert got["ddp"] < got["1"] < got["fsdp"], got


def test_the_safe_batch_leaves_more_memory_under_fsdp_than_under_ddp_or_on_one_gpu():
    from memprobe.predict.safe import FSDP_SAFE_MARGIN, SAFE_MARGIN, safe_capacity, safe_margin

    assert safe_margin(None) == safe_margin(World(2, "ddp")) == SAFE_MARGIN == 0.05
    assert safe_margin(World(4, "fsdp")) == FSDP_SAFE_MARGIN == 0.10
    assert safe_capacity(1000) == 950 and safe_capacity(1000, 0.10) == 900


@pytest.mark.parametrize("margin, says", [(0.05, False), (0.10, True)], ids=["ddp", "fsdp"])
def test_predict_says_the_margin_its_safe_batch_leaves_and_why_fsdp_leaves_more(margin, says):
    from memprobe.predict.render import render
    from memprobe.predict.summary import PrecisionPrediction, Prediction

    size = MemorySize("H200", 140 * 2**30, 139 * 2**30)
    p = PrecisionPrediction(
        "bf16", None, None, {"H200": 1296}, {"H200": 1296}, {}, "checked", safe_max_batch={"H200": 1160}
    )
    world = "2 GPUs, fsdp" if says else "2 GPUs, ddp"
    pred = Prediction("transformer-big", "H100", 3, 1.0, 0.1, [size], {"bf16": p}, [], world=world, safe_margin=margin)
    text = " ".join(render(pred).split())  # notes are wrapped at 120 columns
    assert "1296 (safe 1160)" in text
    assert f"leaves {margin:.0%} of the usable memory unused" in text
    assert ("safe under fsdp: 10%, not 5%" in text) is says


def test_world_rejects_bad_sizes_and_strategies():
    with pytest.raises(ValueError):
        World(1, "ddp")
    with pytest.raises(StrategyError):
        World(2, "zero3")


def test_cli_predicts_per_gpu_and_says_so():
    result = CliRunner().invoke(
        main,
        [
            "predict",
            "--model",
            "toy",
            "-p",
            "bf16",
            "--memory",
            "1GiB",
            "--gpus",
            "2",
            "--strategy",
            "ddp,fsdp",
            "--overhead",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "toy per GPU on 2 GPUs, ddp -- PREDICTED" in result.output
    assert "toy per GPU on 2 GPUs, fsdp -- PREDICTED" in result.output
    assert "NCCL's own buffers" in result.output
    # the safe batch's margin is said, once per strategy: 5% under ddp, 10% under fsdp with why


@pytest.mark.parametrize(
    "args, words",
    [
        (["--gpus", "2", "--strategy", "zero3"], "unknown strategy zero3"),
        (["--gpus", "0"], "--gpus"),
    ],
)
def test_cli_bad_world_is_one_line(args, words):
    result = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "1GiB", *args])
    assert result.exit_code == 2
    assert words in result.output
    assert "Traceback" not in result.output


def test_cli_compare_needs_the_same_world(tmp_path):
    from memprobe.core.records.results import ScanResult  # noqa: F401 - the file below is written the way results.py reads it

    runner = CliRunner()
    out = tmp_path / "scan"
    scanned = runner.invoke(
        main,
        [
            *toy_scan("64MiB"),
            "-p",
            "fp32",
            "--max-batch",
            "8",
            "--no-curve",
            "--out",
            str(out),
        ],
    )
    assert scanned.exit_code == 0, scanned.output
    (path,) = list(out.glob("*.json"))
    assert json.loads(path.read_text())["workload"]["name"] == "toy"
    result = runner.invoke(
        main, ["predict", "--model", "toy", "--memory", "8GiB", "--gpus", "2", "--compare", str(path)]
    )
    assert result.exit_code == 1
    assert "was scanned on 1 GPU; this prediction is for 2 GPUs under ddp" in result.output


def test_api_predicts_per_gpu():
    from memprobe.api import predict_max_batch

    prediction = predict_max_batch("toy", "8GiB", "bf16", overhead=0, gpus=2, strategy="fsdp")
    assert prediction.world == "2 GPUs, fsdp"
    assert prediction.precisions["bf16"].max_batch["8GiB"] > 0
    with pytest.raises(ValueError):
        predict_max_batch("toy", "8GiB", "bf16", overhead=0, gpus=2, strategy="zero3")


def test_cli_refuses_what_a_multi_gpu_scan_refuses():
    result = CliRunner().invoke(main, ["predict", "--model", "pix2pixhd", "--memory", "80GiB", "--gpus", "2"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines()[-1].startswith("Error: pix2pixhd: ")
    assert "Traceback" not in result.output


def test_cli_predicts_inference_and_refuses_it_for_several_gpus():
    infer = CliRunner().invoke(
        main, ["predict", "--model", "toy", "-p", "bf16", "--memory", "8GiB", "--mode", "infer", "--overhead", "0"]
    )
    assert infer.exit_code == 0, infer.output
    assert "of inference (2 forward passes under inference_mode)" in " ".join(infer.output.split())  # wrapped at 120
    both = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "8GiB", "--mode", "infer", "--gpus", "2"])
    assert both.exit_code == 2 and "leave --mode at train" in both.output
    short = CliRunner().invoke(main, ["predict", "--model", "toy", "--memory", "8GiB", "--steps", "2"])
    assert short.exit_code == 2 and "3 or more" in short.output
