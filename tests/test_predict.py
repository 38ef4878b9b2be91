"""memprobe predict on the CPU: fake-tensor traces, the CUDA emulation, the predict command and the no-GPU scan.

The prediction of the toy workload is checked against the CPU's own measurement of the same trial
(memprobe.training.cpu_memory.LiveBytes, the fake allocator of `scan --device cpu`): the live storage bytes the
trace records must match what LiveBytes counts, within TOLERANCE. BERT-Large itself takes about half a
minute to trace, so the transformer paths are checked on the registry's 2-layer BERT (toy-bert-squad).
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from conftest import has_nvidia_gpu  # noqa: E402
from memprobe.core.cards.overhead import OverheadError, overhead_from_files  # noqa: E402
from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.predict.allocator import ALLOC  # noqa: E402
from memprobe.predict.batch_model import PrecisionTraces, _replay  # noqa: E402
from memprobe.predict.edge_search import max_batch_for  # noqa: E402
from memprobe.predict.fake_mode import FakeCudaMode  # noqa: E402
from memprobe.predict.session import fake_session  # noqa: E402
from memprobe.predict.summary import MemorySize, predict  # noqa: E402
from memprobe.predict.trace import TraceSession  # noqa: E402
from memprobe.training.cpu_memory import LiveBytes  # noqa: E402
from memprobe.training.step import Memory, run_step, run_until_state  # noqa: E402
from memprobe.workloads.base import Amp, make_optimizer  # noqa: E402
from memprobe.workloads.toy import build as build_toy  # noqa: E402
from trace_peaks import live_peak  # noqa: E402

TOLERANCE = 0.01  # predicted live bytes vs LiveBytes on the CPU, same trial (they agree exactly today)
H100_RESULT = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "data"
    / "nvidia-h100-80gb-hbm3_bert-large_train_20261121-195009.json"
)
no_gpu_only = pytest.mark.skipif(has_nvidia_gpu(), reason="checks the behaviour on a machine without an NVIDIA GPU")
MiB = 1 << 20


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def toy_traces(registry):
    """The toy's fp32 traces (extrapolated from batches 2 and 3) and a direct trace at batch 10.

    The session is closed before the tests run: while it is open, fake tensors and the CUDA
    emulation are active process-wide.
    """
    with TraceSession(registry["toy"]) as session:
        traces = PrecisionTraces(session, "fp32")
        direct = session.trace("fp32", 10).events
    return traces, direct


def cpu_live_peak(workload, batch: int) -> int:
    """The same trial on the real CPU, measured by LiveBytes (with the fused optimizer the GPU would use)."""
    from torch._subclasses.fake_tensor import FakeTensor

    device = torch.device("cpu")
    assert not isinstance(torch.empty(1), FakeTensor), "a fake-tensor session is still open"
    with LiveBytes() as tracker:
        task = build_toy(workload.params, workload.optimizer, device)
        memory = Memory(device, tracker)
        memory.reset()
        task.start()
        task.optimizers = [make_optimizer(task.model.parameters(), task.optimizer_spec, torch.device("cuda"))]
        amp = Amp("fp32", device)
        inputs = task.make_batch(batch)
        run_until_state(lambda: run_step(task, amp, inputs, "train"), amp, 3, "train")
        return tracker.peak


# --- the trace against the CPU's own measurement ---------------------------------------------------


@pytest.mark.parametrize("batch", [8, 64])
def test_toy_trace_matches_live_bytes_on_the_cpu(registry, toy_traces, batch):
    traces, _ = toy_traces
    events = traces.events_at(batch)
    measured = cpu_live_peak(registry["toy"], batch)
    predicted = live_peak(events)
    assert abs(predicted - measured) <= TOLERANCE * measured, (predicted, measured)
    # The allocator model rounds every block up and adds the 32 MiB cuBLAS workspace of the first GEMM.
    replayed = _replay(events)
    assert replayed.peak_allocated >= predicted + 32 * MiB
    assert replayed.peak_reserved >= replayed.peak_allocated


def test_toy_extrapolation_is_checked_and_exact(toy_traces):
    traces, direct = toy_traces
    assert traces.how == "checked"
    assert traces.events_at(10) == direct


def test_max_batch_is_the_edge_of_the_replayed_run(toy_traces):
    traces, _ = toy_traces
    capacity = 40 * MiB
    found, fail = max_batch_for(traces.replay_at, capacity, guess=3)
    assert found > 3
    assert traces.replay_at(found, capacity).fits
    assert not traces.replay_at(found + 1, capacity).fits
    assert fail is not None and fail.oom is not None


def test_the_run_replayed_is_the_trial_and_the_steps_after_it(toy_traces):
    """A scan's fit is its 3-step trial, then 3 warm-up and 10 timed steps in the same process: the replay goes on
    with the trial's last step 13 more times (fewer once the cache settles), never below the trial's own peak."""
    traces, _ = toy_traces
    ((start, end, extra),) = traces.repeat_at(10)
    assert extra == 13 and (start, end) == traces.model.traces[0].step_at[-2:]
    for batch in (2, 10, 40):
        run = traces.replay_at(batch)
        trial = _replay(traces.events_at(batch))
        assert run.peak_reserved >= trial.peak_reserved and run.peak_allocated >= trial.peak_allocated


def test_predict_toy_in_two_precisions(registry):
    sizes = [MemorySize("40MiB", 40 * MiB, 40 * MiB), MemorySize("80MiB", 80 * MiB, 80 * MiB)]
    pred = predict(registry["toy"], ["fp32", "fp16"], sizes)
    for p in pred.precisions.values():
        assert 0 < p.max_batch["40MiB"] < p.max_batch["80MiB"]
        assert p.how == "checked"
        assert p.model_reserved is not None and p.model_reserved.per_sample_bytes > 0


# --- CUDA code paths on fake CPU tensors -------------------------------------------------------------


class OpLog(FakeCudaMode):
    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, tuple, torch.dtype]] = []

    def observe(self, func, args, kwargs, out):
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.ops.append((str(func), tuple(t.shape), t.dtype))


def test_tiny_bert_runs_fused_attention_and_bool_dropout_masks(registry):
    with TraceSession(registry["toy-bert-squad"]) as session:
        traces = {p: session.trace(p, 2) for p in ("fp32", "fp16")}
        choices = dict(session.behaviour.sdpa_choices)
    # an H100 with torch 2.11's cuDNN 9.19 runs cuDNN attention for half types, memory-efficient for fp32
    assert set(choices) == {("efficient", "float32"), ("cudnn", "float16")}
    for trace in traces.values():
        labels = {str(e[3]) for e in trace.events if e[0] == ALLOC}
        # the math path would materialize (batch, heads, seq, seq) scores with bmm and _softmax
        assert "aten.bmm.default" not in labels and "aten._softmax.default" not in labels
        assert "aten.native_dropout.default" in labels and "aten.bernoulli_.float" not in labels


def test_emulated_autocast_follows_the_cuda_policy():
    with fake_session() as (_, behaviour), OpLog() as log:
        linear = torch.nn.Linear(16, 16)
        x = torch.randn(4, 16)
        with behaviour.autocast(torch.float16):
            y = linear(x)
            linear(x)
            normed = torch.nn.functional.layer_norm(y, (16,))
            probs = torch.softmax(y, -1)
    assert y.dtype == torch.float16  # lower-precision op
    assert normed.dtype == torch.float32  # layer_norm is fp32 on CUDA (bf16/fp16 on the CPU)
    assert probs.dtype == torch.float32  # softmax: fp32_set_opt_dtype
    casts = [op for op in log.ops if op[0] == "aten._to_copy.default" and op[1] == (16, 16)]
    assert len(casts) == 1  # the fp16 copy of the weight is cached within the autocast region


def test_weight_copies_made_while_recomputing_a_checkpoint_go_with_its_autocast_region():
    # On CUDA, checkpointing's recomputation enters torch.autocast and its exit clears the autocast cache;
    # copies kept past it held memory a GPU frees, and made the first traced step differ from the next.
    native = torch.clear_autocast_cache
    with fake_session() as (_, behaviour):
        linear = torch.nn.Linear(16, 16)
        x = torch.randn(4, 16, requires_grad=True)
        with behaviour.autocast(torch.float16):
            y = torch.utils.checkpoint.checkpoint(linear, x, use_reentrant=False)
        assert not behaviour._cache
        y.float().sum().backward()
        assert not behaviour._cache
    assert torch.clear_autocast_cache is native


def test_emulation_is_undone_after_the_session():
    with fake_session():
        pass
    with OpLog() as log:
        torch.nn.functional.dropout(torch.ones(8, 8), 0.5)
    assert not any(op[0] == "aten.native_dropout.default" for op in log.ops)  # the CPU composite again


def test_data_dependent_questions_get_well_formed_answers():
    with fake_session(), FakeCudaMode() as mode:
        mask = torch.ones(4, 8, dtype=torch.bool)
        assert bool(mask.all()) is True
        assert bool(mask.any()) is False
        picked = torch.arange(32).view(4, 8)[mask]
        assert picked.shape == (32,)  # a boolean index selects its worst case: everything
    assert mode.answers[("all", True)] == 1 and mode.answers[("any", False)] == 1


# --- the overhead carried over from a real card ------------------------------------------------------


def test_overhead_is_the_one_guide_derives_from_the_h100_scan():
    overhead = overhead_from_files([H100_RESULT])
    assert overhead.bytes == 80 * 2**30 - 84368621568  # datasheet 80 GiB minus the capacity the scan recorded
    source = overhead.source
    assert "H100" in source


def test_an_override_without_a_result_or_a_path_is_an_error(tmp_path):
    with pytest.raises(OverheadError, match="no scan result"):
        overhead_from_files([tmp_path])
    with pytest.raises(OverheadError, match="does not exist"):
        overhead_from_files([tmp_path / "gone"])


# --- the command line ------------------------------------------------------------------------------


def error_lines(result):
    return [line for line in result.output.splitlines() if line.startswith("Error")]


def test_predict_command_labels_its_output_predicted(run, tmp_path):
    result = run("predict", "--model", "toy", "--memory", "40MiB,80MiB", "--precision", "fp32", "--overhead", "0")
    assert result.exit_code == 0, result.output
    assert "PREDICTED, not measured" in result.output
    assert "40MiB: predicted max batch" in result.output and "80MiB: predicted max batch" in result.output
    assert "0.00 GiB not allocatable, given with --overhead" in result.output


def test_predict_command_subtracts_the_measured_overhead(run):
    result = run("predict", "--model", "toy", "--memory", "2GiB", "--precision", "fp32", "--overhead-from", H100_RESULT)
    assert result.exit_code == 0, result.output
    assert "1.43 GiB not allocatable" in result.output


def test_predict_unknown_model_is_one_line(run):
    result = run("predict", "--model", "nosuch")
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert "unknown model 'nosuch'" in line


def test_predict_workload_that_cannot_be_built_is_one_line(run, tmp_path):
    module = tmp_path / "broken_model.py"
    module.write_text("def build(device, precision):\n    raise RuntimeError('no weights for you')\n")
    result = run("predict", "--model", f"{module}:build", "--precision", "fp32")
    assert result.exit_code == 1
    (line,) = error_lines(result)
    assert "broken_model.py:build" in line and "no weights for you" in line and "Traceback" not in result.output


@pytest.mark.parametrize("args", [["--memory", "lots"], ["--precision", "fp64"], ["--memory", ""]])
def test_predict_bad_options(run, args):
    result = run("predict", "--model", "toy", *args)
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_predict_memory_below_the_overhead(run):
    result = run("predict", "--model", "toy", "--memory", "1GiB", "--overhead-from", H100_RESULT)
    assert result.exit_code == 2
    assert "not larger than the 1.43 GiB the allocator cannot use" in result.output


@no_gpu_only
def test_scan_without_a_gpu_offers_the_prediction(run, tmp_path):
    result = run("scan", "--model", "toy", "--precision", "fp32", "--out", tmp_path)
    assert result.exit_code == 2
    (line,) = error_lines(result)
    assert "no CUDA" in line or "no NVIDIA" in line
    assert "memprobe predict --model toy --precision fp32 --memory 11GiB,24GiB,48GiB,80GiB" in line
    assert "--predict-if-no-gpu" in line
    assert list(tmp_path.iterdir()) == []


@no_gpu_only
def test_scan_without_a_gpu_predicts_when_asked(run, tmp_path):
    result = run("scan", "--model", "toy", "--precision", "fp32", "--out", tmp_path, "--predict-if-no-gpu")
    assert result.exit_code == 0, result.output
    assert "predicting instead of measuring" in result.output
    assert "PREDICTED, not measured" in result.output
    assert "80GiB: predicted max batch" in result.output
    assert list(tmp_path.iterdir()) == []  # a prediction writes no result file


def test_deep_copied_layers_stay_in_the_sessions_fake_mode():
    # nn.TransformerEncoder deep-copies its layer; the copies must move to the device like the original
    import copy

    from torch import nn

    with fake_session() as (fake, _):
        copied = copy.deepcopy(nn.Linear(4, 4))
        assert copied.weight.fake_mode is fake and isinstance(copied.weight, nn.Parameter)
        layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True)
        model = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).to(torch.device("cpu"))
        assert sum(p.numel() for p in model.parameters()) == 2 * sum(p.numel() for p in layer.parameters())
    from torch._subclasses.fake_tensor import FakeTensor

    assert FakeTensor.__deepcopy__ is torch.Tensor.__deepcopy__  # restored when the session ends


def test_the_readme_user_model_predicts(run):
    result = run("predict", "--model", "examples/my_model.py:build", "--precision", "bf16", "--memory", "24GiB")
    assert result.exit_code == 0, result.output
    assert "predicted max batch" in result.output


def test_bool_of_a_fake_tensor_is_answered_under_inference_mode_too(registry):
    # transformers' bidirectional mask asks bool(mask.all()): under inference_mode that arrives as
    # is_nonzero (no autograd key above to decompose it into item()), which fake tensors cannot answer.
    with TraceSession(registry["toy"]):
        mask = torch.ones(2, 8, dtype=torch.bool)
        with torch.inference_mode():
            assert bool(mask.all()) is True
            assert torch.zeros(3).sum().item() == 0.0


def test_inference_is_traced_under_inference_mode_and_needs_less_than_training(registry):
    size = [MemorySize("cap", 256 * MiB, 256 * MiB)]
    train = predict(registry["toy-bert-squad"], ["bf16"], size)
    infer = predict(registry["toy-bert-squad"], ["bf16"], size, steps=2, mode="infer")
    assert (
        infer.mode == "infer"
        and infer.precisions["bf16"].max_batch["cap"] > train.precisions["bf16"].max_batch["cap"] > 0
    )


def test_a_sequence_length_prediction_speaks_of_lengths(run, tmp_path):
    result = run(
        "predict",
        "--model",
        "toy-llama",
        "--search",
        "seq-len",
        "--memory",
        "1GiB",
        "--precision",
        "bf16",
        "--overhead",
        "0",
    )
    assert result.exit_code == 0, result.output
    table = [line for line in result.stdout.splitlines() if line.startswith("|")]
    assert "predicted MiB/token" in table[0] and "1GiB: predicted max length (tokens)" in table[0]
    assert "GiB/sample" not in result.stdout and "max batch" not in result.stdout
    # a 2-layer, 64-wide model holds long sequences in 1 GiB: past the search's cap, "65536+ (cap)"
    assert int(table[2].split("|")[-2].split("+")[0]) > 1000


def test_a_prediction_names_the_libraries_a_scan_ran_differently():
    from memprobe.core.records.environment import Environment
    from memprobe.predict.summary import library_versions, version_note

    mine = {"torch": "2.13.0+cpu", "transformers": "5.24.0", "timm": "1.0.29"}
    same = Environment(versions={"torch": "2.13.0", "transformers": "5.24.0", "timm": "1.0.29"})
    assert version_note(mine, same) == ""  # torch's build tag is not a difference
    other = Environment(versions={"torch": "2.11.0", "transformers": "5.17.0", "timm": "1.0.29"})
    note = version_note(mine, other)
    assert note.startswith("the scan ran torch 2.11.0 (here 2.13.0+cpu), transformers 5.17.0 (here 5.24.0):")
    assert version_note(mine, Environment()) == ""  # an old file without versions: nothing to say
    assert set(library_versions()) == {"torch", "transformers", "timm"}
