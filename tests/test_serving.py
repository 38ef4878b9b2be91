"""plan and guide --mode generate (CliRunner): the concurrent sequences per card, measured from the committed H200
generate scans where they hold that model, P, N and precision, predicted elsewhere and labelled so; the serving
options declared once (request/serving.py); bad input as one `Error:` line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memprobe.cli import main
from memprobe.request import PlanRequest, RequestError, plan_job
from memprobe.request.serving import ServingRequest

ROOT = Path(__file__).resolve().parent.parent
GENERATE = ROOT / "reports" / "h200_generate"
LLAMA_8B = GENERATE / "llama-8b-p2048-n64"


def _measured(folder: Path) -> dict:
    """The bf16 generation record of the one result file in `folder`."""
    return json.loads(next(folder.glob("*.json")).read_text())["precisions"]["bf16"]["generation"]


def _run(args: list[str]):
    return CliRunner().invoke(main, args)


def test_plan_generate_reads_the_measured_scan_of_that_card_model_and_settings():
    r = _run(
        ["plan", "-m", "llama-8b", "--gpu", "H200", "--mode", "generate", "--prompt-len", "2048"]
        + ["--new-tokens", "64", "-p", "bf16", "--results", str(LLAMA_8B), "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output[r.output.index("{") :])
    (row,) = plan["rows"]
    measured = _measured(LLAMA_8B)
    assert plan["workload"] == "llama-8b+p2048+n64" and row["source"] == "measured"
    assert row["sequences"] == measured["sequences"] and row["decode_tokens_per_s"] == measured["decode_tokens_per_s"]


def test_plan_generate_at_other_settings_is_not_the_measured_one(monkeypatch):
    """The scan at P = 2048 says nothing of P = 8192: that row is predicted (the trace is stubbed here)."""
    import memprobe.planning.serving as serving
    from memprobe.core.estimates.serving import PREDICTED, ServingRow

    traced = []

    def fake(workload, precisions, card, workers, progress):
        traced.append(workload.name)
        return [ServingRow(card.name, workload.name, p, PREDICTED, 40, safe_sequences=38) for p in precisions]

    monkeypatch.setattr(serving, "_predicted", fake)
    r = _run(
        ["plan", "-m", "llama-8b", "--gpu", "H200", "--mode", "generate", "--prompt-len", "8192"]
        + ["--new-tokens", "64", "-p", "bf16", "--results", str(LLAMA_8B)]
    )
    assert r.exit_code == 0, r.output
    assert traced == ["llama-8b+p8192+n64"]
    assert "predicted" in r.output and "measured in" not in r.output
    assert "40 (safe 38)" in r.output and "not measured" in r.output


def test_plan_generate_predicts_a_tiny_llama_on_the_cpu():
    r = _run(
        ["plan", "-m", "toy-llama", "--gpu", "H100", "--mode", "generate", "--prompt-len", "16"]
        + ["--new-tokens", "4", "-p", "bf16", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.output[r.output.index("{") :])["rows"]
    assert row["source"] == "predicted" and row["sequences"] > 0 and row["safe_sequences"] <= row["sequences"]
    assert row["decode_tokens_per_s"] is None


@pytest.mark.parametrize(
    "args, said",
    [
        (["-m", "resnet50", "--mode", "generate"], "--mode generate runs causal LMs"),
        (["-m", "bert-large", "--mode", "generate"], "--mode generate runs causal LMs"),
        (["-m", "llama-1b", "--prompt-len", "64"], "--prompt-len: only with --mode generate"),
        (["-m", "llama-1b", "--mode", "generate", "--global-batch", "8"], "--global-batch: training settings"),
        (["-m", "llama-1b", "--mode", "generate", "--prompt-len", "64", "--prefill-chunk", "128"], "--prefill-chunk"),
        (["-m", "llama-1b", "--mode", "serve"], "--mode"),
    ],
)
def test_plan_generate_refuses_in_one_error_line(args, said):
    r = _run(["plan", "--gpu", "H200", *args])
    assert r.exit_code in (1, 2) and "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and said in errors[0], r.output


def test_the_api_plan_takes_the_serving_fields_and_reads_them_as_the_command():
    request = PlanRequest(["llama-1b"], "H200", mode="generate", prompt_len=512, new_tokens=32, precisions=["bf16"])
    job = plan_job(request)
    assert job.workload.name == "llama-1b+p512+n32"
    with pytest.raises(RequestError, match="causal LMs"):
        plan_job(PlanRequest(["resnet50"], "H200", mode="generate"))


def test_serving_request_matches_only_the_generations_asked():
    asked = ServingRequest("generate", prompt_len=2048)
    assert asked.matches({"prompt_len": 2048, "new_tokens": 64, "prefill_chunk": None})
    assert not asked.matches({"prompt_len": 8192, "new_tokens": 64}) and not asked.matches(None)
    with pytest.raises(RequestError, match="only with --mode generate"):
        ServingRequest("train", new_tokens=8).check()


def test_guide_generate_measures_the_scanned_card_and_predicts_the_others():
    r = _run(["guide", str(LLAMA_8B), "--mode", "generate", "--gpu", "H200,A100 80GB SXM4", "--format", "json"])
    assert r.exit_code == 0, r.output
    plan = json.loads(r.output[r.output.index("{") :])
    rows = {row["card"]: row for row in plan["rows"]}
    assert (
        rows["H200 SXM"]["source"] == "measured" and rows["H200 SXM"]["sequences"] == _measured(LLAMA_8B)["sequences"]
    )
    assert rows["H200 SXM"]["decode_tokens_per_s"] > 0
    a100 = rows["A100 80GB SXM4"]
    assert (
        a100["source"] == "predicted"
        and 0 < a100["sequences"] < rows["H200 SXM"]["sequences"]
        and a100["decode_tokens_per_s"] is None
    )


def test_guide_generate_selects_by_settings_and_says_when_none_match():
    r = _run(["guide", str(GENERATE), "--mode", "generate", "--prompt-len", "8192", "-m", "llama-8b", "--gpu", "H200"])
    assert r.exit_code == 0, r.output
    assert "llama-8b+p8192+n64" in r.output and "p2048" not in r.output and "llama-1b" not in r.output
    r = _run(["guide", str(LLAMA_8B), "--mode", "generate", "--prompt-len", "4096"])
    assert r.exit_code == 1 and r.output.count("Error:") == 1 and "--prompt-len 4096" in r.output
    r = _run(["guide", str(LLAMA_8B), "--new-tokens", "64"])
    assert r.exit_code == 2 and "only with --mode generate" in r.output
