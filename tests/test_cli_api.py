"""The CLI and the API read the same options one way (memprobe.request): the same answer, or the same error.

Each case runs the command through CliRunner and the API call with the same options; an error must be the same
message (the API's RequestError, the command's one `Error:` line), an answer the same workload and settings.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import memprobe
from memprobe.cli import main
from memprobe.request import RequestError

CPU = ["--device", "cpu", "--cpu-memory-budget", "64MiB"]
CPU_API = {"device": "cpu", "cpu_memory_budget": "64MiB"}


def _error_line(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, args)
    lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert len(lines) == 1, result.output
    return result.exit_code, lines[0]


def test_a_card_that_cannot_train_the_precision_is_the_same_error_in_both():
    """`predict --gpu V100 --precision bf16`: nothing can be predicted. The command said so in a table of "-" (after
    tracing bf16 for nothing) while the API answered max batch 0; now both refuse it with the one message."""
    code, line = _error_line(["predict", "-m", "toy", "--gpu", "V100", "--precision", "bf16"])
    with pytest.raises(RequestError) as raised:
        memprobe.predict_max_batch("toy", gpu="V100", precision="bf16")  # the call issue 39 names, as it is
    assert code == 2
    assert line == f"Error: {raised.value}"
    assert "the V100 SXM2 16GB cannot train in bf16 (compute capability 7.0" in line


PREDICT_ERRORS = [
    (["-p", "fp8"], {"precision": "fp8"}, "unknown precision(s) fp8 (known: fp32, tf32, fp16, bf16)"),
    (["-p", ","], {"precision": ","}, "give at least one precision"),
    (["--gpus", "2", "--strategy", "zero3"], {"gpus": 2, "strategy": "zero3"}, "unknown strategy zero3"),
    (["--memory", "1x"], {"memory": "1x"}, "not a size: '1x'"),
    (["--memory", "0"], {"memory": "0"}, "must be larger than 0"),
    (["--gpu", "zz"], {"memory": None, "gpu": "zz"}, "unknown GPU 'zz'"),
    (["--overhead", "lots"], {"overhead": "lots"}, "--overhead: not a size: 'lots'"),
    (["--memory", "1GiB", "--overhead", "2GiB"], {"memory": "1GiB", "overhead": "2GiB"}, "is not larger than"),
    (["--seq-len", "64"], {"seq_len": 64}, "apply to the LLM workloads"),
]


@pytest.mark.parametrize("args, kwargs, says", PREDICT_ERRORS, ids=[" ".join(a) for a, _k, _s in PREDICT_ERRORS])
def test_predict_refuses_what_the_api_refuses_in_the_same_words(args, kwargs, says):
    code, line = _error_line(["predict", "-m", "toy", *args])
    with pytest.raises(ValueError) as raised:  # RequestError; or a model's CustomModelError
        memprobe.predict_max_batch("toy", **{"precision": "fp32", **kwargs})
    assert says in line and says in str(raised.value)
    message = getattr(raised.value, "message", str(raised.value))
    assert message in line, (line, message)
    assert code == (1 if "--gpu" in args else 2)  # a card name that names nothing exits 1, as an unknown model


SCAN_ERRORS = [
    (["--device", "cpu"], {"device": "cpu"}, "--device cpu needs --cpu-memory-budget"),
    (["--device", "cpu", "--cpu-memory-budget", "0"], {"device": "cpu", "cpu_memory_budget": "0"}, "larger than 0"),
    (CPU + ["-p", "fp32,fp8"], {**CPU_API, "precision": "fp32,fp8"}, "unknown precision(s) fp8"),
    (CPU + ["--batch", "0"], {**CPU_API, "batches": [0]}, "batch sizes must be at least 1"),
    (CPU + ["--seq-len", "64"], {**CPU_API, "seq_len": 64}, "apply to the LLM workloads"),
    (CPU + ["--lora", "16"], {**CPU_API, "lora": "16"}, "apply to the LLM workloads"),
    (["--memory-cap", "lots"], {"memory_cap": "lots"}, "not a size: 'lots'"),
]


@pytest.mark.parametrize("args, kwargs, says", SCAN_ERRORS, ids=[" ".join(a) for a, _k, _s in SCAN_ERRORS])
def test_scan_refuses_what_find_max_batch_refuses_in_the_same_words(args, kwargs, says, scan_options_seen):
    code, line = _error_line(["scan", "-m", "toy", "-p", "fp32", *args])
    with pytest.raises(ValueError) as raised:
        memprobe.find_max_batch("toy", **{"precision": "fp32", **kwargs})
    assert code == 2
    assert says in line and getattr(raised.value, "message", str(raised.value)) in line
    assert not scan_options_seen  # refused before anything ran


@pytest.mark.parametrize(
    "args, kwargs",
    [
        (
            ["-m", "toy-llama", "--seq-len", "64", "-p", "bf16"],
            {"model": "toy-llama", "seq_len": 64, "precision": "bf16"},
        ),
        (
            ["-m", "toy", "-p", "fp32,fp16", "--steps", "4", "--batch", "2,8", "--curve", "2,4", "--max-trials", "9"],
            {"model": "toy", "precision": "fp32,fp16", "steps": 4, "batches": [2, 8], "curve_batches": [2, 4]}
            | {"max_trials": 9},
        ),
        (
            ["-m", "toy-llama", "--search", "seq-len", "--batch", "2", "--checkpointing", "-p", "bf16"],
            {"model": "toy-llama", "search": "seq-len", "batches": [2], "checkpointing": True, "precision": "bf16"},
        ),
    ],
    ids=["llm-seq-len-variant", "steps-batches-curve", "seq-len-search"],
)
def test_scan_and_find_max_batch_run_the_same_workload_with_the_same_options(args, kwargs, scans_seen, tmp_path):
    result = CliRunner().invoke(main, ["scan", *args, *CPU, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    memprobe.find_max_batch(**kwargs, **CPU_API)
    assert len(scans_seen) == 2
    assert scans_seen[0] == scans_seen[1]


def test_predict_and_predict_max_batch_trace_the_same_request(monkeypatch):
    """The sizes (with what each card cannot train), precisions, steps and world the trace is asked for: the same
    from `predict` and from predict_max_batch."""
    pytest.importorskip("torch")
    import memprobe.predict.summary as summary
    from memprobe.predict.trace import PredictError

    asked = []

    def recorded(workload, precisions, sizes, *args, steps, world=None, **kwargs):
        labels = [(s.label, s.capacity_bytes, s.cannot_train) for s in sizes]
        asked.append((workload.name, list(precisions), labels, steps, world.label if world else None))
        raise PredictError("recorded")

    monkeypatch.setattr(summary, "predict", recorded)
    for args, kwargs in [
        (["--gpu", "V100,H100", "-p", "bf16,fp32"], {"memory": None, "gpu": "V100,H100", "precision": "bf16,fp32"}),
        (
            ["--memory", "8GiB", "--gpus", "2", "--strategy", "fsdp", "-p", "bf16"],
            {"memory": "8GiB", "gpus": 2, "strategy": "fsdp", "precision": "bf16"},
        ),
        (
            ["--memory", "11GB", "--steps", "4", "--overhead", "1GiB", "-p", "fp16"],
            {"memory": "11GB", "steps": 4, "overhead": "1GiB", "precision": "fp16"},
        ),
    ]:
        asked.clear()
        code, line = _error_line(["predict", "-m", "toy", *args])
        assert (code, line) == (1, "Error: recorded")
        with pytest.raises(PredictError):
            memprobe.predict_max_batch("toy", **kwargs)
        assert len(asked) == 2 and asked[0] == asked[1], asked
    assert [s[2] for s in asked[0][2]] == [()]  # 11GB: a size, no card, every precision
    assert asked[0][2][0][0] == "11GB"


def test_a_card_that_cannot_train_one_of_the_precisions_gets_no_answer_for_it_in_both(monkeypatch):
    """V100 and H100 in bf16 and fp32: the V100's bf16 is marked as one it cannot train in (the table's "-" and its
    line; max batch 0 and `cannot_train` in the API), from the same sizes."""
    pytest.importorskip("torch")
    import memprobe.predict.summary as summary
    from memprobe.predict.trace import PredictError

    cannot = []

    def recorded(workload, precisions, sizes, *args, **kwargs):
        cannot.append({s.label: s.cannot_train for s in sizes})
        raise PredictError("recorded")

    monkeypatch.setattr(summary, "predict", recorded)
    _error_line(["predict", "-m", "toy", "--gpu", "V100,H100", "-p", "bf16,fp32"])
    with pytest.raises(PredictError):
        memprobe.predict_max_batch("toy", memory=None, gpu="V100,H100", precision="bf16,fp32")
    assert cannot[0] == cannot[1]
    assert cannot[0]["V100 SXM2 16GB"] == ("tf32", "bf16") and cannot[0]["H100 SXM"] == ()
