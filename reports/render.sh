#!/bin/bash
# Re-render reports/report.md, reports/guide.md and reports/charts/ from the committed H100 result
# files. Run from the repository root with memprobe installed: bash reports/render.sh
set -euo pipefail
command -v memprobe >/dev/null || { echo "render.sh: memprobe is not on PATH (pip install -e .)" >&2; exit 1; }
render() {  # render OUTPUT TITLE COMMAND...
    local out=$1 title=$2; shift 2
    local err; err=$(mktemp)
    local body; body=$("$@" 2>"$err")
    {
        echo "# $title"; echo; echo "Command (run from the repository root):"; echo
        echo '```'; echo "$*"; echo '```'; echo
        if [ -s "$err" ]; then echo "What it said on stderr:"; echo; echo '```'; cat "$err"; echo '```'; echo; fi
        echo "$body"
    } > "$out"
    rm -f "$err"
}
render reports/report.md "memprobe report on the committed results" \
    memprobe report reports/h100 --with-published --charts reports/charts
render reports/guide.md "memprobe guide on the committed results" memprobe guide reports/h100
render reports/scans_h100.md "memprobe scans on the H100 (the newest finished run of each workload and precision)" \
    memprobe report --scans reports/h100
render reports/scans_h100_emulated.md "memprobe scans on the H100 with emulated memory caps (scan --memory-cap)" \
    memprobe report --scans reports/emulated_h100
