"""LLM workload variants from the command line (variants.py, cli_variants.py) and the nothing-fits answer."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.core.records.records import Timed
from memprobe.core.records.results import PrecisionResult, ScanResult, read_result, write_result
from memprobe.core.records.settings import NothingFits
from memprobe.core.workload.registry import Workload, load_registry
from memprobe.core.workload.variants import (
    VariantError,
    VariantRequest,
    apply_variant,
    base_name,
    parse_lora,
    search_axis,
)
from memprobe.probe.nothing_fits import described, explain_nothing_fits

REGISTRY = load_registry()
LLAMA = REGISTRY["llama-8b"]
GiB = 2**30


def test_no_request_keeps_the_workload():
    assert apply_variant(LLAMA, VariantRequest(), ["bf16"]) is LLAMA


def test_each_setting_lands_in_params_and_name():
    v = apply_variant(LLAMA, VariantRequest(seq_len=4096, checkpointing=True, lora=16), ["bf16"])
    assert v.name == "llama-8b+seq4096+ckpt+lora16"
    assert (v.params["seq_len"], v.params["checkpointing"], v.params["lora"]) == (4096, True, 16)
    assert LLAMA.params["seq_len"] == 2048 and not LLAMA.params["checkpointing"]  # the entry is untouched
    assert "activation checkpointing" in v.description and "LoRA r=16" in v.description


def test_sequence_length_search_sets_the_axis_and_batch():
    v = apply_variant(REGISTRY["llama-1b"], VariantRequest(search="seq-len", batch=2, checkpointing=True), ["bf16"])
    assert v.name == "llama-1b+ckpt+maxseq@b2"
    assert (v.params["axis"], v.params["batch"]) == ("seq_len", 2) and "seq_len" not in v.params
    assert search_axis(v.params) == "seq_len" and search_axis(LLAMA.params) == "batch"
    assert base_name(v.name) == "llama-1b" and base_name("bert-large") == "bert-large"


@pytest.mark.parametrize(
    "workload,request_,precisions,match",
    [
        ("bert-large", VariantRequest(checkpointing=True), ["bf16"], "apply to the LLM workloads"),
        ("llama-8b", VariantRequest(lora=16), ["fp32", "bf16"], "bf16 or fp16 only"),
        ("llama-8b", VariantRequest(search="seq-len", seq_len=4096), ["bf16"], "drop --seq-len"),
        ("llama-8b", VariantRequest(search="tokens"), ["bf16"], "--search must be"),
        ("llama-8b", VariantRequest(search="seq-len", batch=0), ["bf16"], "--batch must be at least 1"),
    ],
)
def test_impossible_variants_are_one_line_errors(workload, request_, precisions, match):
    with pytest.raises(VariantError, match=match):
        apply_variant(REGISTRY[workload], request_, precisions)


@pytest.mark.parametrize("text,rank", [(None, None), ("16", 16), ("r=16", 16), (" R=8 ", 8)])
def test_parse_lora(text, rank):
    assert parse_lora(text) == rank


@pytest.mark.parametrize("text", ["0", "r=", "sixteen", "-4"])
def test_parse_lora_rejects(text):
    with pytest.raises(VariantError):
        parse_lora(text)


@pytest.mark.parametrize(
    "args,message",
    [
        (["scan", "-m", "llama-1b", "--lora", "16", "-p", "fp32,bf16"], "bf16 or fp16 only"),
        (["scan", "-m", "llama-1b", "--search", "seq-len", "--batch", "1,2"], "one batch"),
        (["scan", "-m", "bert-large", "--checkpointing"], "apply to the LLM workloads"),
        (["scan", "-m", "llama-1b", "--lora", "big"], "--lora expects a rank"),
        (["predict", "-m", "resnet50", "--seq-len", "128"], "apply to the LLM workloads"),
    ],
)
def test_cli_usage_errors_are_one_line(args, message):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


# --- nothing fits --------------------------------------------------------------------------------


def _result(max_batch: int, capacity: int = 79 * GiB) -> ScanResult:
    result = ScanResult(workload=LLAMA.to_dict(), environment={"gpu": {"name": "NVIDIA H100 80GB HBM3"}}, settings={})
    result.precisions["bf16"] = PrecisionResult(
        "bf16", status="done", max_batch=max_batch, stop="nothing-fits", capacity_bytes=capacity
    )
    return result


def fake_need(workload, precision):
    """What a trace would say, by setting: LoRA fits, checkpointing alone does not."""
    p = workload.params
    base = 40 * GiB if p.get("lora") else 140 * GiB
    return base - (2 * GiB if p.get("checkpointing") else 0)


def test_nothing_fits_says_the_need_and_what_would_fit(tmp_path):
    result = _result(0)
    lines = explain_nothing_fits(result, LLAMA, need=fake_need)
    assert len(lines) == 1 and described(result, LLAMA) == lines  # the stored record says the same paragraph
    path = write_result(result, tmp_path / "r.json")
    text = lines[0]
    assert "nothing trains on NVIDIA H100 80GB HBM3 (79.0 GiB usable), not even batch 1" in text
    assert "about 140.0 GiB" in text and "predicted" in text
    assert "Predicted to fit at 1: --lora 16 (40.0 GiB); --lora 16 --checkpointing (38.0 GiB)" in text
    assert "Still too big: --checkpointing (138.0 GiB)" in text
    saved = read_result(path).precisions["bf16"].settings.nothing_fits
    assert saved.need_bytes == 140 * GiB
    assert [(a["flags"], a["fits"]) for a in saved.alternatives] == [
        ("--checkpointing", False),
        ("--lora 16", True),
        ("--lora 16 --checkpointing", True),
    ]


def test_nothing_fits_is_silent_when_something_fits_and_survives_a_failed_trace():
    assert explain_nothing_fits(_result(3), LLAMA, need=fake_need) == []

    def broken(workload, precision):
        raise RuntimeError("cannot trace")

    (line,) = explain_nothing_fits(_result(0), LLAMA, need=broken)
    assert "could not be traced: RuntimeError: cannot trace" in line


def test_nothing_fits_skips_settings_already_used_and_names_the_sequence_length():
    variant = apply_variant(LLAMA, VariantRequest(search="seq-len", lora=16), ["bf16"])
    result = _result(0)
    (line,) = explain_nothing_fits(result, variant, need=fake_need)
    assert "not even a sequence length of 1" in line
    assert [a["flags"] for a in result.precisions["bf16"].settings.nothing_fits.alternatives] == ["--checkpointing"]


def test_nothing_fits_tries_each_distinct_setting_once():
    variant = apply_variant(LLAMA, VariantRequest(checkpointing=True), ["bf16"])
    result = _result(0)
    explain_nothing_fits(result, variant, need=fake_need)
    alternatives = result.precisions["bf16"].settings.nothing_fits.alternatives
    assert [(a["flags"], a["need_bytes"]) for a in alternatives] == [("--lora 16", 38 * GiB)]


# --- the LLM edges side by side (compare/llm.py, report --llm) ---------------------------------------


def _scan(name_request: VariantRequest, edge: int, created: str, tokens_per_s: float = 1000.0, need=None) -> ScanResult:
    variant = apply_variant(REGISTRY["llama-1b"], name_request, ["bf16"])
    result = ScanResult(
        workload=variant.to_dict(), environment={"gpu": {"name": "NVIDIA H100 80GB HBM3"}}, settings={}, created=created
    )
    p = PrecisionResult("bf16", status="done", max_batch=edge, capacity_bytes=79 * GiB)
    if edge:
        tokens = edge * (variant.params.get("seq_len") or 1)
        p.throughput = Timed(outcome="fit", units_per_step=tokens, units_per_s=tokens_per_s, mfu=0.41)
    if need:
        p.settings.nothing_fits = NothingFits(need_bytes=need)
    result.precisions["bf16"] = p
    return result


def test_llm_rows_compare_each_setting_with_plain_in_the_same_search():
    from memprobe.compare.llm import llm_rows

    results = [
        _scan(VariantRequest(), 8, "2026-11-23T10:00:00"),
        _scan(VariantRequest(), 7, "2026-11-22T10:00:00"),  # older: not shown
        _scan(VariantRequest(checkpointing=True), 40, "2026-11-23T10:05:00"),
        _scan(VariantRequest(search="seq-len"), 17000, "2026-11-23T10:10:00"),
        _scan(VariantRequest(search="seq-len", checkpointing=True), 51000, "2026-11-23T10:15:00"),
    ]
    rows = llm_rows(results)
    assert [(r["searched"], r["setting"], r["edge"], r["vs plain"]) for r in rows] == [
        ("batch at seq 2048", "plain", 8, "1.00x"),
        ("batch at seq 2048", "checkpointing", 40, "5.00x"),
        ("seq len at batch 1", "plain", 17000, "1.00x"),
        ("seq len at batch 1", "checkpointing", 51000, "3.00x"),
    ]
    assert rows[0]["tokens/step"] == "16,384" and rows[0]["MFU %"] == "41.0" and rows[0]["model"] == "llama-1b"


def test_llm_rows_say_nothing_fits_with_the_traced_need_and_skip_other_families():
    from memprobe.compare.llm import llm_rows

    bert = ScanResult(workload=REGISTRY["bert-large"].to_dict(), environment={}, settings={})
    bert.precisions["bf16"] = PrecisionResult("bf16", status="done", max_batch=100)
    rows = llm_rows([_scan(VariantRequest(checkpointing=True), 0, "2026-11-23", need=141 * GiB), bert])
    assert len(rows) == 1
    assert rows[0]["edge"] == "nothing fits (needs ~141.0 GiB, traced)" and rows[0]["vs plain"] == "-"


def test_report_llm_from_files(tmp_path):
    write_result(_scan(VariantRequest(), 8, "2026-11-23T10:00:00"), tmp_path / "a.json")
    write_result(_scan(VariantRequest(lora=16), 12, "2026-11-23T10:01:00"), tmp_path / "b.json")
    out = CliRunner().invoke(main, ["report", "--llm", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "LoRA r=16" in out.output and "1.50x" in out.output
    as_json = CliRunner().invoke(main, ["report", "--llm", "--format", "json", str(tmp_path)])
    assert '"setting": "LoRA r=16"' in as_json.output


def test_seq_len_reaches_each_model_of_a_mixed_list():
    # --seq-len sets a registry LLM's length (a variant) and shapes an hf: model given by name, in one list
    from memprobe.request import ModelRequest, workloads_of

    workloads = workloads_of(ModelRequest(["toy-llama,hf:gpt2-large"], seq_len=64), ["bf16"])
    assert [(w.name, w.params.get("seq_len")) for w in workloads] == [("toy-llama+seq64", 64), ("hf:gpt2-large", 64)]


def test_the_need_is_traced_in_a_child_process_by_module_name():
    """probe does not import predict: the default need runs `python -m memprobe.predict.need` and reads its answer."""
    pytest.importorskip("torch")
    from memprobe.probe.nothing_fits import NeedError, _default_need

    toy = REGISTRY["toy"]
    assert _default_need(toy, "fp32") > 0
    broken = Workload.from_dict({**toy.to_dict(), "params": {**toy.params, "layers": "three"}})
    with pytest.raises(NeedError, match="three"):  # the child's own error, passed on
        _default_need(broken, "fp32")


def test_a_need_child_that_answers_no_need_is_a_need_error_not_a_traceback():
    import sys

    import memprobe.probe.nothing_fits as nothing_fits

    for printed, says in (
        ("print('garbage')", "answered no need: not a NeedAnswer"),
        ("print('{}')", "answered no need"),
        ("print('no answer', file=sys.stderr); sys.exit(4)", "ended with exit code 4: no answer"),
    ):
        child = [sys.executable, "-c", f"import sys; sys.stdin.readline(); {printed}"]
        with pytest.raises(nothing_fits.NeedError, match=says):
            nothing_fits._default_need(REGISTRY["toy"], "fp32", command=child)
