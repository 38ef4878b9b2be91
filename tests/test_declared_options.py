"""Each option of scan, predict and plan is declared once, as a field of its request (memprobe/request/option.py):
the declarations are whole (each is on its command, each scan setting is a ScanOptions field and a recorded setting,
the API takes the same names), a request written back as a command line reads as the same request, and every option
of a `scan --parallel` reaches its children (on fake GPUs: the children are run here, their scans recorded).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import fields

import pytest
from click.testing import CliRunner

import memprobe.api as api
from memprobe.cli import main
from memprobe.cli.plan import plan_cmd
from memprobe.cli.predict import predict_cmd
from memprobe.cli.report import guide_cmd
from memprobe.cli.scan import scan_cmd
from memprobe.core.records.settings import ScanSettings
from memprobe.core.workload.registry import default_registry_path
from memprobe.probe.options import ScanOptions
from memprobe.request import ModelRequest, PlanRequest, PredictRequest, ScanRequest
from memprobe.request.model import modelled
from memprobe.request.option import command_line, declared, option_names
from memprobe.request.serving import ServingRequest

# What each command takes besides its request: what it prints or writes (the API returns it instead).
COMMAND_ONLY = {
    "scan": {"wide"},
    "predict": {"compare", "breakdown", "breakdown_out", "out_dir", "wide"},
    "plan": {"fmt", "wide"},
    "guide": {"paths", "budget", "gpus", "fmt", "html_file", "model", "precision", "wide"},
}
REQUESTS = {
    "scan": (ScanRequest, ModelRequest),
    "predict": (PredictRequest, ModelRequest),
    "plan": (PlanRequest,),
    "guide": (ServingRequest,),
}
COMMANDS = {"scan": scan_cmd, "predict": predict_cmd, "plan": plan_cmd, "guide": guide_cmd}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_declared_option_is_an_option_of_its_command_named_as_the_field(name):
    params = {p.name for p in COMMANDS[name].params}
    names = set().union(*(option_names(r) for r in REQUESTS[name]))
    assert params - names == COMMAND_ONLY[name] and names <= params


def test_a_model_option_and_a_commands_own_never_share_a_name():
    """A command's parsed options are split between its request and the model's by name (request.modelled)."""
    assert not option_names(ModelRequest) & option_names(ScanRequest)
    assert not option_names(ModelRequest) & option_names(PredictRequest)


def test_each_scan_setting_is_a_scan_options_field_and_a_recorded_setting_with_the_same_default():
    made = ScanOptions(precisions=["fp32"])
    recorded = {f.name for f in fields(ScanSettings)}
    settings = [d for d in declared(ScanRequest) if d.option.setting]
    assert len(settings) >= 16
    for d in settings:
        assert d.option.setting in recorded, d.name
        default = getattr(made, d.option.setting)  # AttributeError: no such ScanOptions field
        assert (list(default) if isinstance(default, list) else default) == (
            list(d.default) if isinstance(d.default, tuple) else d.default
        ), d.name


def test_the_api_takes_the_declared_names():
    """find_max_batch takes every scan option by its field's name (its explicit keywords among them); the other
    API functions name theirs as their requests do, but for these, named as the API has always named them."""
    renamed = {"precision": "precisions", "gpu": "cards", "strategy": "strategies", "out": "out_dir"}
    own = {"model", "verbose", "device", "scan_options"}
    for function, requests, renames in (
        (api.find_max_batch, (ScanRequest, ModelRequest), renamed),
        (api.predict_max_batch, (PredictRequest, ModelRequest), renamed),
        (api.plan, (PlanRequest,), renamed | {"gpu": "card", "strategy": "strategy"}),
    ):
        taken = {renames.get(k, k) for k in inspect.signature(function).parameters if k not in own}
        taken = {"models" if k == "model" else k for k in taken}
        assert taken <= set().union(*(option_names(r) for r in requests)), function.__name__


def _parsed(name: str, argv: list[str]):
    """The request the command `name` reads from `argv` (parsed by click, as the command's own parameters)."""
    with COMMANDS[name].make_context(name, list(argv)) as ctx:
        params = dict(ctx.params)
    request = REQUESTS[name][0]
    if len(REQUESTS[name]) > 1:
        return modelled(request, params)
    return request(**{k: v for k, v in params.items() if k in option_names(request)})


def _argv(request) -> list[str]:
    model = getattr(request, "model", None)
    if model is None:
        return command_line(request)
    return command_line(model, only={"models"}) + command_line(request) + command_line(model, skip={"models"})


@pytest.mark.parametrize(
    "name, argv",
    [
        ("scan", ["-m", "toy-llama", "-p", "bf16", "--batch", "4,8", "--soak", "3", "--no-throughput", "--lora", "8"]),
        ("scan", ["-m", "toy", "--curve", "2,4", "--curve-budget", "9.5", "--no-predicted-start", "--breakdown"]),
        ("scan", ["-m", "toy", "--no-curve", "--device", "cpu", "--cpu-memory-budget", "8MiB", "--gpus", "1,2"]),
        ("predict", ["-m", "toy", "--gpu", "H100", "--gpus", "2", "--strategy", "fsdp", "--overhead-from", "."]),
        ("predict", ["-m", "toy-llama", "--search", "seq-len", "--batch", "2", "--checkpointing", "--steps", "4"]),
        ("plan", ["-m", "toy", "--gpu", "H100", "--global-batch", "64", "--results", ".", "--results", "tests"]),
        ("plan", ["-m", "toy-llama", "--gpu", "H200", "--mode", "generate", "--prompt-len", "64", "--new-tokens", "8"]),
        ("plan", ["-m", "toy-llama", "--gpu", "H200", "--mode", "generate", "--prefill-chunk", "16"]),
        ("guide", ["--mode", "generate", "--prompt-len", "2048", "--new-tokens", "64", "--prefill-chunk", "512"]),
    ],
)
def test_a_request_written_as_a_command_line_reads_back_as_the_same_request(name, argv):
    request = _parsed(name, argv)
    assert _parsed(name, _argv(request)) == request


# --- every option of scan --parallel reaches its children ---------------------------------------------------------

# The scan options a --parallel child has no use for: the parent spreads the jobs over --gpus (--strategy: none for
# one GPU), answers a missing GPU itself, and refuses a frontier (one GPU).
NOT_THE_CHILDS = {"gpus", "strategies", "parallel", "predict_if_no_gpu", "frontier_budget"}
MODELS = ["--models", str(default_registry_path())]
SCANS = [  # each a scan that runs as it is on one GPU, all of them together giving every option of a scan
    ["-m", "toy-llama", "-p", "fp16,bf16", "--batch", "4,8", "--steps", "4", "--warmup", "2", "--timed-steps", "5"]
    + [
        "--max-batch",
        "512",
        "--max-trials",
        "12",
        "--soak",
        "7",
        "--repeat",
        "3",
        "--no-predicted-start",
        "--breakdown",
    ]
    + ["--curve", "2,4", "--curve-budget", "9.5", "--cudnn-benchmark", "--compile", "--memory-cap", "8GiB"]
    + ["--checkpointing", "--lora", "8", "--seq-len", "16", *MODELS],
    ["-m", "timm:resnet18", "--input-size", "3,64,64", "--optimizer", "adam", "-p", "fp16", "--no-throughput"]
    + ["--predicted-start", "--no-breakdown"],
    ["-m", "hf:gpt2-large", "--task", "seq-cls", "--seq-len", "64", "--optimizer", "sgd", "-p", "bf16", "--no-curve"],
    ["-m", "toy-llama", "--search", "seq-len", "--batch", "2", "-p", "bf16,fp32"],
    ["-m", "toy,toy-llama", "--mode", "infer", "-p", "fp32,tf32"],
    ["-m", "toy", "--device", "cpu", "--cpu-memory-budget", "8MiB", "-p", "fp32,bf16"],
    ["-m", "toy-llama", "--mode", "generate", "-p", "bf16,fp16", "--prompt-len", "16", "--new-tokens", "8"]
    + ["--prefill-chunk", "4"],
]


class _Finished:
    """A child that has already ended well: what run_parallel polls."""

    returncode = 0

    def alive(self) -> bool:
        return False


@pytest.fixture
def children(monkeypatch):
    """Fake GPUs: two visible and idle, each --parallel child's start recorded (its command and environment), its
    scan recorded where it runs; the scan replaced by a recorder of (workload, ScanOptions) as dicts."""
    import memprobe.cli.scan as cli_scan
    import memprobe.probe.parallel as parallel
    import memprobe.probe.scan
    from memprobe.core.records.results import ScanResult

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setattr(cli_scan, "require_gpu", lambda: None)
    monkeypatch.setattr(parallel, "POLL_S", 0.0)
    started: list[tuple[list[str], dict[str, str]]] = []
    scanned: list[tuple[dict, dict]] = []

    class Child:
        @staticmethod
        def start(cmd, base, env, talk, log):
            started.append((cmd, env))
            return _Finished()

    def recorded(workload, opts, out_dir, progress):
        scanned.append((workload.to_dict(), opts.to_dict()))
        return ScanResult(workload=workload.to_dict(), environment={}, settings=opts.to_dict()), out_dir + "/x.json"

    monkeypatch.setattr(parallel, "Child", Child)
    monkeypatch.setattr(memprobe.probe.scan, "scan_workload", recorded)
    return started, scanned


def _scan(argv: list[str], out) -> None:
    result = CliRunner().invoke(main, ["scan", *argv, "--out", str(out)])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("argv", SCANS, ids=[" ".join(a[:2]) + (" cpu" if "cpu" in a else "") for a in SCANS])
def test_every_option_of_a_parallel_scan_reaches_its_children(argv, children, tmp_path):
    """Each child scans what the serial scan of the same options scans, in its one precision: the same workload
    (a variant's, a model given by name with its options) and the same ScanOptions, on the GPU it was pinned to."""
    started, scanned = children
    _scan(argv, tmp_path / "serial")
    serial = {w["name"]: (w, o) for w, o in scanned}
    scanned.clear()
    _scan([*argv, "--parallel", "--gpus", "2"], tmp_path / "parallel")
    assert len(started) == sum(len(o["precisions"]) for _w, o in serial.values())
    for cmd, env in started:
        assert cmd[-2] == "scan-part", cmd
        result = CliRunner().invoke(main, cmd[-2:])
        assert result.exit_code == 0, result.output
        assert env == ({} if "cpu" in argv else {"CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES")})
    pinned = {env.get("CUDA_VISIBLE_DEVICES") for _cmd, env in started}
    assert pinned == ({None} if "cpu" in argv else {"0", "1"} if len(started) > 1 else {"0"})
    assert len(scanned) == len(started)
    for workload, opts in scanned:
        (precision,) = opts["precisions"]
        serial_workload, serial_opts = serial[workload["name"]]
        assert workload == serial_workload
        assert opts == serial_opts | {"precisions": [precision]}


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda d: d["options"].update(steps="3"), "'options': not a ScanOptions: 'steps': expected int"),
        (lambda d: d["options"].update(steps=2), "steps >= 3"),
        (lambda d: d["workload"].pop("family"), "'workload'"),
        (lambda d: d.pop("out_dir"), "no 'out_dir'"),
    ],
    ids=["option-of-another-type", "option-refused", "workload-broken", "no-folder"],
)
def test_a_part_request_that_is_not_one_is_refused_in_one_line_naming_the_field(change, says, tmp_path):
    from fakes import TOY
    from memprobe.probe.parallel import PartRequest
    from memprobe.probe.scan import ScanOptions

    path = PartRequest.of(TOY, ScanOptions(["fp32"], device="cpu"), "fp32", tmp_path).write(tmp_path / "part.json")
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(main, ["scan-part", str(path)])
    assert result.exit_code == 1 and "not a scan part's request" in result.output and says in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def test_the_parallel_scans_above_give_every_option_a_child_takes():
    """Adding a scan option means adding it to SCANS (or saying here why a child has no use for it)."""
    flags = {}
    for request in (ScanRequest, ModelRequest):
        for d in declared(request):
            for spelling in d.option.flags:
                for flag in spelling.split("/"):
                    flags[flag] = d.name
    given = {flags[a] for argv in SCANS for a in argv if a in flags} | {"out_dir"}
    assert given | NOT_THE_CHILDS == option_names(ScanRequest) | option_names(ModelRequest)


# --- plan and memprobe.plan: one request path ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, call, code",
    [
        (["-m", "toy", "--gpu", "H100", "--strategy", "fsdp"], ("toy", "H100", {"strategy": "fsdp"}), 2),
        (["-m", "toy", "--gpu", "H100,H200"], ("toy", "H100,H200", {}), 2),
        (["-m", "toy", "--gpu", "H900"], ("toy", "H900", {}), 1),
        (["-m", "toy,toy-llama", "--gpu", "H100"], ("toy,toy-llama", "H100", {}), 2),
    ],
    ids=["strategy-on-one-gpu", "several-cards", "unknown-card", "several-models"],
)
def test_plan_and_the_plan_api_refuse_the_same_request_in_the_same_words(argv, call, code):
    """The API ignored a strategy on one GPU, and said the others in words of its own; one request path now."""
    from memprobe.request import RequestError

    result = CliRunner().invoke(main, ["plan", *argv])
    model, card, options = call
    with pytest.raises(RequestError) as raised:
        api.plan(model, card, **options)
    assert result.exit_code == code and result.output.splitlines()[-1] == f"Error: {raised.value}", result.output
