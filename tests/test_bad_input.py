"""Every CLI option's bad values, tried as a new user would: each is one clear `Error` line and a non-zero exit,
never a traceback. One table per command family: this file holds report, guide, list and the group itself;
tests/test_bad_input_predict.py and tests/test_bad_input_scan.py the others (harness: tests/bad_input.py)."""

from __future__ import annotations

import pytest

from bad_input import check, workdir  # noqa: F401  (workdir is a fixture)

# (id, argv, a fragment the one-line error must contain)
CASES = [
    # the group
    ("no-such-command", ["frobnicate"], "No such command 'frobnicate'"),
    ("no-such-option", ["--frobnicate"], "No such option '--frobnicate'"),
    ("predict-without-model", ["predict"], "Missing option '--model'"),
    # --format, --precision
    ("report-bad-format", ["report", "{H100}", "--format", "xlsx"], "'xlsx' is not one of"),
    ("guide-bad-format", ["guide", "--format", "pdf"], "'pdf' is not one of"),
    ("report-bad-precision", ["report", "{H100}", "--precision", "fp64"], "unknown precision(s) fp64"),
    ("report-empty-precision", ["report", "{H100}", "--precision", ","], "give at least one precision"),
    ("report-bad-at-batch", ["report", "{H100}", "--at-batch", "median"], "'median' is not one of"),
    # result files
    ("report-missing-file", ["report", "{tmp}/nowhere.json"], "nowhere.json: cannot read"),
    ("report-truncated", ["report", "{truncated.json}"], "truncated.json: not a JSON file"),
    ("report-foreign", ["report", "{foreign.json}"], "not a memprobe result file"),
    ("report-future-schema", ["report", "{future.json}"], "is newer than this memprobe reads"),
    ("report-binary", ["report", "{binary.json}"], "binary.json: not a JSON file"),
    ("report-list", ["report", "{list.json}"], "not a memprobe result file"),
    ("report-max-batch-lots", ["report", "{lots.json}"], "max_batch must be an integer >= 0 or null, got 'lots'"),
    ("report-max-batch-negative", ["report", "{negative.json}"], "max_batch must be an integer >= 0 or null, got -5"),
    ("report-schema-one", ["report", "{one.json}"], "'one' is not a valid schema version"),
    ("report-nan", ["report", "{nan.json}"], "best_samples_per_s must be a number"),
    ("report-scans-lots", ["report", "--scans", "{lots.json}"], "max_batch must be an integer"),
    ("report-llm-lots", ["report", "--llm", "{lots.json}"], "max_batch must be an integer"),
    ("report-only-bad-files", ["report", "{lots.json}", "{one.json}"], "(2 skipped, above)"),
    ("report-empty-folder", ["report", "{empty_dir}"], "no memprobe result files in"),
    ("report-dev-zero", ["report", "/dev/zero"], "/dev/zero: cannot read (not a regular file"),
    ("guide-dev-urandom", ["guide", "/dev/urandom"], "/dev/urandom: cannot read (not a regular file"),
    ("list-models-dev-zero", ["list", "--models", "/dev/zero"], "cannot read registry (not a regular file"),
    ("report-scans-empty-folder", ["report", "--scans", "{empty_dir}"], "no memprobe result files in"),
    ("report-unknown-reference", ["report", "{H100}", "--reference", "Voodoo 2"], "reference GPU 'Voodoo 2'"),
    ("report-empty-reference", ["report", "{H100}", "--reference", " "], "--reference: no card name given"),
    ("report-unicode-reference", ["report", "{H100}", "--reference", "H100 \N{SNOWMAN}"], "is not among the results"),
    ("guide-empty-folder", ["guide", "{empty_dir}"], "no memprobe result files in"),
    ("guide-future-schema", ["guide", "{future.json}"], "is newer than this memprobe reads"),
    ("guide-max-batch-lots", ["guide", "{lots.json}"], "max_batch must be an integer"),
    # chart folders that cannot be written: one line before the report prints
    ("charts-in-proc", ["report", "{H100}", "--charts", "/proc/memprobe-x"], "cannot make the folder /proc/memprobe-x"),
    (
        "charts-in-sys",
        ["report", "{H100}", "--charts", "/sys/memprobe-x/y"],
        "cannot make the folder /sys/memprobe-x/y",
    ),
    (
        "charts-folder-where-a-chart-goes",
        ["report", "{H100}", "--charts", "{charts_blocked}"],
        "max_batch.png is a folder, where a chart file would be written",
    ),
    ("charts-on-a-file", ["report", "{H100}", "--charts", "{a_file}"], "is a file"),
    # empty paths are not the working folder
    ("report-empty-path", ["report", ""], "an empty path"),
    ("guide-empty-path", ["guide", " "], "an empty path"),
    ("charts-empty-path", ["report", "{H100}", "--charts", ""], "an empty path"),
    ("list-empty-models", ["list", "--models", ""], "an empty path"),
    # options that do nothing together
    ("report-scans-and-llm", ["report", "--scans", "--llm", "{H100}"], "give one of --scans, --llm and --breakdown"),
    (
        "report-scans-charts",
        ["report", "--scans", "{H100}", "--charts", "{tmp}/c"],
        "--charts has no effect with --scans",
    ),
    ("report-scans-reference", ["report", "--scans", "{H100}", "--reference", "H100 SXM"], "--reference has no effect"),
    ("report-llm-precision", ["report", "--llm", "{H100}", "-p", "bf16"], "--precision has no effect with --llm"),
    ("report-llm-at-batch", ["report", "--llm", "{H100}", "--at-batch", "max"], "--at-batch has no effect with --llm"),
    # guide: budgets and cards
    ("guide-budget-negative", ["guide", "--budget", "-100"], "--budget"),
    ("guide-budget-garbage", ["guide", "--budget", "cheap"], "--budget"),
    ("guide-budget-nan", ["guide", "--budget", "nan"], "expected a price in USD, got nan"),
    ("guide-budget-inf", ["guide", "--budget", "inf"], "expected a price in USD, got inf"),
    ("guide-empty-gpu", ["guide", "--gpu", ""], "no card name given"),
    ("guide-gpu-comma", ["guide", "--gpu", ","], "no card name given"),
    ("guide-gpu-junk-words", ["guide", "--gpu", "H200 foo"], "unknown GPU 'H200 foo'; closest catalog names: H200 SXM"),
    ("guide-gpu-unicode", ["guide", "--gpu", "H200 \N{SNOWMAN}"], "is not a card name"),
    ("guide-gpu-typo", ["guide", "--gpu", "H900"], "closest catalog names"),
    ("guide-gpu-huge", ["guide", "--gpu", "x" * 20000], "unknown GPU"),
    # list and malformed models.yaml: the file, the entry and its line are named
    ("list-unknown-name", ["list", "gpt-17"], "unknown model 'gpt-17'"),
    ("list-unicode-name", ["list", "\N{SNOWMAN}"], "unknown model"),
    ("list-all-with-names", ["list", "--all", "bert-large"], "--all has no effect with NAMES"),
    ("models-bad-yaml", ["list", "--models", "{bad_yaml.yaml}"], "line 3"),
    ("models-duplicate", ["list", "--models", "{duplicate.yaml}"], "line 6: duplicate entry 'toy' (first at line 1)"),
    (
        "models-params-list",
        ["list", "--models", "{params_list.yaml}"],
        "entry 'toy' (line 1): params must be a mapping",
    ),
    ("models-not-mapping", ["list", "--models", "{not_mapping.yaml}"], "not_mapping.yaml"),
    ("models-unknown-key", ["list", "--models", "{unknown_key.yaml}"], "entry 'toy' (line 1)"),
    ("models-missing-file", ["list", "--models", "{tmp}/nowhere.yaml"], "nowhere.yaml"),
    ("models-a-folder", ["list", "--models", "{empty_dir}"], "is a directory"),
    # relative paths, run from another working directory
    ("relative-report-path", ["report", "reports/h100"], "reports/h100"),
    ("relative-models-path", ["list", "--models", "models.yaml"], "models.yaml"),
]


@pytest.mark.parametrize("argv, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_a_non_zero_exit(workdir, argv, fragment):  # noqa: F811
    check(workdir, argv, fragment)


# card names: a name memprobe cannot read exits 1 in every command (README's exit codes), --gpu named
CODED = [
    ("guide-gpu-unknown", ["guide", "--gpu", "H900"], "--gpu: unknown GPU 'H900'", 1),
    ("guide-gpu-a-size", ["guide", "--gpu", "80GB"], "'80GB' is a memory size, not a card name", 1),
    ("guide-gpu-a-size-binary", ["guide", "--gpu", "24 GiB"], "'24 GiB' is a memory size", 1),
    ("guide-gpu-empty", ["guide", "--gpu", ""], "--gpu: no card name given", 1),
    # report's --reference reads a card name too: the same exit code as --gpu (issue 51)
    ("report-reference-empty", ["report", "{H100}", "--reference", " "], "--reference: no card name given", 1),
    ("report-reference-a-size", ["report", "{H100}", "--reference", "80GB"], "'80GB' is a memory size", 1),
    ("report-reference-unknown", ["report", "{H100}", "--reference", "H900"], "reference GPU 'H900' is not among", 1),
    ("page-reference-empty", ["report", "{H100}", "--html", "{tmp}/p.html", "--reference", ""], "no card name", 1),
]


@pytest.mark.parametrize("argv, fragment, code", [c[1:] for c in CODED], ids=[c[0] for c in CODED])
def test_bad_names_exit_1(workdir, argv, fragment, code):  # noqa: F811
    check(workdir, argv, fragment, code=code)
