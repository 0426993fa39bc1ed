#!/usr/bin/env bash
# Feeds baremq's fio output to fio's own tools and shows that they accept it:
#   * fio's `fio_jsonplus_clat2csv --validate` (Debian package `fio`) on the json+ document,
#   * fio-plot (PyPI `fio-plot`) on the JSON documents (-l, -N, -H, -L) and on the logs (-g).
#
# usage: xtask/scripts/fio-compat-check.sh [CONSOLE_LOG]
#   CONSOLE_LOG: a captured console of a json+ run with logs (BAREMQ-FIO-JSON / BAREMQ-LOG lines).
#   Without it, the host example `cargo run -p workload --example fio_output -- json+` makes one
#   (randread at iodepth 1, 8 and 32 on a simulated device, logs named as bench-fio names them).
#
# Needs: fio (apt-get install -y fio) for fio_jsonplus_clat2csv, and fio-plot in a virtual
# environment: FIO_PLOT=/path/to/venv/bin/fio-plot (default: fio-plot on PATH, then
# /tmp/fio-plot-venv/bin/fio-plot). Exits non-zero, naming the tool, when one of them refuses
# the output; exits 2 when a tool is missing (nothing was checked, so nothing passed).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/baremq-fio-compat.XXXXXX)
# KEEP_WORK=1 keeps the documents, CSVs and charts for a look.
if [[ -z "${KEEP_WORK:-}" ]]; then trap 'rm -rf "$work"' EXIT; else echo "work directory: $work"; fi

clat2csv=$(command -v fio_jsonplus_clat2csv || true)
fio_plot=${FIO_PLOT:-$(command -v fio-plot || echo /tmp/fio-plot-venv/bin/fio-plot)}
if [[ -z "$clat2csv" ]]; then
    echo "fio-compat-check: fio_jsonplus_clat2csv not found (apt-get install -y fio)" >&2
    exit 2
fi
if [[ ! -x "$fio_plot" ]]; then
    echo "fio-compat-check: fio-plot not found (python3 -m venv /tmp/fio-plot-venv && /tmp/fio-plot-venv/bin/pip install fio-plot, or set FIO_PLOT)" >&2
    exit 2
fi

console="$work/console.log"
if [[ $# -ge 1 ]]; then
    cp "$1" "$console"
else
    (cd "$root" && cargo run -q -p workload --example fio_output -- json+) > "$console"
fi

# The host tool: the document, one document per job (fio-plot sums the jobs of a file), the logs.
(cd "$root" && cargo run -q -p xtask -- fio-out "$console" "$work/out" --output run.json --split) > /dev/null
doc="$work/out/run.json"

echo "== fio_jsonplus_clat2csv, then --validate (the CSV counts against the document's bins)"
for mode in convert --validate; do
    flag=$([[ $mode == convert ]] || echo "$mode")
    # shellcheck disable=SC2086
    "$clat2csv" $flag "$doc" "$work/clat.csv" > "$work/clat2csv.txt" 2>&1 || {
        cat "$work/clat2csv.txt"; echo "FAIL: fio_jsonplus_clat2csv ($mode) refused the document" >&2; exit 1; }
    cat "$work/clat2csv.txt"
done
if ! grep -q validated "$work/clat2csv.txt"; then
    echo "FAIL: fio_jsonplus_clat2csv --validate validated nothing" >&2
    exit 1
fi
csv_count=$(ls "$work"/clat_job*.csv 2>/dev/null | wc -l)
jobs=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["jobs"]))' "$doc")
if [[ "$csv_count" -ne "$jobs" ]]; then
    echo "FAIL: fio_jsonplus_clat2csv wrote $csv_count CSV files for $jobs jobs" >&2
    exit 1
fi
# Every CSV has rows (the bins are not empty) and its counts add up to the document's N.
python3 - "$doc" "$work" <<'PY'
import csv, json, sys, glob
doc = json.load(open(sys.argv[1]))
for index, job in enumerate(doc["jobs"]):
    lines = list(csv.reader(open(f"{sys.argv[2]}/clat_job{index}.csv"), skipinitialspace=True))
    header, rows = [c.strip() for c in lines[0]], lines[1:]
    if not rows:
        sys.exit(f"FAIL: clat_job{index}.csv is empty")
    column = header.index("read_clat_ns_count")
    total = sum(int(r[column]) for r in rows if r[column].strip())
    n = job["read"]["clat_ns"]["N"]
    if total != n:
        sys.exit(f"FAIL: clat_job{index}.csv counts {total} reads, the document says N={n}")
    print(f"clat_job{index}.csv: {len(rows)} rows, {total} reads = N")
PY

echo "== fio-plot on the JSON documents"
cd "$work"
depths=$(python3 -c 'import json,sys; print(" ".join(sorted({j["job options"]["iodepth"] for j in json.load(open(sys.argv[1]))["jobs"]}, key=int)))' "$doc")
numjobs=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["job options"]["numjobs"])' "$doc")
rw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["job options"]["rw"])' "$doc")
# Only the split files (one job each) go to fio-plot; the whole-run document would be summed.
mkdir -p "$work/plot-in" && cp "$work"/out/"$rw"-*.json "$work/plot-in/"
first_depth=${depths%% *}
run_plot() {
    local name=$1; shift
    if "$fio_plot" -T "baremq $name" -r "$rw" -o "$work/$name.png" "$@" > "$work/$name.txt" 2>&1 \
        && [[ -s "$work/$name.png" ]]; then
        echo "fio-plot $name: $(stat -c %s "$work/$name.png") bytes of chart"
    else
        cat "$work/$name.txt"; echo "FAIL: fio-plot $name refused the output" >&2; exit 1
    fi
}
# shellcheck disable=SC2086
run_plot bargraph2d-qd -i "$work/plot-in" -l -d $depths -n "$numjobs"
run_plot bargraph2d-nj -i "$work/plot-in" -N -d "$first_depth" -n "$numjobs"
run_plot histogram -i "$work/plot-in" -H -d "$first_depth" -n "$numjobs"
# shellcheck disable=SC2086
run_plot bargraph3d -i "$work/plot-in" -L -t iops -d $depths -n "$numjobs"
# Two "benchmark runs" side by side (the same files twice), with the CPU table.
cp -r "$work/plot-in" "$work/plot-in-2"
run_plot compare-cpu -i "$work/plot-in" "$work/plot-in-2" -C --show-cpu --show-data -d "$first_depth" -n "$numjobs"

echo "== fio-plot on the logs"
mkdir -p "$work/logs" && cp "$work"/out/*.log "$work/logs/"
if "$fio_plot" -i "$work/logs" -T "baremq logs" -g -t bw iops lat -r "$rw" -d $depths -n "$numjobs" -o "$work/logs.png" > "$work/logs.txt" 2>&1 \
    && [[ -s "$work/logs.png" ]]; then
    echo "fio-plot loggraph: $(stat -c %s "$work/logs.png") bytes of chart"
else
    cat "$work/logs.txt"; echo "FAIL: fio-plot -g refused the logs" >&2; exit 1
fi
echo "fio-compat-check: fio_jsonplus_clat2csv and fio-plot accept baremq's output"
