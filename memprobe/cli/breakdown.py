"""`memprobe predict --breakdown`: the predicted breakdown at each predicted max batch, printed (and saved)."""

from __future__ import annotations

import click

from memprobe.compare.breakdown import breakdown_table
from memprobe.core.breakdown import Breakdown


def predicted_breakdowns(made: list, steps: int, out: str | None) -> None:
    """For each (workload, prediction) and precision, the breakdown at each memory size's predicted max batch
    (one trace per distinct batch). Writes them to `out` when given."""
    from memprobe.core.breakdown import write_predicted
    from memprobe.predict.breakdown import predict_breakdown
    from memprobe.predict.trace import PredictError

    records = []
    for workload, prediction in made:
        for precision, p in prediction.precisions.items():
            done: dict[int, Breakdown] = {}
            for label, batch in p.max_batch.items():
                if batch < 1:
                    continue
                try:
                    record = done.get(batch) or predict_breakdown(workload, precision, batch, steps)
                except PredictError as exc:
                    raise click.ClickException(str(exc).splitlines()[0]) from None
                done[batch] = record
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
