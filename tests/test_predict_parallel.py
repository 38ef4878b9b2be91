"""Traces in forked children give the events of traces made in-process; predict's numbers do not depend on the
number of workers; progress lines go to stderr, one per trace (n of m), plus a heartbeat on a terminal."""

from __future__ import annotations

import os
import signal
import warnings
from collections import Counter
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from memprobe.core.workload.registry import load_registry  # noqa: E402
from memprobe.core.workload.variants import VariantRequest, apply_variant  # noqa: E402
from memprobe.predict.parallel import Job, can_fork, trace_jobs  # noqa: E402
from memprobe.predict.progress import TraceProgress  # noqa: E402
from memprobe.predict.summary import MemorySize, predict  # noqa: E402
from memprobe.predict.trace import PredictError, Trace, TraceSession  # noqa: E402
from memprobe.predict.workspaces import Workspace  # noqa: E402

MiB = 1 << 20


@pytest.fixture
def _forks_now():
    """Skips where this process can no longer fork (it ran autograd's CUDA device threads: a CUDA build of torch):
    a child's SIGKILL would then kill the test process itself."""
    if not can_fork():
        pytest.skip("this process can no longer trace in forked children")


_ON_LINUX = pytest.mark.skipif(not can_fork(), reason="traces run in forked children on Linux only")


def forks(test):
    """Runs `test` only where traces run in forked children: checked when collected, and again when it runs."""
    return pytest.mark.usefixtures("_forks_now")(_ON_LINUX(test))


@pytest.fixture(scope="module")
def registry():
    return load_registry()


class Lines:
    """A TraceProgress sink with a clock the test moves."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.now = 0.0

    def progress(self, heartbeat: bool = False) -> TraceProgress:
        return TraceProgress(self.lines.append, every=5.0, heartbeat=heartbeat, clock=lambda: self.now)


@forks
def test_children_trace_what_this_process_traces(registry):
    with TraceSession(registry["toy-bert-squad"]) as session:
        jobs = [Job(session, p, b, f"{p} at batch {b}") for p, b in (("bf16", 2), ("fp32", 3))]
        forked = trace_jobs(jobs, workers=2)
        here = {job: session.trace(job.precision, job.batch) for job in jobs}
    for job in jobs:
        assert isinstance(forked[job], Trace)
        assert forked[job].events == here[job].events  # op labels come back as the same OpOverload objects
    labels = [e[3] for e in forked[jobs[0]].events if e[0] == "alloc"]
    assert any(isinstance(label, Workspace) for label in labels)  # flash attention's backward workspaces
    assert any(label is torch.ops.aten.mm.default for label in labels)


class _DyingSession:
    """Stands in for a TraceSession whose trace kills its process, or raises PredictError."""

    def __init__(self, how: str) -> None:
        self.how = how
        self.recorder = SimpleNamespace(answers=Counter())
        self.behaviour = SimpleNamespace(sdpa_choices=Counter(), notes=[])

    def trace(self, precision: str, batch: int, repeat_last: bool = False) -> Trace:
        if self.how == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        warnings.warn("a warning from the child", UserWarning, stacklevel=1)
        self.behaviour.notes.append("a note from the child")
        raise PredictError(f"toy {precision} batch {batch}: the step failed on fake tensors")


@forks
def test_a_child_that_dies_or_fails_is_a_predict_error():
    killed, failing = _DyingSession("killed"), _DyingSession("raises")
    jobs = [Job(killed, "fp32", 2, "toy fp32 at batch 2"), Job(failing, "fp16", 3, "toy fp16 at batch 3")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = trace_jobs(jobs, workers=2)
    assert isinstance(got[jobs[0]], PredictError)
    assert "ended without an answer (signal 9)" in str(got[jobs[0]])
    assert str(got[jobs[1]]) == "toy fp16 batch 3: the step failed on fake tensors"
    assert [str(w.message) for w in caught] == ["a warning from the child"]  # shown here, once
    assert failing.behaviour.notes == ["a note from the child"]  # what the child counted comes back


def test_a_trace_answer_crosses_whole_and_anything_else_is_refused_saying_so():
    import pickle

    from memprobe.predict.parallel import Counts, TraceAnswer, Warned, read_trace_answer

    trace = Trace(2, [("alloc", 1, 512, "x")], 3, step_at=(0, 1), decode_at=(("decode", 0),), decode_more=4)
    counts = Counts(Counter({"a": 1}), Counter(), ["a note"])
    answer = TraceAnswer(trace, None, counts, [Warned("careful", UserWarning, "x.py", 3)], b"")
    assert read_trace_answer(pickle.dumps(answer)) == answer  # every field of the trace, decode marks too
    assert read_trace_answer(b"") is None
    with pytest.raises(ValueError, match="not a trace answer: a dict"):
        read_trace_answer(pickle.dumps({"batch": 2}))
    with pytest.raises(ValueError, match="not a trace answer: UnpicklingError"):
        read_trace_answer(b"garbage")


@forks
@pytest.mark.parametrize(
    "name, search, precisions", [("toy-bert-squad", "batch", ["fp32", "bf16"]), ("toy-llama", "seq-len", ["bf16"])]
)
def test_the_numbers_do_not_depend_on_the_workers(registry, name, search, precisions):
    workload = registry[name] if search == "batch" else apply_variant(registry[name], VariantRequest(search, 1))
    sizes = [MemorySize("96MiB", 96 * MiB, 96 * MiB), MemorySize("160MiB", 160 * MiB, 160 * MiB)]
    one = predict(workload, precisions, sizes, workers=1)
    two = predict(workload, precisions, sizes, workers=2)
    for precision in precisions:
        a, b = one.precisions[precision], two.precisions[precision]
        assert (a.max_batch, a.peaks, a.how, a.oom_request) == (b.max_batch, b.peaks, b.how, b.oom_request)
    assert [n for n in one.notes if not n.startswith("time:")] == [n for n in two.notes if not n.startswith("time:")]


def test_a_line_per_trace_with_n_of_m(registry):
    sink = Lines()
    sizes = [MemorySize("64MiB", 64 * MiB, 64 * MiB)]
    predict(registry["toy"], ["fp32", "tf32", "bf16"], sizes, progress=sink.progress())
    traced = [line for line in sink.lines if line.startswith("tracing ")]
    # tf32 takes fp32's traces; each precision is traced at batch 2 first, then (it fits) checked at 4 and
    # traced at 3; the m of "n of m" counts those from the start
    order = [("fp32", 2), ("bf16", 2), ("fp32", 4), ("fp32", 3), ("bf16", 4), ("bf16", 3)]
    assert traced == [f"tracing toy {p} at batch {b} ({i} of 6) ..." for i, (p, b) in enumerate(order, 1)]
    assert "building toy on fake tensors ..." in sink.lines


def test_the_heartbeat_speaks_after_five_silent_seconds():
    sink = Lines()
    progress = sink.progress(heartbeat=True)
    progress.plan(2)
    label = progress.tracing("llama-8b bf16 at batch 2")
    sink.now = 4.9
    progress.beat()
    assert len(sink.lines) == 1  # less than 5 s of silence: nothing
    sink.now = 5.0
    progress.beat()
    assert sink.lines[-1] == "... still tracing llama-8b bf16 at batch 2 (5 s since the last line)"
    progress.done(label)
    progress.phase("replaying bf16 through the allocator model")
    sink.now = 12.0
    progress.beat()
    assert sink.lines[-1] == "... still replaying bf16 through the allocator model (7 s since the last line)"


def test_the_heartbeat_thread_runs_only_when_asked():
    sink = Lines()
    with sink.progress(heartbeat=False) as quiet:
        assert quiet._thread is None
    with sink.progress(heartbeat=True) as talking:
        assert talking._thread is not None and talking._thread.is_alive()
    assert talking._thread is None


def test_predict_prints_progress_on_stderr_only(run, tmp_path):
    result = run("predict", "--model", "toy", "--memory", "2GiB", "--precision", "fp32", "--overhead", "0")
    assert result.exit_code == 0, result.output
    assert "tracing toy fp32 at batch 2 (1 of 3) ..." in result.stderr
    assert not [line for line in result.stdout.splitlines() if line.startswith(("tracing", "building", "replaying"))]
    assert "still" not in result.stderr  # not a terminal: no heartbeat


@pytest.mark.parametrize("verbose", [True, False])
def test_the_api_prints_progress_only_when_verbose(tmp_path, capfd, verbose):
    from memprobe.api import predict_max_batch

    prediction = predict_max_batch("toy", "64MiB", "fp32", overhead=0, verbose=verbose)
    assert prediction.precisions["fp32"].max_batch["64MiB"] > 0
    out, err = capfd.readouterr()
    assert "tracing" not in out
    assert ("memprobe: tracing toy fp32 at batch 2 (1 of 3) ..." in err) is verbose


def _trace(n: int) -> Trace:
    """A made-up trace at n: one size quadratic in n (an n x n mask), one affine, one flash-attention workspace."""
    flash = Workspace("aten._scaled_dot_product_flash_attention_backward.default", 1, (1, 4, n, 16))
    return Trace(
        n,
        [
            ("alloc", 1, n * n + 3 * n + 7, "mask"),
            ("alloc", 2, 512 * n, "act"),
            ("alloc", 3, flash.nbytes, flash),
            ("free", 3),
            ("free", 1),
            ("free", 2),
        ],
        3,
    )


def test_a_model_from_three_lengths_gives_quadratic_sizes_and_rounded_workspaces():
    from memprobe.predict.batch_model import BatchModel

    quadratic = BatchModel([_trace(2), _trace(3), _trace(4)])
    assert quadratic.aligned()
    assert quadratic.events_at(1000) == _trace(1000).events  # dq_accum rounds 1000 up to 1024 rows, as traced
    assert quadratic.reproduces(_trace(30000)) and quadratic.checked_at == 30000
    line = BatchModel([_trace(2), _trace(3)])
    assert not line.reproduces(_trace(4))  # a line through 2 and 3 misses the n x n size at 4
    assert line.events_at(4)[1] == _trace(4).events[1]  # the affine size it gets right


def test_a_batch_model_keeps_the_events_that_do_not_change_and_refuses_a_negative_size():
    from memprobe.predict.batch_model import BatchModel

    two = Trace(2, [("alloc", 1, 100, "weight"), ("alloc", 2, 600, "act"), ("free", 2)], 3)
    three = Trace(3, [("alloc", 1, 100, "weight"), ("alloc", 2, 500, "act"), ("free", 2)], 3)
    model = BatchModel([two, three])
    at_seven = model.events_at(7)
    assert at_seven == [("alloc", 1, 100, "weight"), ("alloc", 2, 100, "act"), ("free", 2)]
    assert at_seven[0] is two.events[0]  # not made again for every batch asked
    with pytest.raises(ValueError, match="negative"):
        model.events_at(9)  # 600 - 100 x 7


def test_no_heartbeat_lines_unless_asked():
    sink = Lines()
    progress = sink.progress(heartbeat=False)
    progress.tracing("toy fp32 at batch 2")
    sink.now = 60.0
    progress.beat()
    assert sink.lines == ["tracing toy fp32 at batch 2 (1 of 1) ..."]  # a log gets a line per trace, no pulses


def test_no_fork_once_this_process_has_a_cuda_context(monkeypatch, registry):
    """A fake CUDA tensor on a CUDA build makes a real CUDA context; forked children could not use it, so the traces
    then run here, one after another, and give the same events."""
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert not can_fork()
    with TraceSession(registry["toy"], 3) as session:
        traces = trace_jobs([Job(session, "fp32", 2, "toy fp32 at 2")], workers=4)
    assert isinstance(next(iter(traces.values())), Trace)


@pytest.mark.parametrize(
    "command",
    [
        ["predict", "--model", "toy", "--memory", "2GiB", "--precision", "fp32", "--overhead", "0"],
        ["plan", "--model", "toy", "--gpu", "H100", "--precision", "fp32"],
    ],
    ids=["predict", "plan"],
)
def test_predict_and_plan_hide_the_gpus_while_tracing_and_put_them_back(run, monkeypatch, command):
    """So that tracing on a GPU machine makes no CUDA context (GPU memory, broken forks); the command leaves the
    variable as it found it, so a command run in this process (CliRunner) changes nothing for what runs after."""
    from memprobe.predict import parallel

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    seen = []
    real = parallel.can_fork
    monkeypatch.setattr(parallel, "can_fork", lambda: seen.append(os.environ.get("CUDA_VISIBLE_DEVICES")) or real())
    result = run(*command)
    assert result.exit_code == 0, result.output
    assert seen and set(seen) == {""}  # every trace ran with the GPUs hidden
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


@forks
def test_a_job_autograd_refuses_after_fork_is_traced_here(monkeypatch, registry):
    """Autograd refuses a forked child once this process ran its device threads (a GPU machine): that job is traced
    again here, and so is every later one."""
    from memprobe.predict import parallel

    monkeypatch.setattr(parallel, "_fork_failed", False)
    parent = os.getpid()
    with TraceSession(registry["toy"], 3) as session:
        traced_here = session.trace

        def trace(precision, batch, repeat_last=False):
            if os.getpid() != parent:
                session.behaviour.sdpa_choices[("math", "in a failed child")] += 1  # counted before it failed
                raise PredictError(f"toy: RuntimeError: {parallel._FORK_BROKEN}-based multiprocessing")
            return traced_here(precision, batch, repeat_last)

        monkeypatch.setattr(session, "trace", trace)
        jobs = [Job(session, "fp32", b, f"toy fp32 at {b}") for b in (2, 3)]
        traces = trace_jobs(jobs, workers=2)
        assert all(isinstance(t, Trace) for t in traces.values()), traces
        assert [t.batch for t in traces.values()] == [2, 3]
        assert not can_fork()  # from now on, here
        assert ("math", "in a failed child") not in session.behaviour.sdpa_choices  # counted once, here


def _square_or_fail(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    if x == 4 and os.environ.get("MEMPROBE_TEST_PARENT") != str(os.getpid()):
        os.kill(os.getpid(), signal.SIGKILL)  # a child that dies: the parent computes it
    return x * x


@forks
def test_forked_map_keeps_order_raises_and_recovers(monkeypatch):
    from memprobe.predict.parallel import forked_map

    monkeypatch.setenv("MEMPROBE_TEST_PARENT", str(os.getpid()))
    assert forked_map(_square_or_fail, [1, 2, 4, 5, 6], workers=2) == [1, 4, 16, 25, 36]
    with pytest.raises(ValueError, match="three"):
        forked_map(_square_or_fail, [1, 3], workers=2)
    from memprobe.predict.parallel import can_fork

    if can_fork():  # not after this process ran autograd's CUDA device threads (a CUDA build of torch)
        assert forked_map(lambda x: os.getpid(), [1, 2], workers=2) != [os.getpid()] * 2  # each in its own child
    assert forked_map(lambda x: os.getpid(), [1, 2], workers=1) == [os.getpid()] * 2


def test_predict_numbers_do_not_depend_on_forked_replays(registry):
    sizes = [MemorySize("40MiB", 40 * MiB, 40 * MiB), MemorySize("1GiB", 1 << 30, 1 << 30)]
    one = predict(registry["toy"], ["fp32", "bf16"], sizes, workers=1)
    two = predict(registry["toy"], ["fp32", "bf16"], sizes, workers=2)
    assert one.precisions == two.precisions


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=_ON_LINUX)])
def test_jobs_can_add_jobs_as_they_end(registry, workers):
    with TraceSession(registry["toy"]) as session:
        first = Job(session, "fp32", 2, "fp32 at batch 2")
        added: list[Job] = []

        def then(job: Job, result) -> list[Job]:
            assert isinstance(result, Trace) and result.batch == job.batch
            more = [Job(session, "fp32", b, f"fp32 at batch {b}") for b in (3, 4)] if job is first else []
            added.extend(more)
            return more

        got = trace_jobs([first], workers=workers, then=then)
    assert set(got) == {first, *added} and sorted(t.batch for t in got.values()) == [2, 3, 4]
