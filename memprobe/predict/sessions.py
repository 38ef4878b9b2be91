"""Open trace sessions per precision: one shared on one GPU, one per precision for rank 0 of N data-parallel GPUs."""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator

from memprobe.core.workload.registry import Workload
from memprobe.predict.fakecuda import H100, Target
from memprobe.predict.trace import TraceSession


@contextmanager
def world_wraps(world: Any) -> Iterator[Callable[[str], Callable | None]]:
    """Yields precision -> the wrap hook of TraceSession (None on one GPU). With a `world`
    (data_parallel.World), holds the fake process group. Raises RuntimeError when a process group is already
    initialised here."""
    if world is None:
        yield lambda precision: None
        return
    from memprobe.predict.data_parallel import fake_world, wrap_for_trace

    with fake_world(world) as mesh:
        yield lambda precision: lambda task: wrap_for_trace(task, world, precision, mesh)


@contextmanager
def trace_sessions(
    workload: Workload, steps: int = 3, target: Target = H100, world: Any = None, mode: str = "train"
) -> Iterator[Callable[[str], TraceSession]]:
    """Yields precision -> an open TraceSession to trace that precision in, all closed on exit.

    One GPU: one session shared by every precision (built once); in generate mode one per precision (the weights
    are in its dtype). With a `world`: a session per precision
    (the wrapper depends on it), built again for every traced batch (`fresh`). A session that cannot be
    built raises PredictError when asked for, so other precisions can still be tried. `mode` "infer" traces
    forward passes (TraceSession).
    """
    with ExitStack() as stack:
        wrap_for = stack.enter_context(world_wraps(world))
        shared: list[TraceSession] = []

        def session_for(precision: str) -> TraceSession:
            if world is not None:
                return stack.enter_context(
                    TraceSession(workload, steps, target, wrap=wrap_for(precision), fresh=True, mode=mode)
                )
            if mode == "generate":  # the weights are built in the precision's dtype: a session per precision
                return stack.enter_context(TraceSession(workload, steps, target, mode=mode, precision=precision))
            if not shared:
                shared.append(stack.enter_context(TraceSession(workload, steps, target, mode=mode)))
            return shared[0]

        yield session_for
