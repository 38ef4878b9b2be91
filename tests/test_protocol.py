"""The trial-process protocol (core/process/protocol.py): every request and answer survives the wire, refusals and crashes
are recognised, unknown kinds are refused (no torch, no process)."""

from __future__ import annotations

import json

import pytest

from memprobe.core.estimates.memory_model import Attempt
from memprobe.core.process.protocol import (
    REQUESTS,
    BreakdownAnswer,
    BreakdownRequest,
    ExitRequest,
    Failure,
    Flops,
    FlopsRequest,
    Lost,
    MeasureRequest,
    PingRequest,
    Pong,
    ProtocolError,
    Ready,
    SetupRequest,
    TrialRequest,
    TrialSettings,
    crashed,
    decode_answer,
    decode_request,
    encode_answer,
    encode_request,
)
from memprobe.core.records.breakdown import Breakdown
from memprobe.core.records.records import Timed
from memprobe.core.workload.registry import Workload

TOY = Workload("toy", "toy-mlp", "a toy", "samples", {"hidden": 8}, {"name": "sgd", "lr": 0.1})
REQUESTS_SENT = [
    SetupRequest(TOY, "bf16", "train", "cpu", 1 << 20, TrialSettings(cudnn_benchmark=True, memory_cap_bytes=1 << 30)),
    TrialRequest(64, 3, 4096.0, keep=True),
    MeasureRequest(64, 1, 10, budget_s=5.0, loss_scale=None, cont=True),
    FlopsRequest(1),
    PingRequest(),
    ExitRequest(),
]


@pytest.mark.parametrize("request_", REQUESTS_SENT, ids=lambda r: r.op)
def test_every_request_reads_back_as_sent(request_):
    line = encode_request(request_)
    assert line.endswith("\n") and json.loads(line)["op"] == request_.op
    assert decode_request(line) == request_


def test_every_kind_is_listed_once():
    assert sorted(REQUESTS) == ["breakdown", "exit", "flops", "measure", "ping", "setup", "trial"]


ANSWERS = [
    (SetupRequest(TOY), Ready({"gpu": {"name": "cpu"}}, 1 << 20, 1000, 0.5, 0.0, {"parameters": 3}, "tokens", None)),
    (TrialRequest(8), Attempt(8, "fit", 10, 12, 0.25, "", steps=3, loss_scale=2.0**15)),
    (
        MeasureRequest(8),
        Timed(
            batch=8,
            outcome="fit",
            samples_per_s=80.0,
            step_time={"median_s": 0.1, "steps": 3},
            extra={"added_later": 1},
        ),
    ),
    (FlopsRequest(), Flops(1.5e9)),
    (FlopsRequest(), Flops(None, "FLOPs per unit vary with n")),
    (PingRequest(), Pong(True, 1234)),
    (
        BreakdownRequest(8),
        BreakdownAnswer(breakdown=Breakdown(8, "measured", {"parameters": 1024, "activations": 4096}, 6144, 5120)),
    ),
    (BreakdownRequest(8), BreakdownAnswer(outcome="oom", error="OutOfMemoryError: under the tracker")),
]


@pytest.mark.parametrize("request_, answer", ANSWERS, ids=lambda x: type(x).__name__)
def test_every_answer_reads_back_as_sent(request_, answer):
    assert decode_answer(request_, encode_answer(answer)) == answer


@pytest.mark.parametrize(
    "request_, line, says",
    [
        (TrialRequest(4), {"attempt": {"batch": "4", "outcome": "fit"}}, "'batch': expected int"),
        (TrialRequest(4), {"batch": 4, "outcome": "fit"}, "expected a mapping"),
        (PingRequest(), {"ok": True, "pid": "7"}, "'pid'"),
        (SetupRequest(TOY), {"ok": True, "environment": {}, "emulation": {"memory_cap_bytes": 1}}, "emulation"),
        (BreakdownRequest(8), {"breakdown": {"batch": 8, "categories": {}}}, "malformed breakdown"),
        (FlopsRequest(), ["not", "a", "mapping"], "not an answer"),
    ],
)
def test_an_answer_with_a_field_missing_or_of_another_type_is_refused_naming_it(request_, line, says):
    with pytest.raises(ProtocolError, match=says):
        decode_answer(request_, json.dumps(line))


def test_a_refusal_reads_as_a_failure_whatever_was_asked():
    refusal = encode_answer(Failure("no_cuda", "torch sees no CUDA device"))
    for request_ in (SetupRequest(TOY), TrialRequest(4), MeasureRequest(4)):
        assert decode_answer(request_, refusal) == Failure("no_cuda", "torch sees no CUDA device", "setup")
    # a failed ping is a Pong saying so, not a refusal
    assert decode_answer(PingRequest(), encode_answer(Pong(False, 7))) == Pong(False, 7)


def test_unknown_and_broken_requests_are_refused():
    with pytest.raises(ProtocolError, match="unknown op 'dance'"):
        decode_request(json.dumps({"op": "dance"}))
    with pytest.raises(ProtocolError, match="not a request"):
        decode_request("{not json")
    with pytest.raises(ProtocolError):
        decode_answer(TrialRequest(4), "garbage")


@pytest.mark.parametrize(
    "fields, says",
    [
        ({"precision": "fp32"}, "not a SetupRequest: no 'workload'"),
        ({"workload": {"family": "toy-mlp"}}, "'workload'"),  # a workload without its name
        ({"workload": TOY.to_dict(), "settings": {"compile": "yes"}}, "'settings'.*'compile': expected bool"),
        ({"workload": TOY.to_dict(), "cpu_budget_bytes": "1 GiB"}, "'cpu_budget_bytes': expected int, got str"),
    ],
)
def test_a_request_with_a_field_missing_or_of_another_type_is_refused_naming_it(fields, says):
    with pytest.raises(ProtocolError, match=says):
        decode_request(json.dumps({"op": "setup", **fields}))
    with pytest.raises(ProtocolError, match="'batch': expected int, got float"):
        decode_request(json.dumps({"op": "trial", "batch": 2.5}))


def test_a_crash_ends_the_process_after_its_answer():
    assert crashed(Attempt(4, "crash"))
    assert crashed(Timed(batch=4, outcome="crash"))
    assert not crashed(Attempt(4, "oom")) and not crashed(Failure("error", "x")) and not crashed(Flops())


def test_lost_answers_say_why():
    assert Lost().outcome == "crash" and Lost(timed_out=True).outcome == "timeout"


# --- the predicted-start child's wire ---------------------------------------------------------------------------


def test_the_predicting_childrens_messages_survive_the_wire_and_a_bad_line_is_refused():
    from memprobe.core.process.protocol import (
        HintAnswer,
        HintRequest,
        HintSetup,
        NeedAnswer,
        NeedRequest,
        message_line,
        read_message,
    )

    setup = HintSetup(TOY, ["fp32", "bf16"], 2, "infer", [2, "fsdp"])
    request = HintRequest("bf16", 1 << 30, 7)
    answer = HintAnswer(7, "bf16", 1000.5, max_batch=985, seconds=3.25, how="checked")
    for message in (setup, request, answer):
        line = message_line(message)
        assert line.endswith("\n") and line.count("\n") == 1
        assert read_message(line, type(message)) == read_message(line.encode(), type(message)) == message
    # the scan keeps the answer without the request id and without the fields not given
    assert answer.record() == {"precision": "bf16", "at": 1000.5, "max_batch": 985, "seconds": 3.25, "how": "checked"}
    failed = HintAnswer(8, "fp32", 1001.0, error="TypeError: no")
    assert failed.record() == {"precision": "fp32", "at": 1001.0, "error": "TypeError: no"}
    with pytest.raises(ProtocolError, match="not a HintSetup"):
        read_message('{"precisions": ["fp32"]}', HintSetup)  # no workload
    need = NeedRequest(TOY, "bf16")
    assert read_message(message_line(need), NeedRequest) == need
    assert read_message(message_line(NeedAnswer(need_bytes=5)), NeedAnswer) == NeedAnswer(need_bytes=5)
    for bad in ("not json", '{"precision": "fp32"}', "[1, 2]"):
        with pytest.raises(ProtocolError, match="not a HintRequest"):
            read_message(bad, HintRequest)
