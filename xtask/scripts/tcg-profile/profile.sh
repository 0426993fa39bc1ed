#!/usr/bin/env bash
# Where the guest's time goes under TCG, per I/O: instructions, memory accesses and translated
# blocks of each kernel function, how blocks end (calls, returns, jumps to another page: each
# needs a code lookup instead of a chained jump) and the costly instructions in hot blocks
# (divisions, rdtsc, indirect jumps, interrupt flag changes). Exact counts, not samples, and
# independent of host load: compare two kernels by these numbers, then confirm with IOPS.
#
#   xtask/scripts/tcg-profile/profile.sh [KERNEL_ARGS...]       (from the checkout)
#
# Default job: null0, 4k randread QD32, 2 s, one vCPU. Environment: KERNEL (default: the release
# build, built if missing), QEMU_ARGS (extra device flags, e.g. a megasas disk), TOP (functions
# listed, 25), EXITS=off (skip the block-exit pass, which runs the job a second time with a
# callback per block and is slower). Needs cc, nm, addr2line, objdump, python3, and a QEMU
# built with plugin support (Debian's is). Results also stay in target/tcg-profile/.
set -eu
HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
OUT=$ROOT/target/tcg-profile
mkdir -p "$OUT"
K=${KERNEL:-$ROOT/target/x86_64-unknown-none/release/kernel}
if [ -z "${KERNEL:-}" ]; then (cd "$ROOT" && cargo xtask build >/dev/null 2>&1); fi
[ -f "$K" ] || { echo "tcg-profile: no kernel at $K" >&2; exit 2; }
cc -O2 -shared -fPIC -o "$OUT/libtbstats.so" "$HERE/tbstats.c"
ARGS=${*:-null.size=8g runtime=2 device=null0 job=null_qd32 rw=randread bs=4k iodepth=32}
BIOS=(); [ -f /usr/share/qemu/qboot.rom ] && BIOS=(-bios /usr/share/qemu/qboot.rom)
run() { # $1 = output name, $2 = extra plugin argument
    # shellcheck disable=SC2086
    timeout 600 qemu-system-x86_64 -accel tcg -cpu max "${BIOS[@]}" -smp 1 -m 1G -display none -no-reboot \
        -plugin "$OUT/libtbstats.so,arg=out=$OUT/$1.txt$2" -serial "file:$OUT/$1.log" \
        -device isa-debug-exit,iobase=0xf4,iosize=0x04 ${QEMU_ARGS:-} -kernel "$K" -append "$ARGS" </dev/null >/dev/null 2>&1 || true
    grep -q 'BAREMQ-JSON' "$OUT/$1.log" || { echo "tcg-profile: the job printed no result (see $OUT/$1.log)" >&2; exit 1; }
}
run counts ""
[ "${EXITS:-on}" = off ] || run exits ",arg=exits=on"
python3 - "$K" "$OUT" "${TOP:-25}" "${EXITS:-on}" <<'PY'
import bisect, collections, json, re, subprocess, sys
elf, out, top, exits = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] != "off"

def ios_of(log):
    n = 0
    for line in open(log, errors="replace"):
        m = re.search(r"BAREMQ-JSON: (\{.*\})", line)
        if m:
            n += json.loads(m.group(1)).get("ios", 0)
    return n or 1

syms = []
for line in subprocess.run(["nm", "-n", "-C", "--defined-only", elf], capture_output=True, text=True).stdout.splitlines():
    p = line.split(" ", 2)
    if len(p) == 3 and p[1] in "tTwW":
        syms.append((int(p[0], 16), re.sub(r"::h[0-9a-f]{16}$", "", p[2])))
starts = [a for a, _ in syms]
def func(addr):
    i = bisect.bisect_right(starts, addr) - 1
    return syms[i][1] if i >= 0 else "?"

def blocks(path):
    for line in open(path):
        start, insns, runs, mem, other_page, disas = line.split(maxsplit=5)
        yield int(start, 16), int(insns), int(runs), int(mem), int(other_page), disas.strip()

ios = ios_of(f"{out}/counts.log")
ins, mem, tbs = collections.Counter(), collections.Counter(), collections.Counter()
hot = []
for start, n, runs, m, _, _ in blocks(f"{out}/counts.txt"):
    f = func(start)
    ins[f] += n * runs; mem[f] += m; tbs[f] += runs
    if runs >= ios / 20:
        hot.append((start, n, runs / ios))
print(f"{ios} I/Os; per I/O: {sum(ins.values())/ios:.0f} instructions, {sum(mem.values())/ios:.0f} memory accesses, "
      f"{sum(tbs.values())/ios:.1f} blocks")
print(f"\n{'insns':>8} {'mem':>7} {'blocks':>6}  function (per I/O)")
for f, c in ins.most_common(top):
    if c / ios < 0.05:
        break
    print(f"{c/ios:8.1f} {mem[f]/ios:7.1f} {tbs[f]/ios:6.1f}  {f[:110]}")

if exits:
    ios_x = ios_of(f"{out}/exits.log")
    kinds, other = collections.Counter(), collections.Counter()
    for _, _, runs, _, other_page, disas in blocks(f"{out}/exits.txt"):
        op = disas.split("_")[0]
        kind = ("return" if op.startswith("ret") else
                "indirect call" if op.startswith("call") and "*" in disas else
                "call" if op.startswith("call") else
                "indirect jump" if op.startswith("jmp") and "*" in disas else
                "jump" if op.startswith("jmp") else
                "conditional" if op.startswith("j") or op.startswith("loop") else
                op)
        kinds[kind] += runs; other[kind] += other_page
    print(f"\nhow blocks end, per I/O (next block on another page: no chaining)")
    for k, c in kinds.most_common(12):
        print(f"{c/ios_x:8.2f}  {k:15s} other page {other[k]/ios_x:6.2f}")

costly = re.compile(r"(div|idiv|rdtsc|rdtscp|pushf|popf|sti|cli|pause|hlt|rep|in |out |jmp\s+\*|call\s+\*)")
text = {}
lo, hi = min((h[0] for h in hot), default=0), max((h[0] + 16 * h[1] for h in hot), default=0)
dump = subprocess.run(["objdump", "-d", "--no-show-raw-insn", f"--start-address={lo:#x}", f"--stop-address={hi:#x}", elf],
                      capture_output=True, text=True).stdout
for line in dump.splitlines():
    m = re.match(r"\s+([0-9a-f]+):\s+(.*)", line)
    if m:
        text[int(m.group(1), 16)] = m.group(2)
addrs = sorted(text)
print("\ncostly instructions in blocks run at least once per 20 I/Os")
for start, n, rate in sorted(hot):
    i = bisect.bisect_left(addrs, start)
    for a in addrs[i:i + n]:
        if costly.match(text[a]):
            where = subprocess.run(["addr2line", "-i", "-e", elf, hex(a)], capture_output=True, text=True).stdout.split()
            print(f"{rate:6.2f}/io  {text[a][:36]:36s} {' <- '.join(w.split('/')[-1] for w in where[:4])}")
PY
