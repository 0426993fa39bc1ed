#!/usr/bin/env bash
# baremq and a Linux 6.1 guest + fio on the same QEMU device, in one run, with ratios and the
# device floor (what the emulated controller allows with no block layer, measured by baremq
# before each job). One table per run: compare the ratios, not absolutes (TCG, shared host).
#
#   xtask/scripts/side-by-side.sh [md|nvme] [SMP] [RUNTIME_S]        (from the checkout)
#   xtask/scripts/side-by-side.sh SMP [RUNTIME_S]                    (md)
#
# md: megasas-gen2 on an 8 GiB null-co disk (`megasas.floor=`); nvme: QEMU nvme with one queue pair
# per vCPU on the same backend (`nvme.floor=`). Jobs on both sides: 4k randread QD1 (one CPU),
# 4k randread QD32 on every CPU, 128k sequential read QD8 and 4k randwrite QD32 (one CPU each).
# The Linux side is `cargo xtask peer run` (xtask/README.md); its first run builds the guest under
# $BAREMQ_PEER_DIR (default ~/.cache/baremq/peer: a download and a few minutes).
#
# IPIO=1 adds a second table: the exact work per I/O of both systems on the same device
# (`cargo xtask ipio --device DEV --linux`: guest instructions and MMIO reads/writes per I/O,
# 4k randread QD32 on 1 vCPU whatever SMP is; about 5 more minutes for the two Linux boots).
set -u
case ${1:-md} in
  [0-9]*) DEV=md; SMP=$1; RT=${2:-5} ;;
  *) DEV=${1:-md}; SMP=${2:-1}; RT=${3:-5} ;;
esac
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
(cd "$ROOT" && cargo xtask build >/dev/null 2>&1) || { echo "side-by-side: kernel build failed" >&2; exit 1; }
K=$ROOT/target/x86_64-unknown-none/release/kernel
BIOS=(); [ -f /usr/share/qemu/qboot.rom ] && BIOS=(-bios /usr/share/qemu/qboot.rom)
NULLCO=(-blockdev driver=null-co,node-name=d0,size=8589934592,read-zeroes=on)
case $DEV in
  md) DISK=("${NULLCO[@]}" -device megasas-gen2,id=hba0 -device scsi-hd,drive=d0,bus=hba0.0)
      NAME=md0; FLOOR=megasas.floor=5000; SCN=megasas-nullco ;;
  nvme) DISK=("${NULLCO[@]}" -device "nvme,id=nvme0,serial=peer0,max_ioqpairs=$SMP" -device nvme-ns,drive=d0,bus=nvme0)
      NAME=nvme0n1; FLOOR=nvme.floor=5000; SCN=nvme-nullco ;;
  *) echo "side-by-side: device must be md or nvme, not '$DEV'" >&2; exit 2 ;;
esac
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
boot() { # $1 = log name, rest = kernel command line
  local name=$1; shift
  local t0=$EPOCHREALTIME
  timeout 300 qemu-system-x86_64 -accel tcg,thread=multi -cpu max "${BIOS[@]}" -smp "$SMP" -m 1G -display none \
    -no-reboot -serial "file:$W/$name.log" -device isa-debug-exit,iobase=0xf4,iosize=0x04 -kernel "$K" \
    "${DISK[@]}" -append "$*" </dev/null >/dev/null 2>&1
  echo "rc=$? wall_ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%d",(b-a)*1000}')" >"$W/$name.rc"
}
LAST=$((SMP - 1))
boot ours "$FLOOR" runtime="${RT}s" device=$NAME job=rr4k_qd1 rw=randread bs=4k iodepth=1 cpus=0 \
  job=rr4k_qd32 rw=randread bs=4k iodepth=32 cpus=0-$LAST job=sr128k_qd8 rw=read bs=128k iodepth=8 cpus=0 \
  job=rw4k_qd32 rw=randwrite bs=4k iodepth=32 cpus=0
boot first runtime=200ms device=$NAME rw=randread bs=4k iodepth=1 cpus=0
(cd "$ROOT" && cargo xtask peer run "$SCN" "$SMP" sbs --jobs rr4k_qd1,rr4k_qd32,sr128k_qd8,rw4k_qd32 \
  --runtime "$RT" --ramp 1 >"$W/linux.out" 2>&1) \
  || { echo "side-by-side: the Linux peer failed (its figures may be missing):" >&2; tail -3 "$W/linux.out" >&2; }
python3 - "$W" "$DEV" "$SMP" "$RT" <<'PY'
import json, re, sys
W, dev, smp, rt = sys.argv[1:5]
ours, floors = {}, {}
for line in open(f"{W}/ours.log", errors="replace"):
    m = re.search(r"BAREMQ-JSON: (\{.*\})", line)
    if m:
        d = json.loads(m.group(1)); ours[d["job"]["name"]] = d
    m = re.search(r"floor_qd1_iops=(\d+) floor_qd1_p50_ns=(\d+) floor_qd32_iops=(\d+)", line)
    if m:  # the totals line of the job that follows its floor line
        # The run at the job's own depth (floor_job_qd_iops) where it has one, else QD32's.
        own = re.search(r"floor_job_qd_iops=(\d+)", line)
        floors[len(floors)] = tuple(int(x) for x in m.groups()) + (int(own.group(1)) if own else None,)
linux = {}
for line in open(f"{W}/linux.out", errors="replace"):
    m = re.match(r"RESULT \S+/(\S+) (.*)", line)
    if m:
        linux[m.group(1).split("x")[0].split("_hipri")[0]] = dict(x.split("=", 1) for x in m.group(2).split())
order = ["rr4k_qd1", "rr4k_qd32", "sr128k_qd8", "rw4k_qd32"]
floor = {name: floors.get(i) for i, name in enumerate(order)}
def lin(job, key):
    try: return float(linux[job][key])
    except (KeyError, ValueError): return None
def our(job, f):
    try: return f(ours[job])
    except (KeyError, TypeError): return None
rows = [
    ("4k randread QD1, IOPS", our("rr4k_qd1", lambda d: d["iops"]), lin("rr4k_qd1", "iops"), "higher",
     floor["rr4k_qd1"] and floor["rr4k_qd1"][0]),
    ("4k randread QD1, p50 latency (us)", our("rr4k_qd1", lambda d: d["lat_ns"]["p50"] / 1000), lin("rr4k_qd1", "lat_p50_us"),
     "lower", floor["rr4k_qd1"] and floor["rr4k_qd1"][1] / 1000),
    (f"4k randread QD32 x {smp} CPU(s), IOPS", our("rr4k_qd32", lambda d: d["iops"]), lin("rr4k_qd32", "iops"), "higher",
     floor["rr4k_qd32"] and floor["rr4k_qd32"][2]),
    # md's floor before this job reads 128 KiB (one SGE) at the job's depth, QD8, as MB/s.
    # NVMe's floor reads one page, so it has no 128 KiB floor.
    ("128k seq read QD8, MB/s", our("sr128k_qd8", lambda d: d["bw_bytes"] / 1e6), lin("sr128k_qd8", "bw_MBps"), "higher",
     floor["sr128k_qd8"] and dev == "md" and floor["sr128k_qd8"][3] and floor["sr128k_qd8"][3] * 131072 / 1e6),
    ("4k randwrite QD32, IOPS", our("rw4k_qd32", lambda d: d["iops"]), lin("rw4k_qd32", "iops"), "higher", None),
]
first = int(open(f"{W}/first.rc").read().split("wall_ms=")[1]) - 200
lf = None
for line in open(f"{W}/linux.out", errors="replace"):
    m = re.search(r"fio_start_ms=(\d+)", line)
    if m and lf is None: lf = float(m.group(1))
rows.append(("boot to first I/O, host wall (ms)", float(first), lf, "lower", None))
def f(x):
    return "-" if x is None else (f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}")
print(f"| {dev} (TCG, smp{smp}, {rt} s jobs) | baremq | Linux 6.1 + fio | baremq/Linux | device floor | baremq/floor |")
print("|---|--:|--:|--:|--:|--:|")
for name, o, t, better, fl in rows:
    ratio = f"{o / t:.2f}x" if o and t else "-"
    frac = f"{(fl / o if better == 'lower' else o / fl):.2f}" if o and fl else "-"
    print(f"| {name} | {f(o)} | {f(t)} | {ratio} | {f(fl) if fl else '-'} | {frac} |")
for n in ("ours", "first"):
    print(f"{n}: {open(f'{W}/{n}.rc').read().strip()}")
PY
if [ "${IPIO:-0}" = 1 ]; then
  echo
  echo "Work per I/O, exact (cargo xtask ipio --device $DEV --linux: TCG plugin, 4k randread QD32, 1 vCPU):"
  echo
  (cd "$ROOT" && cargo xtask ipio --device "$DEV" --linux >"$W/ipio.out" 2>&1) \
    && grep '^|' "$W/ipio.out" \
    || { echo "side-by-side: IPIO=1: cargo xtask ipio failed:" >&2; tail -5 "$W/ipio.out" >&2; exit 1; }
fi
