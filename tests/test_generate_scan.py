"""`memprobe scan --mode generate`: the CPU scan of a tiny Llama's generation with the fake allocator, its result
file (schema 4: the generation record, the phases timed apart), the arithmetic of that record, and bad input.

The scan runs the real code path (trial processes, the search, the fresh-process proof, the timed generation) on
the CPU, where `--cpu-memory-budget` is the allocator's limit (training/cpu_memory.LiveBytes).
"""

from __future__ import annotations

import json

import pytest

from fakes import proven_point
from memprobe.core.records.generation import GenerationRequest, generation_record, generation_variant
from memprobe.core.records.records import Timed
from memprobe.core.records.results import SCHEMA_VERSION, read_result
from memprobe.core.workload.registry import load_registry

REGISTRY = load_registry()
GEN = ["--mode", "generate", "--prompt-len", "8", "--new-tokens", "2", "-p", "fp32"]


@pytest.mark.slow
def test_cpu_scan_finds_the_most_concurrent_sequences(run, tmp_path):
    args = ["scan", "--model", "toy-llama", "--device", "cpu", "--cpu-memory-budget", "1MiB", *GEN]
    got = run(*args, "--no-curve", "--out", tmp_path)
    assert got.exit_code == 0, got.output
    (path,) = tmp_path.glob("cpu_toy-llama-p8-n2_generate_*.json")
    result = read_result(path)
    assert (result.schema_version, result.mode) == (SCHEMA_VERSION, "generate")
    p = result.precisions["fp32"]
    b = p.max_batch
    assert b and p.proof.fits == b and p.proof.fails == b + 1
    assert p.settings.task.extra["weights_dtype"] == "float32" and p.settings.task.optimizer == "none"
    timed = p.throughput
    assert timed.prefill_seconds > 0 and timed.decode_seconds > 0
    assert timed.prefill_tokens_per_s == pytest.approx(b * 8 / timed.prefill_seconds)
    assert timed.decode_tokens_per_s == pytest.approx(b * 1 / timed.decode_seconds)  # N - 1 decode forwards
    gen = p.generation
    per_token = 2 * 2 * 2 * 16 * 4  # keys and values, 2 layers, 2 KV heads, 16 wide, fp32
    assert (gen.sequences, gen.context, gen.kv_bytes_per_token) == (b, 10, per_token)
    assert gen.kv_cache_bytes == b * 10 * per_token
    assert gen.weights_bytes + gen.kv_cache_bytes + gen.activation_bytes == gen.peak_allocated
    assert gen.kv_capacity_tokens == (gen.capacity_bytes - gen.weights_bytes - gen.activation_bytes) // per_token
    assert gen.kv_capacity_sequences >= b  # B's caches fit beside the weights and B's own activation
    assert "proof" in json.loads(path.read_text())["precisions"]["fp32"]


def test_generation_record_splits_the_peak_and_gives_the_capacity_and_the_formula():
    timed = Timed(batch=10, outcome="fit", peak_allocated=1000 + 400 + 250, peak_reserved=1700, kv_cache_bytes=400)
    timed.prefill_seconds, timed.prefill_tokens_per_s, timed.decode_tokens_per_s = 0.5, 100.0, 50.0
    settings = {"prompt_len": 30, "new_tokens": 10, "prefill_chunk": None}
    gen = generation_record(settings, 10, 1, 1000, 3000, 4000, timed)
    assert (gen.weights_bytes, gen.kv_cache_bytes, gen.activation_bytes, gen.slack_bytes) == (1000, 400, 250, 50)
    assert gen.kv_capacity_tokens == 3000 - 1000 - 250 and gen.kv_capacity_sequences == (3000 - 1250) // 40
    assert gen.vllm_formula_tokens == int(0.92 * 4000) - 1250 and gen.vllm_formula.startswith("formula, not measured")
    assert (gen.time_to_first_token_s, gen.decode_tokens_per_s) == (0.5, 50.0)
    again = type(gen).from_dict(json.loads(json.dumps(gen.to_dict())))
    assert again == gen


def test_generation_variant_names_and_params():
    llama = REGISTRY["llama-8b"]
    made = generation_variant(llama, GenerationRequest(8192, 64, 512))
    assert made.name == "llama-8b+p8192+n64+c512" and made.unit == "tokens"
    assert made.params["generate"] == {"prompt_len": 8192, "new_tokens": 64, "prefill_chunk": 512}
    assert "seq_len" not in made.params
    assert generation_variant(llama, GenerationRequest()).params["generate"]["prompt_len"] == 2048
    over = generation_variant(llama, GenerationRequest(new_tokens=64), search="seq-len", batch=4)
    assert over.name == "llama-8b+n64+maxprompt@b4" and over.params["axis"] == "seq_len" and over.params["batch"] == 4


@pytest.mark.parametrize(
    "args, says",
    [
        (["-m", "toy", "--mode", "generate"], "runs causal LMs: llama-* registry workloads"),
        (["-m", "bert-large", "--mode", "generate"], "bert-large is family bert-pretraining"),
        (["-m", "toy-llama", "--mode", "generate", "--prompt-len", "131000", "--new-tokens", "100"], "131072"),
        (["-m", "toy-llama", "--mode", "generate", "--new-tokens", "0"], "must be at least 1"),
        (["-m", "toy-llama", "--mode", "generate", "--prompt-len", "16", "--prefill-chunk", "32"], "--prefill-chunk"),
        (["-m", "toy-llama", "--prefill-chunk", "8"], "apply to --mode generate; this is --mode train"),
        (["-m", "toy-llama", "--mode", "infer", "--new-tokens", "8"], "this is --mode infer"),
        (["-m", "toy-llama", "--mode", "generate", "--checkpointing"], "--checkpointing: training settings"),
    ],
)
@pytest.mark.parametrize("command", ["scan", "predict"])
def test_bad_generation_input_is_one_error_line(run, tmp_path, command, args, says):
    extra = ["--device", "cpu", "--cpu-memory-budget", "1MiB", "--out", tmp_path] if command == "scan" else []
    got = run(command, *args, *extra)
    assert got.exit_code == 2, got.output
    errors = [line for line in got.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and says in errors[0], got.output
    assert "Traceback" not in got.output


def test_generation_frontier_walks_contexts_and_reports_them(tmp_path, monkeypatch):
    """`scan --search frontier --mode generate` over fake point scans: the max concurrent sequences at contexts
    1k, 2k, 4k, ... (prompts of context - N) and the max context (prompt found + N) at 1, 2, 4, ... sequences, the
    prompt search capped where the model's positions end."""
    from memprobe.core.records.frontier import BATCH_AT_SEQ, SEQ_AT_BATCH, ladder_of, point_workload
    from memprobe.probe import frontier as probe_frontier
    from memprobe.probe.options import ScanOptions

    tokens, new = 200_000, 64  # the fake card holds sequences x context <= tokens
    template = generation_workloads_frontier(new)
    assert template.name == "llama-8b+n64" and ladder_of(template, 1 << 20) == (1024, 131072, new)
    at_4k = point_workload(template, BATCH_AT_SEQ, 4096)
    assert at_4k.name == "llama-8b+p4032+n64" and at_4k.params["generate"]["prompt_len"] == 4032
    at_b2 = point_workload(template, SEQ_AT_BATCH, 2)
    assert at_b2.name == "llama-8b+n64+maxprompt@b2" and (at_b2.params["axis"], at_b2.params["batch"]) == ("seq_len", 2)
    caps = []

    def fake_scan(variant, opts, out_dir, progress):
        given = variant.params["generate"]
        if variant.params.get("axis") == "seq_len":
            caps.append(opts.max_batch)
            n = min(opts.max_batch, tokens // variant.params["batch"] - new)
        else:
            n = tokens // (given["prompt_len"] + new)
        return proven_point(variant, opts.precisions[0], n, tmp_path)

    monkeypatch.setattr(probe_frontier, "scan_workload", fake_scan)
    opts = ScanOptions(precisions=["bf16"], mode="generate", max_batch=1 << 20)
    result, path = probe_frontier.scan_frontier(template, opts, tmp_path, lambda *a, **k: None, None)
    frontier = result.frontier["bf16"]
    batch_at = frontier.found(BATCH_AT_SEQ)
    context_at = frontier.found(SEQ_AT_BATCH)
    assert batch_at[1024] == tokens // 1024 and batch_at[131072] == tokens // 131072 == 1
    assert context_at[1] == 131072 and context_at[2] == tokens // 2 and context_at[4] == tokens // 4
    assert caps and max(caps) == 131072 - new
    assert any("contexts" in note for note in frontier.notes)
    assert read_result(path).frontier["bf16"].points == frontier.points and read_result(path).mode == "generate"


def test_a_generation_frontier_stopped_before_its_first_point_writes_nothing(tmp_path, monkeypatch):
    from memprobe.probe import frontier as probe_frontier
    from memprobe.probe.options import ScanOptions
    from memprobe.probe.scan import ScanInterrupted

    notes = []

    def interrupted(variant, opts, out_dir, progress):
        raise ScanInterrupted(tmp_path / "point.json")

    monkeypatch.setattr(probe_frontier, "scan_workload", interrupted)
    opts = ScanOptions(precisions=["bf16"], mode="generate", max_batch=1 << 20)
    progress = type("P", (), {"note": staticmethod(notes.append)})()
    with pytest.raises(ScanInterrupted) as stop:
        probe_frontier.scan_frontier(generation_workloads_frontier(64), opts, tmp_path, progress, None)
    assert stop.value.path is None and not list(tmp_path.rglob("*.json"))
    assert notes and "point.json" in notes[0]


def test_generation_frontier_points_over_the_batch_start_from_the_prediction(tmp_path, monkeypatch):
    from memprobe.core.records.frontier import BATCH_AT_SEQ, SEQ_AT_BATCH
    from memprobe.core.records.records import Proof
    from memprobe.core.records.results import PrecisionResult, ScanResult
    from memprobe.probe import frontier as probe_frontier
    from memprobe.probe.options import ScanOptions

    asked = {}

    def fake_scan(variant, opts, out_dir, progress):
        kind = SEQ_AT_BATCH if variant.params.get("axis") == "seq_len" else BATCH_AT_SEQ
        asked.setdefault(kind, set()).add(opts.uses_predicted_start)
        scanned = ScanResult(workload=variant.to_dict(), environment={"gpu": {"name": "Fake GPU"}}, settings={})
        scanned.precisions["bf16"] = PrecisionResult("bf16", "done", 0, proof=Proof(fits=0, fails=1))
        return scanned, tmp_path / f"{variant.name}.json"

    monkeypatch.setattr(probe_frontier, "scan_workload", fake_scan)
    opts = ScanOptions(precisions=["bf16"], mode="generate", max_batch=1 << 20)  # CUDA: the predicted start is on
    result, path = probe_frontier.scan_frontier(generation_workloads_frontier(64), opts, tmp_path, None, None)
    assert asked == {BATCH_AT_SEQ: {True}, SEQ_AT_BATCH: {False}}
    assert path is not None and read_result(path).gpu_name() == "Fake GPU" and result.frontier["bf16"].points


def generation_workloads_frontier(new: int):
    from types import SimpleNamespace

    from memprobe.core.records.generation import generation_workloads

    asked = SimpleNamespace(
        prompt_len=None, new_tokens=new, prefill_chunk=None, seq_len=None, checkpointing=False, lora=None,
        search="frontier", batch=1,
    )  # fmt: skip
    (template,) = generation_workloads([REGISTRY["llama-8b"]], asked, "generate", frontier=True)
    return template


def test_report_shows_the_generation_record(run, tmp_path):
    from memprobe.core.records.results import PrecisionResult, ScanResult, write_result

    timed = Timed(batch=190, outcome="fit", peak_allocated=120 << 30, peak_reserved=122 << 30, kv_cache_bytes=48 << 30)
    timed.prefill_seconds, timed.prefill_tokens_per_s, timed.decode_tokens_per_s = 12.0, 129_706.0, 8_512.0
    settings = {"prompt_len": 8192, "new_tokens": 64, "prefill_chunk": None}
    gen = generation_record(settings, 190, 32768, 5 << 29, 139 << 30, 140 << 30, timed)
    result = ScanResult(
        workload=generation_variant(REGISTRY["llama-1b"], GenerationRequest(8192, 64)).to_dict(),
        environment={"gpu": {"name": "Fake GPU", "total_bytes": 140 << 30}},
        settings={"mode": "generate"},
    )
    result.precisions["bf16"] = PrecisionResult("bf16", "done", 190, throughput=timed, generation=gen)
    result.status = "complete"
    write_result(result, tmp_path / "fake_llama-1b_generate.json")
    got = run("report", tmp_path, "--wide")
    assert got.exit_code == 0, got.output
    assert "Generation with a static KV cache" in got.output and "8192 / 64" in got.output
    assert f"{gen.kv_capacity_tokens:,} ({gen.kv_capacity_sequences})" in got.output and "8,512" in got.output
    # a generation is not training: its throughput is named for what it is, its batch counts sequences
    assert "Training throughput" not in got.output and "Generation throughput (new tokens/s" in got.output
    assert "concurrent sequences" in got.output and "decode tok/s" in got.output
    page = tmp_path / "page.html"
    assert run("report", tmp_path / "fake_llama-1b_generate.json", "--html", page).exit_code == 0
    html = page.read_text()
    assert "Training throughput" not in html and "decode tok/s" in html and "prefill tok/s" in html


def test_a_generation_where_nothing_fits_says_so_and_what_it_would_need():
    """As in training: batch 1 failed, so the scan traces what one sequence's generation would need and says it;
    no training alternative (checkpointing, LoRA) is offered for a generation."""
    from memprobe.core.records.results import PrecisionResult, ScanResult
    from memprobe.probe.nothing_fits import described, explain_precision

    workload = generation_variant(REGISTRY["llama-8b"], GenerationRequest(2048, 64))
    result = ScanResult(
        workload=workload.to_dict(), environment={"gpu": {"name": "Small GPU"}}, settings={"mode": "generate"}
    )
    result.precisions["bf16"] = PrecisionResult("bf16", "done", 0, capacity_bytes=8 << 30)
    asked = []

    def need(variant, precision):
        asked.append(variant.name)
        return 17 << 30

    text = explain_precision(result, "bf16", workload, need)
    assert asked == [workload.name]  # the generation itself, no training variant
    assert "nothing generates on Small GPU" in text and "1 sequence would need about 17" in text
    assert "--prefill-chunk" in text and "trains" not in text and "fsdp" not in text
    assert result.precisions["bf16"].settings.nothing_fits.need_bytes == 17 << 30
    assert described(result, workload) == [text]


@pytest.mark.slow
def test_the_need_of_a_generation_is_traced_in_generate_mode():
    pytest.importorskip("torch")
    from memprobe.predict.need import trial_need_bytes

    workload = generation_variant(REGISTRY["toy-llama"], GenerationRequest(64, 4))
    small, large = (trial_need_bytes(workload, "bf16", n, mode="generate") for n in (1, 512))
    assert 0 < small < large
