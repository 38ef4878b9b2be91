"""`memprobe report` and `memprobe guide`: tables and charts from result files (no torch)."""

from __future__ import annotations

from typing import Any

import click

from memprobe.cli import checks
from memprobe.cli.app import _FORMATS, _load_results, main
from memprobe.cli.declared import request_options
from memprobe.cli.helpers import card_names
from memprobe.cli.options import format_option, number_option, precision_option
from memprobe.cli.serving import checked, guide_serving
from memprobe.cli.width import wide_option
from memprobe.core.workload import option_bounds as bounds
from memprobe.request.serving import ServingRequest


@main.command("report")
@click.argument("paths", nargs=-1, required=True, type=checks.Path())
@click.option(
    "--reference",
    help="GPU that throughput is normalized to (catalog or device name). "
    "Default: Quadro RTX 8000 where present, else the first GPU given.",
)
@precision_option("Comma-separated precisions to show (default: all found).")
@format_option(_FORMATS, "github (markdown), plain, csv or json.")
@click.option(
    "--with-published",
    is_flag=True,
    help="Add published figures (2020 study, 2023-2025 PyTorch catalog) for the workloads that have them, "
    "marked (pub).",
)
@click.option(
    "--charts", "charts_dir", type=checks.Path(file_okay=False), help="Also write PNG and SVG charts into this folder."
)
@click.option(
    "--at-batch",
    type=click.Choice(["best", "common", "max"]),
    default="best",
    show_default=True,
    help="Throughput normalized across cards: best (at each card's best batch b*, from the scan's curve), "
    "common (at the largest batch every compared card fits, from the curves) or max (at each card's "
    "max batch B, the 2020 study's method). Files without a curve fall back to B, noted.",
)
@click.option(
    "--scans",
    is_flag=True,
    help="Print the scan summary instead (max batch, proof, trials, throughput, MFU, utilization): one row "
    "per GPU, workload and precision, from the newest file that finished it.",
)
@click.option(
    "--llm",
    is_flag=True,
    help="Print the LLM edges instead: max batch or max sequence length per setting (plain, checkpointing, "
    "LoRA) and how much each raises it over plain, with tokens per step, tokens/s and MFU.",
)
@click.option(
    "--frontier",
    is_flag=True,
    help="Print the batch x sequence-length frontiers instead (scan/predict --search frontier): measured and "
    "predicted points side by side; with --charts, a frontier chart.",
)
@click.option(
    "--breakdown",
    is_flag=True,
    help="Show the memory at the peak of B by category (scan --breakdown), with what buys more batch.",
)
@click.option(
    "--html",
    "html_file",
    type=checks.Path(dir_okay=False),
    help="Write one self-contained HTML page instead of printing: every table and chart of report, guide and "
    "--scans/--breakdown/--frontier/--llm for these files, each measured figure linked to its result file.",
)
@click.option(
    "--predicted",
    "predicted_file",
    type=checks.Path(exists=True, dir_okay=False),
    help="With --breakdown or --charts: a file of predicted breakdowns (predict --breakdown-out) to set "
    "beside the measured ones at the same batch.",
)
@click.option(
    "--model",
    "-m",
    "model",
    help="Print one workload's answer instead (a workload name as the tables show it): every card with a figure "
    "ranked by throughput at its best batch b*, with its max batch, throughput relative to the reference card and per "
    "1000 USD; one precision (fp16 first) unless --precision names others.",
)
@wide_option
def report_cmd(
    paths: tuple[str, ...],
    reference: str | None,
    precision: list[str] | None,
    fmt: str,
    with_published: bool,
    charts_dir: str | None,
    at_batch: str,
    scans: bool,
    llm: bool,
    frontier: bool,
    breakdown: bool = False,
    html_file: str | None = None,
    predicted_file: str | None = None,
    model: str | None = None,
) -> None:
    """Compare result files from any number of machines.

    PATHS are result files or folders (searched for *.json; other JSON files there are skipped with a
    warning). Prints max batch, throughput at each card's best batch b* with MFU, throughput relative to a
    reference GPU (OOM = 0), the mixed-precision gain over fp32 and utilization. Cells memprobe did not measure
    are marked.
    """
    ctx = click.get_current_context()
    checks.report_checks(ctx, scans, llm, breakdown, bool(charts_dir or html_file))
    checks.reference_name(reference)
    if model is not None:
        _model_checks(ctx, scans or llm or breakdown or frontier)
    options = {"reference": reference, "precisions": precision, "at_batch": at_batch, "with_published": with_published}
    if html_file:
        _html_report(ctx, html_file, paths, scans or llm or breakdown or frontier, options, predicted_file)
        if not charts_dir:
            return
    if charts_dir:  # before the report prints: a folder that cannot be written is one line, not a late traceback
        _charts_folder(charts_dir)
    if frontier:
        if scans or llm or breakdown:
            raise click.UsageError("give one of --frontier, --scans, --llm and --breakdown")
        checks.refuse(
            checks.given(ctx, "reference", "at_batch", "with_published"),
            "with --frontier (they shape the comparison report)",
        )
        _frontier_report(_load_results(paths), fmt, charts_dir)
        return
    from memprobe.compare.scaling import split_by_world_size

    loaded, multi = split_by_world_size(_load_results(paths))
    if breakdown:
        _breakdown_report(loaded, _predicted(predicted_file), charts_dir)
    elif llm:
        from memprobe.compare.llm import llm_table

        click.echo(llm_table([result for _path, result in loaded], fmt))
    elif model is not None:
        _model_report(loaded, paths, model, fmt, options)
    elif not _scaling_report(multi, loaded, fmt, with_published):
        if scans:
            _scans_report(loaded, paths, fmt, precision)
        else:
            _comparison_report(loaded, paths, fmt, options, charts_dir, _predicted(predicted_file))


def _model_checks(ctx: click.Context, other_mode: bool) -> None:
    """--model prints one workload's answer: not beside another mode, a page or charts."""
    if other_mode:
        raise click.UsageError(
            "--model prints one workload's answer: give it without --scans, --llm, --breakdown, --frontier"
        )
    checks.refuse(
        checks.given(ctx, "html_file", "charts_dir"), "with --model (the page and charts show every workload)"
    )


def _html_report(
    ctx: click.Context,
    html_file: str,
    paths: tuple[str, ...],
    other_mode: bool,
    options: dict,
    predicted_file: str | None,
) -> None:
    """report --html: the page of every section, refused beside the options that print one table."""
    if other_mode:
        raise click.UsageError("--html writes every section: give it without --scans, --llm, --breakdown, --frontier")
    checks.refuse(checks.given(ctx, "fmt"), "with --html (the page is HTML)")
    reads = (predicted_file,) if predicted_file else ()
    html_page(html_file, paths, predicted=_predicted(predicted_file), reads=reads, **options)


def _breakdown_report(loaded: list, predicted: list | None, charts_dir: str | None) -> None:
    """report --breakdown: the memory at B by category (and its charts)."""
    from memprobe.compare.breakdown import breakdown_report
    from memprobe.compare.breakdown_chart import write_breakdown_charts

    click.echo(breakdown_report([result for _path, result in loaded], predicted))
    if charts_dir:
        _wrote(lambda: write_breakdown_charts(loaded, charts_dir, predicted))


def _scaling_report(multi: list, loaded: list, fmt: str, with_published: bool) -> bool:
    """Multi-GPU files get the scaling table (and the published one); True when nothing else is left to print."""
    if multi and (loaded or with_published) and fmt == "json":
        raise click.UsageError("--format json makes one document: report multi-GPU and single-GPU files separately")
    if not multi:
        return False
    from memprobe.compare.scaling import scaling_table

    click.echo(scaling_table([r for _p, r in multi], [r for _p, r in loaded], fmt), nl=False)
    if with_published:
        from memprobe.compare.published_scaling import published_scaling_rows, published_scaling_table

        names = sorted({str(r.workload.name) for _p, r in multi})
        if published_scaling_rows(names):
            click.echo(published_scaling_table(names, fmt), nl=False)
    return not loaded and not with_published


def _scans_report(loaded: list, paths: tuple[str, ...], fmt: str, precision: list[str] | None) -> None:
    """report --scans: one row per GPU, workload and precision, from the newest file that finished it."""
    from memprobe.compare.scan_table import scan_table

    if not loaded:
        raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
    click.echo(scan_table([result for _path, result in loaded], fmt, newest_only=True, precisions=precision))


def _comparison_report(
    loaded: list, paths: tuple[str, ...], fmt: str, options: dict, charts_dir: str | None, predicted: list | None
) -> None:
    """The comparison report (and its charts): max batch, throughput at b*, relative throughput, gains."""
    from memprobe.compare.comparison import ReportError
    from memprobe.compare.report import comparison_report

    if not loaded and not options["with_published"]:
        raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
    try:
        text, comparison, relative = comparison_report(loaded, fmt=fmt, **options)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(text, nl=False)
    if charts_dir:
        from memprobe.compare.charts import write_charts

        _wrote(lambda: write_charts(comparison, relative, loaded, charts_dir, predicted=predicted))


def _model_report(loaded: list, paths: tuple[str, ...], model: str, fmt: str, options: dict) -> None:
    """report --model NAME: one workload's cards with a figure, ranked (compare/view_text.py)."""
    from memprobe.compare.comparison import ReportError, build_comparison
    from memprobe.compare.curves import like_for_like
    from memprobe.compare.relative import resolve_reference
    from memprobe.compare.view_text import model_text, model_views

    if not loaded and not options["with_published"]:
        raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
    try:
        comparison = build_comparison(loaded, with_published=options["with_published"])
        reference = resolve_reference(comparison, options["reference"]) if options["reference"] else None
        basis = like_for_like(comparison, options["at_batch"])
        views = model_views(loaded, basis.comparison, basis.label, reference=reference)
        click.echo(model_text(views, model, options["precisions"], fmt, "report"), nl=False)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None


def html_page(path: str, paths: tuple[str, ...], reads: tuple[str, ...] = (), **options) -> None:
    """Write the HTML page of `paths` (compare/page.py) atomically (`-`: to standard output); any problem is one
    Error line, with no page written: the path is checked before the files are read, and is none of them nor of
    `reads` (the command's other inputs), nor any result file."""
    from memprobe.compare.comparison import ReportError
    from memprobe.compare.page import PageOptions, build_page, check_page_path, write_page
    from memprobe.core.files.output_guard import check_output_name, refuse_clobber
    from memprobe.core.files.outputs import STDOUT, OutputError, check_output_file

    try:
        check_output_name(path, "page.html", stdout_ok=True)
        refuse_clobber(path, (*paths, *reads))
    except OutputError as exc:
        raise click.BadParameter(str(exc), param_hint="--html") from None
    try:
        if path != STDOUT:
            check_output_file(path)  # a link loop or a folder that cannot be made: said before the page is built
            check_page_path(path)
        loaded = _load_results(paths) if paths else []
        if paths and not loaded:
            raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
        write_page(path, build_page(loaded, PageOptions(**options), given=paths))
    except (OutputError, ReportError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo("wrote the page to standard output" if path == STDOUT else f"wrote {path}", err=True)


def _wrote(write) -> None:
    """Run a chart writer and say each file it wrote; a file that cannot be written is one line, and what the chart
    library warns of is one note line each (never its raw warning)."""
    import warnings

    from memprobe.core.files.outputs import OutputError

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for written in write():
                click.echo(f"wrote {written}", err=True)
        except OutputError as exc:
            raise click.ClickException(str(exc)) from None
    for message in dict.fromkeys(str(w.message).splitlines()[0] for w in caught):
        click.echo(f"note: the chart library said: {message}", err=True)


def _frontier_report(loaded: list, fmt: str, charts_dir: str | None) -> None:
    """The frontier table of the results that have one (and its chart under `charts_dir`)."""
    from memprobe.compare.frontier import frontier_rows, write_frontier_chart
    from memprobe.compare.tables import rows_text

    rows = frontier_rows(loaded)
    if not rows:
        raise click.ClickException("no frontier in these result files (made by scan or predict --search frontier)")
    click.echo(rows_text(rows, "github" if fmt == "github" else fmt, keep=4))
    if charts_dir:
        for path in write_frontier_chart(loaded, charts_dir):
            click.echo(f"wrote {path}", err=True)


def _charts_folder(path: str) -> None:
    """--charts: the folder exists or can be made, can be written, and holds no folder where a chart file goes."""
    from memprobe.core.files.outputs import OutputError, prepare_dir

    try:
        prepare_dir(path)
    except OutputError as exc:
        if path == "-":  # a name that is no folder's: a bad option value, as a file there is
            raise click.BadParameter(str(exc), param_hint="--charts") from None
        raise click.ClickException(str(exc)) from None


@main.command("guide")
@click.argument("paths", nargs=-1, type=checks.Path())
@number_option(bounds.GUIDE_BUDGET, "Only cards whose typical price (USD) is at most this.")
@click.option(
    "--gpu", "gpus", help='Only these catalog cards, by name or alias, comma-separated (e.g. "H200,A100 80GB SXM4").'
)
@format_option(_FORMATS, "github (markdown), plain, csv or json.")
@click.option(
    "--html",
    "html_file",
    type=checks.Path(dir_okay=False),
    help="Write the report page (memprobe report --html) with this guide instead of printing.",
)
@click.option(
    "--model",
    "-m",
    "model",
    help="Print one workload's answer instead: every catalog card (and every scanned one) ranked by throughput at "
    "its best batch b* where known, then by max batch (measured, else predicted), with throughput per 1000 USD.",
)
@precision_option("With --model: the precisions to show (default: one, fp16 first).")
@request_options(ServingRequest)
@wide_option
def guide_cmd(
    paths: tuple[str, ...],
    budget: float | None,
    gpus: str | None,
    fmt: str,
    html_file: str | None = None,
    model: str | None = None,
    precision: list[str] | None = None,
    **serving: Any,
) -> None:
    """GPU purchase guidance from result files: the max batch predicted on every catalog card.

    Uses each scan's fitted memory model (static + per-sample bytes) and the memory overhead measured on
    the scanned card; adds throughput per 1000 USD and per watt where measured or published, and a
    one-line verdict per card. Multi-GPU files (scan --gpus N) add the scaling table: per-GPU max batch and
    efficiency on N GPUs, beside the published multi-GPU figures. Without PATHS it shows the catalog and the
    published figures only.

    With --mode generate (optionally --prompt-len, --new-tokens, --prefill-chunk: only those generations): per
    `scan --mode generate` result and card, the concurrent sequences that fit (measured on the scanned card,
    predicted elsewhere from its memory line, labelled) and the decode and prefill tokens/s where measured.
    """
    from memprobe.compare.guide import guide_report
    from memprobe.compare.scaling import split_by_world_size

    ctx = click.get_current_context()
    asked = checked(ServingRequest(**serving))
    if asked.mode == "generate":
        checks.refuse(checks.given(ctx, "html_file"), "with --mode generate (the page has its generation section)")
        checks.refuse(checks.given(ctx, "precision"), "with --mode generate (the guide shows every precision)")
        guide_serving(paths, asked, model, fmt, budget, card_names(gpus))
        return
    if model is None:
        checks.refuse(checks.given(ctx, "precision"), "without --model (the guide shows every precision)")
    else:
        checks.refuse(checks.given(ctx, "html_file"), "with --model (the page shows every workload)")
    if html_file:
        checks.refuse(checks.given(ctx, "fmt"), "with --html (the page is HTML)")
        html_page(html_file, paths, budget=budget, only=card_names(gpus))
        return
    # Per-card predictions come from the single-GPU files; multi-GPU files add the scaling table.
    loaded, multi = split_by_world_size(_load_results(paths))
    if paths and not loaded and not multi:
        raise click.ClickException(f"no memprobe result files in {', '.join(paths)}")
    if model is not None:
        _guide_model(loaded, model, precision, fmt, budget, card_names(gpus))
        return
    shown = guide_report(loaded, budget=budget, fmt=fmt, only=card_names(gpus), multi=[r for _p, r in multi])
    click.echo(shown, nl=False)


def _guide_model(
    loaded: list, model: str, precision: list[str] | None, fmt: str, budget: float | None, only: list[str] | None
) -> None:
    """guide --model NAME: every card for one workload, ranked (compare/view_text.py)."""
    from memprobe.compare.comparison import ReportError
    from memprobe.compare.view_text import guide_model_text

    try:
        click.echo(guide_model_text(loaded, model, precision, fmt, budget, only), nl=False)
    except ReportError as exc:
        raise click.ClickException(str(exc)) from None


def _predicted(predicted_file: str | None) -> list | None:
    """The predicted breakdowns of --predicted (None without it); a file that cannot be read is one line."""
    from memprobe.core.records.breakdown import BreakdownError, read_predicted

    try:
        return read_predicted(predicted_file) if predicted_file else None
    except BreakdownError as exc:
        raise click.ClickException(str(exc)) from None
