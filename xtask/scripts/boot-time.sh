#!/usr/bin/env bash
# Boot to first I/O, as side-by-side.sh's second boot measures it (the same QEMU command line:
# pc, qboot, 1 vCPU, 1 GiB, megasas-gen2 on a null-co disk, a 200 ms job), N times; prints each
# boot's host wall time minus the job, the kernel's own `boot to first I/O` (TSC time from the VM's
# reset to the job's start) and its `boot phases` line, then the medians.
#
#   xtask/scripts/boot-time.sh [N] [KERNEL...]      (from the checkout; N defaults to 12)
#
# With several kernels (e.g. two builds copied aside), the boots alternate between them, A B A B ...,
# so a noisy shared host weighs on both alike; one median line per kernel. Without a kernel it
# builds and times the checkout's. KERNEL may be PATH::WORDS (the same build with other kernel words,
# e.g. "$K::aml=off"); EXTRA adds kernel words to every boot, QEMU_EXTRA QEMU options.
# Each round also times QEMU alone: the first kernel on the same command line with a word it
# refuses at once (it exits before any device is touched), so what is QEMU's own start-up and
# exit can be told from what is the kernel's; the summary subtracts its median.
set -u
N=${1:-12}; shift || true
ROOT=$(cd "$(dirname "$(readlink -f "$0")")/../.." && pwd)
if [ $# -eq 0 ]; then
  (cd "$ROOT" && cargo xtask build >/dev/null 2>&1) || { echo "boot-time: kernel build failed" >&2; exit 1; }
  set -- "$ROOT/target/x86_64-unknown-none/release/kernel"
fi
BIOS=(); [ -f /usr/share/qemu/qboot.rom ] && BIOS=(-bios /usr/share/qemu/qboot.rom)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
qemu_boot() { # KERNEL APPEND LOG
  timeout 60 qemu-system-x86_64 -accel tcg,thread=multi -cpu max "${BIOS[@]}" -smp 1 -m 1G -display none \
    -no-reboot -serial "file:$3" -device isa-debug-exit,iobase=0xf4,iosize=0x04 -kernel "$1" \
    -blockdev driver=null-co,node-name=d0,size=8589934592,read-zeroes=on \
    -device megasas-gen2,id=hba0 -device scsi-hd,drive=d0,bus=hba0.0 ${QEMU_EXTRA:-} \
    -append "$2" </dev/null >/dev/null 2>&1
}
for i in $(seq 1 "$N"); do
  K=${1%%::*}
  t0=$EPOCHREALTIME
  qemu_boot "$K" "boot-time.refused-at-once=1" "$W/alone.log"
  alone=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%d",(b-a)*1000}')
  grep -aq "unknown command-line key" "$W/alone.log" || { echo "boot-time: the QEMU-alone boot was not refused at its command line" >&2; exit 1; }
  echo "$alone" >>"$W/alone"
  k=0
  for KW in "$@"; do
    k=$((k + 1))
    K=${KW%%::*}; WORDS=; [ "$K" != "$KW" ] && WORDS=${KW#*::}
    t0=$EPOCHREALTIME
    qemu_boot "$K" "runtime=200ms device=md0 rw=randread bs=4k iodepth=1 cpus=0 $WORDS ${EXTRA:-}" "$W/boot.log"
    rc=$?
    wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%d",(b-a)*1000-200}')
    phases=$(grep -a -o 'boot phases (ms): .*' "$W/boot.log" | tr -d '\r')
    # The kernel's own figure: TSC time from the VM's reset to the job's start.
    vm=$(grep -a -o 'boot to first I/O: [0-9.]* ms from reset' "$W/boot.log" | grep -o '[0-9.]*' | head -1)
    echo "$k $wall ${vm:-nan} $phases" >>"$W/all"
    echo "kernel $k boot $i: rc=$rc first_io_ms=$wall vm_first_io_ms=${vm:-none} ${phases:-no phases line}"
  done
done
python3 - "$W/all" "$W/alone" "$@" <<'PY'
import re, statistics, sys
rows = [l.split(" ", 3) for l in open(sys.argv[1]) if l.strip()]
alone = statistics.median(int(l) for l in open(sys.argv[2]) if l.strip())
print(f"QEMU alone (a boot refused at its command line): median {alone} ms of wall")
for k, path in enumerate(sys.argv[3:], 1):
    mine = [r for r in rows if r[0] == str(k)]
    walls = [int(r[1]) for r in mine]
    vms = [float(r[2]) for r in mine if r[2] != "nan"]
    vm = f"{statistics.median(vms):.1f} ms" if vms else "not printed"
    phases = {}
    for r in mine:
        for name, ms in re.findall(r"([a-z+ ]+?) ([\d.]+)(?:,|$)", r[3].replace("boot phases (ms): ", "").replace(";", ",") if len(r) > 3 else ""):
            phases.setdefault(name.strip(), []).append(float(ms))
    med = ", ".join(f"{n} {statistics.median(v):.1f}" for n, v in phases.items())
    print(f"kernel {k} ({path}): {len(walls)} boots, boot to first I/O median {statistics.median(walls)} ms "
          f"(min {min(walls)}, max {max(walls)}), {statistics.median(walls) - alone} ms above QEMU alone; "
          f"from the VM's reset (TSC, the kernel's line) median {vm}; "
          f"phase medians (ms): {med}")
PY
