"""The generation table of docs/benchmarks.md: every committed `scan --mode generate` result (not a frontier) beside
`memprobe predict --mode generate` of the same workload and card, made now by this machine's predictor.

    python benchmarks/generate_table.py [FOLDER ...] [--predictions FILE] [--reuse] [--write docs/benchmarks.md]

FOLDER: where the result files are (default reports/h200_generate). The predictions are made through the request
path `memprobe predict --mode generate --gpu CARD -m MODEL -p PRECISION --prompt-len P --new-tokens N
[--prefill-chunk C]` takes (memprobe.request.predict_job), one per workload, card and precision, and kept in --predictions (default
reports/h200_generate/table_predictions.json) with the versions of the libraries that made them; --reuse takes that
file's and traces only the result files it lacks (with the same libraries, or it stops). The table goes to stdout, or with --write between the markers GENERATE_TABLE_START and
GENERATE_TABLE_END of that file. Run from the repository root (an hf-config: model's path is relative to it).

Measured B: the result's proven edge (status done). A scan that did not finish is labelled partial, with its largest
batch that fitted and its smallest failure. Error: (predicted - B) / B. Safe: the predicted batch that leaves the
prediction's margin unused; "yes" where it is at or below B.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- GENERATE_TABLE_START -->", "<!-- GENERATE_TABLE_END -->"


def scans(folders: list[Path]) -> list[tuple[Path, Any]]:
    """The generate results (not frontiers) under `folders`, in path order."""
    from memprobe.core.records.results import load_results

    found = load_results([str(f) for f in folders], on_skip=lambda _exc: None)
    return [
        (Path(p), r)
        for p, r in sorted(found, key=lambda f: str(f[0]))
        if r.mode == "generate" and r.workload.params.get("generate", {}).get("prompt_len") and not r.frontier
    ]


def card_of(result: Any) -> str:
    """The catalog name of the card a result ran on."""
    from memprobe.core.cards.catalog import find_card

    card = find_card(result.gpu_name())
    return card.name if card else result.gpu_name()


def predict_one(result: Any, precision: str) -> dict[str, Any]:
    """predict --mode generate of a result's workload on its card: {max, safe, seconds}."""
    import time

    from memprobe.request import ModelRequest, PredictRequest, predict_job

    g = result.workload.params["generate"]
    model = ModelRequest(
        [str(result.workload.name).split("+p", 1)[0]],
        prompt_len=g["prompt_len"],
        new_tokens=g["new_tokens"],
        prefill_chunk=g.get("prefill_chunk"),
    )
    card = card_of(result)
    job = predict_job(PredictRequest(model, precisions=[precision], cards=card, mode="generate"))
    started = time.monotonic()
    sizes = job.memory_sizes()
    prediction = job.predict(job.workloads[0], sizes)
    p = prediction.precisions[precision]
    label = sizes[0].label
    return {
        "max": p.max_batch[label],
        "safe": p.safe_max_batch.get(label),
        "seconds": round(time.monotonic() - started, 1),
    }


def key(result: Any, precision: str) -> str:
    """What a prediction is of: the workload (its name says P, N and C), the card and the precision; two scans of
    the same setting share one."""
    return f"{result.workload.name} on {card_of(result)} {precision}"


def measured(result: Any, precision: str) -> tuple[int | None, str, int | None]:
    """(B, how it reads, smallest failure): B of a finished scan, else None, what the partial scan found and its
    smallest failed batch (None: none failed)."""
    p = result.precisions[precision]
    fits = [a.batch for a in p.attempts if a.outcome == "fit" and a.batch is not None]
    fails = [a.batch for a in p.attempts if a.outcome != "fit" and a.batch is not None]
    if p.status == "done" and p.max_batch is not None:
        return int(p.max_batch), str(p.max_batch), None
    parts = [f"partial ({p.status})"]
    parts += [f"fitted {max(fits)}"] if fits else []
    parts += [f"failed {min(fails)}"] if fails else []
    return None, ", ".join(parts), min(fails) if fails else None


def _safe_check(b: int | None, failed: int | None, safe: int | None) -> str:
    """Whether the safe figure runs: at or below B, or (a partial scan) below its smallest failure."""
    if safe is None or (b is None and failed is None):
        return "-"
    ok = safe <= b if b is not None else safe < (failed or 0)
    return ("yes" if ok else "**no**") + ("" if b is not None else f" (< failed {failed})" if ok else "")


def versions() -> dict[str, str]:
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version()}


def table(entries: list[tuple[Path, Any]], predicted: dict[str, Any]) -> str:
    """The markdown table and the line under it."""
    lines = [
        "| model | P / N | chunk | measured B (H200 SXM, file) | predicted | error | safe | safe runs |",
        "|-------|-------|-------|-----------------------------|-----------|-------|------|-----------|",
    ]
    for path, result in entries:
        g = result.workload.params["generate"]
        for precision in result.precisions:
            b, shown, failed = measured(result, precision)
            pred = predicted["rows"].get(key(result, precision), {})
            top, safe = pred.get("max"), pred.get("safe")
            error = f"{(top - b) / b:+.1%}" if b and top is not None else "-"
            if b is None and failed is not None and top is not None and top >= failed:
                error = f"above the failed {failed}"
            ok = _safe_check(b, failed, safe)
            name = str(result.workload.name).split("+p", 1)[0]
            name = name.replace("hf-config:benchmarks/zoo_models/configs/", "").replace(".json", " (hf-config)")
            name += " (frontier point)" if "frontier-points" in path.parts else ""
            lines.append(
                f"| {name} {precision} | {g['prompt_len']} / {g['new_tokens']} | {g.get('prefill_chunk') or '-'} | "
                f"{shown} ([file]({Path('..') / path})) | {top if top is not None else '-'} | {error} | "
                f"{safe if safe is not None else '-'} | {ok} |"
            )
    v = predicted.get("versions", {})
    lines += [
        "",
        f"Measured: `memprobe scan --mode generate` on an H200 SXM (each file linked). Predicted: `memprobe predict --mode "
        f"generate --gpu H200` of the same workload, made on a CPU with torch {v.get('torch')} and transformers "
        f"{v.get('transformers')} (not measured; a transformers other than the GPU's can run a different decode). "
        "Re-made by `python benchmarks/generate_table.py --write docs/benchmarks.md`. Safe runs: the safe figure is at "
        "or below B, or, for a partial scan, below its smallest failure.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, default=[Path("reports/h200_generate")])
    parser.add_argument("--predictions", type=Path, default=Path("reports/h200_generate/table_predictions.json"))
    parser.add_argument(
        "--reuse", action="store_true", help="take the predictions in --predictions, tracing only the files it lacks"
    )
    parser.add_argument("--write", type=Path, help="replace the table between the markers of this file")
    args = parser.parse_args(argv)
    entries = scans(args.folders)
    kept = json.loads(args.predictions.read_text()) if args.reuse and args.predictions.exists() else None
    predicted = kept or {"versions": versions(), "rows": {}}
    missing = {key(r, n): (r, n) for _p, r in entries for n in r.precisions if key(r, n) not in predicted["rows"]}
    if missing and kept and kept.get("versions") != versions():  # one table, one predictor's libraries
        print(f"error: {args.predictions} was made with {kept.get('versions')}: drop --reuse", file=sys.stderr)
        return 1
    for name, (result, precision) in missing.items():
        print(f"predicting {name} ...", file=sys.stderr)
        predicted["rows"][name] = predict_one(result, precision)
    if missing:
        args.predictions.write_text(json.dumps(predicted, indent=1) + "\n")
    text = table(entries, predicted)
    if args.write:
        doc = args.write.read_text()
        if START not in doc or END not in doc:
            print(f"error: {args.write} has no {START} ... {END} markers", file=sys.stderr)
            return 1
        head, rest = doc.split(START, 1)
        args.write.write_text(head + START + "\n" + text + "\n" + END + rest.split(END, 1)[1])
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
