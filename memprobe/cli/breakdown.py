"""`memprobe predict --breakdown`: the predicted breakdown at each predicted max batch, printed (and saved)."""

from __future__ import annotations

import click

from memprobe.compare.breakdown import breakdown_table
from memprobe.core.breakdown import Breakdown


def predicted_breakdowns(made: list, steps: int, out: str | None) -> None:
    """For each (workload, prediction) and precision, the breakdown at each memory size's predicted max batch,
    replayed at that size's allocator capacity (one trace per distinct batch and capacity). Writes them to `out`
    when given."""
    from memprobe.core.breakdown import write_predicted
    from memprobe.predict.breakdown import predict_breakdown
    from memprobe.predict.trace import PredictError

    records = []
    for workload, prediction in made:
        for precision, p in prediction.precisions.items():
            done: dict[tuple[int, int], Breakdown] = {}
            capacity = {size.label: size.capacity_bytes for size in prediction.sizes}
            for label, batch in p.max_batch.items():
                if batch < 1:
                    continue
                key = (batch, capacity[label])
                try:
                    record = done.get(key) or predict_breakdown(workload, precision, batch, steps, capacity=key[1])
                except PredictError as exc:
                    raise click.ClickException(str(exc).splitlines()[0]) from None
                done[key] = record
                records.append(
                    {"workload": workload.name, "precision": precision, "memory": label, "breakdown": record}
                )
                click.echo(
                    breakdown_table(
                        record, f"{workload.name} {precision} at {label} (predicted)", precision, workload.family
                    )
                    + "\n"
                )
    if out:
        click.echo(f"wrote {write_predicted(out, records)}", err=True)
