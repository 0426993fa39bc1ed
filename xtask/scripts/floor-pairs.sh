#!/usr/bin/env bash
# How close the kernel comes to the device floor, judged on a noisy host: md0 and NVMe 4k randread
# QD32 on cpu0 (or another job: BS=, QD=, RW=) against the
# device floor measured right before each job, many times. Each boot runs JOBS short jobs, each
# after its own floor at the job's depth (`floor.depths=32` or `1`; another depth takes the default
# depths, which add the job's own; `megasas.floor=` / `nvme.floor=`, reads of the job's size), so
# a job and its floor are seconds apart and a change in the host's load falls on both; the configurations are
# booted in turn, ROUNDS times. Prints per configuration the median and mean of job / floor over
# every pair, their spread, and the median job and floor IOPS (docs/bench.md "Floor pairs").
#
#   xtask/scripts/floor-pairs.sh [ROUNDS] [JOBS] [RUNTIME]   (defaults 4 rounds, 8 jobs, 1s per job)
#
# The job: BS=4k, QD=32, RW=randread (defaults; e.g. BS=128k QD=8 RW=read for the large row; NVMe's
# floor reads at most 4 KiB, MegaRAID's one SGE). Configurations: DEVICES="md nvme" (default), SMPS="1 2" (default); reads per floor burst:
# FLOOR=30000 (default); QEMU's accelerator: ACCEL= (default tcg,thread=multi); extra kernel words
# for every boot: EXTRA="..."; kernels to compare, booted in turn: KERNELS="A.elf B.elf" (default:
# this checkout's, built first; a kernel must know `floor.depths=`). Timings under TCG move with
# the host: compare within one run only.
set -u
ROUNDS=${1:-4}; NJOBS=${2:-8}; RT=${3:-1s}; FLOOR=${FLOOR:-30000}
BS=${BS:-4k}; QD=${QD:-32}; RW=${RW:-randread}
case "$QD" in
  32) depths="floor.depths=32"; floor_key=floor_qd32_iops ;;
  1) depths="floor.depths=1"; floor_key=floor_qd1_iops ;;
  *) depths=""; floor_key=floor_job_qd_iops ;;
esac
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
if [ -z "${KERNELS:-}" ]; then
  (cd "$ROOT" && cargo xtask build >/dev/null 2>&1) || { echo "floor-pairs: kernel build failed" >&2; exit 1; }
  KERNELS=$ROOT/target/x86_64-unknown-none/release/kernel
fi
BIOS=(); [ -f /usr/share/qemu/qboot.rom ] && BIOS=(-bios /usr/share/qemu/qboot.rom)
. "$ROOT/xtask/scripts/floor-device.sh"
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
jobs=""
for i in $(seq 1 "$NJOBS"); do jobs="$jobs job=pair$i iodepth=$QD cpus=0"; done
k=0
for kernel in $KERNELS; do
  [ -f "$kernel" ] || { echo "floor-pairs: no kernel $kernel" >&2; exit 1; }
  k=$((k + 1)); cp "$kernel" "$W/kernel$k"
done
for round in $(seq 1 "$ROUNDS"); do
  for dev in ${DEVICES:-md nvme}; do
    for smp in ${SMPS:-1 2}; do
      for i in $(seq 1 "$k"); do
        name="k$i-$dev-smp$smp-r$round"
        echo "floor-pairs: round $round kernel $i $dev smp$smp" >&2
        floor_device "$dev" "$smp" "$FLOOR"
        timeout 600 qemu-system-x86_64 -accel "${ACCEL:-tcg,thread=multi}" -cpu max "${BIOS[@]}" -smp "$smp" -m 1G \
          -display none -no-reboot -serial "file:$W/$name.log" -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
          -kernel "$W/kernel$i" "${disk[@]}" \
          -append "${EXTRA:-} $depths $words runtime=$RT rw=$RW bs=$BS verify=none$jobs" \
          </dev/null >/dev/null 2>&1
        echo "$?" >"$W/$name.rc"
      done
    done
  done
done
echo "floor-pairs: $RW bs=$BS QD$QD on cpu0 against the floor at QD$QD ($floor_key)"
python3 - "$W" "$KERNELS" "$floor_key" <<'PY'
import glob, json, os, re, statistics, sys
w, kernels, floor_key = sys.argv[1], sys.argv[2].split(), sys.argv[3]
pairs = {}
for log in sorted(glob.glob(f"{w}/*.log")):
    name = os.path.basename(log)[:-4]
    kernel, dev, smp, _ = name.split("-")
    rc = open(f"{w}/{name}.rc").read().strip()
    if rc != "33":
        print(f"floor-pairs: {name} failed (exit {rc}), left out", file=sys.stderr)
        continue
    for m in re.finditer(r"BAREMQ-JSON: (\{.*\})", open(log, errors="replace").read()):
        j = json.loads(m.group(1))
        floor = j["totals"].get(floor_key, 0)
        if floor:
            pairs.setdefault((dev, smp, kernel), []).append((j["iops"], floor))
med = statistics.median
print("| device, vCPUs | kernel | pairs | job / floor: median | mean | 10th-90th percentile | job IOPS (median) | floor IOPS (median) |")
print("|---|---|--:|--:|--:|--:|--:|--:|")
for (dev, smp, kernel), p in sorted(pairs.items()):
    r = sorted(job / floor for job, floor in p)
    lo, hi = r[int(0.1 * (len(r) - 1))], r[int(0.9 * (len(r) - 1))]
    label = kernels[int(kernel[1:]) - 1] if len(kernels) > 1 else "this checkout"
    print(f"| {dev} {smp[3:]} | {label} | {len(r)} | {med(r):.3f} | {statistics.mean(r):.3f} | {lo:.2f}-{hi:.2f} | "
          f"{med(j for j, _ in p):,.0f} | {med(f for _, f in p):,.0f} |")
PY
