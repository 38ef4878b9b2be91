"""`memprobe predict --breakdown`: the predicted breakdown at each predicted max batch, printed (and saved)."""

from __future__ import annotations

import click

from memprobe.cli.model_code import model_code
from memprobe.compare.breakdown import breakdown_table
from memprobe.core.records.breakdown import Breakdown
from memprobe.predict.progress import TraceProgress, silent


def predicted_breakdowns(made: list, steps: int, out: str | None, progress: TraceProgress | None = None) -> None:
    """For each (workload, prediction) and precision, the breakdown at each memory size's predicted max batch,
    replayed at that size's allocator capacity (one trace per distinct batch and capacity). Each takes tens of
    seconds: `progress` announces it ("n of m"; its heartbeat fills the silence). Writes them to `out` when given
    (its folder was checked before predicting); an error writing it is one line."""
    from memprobe.core.records.breakdown import write_predicted
    from memprobe.predict.breakdown import predict_breakdown
    from memprobe.predict.trace import PredictError

    progress = progress or silent()
    jobs = []  # (workload, precision, memory label, batch, allocator capacity)
    for workload, prediction in made:
        capacity = {size.label: size.capacity_bytes for size in prediction.sizes}
        for precision, p in prediction.precisions.items():
            jobs += [(workload, precision, label, b, capacity[label]) for label, b in p.max_batch.items() if b >= 1]
    number = {key: n for n, key in enumerate(dict.fromkeys((w.name, p, b, c) for w, p, _label, b, c in jobs), 1)}
    done: dict[tuple, Breakdown] = {}
    records = []
    for workload, precision, label, batch, capacity in jobs:
        key = (workload.name, precision, batch, capacity)
        if key not in done:
            progress.phase(
                f"predicting where the memory goes: {workload.name} {precision} at batch {batch} ({label}; "
                f"{number[key]} of {len(number)})"
            )
            try:
                with model_code():
                    done[key] = predict_breakdown(workload, precision, batch, steps, capacity=capacity)
            except PredictError as exc:
                raise click.ClickException(str(exc).splitlines()[0]) from None
        record = done[key]
        records.append({"workload": workload.name, "precision": precision, "memory": label, "breakdown": record})
        title = f"{workload.name} {precision} at {label} (predicted)"
        click.echo(breakdown_table(record, title, precision, workload.family) + "\n")
    if out:
        try:
            click.echo(f"wrote {write_predicted(out, records)}", err=True)
        except OSError as exc:  # core.outputs.OutputError: one line naming the file
            raise click.ClickException(str(exc)) from None
