#!/bin/bash
# Re-render reports/report.md, reports/guide.md, reports/charts/, the per-card scan tables and the one-page HTML
# report (reports/index.html) from the committed H100 and H200 result files (the 2- and 4-GPU ones included). Run from the repository root with memprobe importable (pip install -e . , or
# PYTHONPATH=$PWD): bash reports/render.sh. It runs `python -m memprobe`, so the memprobe of this checkout's
# Python is the one used (set PYTHON to pick another interpreter).
set -euo pipefail
PYTHON=${PYTHON:-python}
"$PYTHON" -c "import memprobe" 2>/dev/null || { echo "render.sh: $PYTHON cannot import memprobe (pip install -e .)" >&2; exit 1; }
render() {  # render OUTPUT TITLE ARGS...: `memprobe ARGS...` into OUTPUT, with the command and its stderr
    local out=$1 title=$2; shift 2
    local err; err=$(mktemp)
    local body; body=$("$PYTHON" -m memprobe "$@" 2>"$err")
    {
        echo "# $title"; echo; echo "Command (run from the repository root):"; echo
        echo '```'; echo "memprobe $*"; echo '```'; echo
        if [ -s "$err" ]; then echo "What it said on stderr:"; echo; echo '```'; cat "$err"; echo '```'; echo; fi
        echo "$body"
    } > "$out"
    rm -f "$err"
}
render reports/report.md "memprobe report on the committed results (H100 and H200)" \
    report reports/h100 reports/h200 --with-published --charts reports/charts
render reports/guide.md "memprobe guide on the committed results (H100 and H200)" guide reports/h100 reports/h200
render reports/scans_h100.md "memprobe scans on the H100 (the newest finished run of each workload and precision)" \
    report --scans reports/h100
render reports/scans_h200.md "memprobe scans on the H200 (the newest finished run of each workload and precision)" \
    report --scans reports/h200
render reports/scans_h100_emulated.md "memprobe scans on the H100 with emulated memory caps (scan --memory-cap)" \
    report --scans reports/emulated_h100
BREAKDOWNS="reports/breakdown/h100 reports/h100 reports/breakdown/h200"
# shellcheck disable=SC2086 # the folders are words
render reports/breakdown/breakdown.md "Memory breakdown at B on the H100 and H200, measured and predicted" \
    report --breakdown $BREAKDOWNS --predicted reports/breakdown/predicted-breakdowns.json --charts reports/breakdown/charts
# shellcheck disable=SC2086
"$PYTHON" benchmarks/breakdown_accuracy.py --predicted reports/breakdown/predicted-breakdowns.json $BREAKDOWNS \
    > reports/breakdown/accuracy.md
render reports/h200_frontier/frontier.md "llama-1b batch x sequence-length frontier on the H200, measured and predicted" \
    report --frontier reports/h200_frontier/scans reports/h200_frontier/predicted
# reports/h200_parallel: the --parallel run's single-GPU scans (no curves), with llama-1b's 1-GPU B; kept out of the
# other renders, where they would replace the suite's scans (with curves) as the newest of each workload.
render reports/scaling_h200.md "memprobe report on the 2- and 4-GPU scans (4x H200 host) beside the single-GPU H200 scans" \
    report reports/h200 reports/h200_multi reports/h200_parallel --with-published
render reports/scaling_h100.md "memprobe report on the 4-GPU scans (4x H100 host) beside the single-GPU H100 scans" \
    report reports/h100 reports/h100_4gpu_host --with-published
# One self-contained page of all of it (report, guide, scans, breakdowns, LLM edges, the frontier): open it offline.
# reports/breakdown/h100 and h200 stay out: their rescans (no curve) are newer than the suite's, so the comparison
# would take them and compare at B where report.md compares at b*; the page shows the breakdowns of reports/h100.
"$PYTHON" -m memprobe report reports/h100 reports/h200 reports/h200_multi reports/h100_4gpu_host reports/h100_llm reports/h200_frontier/scans \
    reports/h200_frontier/predicted --with-published --predicted reports/breakdown/predicted-breakdowns.json \
    --html reports/index.html
