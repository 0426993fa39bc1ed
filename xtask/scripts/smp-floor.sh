#!/usr/bin/env bash
# One vCPU against two, and the device floor, in one interleaved run: md0 and NVMe
# 4k randread, QD1 on CPU 0 and on the last CPU (p50, IOPS, completion IPIs per I/O: the last CPU is
# not the one MegaRAID's single vector is aimed at) and QD32 (IOPS against the floor the kernel measures
# just before each job: `megasas.floor=` / `nvme.floor=`), each configuration booted ROUNDS times
# in turn, so the host's load falls on all of them alike. Prints one Markdown table: medians, the
# 2-vCPU / 1-vCPU ratio of QD1 p50, and QD32 IOPS as a fraction of the floor.
#
#   xtask/scripts/smp-floor.sh [ROUNDS] [RUNTIME_S]        (from the checkout; default 3 rounds, 3 s)
#
# Extra kernel words for every boot: EXTRA="idle.poll_us=50" (e.g.); another kernel: KERNEL=ELF;
# QEMU's accelerator: ACCEL=tcg,thread=single (default tcg,thread=multi: one host thread per vCPU,
# which with two or more vCPUs runs every guest atomic as a host atomic helper and taxes guest
# work 8-10%, one vCPU not at all; docs/bench.md "Two vCPUs under TCG");
# fewer devices: DEVICES=md (default "md nvme"); reads per floor burst: FLOOR=30000 (default 2000:
# a 2000-read burst lasts about 10 ms and its IOPS move by up to 40% between boots; 30000 read
# steadier). Timings under TCG move with the host: compare within one run only.
set -u
ROUNDS=${1:-3}; RT=${2:-3}; FLOOR=${FLOOR:-2000}
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
(cd "$ROOT" && cargo xtask build >/dev/null 2>&1) || { echo "smp-floor: kernel build failed" >&2; exit 1; }
K=${KERNEL:-$ROOT/target/x86_64-unknown-none/release/kernel}
BIOS=(); [ -f /usr/share/qemu/qboot.rom ] && BIOS=(-bios /usr/share/qemu/qboot.rom)
. "$ROOT/xtask/scripts/floor-device.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
boot() { # $1 = log name, $2 = device (md|nvme), $3 = smp
  local name=$1 dev=$2 smp=$3 disk words last=$(($3 - 1))
  floor_device "$dev" "$smp" "$FLOOR"
  timeout 300 qemu-system-x86_64 -accel "${ACCEL:-tcg,thread=multi}" -cpu max "${BIOS[@]}" -smp "$smp" -m 1G -display none \
    -no-reboot -serial "file:$W/$name.log" -device isa-debug-exit,iobase=0xf4,iosize=0x04 -kernel "$K" \
    "${disk[@]}" -append "${EXTRA:-} $words runtime=${RT}s rw=randread bs=4k verify=none \
      job=qd1 iodepth=1 cpus=0 job=qd1last iodepth=1 cpus=$last job=qd32 iodepth=32 cpus=0 \
      job=qd32all iodepth=$((32 / smp)) cpus=0-$last" \
    </dev/null >/dev/null 2>&1
  echo "$?" >"$W/$name.rc"
}
for round in $(seq 1 "$ROUNDS"); do
  for dev in ${DEVICES:-md nvme}; do
    for smp in 1 2; do
      echo "smp-floor: round $round $dev smp$smp" >&2
      boot "$dev-smp$smp-r$round" "$dev" "$smp"
    done
  done
done
python3 - "$W" "$ROUNDS" <<'PY'
import json, re, statistics, sys, glob, os
w, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for log in sorted(glob.glob(f"{w}/*.log")):
    name = os.path.basename(log)[:-4]
    dev, smp, _ = name.split("-")
    rc = open(f"{w}/{name}.rc").read().strip()
    text = open(log, errors="replace").read()
    jobs = {}
    for m in re.finditer(r"BAREMQ-JSON: (\{.*\})", text):
        j = json.loads(m.group(1))
        jobs[j["job"]["name"]] = j
    if rc != "33" or not {"qd1", "qd1last", "qd32", "qd32all"} <= set(jobs):
        print(f"smp-floor: {name} failed (exit {rc}), left out", file=sys.stderr)
        continue
    r = rows.setdefault((dev, smp), {"p50": [], "qd1": [], "ipis": [], "p50last": [], "ipislast": [],
                                     "qd32": [], "all": [], "ipisall": [], "floor": []})
    per_io = lambda j, key: j["totals"].get(key, 0) / max(j["ios"], 1)
    r["ipis"].append(per_io(jobs["qd1"], "ipis"))
    r["p50last"].append(jobs["qd1last"]["lat_ns"]["p50"] / 1000)
    r["ipislast"].append(per_io(jobs["qd1last"], "ipis"))
    r["ipisall"].append(per_io(jobs["qd32all"], "ipis"))
    r["p50"].append(jobs["qd1"]["lat_ns"]["p50"] / 1000)
    r["qd1"].append(jobs["qd1"]["iops"])
    r["qd32"].append(jobs["qd32"]["iops"])
    r["all"].append(jobs["qd32all"]["iops"])
    r["floor"].append(jobs["qd32"]["totals"].get("floor_qd32_iops", 0))
med = lambda v: statistics.median(v) if v else float("nan")
print(f"| device, vCPUs | runs | QD1 p50 µs | QD1 IOPS | QD1 IPIs/IO | QD1 on last CPU: p50 µs, IPIs/IO | QD32 IOPS (cpu0) | QD32 IOPS (all CPUs), IPIs/IO | floor QD32 IOPS | QD32 / floor | all CPUs / floor |")
print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
for (dev, smp), r in sorted(rows.items()):
    f = med(r["floor"])
    print(f"| {dev} {smp} | {len(r['p50'])} | {med(r['p50']):.1f} | {med(r['qd1']):,.0f} | {med(r['ipis']):.2f} | "
          f"{med(r['p50last']):.1f}, {med(r['ipislast']):.2f} | {med(r['qd32']):,.0f} | "
          f"{med(r['all']):,.0f}, {med(r['ipisall']):.2f} | {f:,.0f} | {med(r['qd32'])/f if f else float('nan'):.2f} | {med(r['all'])/f if f else float('nan'):.2f} |")
for dev in ("md", "nvme"):
    a, b = rows.get((dev, "smp1")), rows.get((dev, "smp2"))
    if a and b:
        print(f"\n{dev}: QD1 p50 with 2 vCPUs / 1 vCPU = {med(b['p50']) / med(a['p50']):.2f} on cpu0, "
              f"{med(b['p50last']) / med(a['p50']):.2f} on cpu1 "
              f"(per round, cpu0: {', '.join(f'{y / x:.2f}' for x, y in zip(a['p50'], b['p50']))}; "
              f"cpu1: {', '.join(f'{y / x:.2f}' for x, y in zip(a['p50'], b['p50last']))})")
PY
