//! Application-processor bring-up (INIT-SIPI-SIPI through the real-mode
//! trampoline), the per-CPU idle loop, and running work on other CPUs.
//!
//! Work reaches a CPU through its mailbox: the caller publishes a function
//! pointer and argument, then sends a wake IPI. The target's idle loop (not
//! the IPI handler) runs the work with interrupts enabled, so long-running
//! work such as an I/O job can still take device interrupts and IPIs.

use crate::arch::console::kprintln;
use crate::arch::percpu::{self, MAX_CPUS};
use crate::arch::{apic, cpu, idt, irq, time};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

const AP_STACK_BYTES: usize = 256 * 1024;

/// Number of CPUs online (the BSP counts).
static ONLINE: AtomicUsize = AtomicUsize::new(1);

/// Per-CPU mailbox. `work` holds a `fn(usize)` pointer, 0 when empty.
struct Mailbox {
    work: AtomicUsize,
    arg: AtomicUsize,
    /// Incremented after each finished piece of work.
    done: AtomicU64,
}

static MAILBOX: [Mailbox; MAX_CPUS] = [const {
    Mailbox {
        work: AtomicUsize::new(0),
        arg: AtomicUsize::new(0),
        done: AtomicU64::new(0),
    }
}; MAX_CPUS];

/// CPU indices handed out (started CPUs, online or not; the boot CPU counts).
static STARTED: AtomicUsize = AtomicUsize::new(1);

/// AP stacks allocated for a CPU the SRAT places, and how many of them lie in its node's memory.
static STACKS_WITH_NODE: AtomicUsize = AtomicUsize::new(0);
static STACKS_LOCAL: AtomicUsize = AtomicUsize::new(0);

/// `(local, placed)`: of the AP stacks of CPUs the SRAT places, how many are on their CPU's node.
pub fn stack_locality() -> (usize, usize) {
    (
        STACKS_LOCAL.load(Ordering::Relaxed),
        STACKS_WITH_NODE.load(Ordering::Relaxed),
    )
}

/// Number of online CPUs.
pub fn online() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// Number of CPU indices in use: every started CPU has an index below it.
pub fn started() -> usize {
    STARTED.load(Ordering::Acquire)
}

/// A CPU found in the MADT, with the outcome of its start.
pub type CpuEntry = platform::cpus::CpuRow;
use platform::cpus::CpuState;

fn on_wake(_vector: u8, _cpu: u32) {}

/// Starts the listed CPUs other than the BSP, at most `max_cpus` CPUs in all
/// (`cpus.max=`; the kernel's capacity is the other cap). Returns the CPU
/// table; CPUs beyond the caps are in it as [`CpuState::NotStarted`].
pub fn start_aps(apic_ids: &[u32], max_cpus: Option<usize>) -> Vec<CpuEntry> {
    irq::register_fn(irq::VECTOR_WAKE, "wake", on_wake);
    let bsp = apic::id();
    let mut table = alloc::vec![CpuEntry {
        index: 0,
        apic_id: bsp,
        state: CpuState::Online,
    }];
    let others = apic_ids.iter().filter(|&&id| id != bsp).count();
    let to_start_count = platform::cpus::cpus_to_start(others + 1, max_cpus, MAX_CPUS);
    if to_start_count < others + 1 {
        kprintln!(
            "smp: starting {to_start_count} of the {} CPUs listed ({})",
            others + 1,
            match max_cpus {
                Some(max) if max < MAX_CPUS => alloc::format!("cpus.max={max}"),
                _ => alloc::format!("the kernel's capacity is {MAX_CPUS}"),
            }
        );
    }
    let image = boot::ap_trampoline_image();
    let base = boot::AP_TRAMPOLINE_BASE as *mut u8;
    // SAFETY: 0x8000 lies in low memory the frame allocator never hands out
    // (the first MiB is reserved) and is identity-mapped; nothing else uses it.
    unsafe { core::ptr::copy_nonoverlapping(image.as_ptr(), base, image.len()) };
    let patch_u64 = |off: usize, v: u64| {
        // SAFETY: `off` is one of the trampoline's data words (boot::trampoline_layout).
        unsafe { core::ptr::write_volatile(base.add(off) as *mut u64, v) }
    };
    // SAFETY: as above; the AP increments this aligned word with a locked instruction.
    let started: &AtomicU32 = unsafe { &*(base.add(boot::trampoline_layout::STARTED) as *const AtomicU32) };
    // Every AP gets its INIT first and all share one settling delay (the
    // spec's 10 ms, none where it is not needed); then each is started with
    // SIPIs in turn, since they share the trampoline's parameter words.
    let mut to_start: Vec<(usize, u32)> = Vec::new();
    for &apic_id in apic_ids.iter().filter(|&&id| id != bsp) {
        let index = table.len() + to_start.len();
        if index >= to_start_count {
            table.push(CpuEntry {
                index,
                apic_id,
                state: CpuState::NotStarted,
            });
            continue;
        }
        to_start.push((index, apic_id));
    }
    // Entries for CPUs not started sit at the end of the table, after the started ones.
    let skipped = table.split_off(1);
    STARTED.store(1 + to_start.len(), Ordering::Release);
    if !to_start.is_empty() {
        for &(_, apic_id) in &to_start {
            apic::send_ipi(apic_id, apic::Delivery::Init);
        }
        time::delay_us(init_delay_us());
        for &(_, apic_id) in &to_start {
            apic::send_ipi(apic_id, apic::Delivery::InitDeassert);
        }
    }
    for (index, apic_id) in to_start {
        percpu::cpu(index).apic_id.store(apic_id, Ordering::Relaxed);
        // From the frame allocator, not the heap: hundreds of 256 KiB stacks would take
        // the whole heap (an eighth of RAM at most). Below 4 GiB: identity-mapped by the
        // boot tables the trampoline switches to. On the CPU's NUMA node where it has room.
        let node = super::firmware::get().node_of_apic_id(apic_id);
        let stack_base = match super::memory::alloc_frames_on_node_below_4g(AP_STACK_BYTES as u64, 4096, node) {
            Ok(base) => base,
            Err(e) => {
                log::error!("smp: no memory for cpu{index}'s stack ({e}); it is not started");
                table.push(CpuEntry {
                    index,
                    apic_id,
                    state: CpuState::Failed,
                });
                continue;
            }
        };
        if let (Some(node), Some(numa)) = (node, super::firmware::get().numa.as_ref()) {
            STACKS_WITH_NODE.fetch_add(1, Ordering::Relaxed);
            if numa.range_is_on_node(stack_base, AP_STACK_BYTES as u64, node) {
                STACKS_LOCAL.fetch_add(1, Ordering::Relaxed);
            }
        }
        let stack_top = (stack_base + AP_STACK_BYTES as u64) & !0xF;
        patch_u64(boot::trampoline_layout::CR3, boot::boot_pml4_address());
        patch_u64(boot::trampoline_layout::ENTRY, ap_entry as *const () as u64);
        patch_u64(boot::trampoline_layout::STACK, stack_top);
        patch_u64(boot::trampoline_layout::ARG, index as u64);
        started.store(0, Ordering::SeqCst);

        // Two SIPIs at most, the second only when the AP has not signalled
        // after the spec's 200 us: one is enough for QEMU and most hardware.
        let page = (boot::AP_TRAMPOLINE_BASE >> 12) as u8;
        for _ in 0..2 {
            apic::send_ipi(apic_id, apic::Delivery::Startup(page));
            let t0 = time::now_ns();
            while started.load(Ordering::SeqCst) == 0 && time::now_ns() - t0 < 200_000 {
                core::hint::spin_loop();
            }
            if started.load(Ordering::SeqCst) != 0 {
                break;
            }
        }
        // A busy host may run a vCPU late: give it a second to signal that it
        // read its parameters (they are rewritten for the next AP after this),
        // then ten to finish its setup.
        let t0 = time::now_ns();
        while started.load(Ordering::SeqCst) == 0 && time::now_ns() - t0 < 1_000_000_000 {
            core::hint::spin_loop();
        }
        let t0 = time::now_ns();
        let slot = percpu::cpu(index);
        let setup_ns = if started.load(Ordering::SeqCst) != 0 {
            10_000_000_000
        } else {
            0
        };
        while !slot.online.load(Ordering::Acquire) && time::now_ns() - t0 < setup_ns {
            core::hint::spin_loop();
        }
        let online = slot.online.load(Ordering::Acquire);
        if online {
            ONLINE.fetch_add(1, Ordering::AcqRel);
        } else {
            log::error!("smp: CPU with apic id {apic_id} did not come online");
        }
        let state = if online { CpuState::Online } else { CpuState::Failed };
        table.push(CpuEntry { index, apic_id, state });
    }
    table.extend(skipped);
    percpu::cpu(0).online.store(true, Ordering::Release);
    table
}

/// How long to hold INIT before the SIPIs. The MP specification asks for
/// 10 ms; like Linux, none on CPUs that do not need it (Intel family 6 and
/// later, AMD family 0xF and later) or under a hypervisor, which emulates
/// INIT instantly.
fn init_delay_us() -> u64 {
    const LEGACY_INIT_DELAY_US: u64 = 10_000;
    if super::idle::under_hypervisor() {
        return 0;
    }
    let id = raw_cpuid::CpuId::new();
    let family = id.get_feature_info().map_or(0, |f| f.family_id());
    let modern = match id.get_vendor_info().as_ref().map(|v| v.as_str()) {
        Some("GenuineIntel") => family >= 6,
        Some("AuthenticAMD") | Some("HygonGenuine") => family >= 0xF,
        _ => false,
    };
    if modern { 0 } else { LEGACY_INIT_DELAY_US }
}

/// First Rust code on an AP: per-CPU state, descriptor tables, local APIC, then idle.
extern "C" fn ap_entry(index: usize) -> ! {
    let apic_id = percpu::cpu(index).apic_id.load(Ordering::Relaxed);
    // SAFETY: the BSP hands each index to exactly one AP.
    unsafe { percpu::init_current(index, apic_id) };
    idt::load();
    cpu::init_descriptor_tables();
    apic::init_local(irq::VECTOR_SPURIOUS);
    if apic::id() != apic_id {
        log::error!("smp: cpu{index} expected apic id {apic_id}, reads {}", apic::id());
    }
    // Its tick starts now; it is watched from here on (its idle loop and the
    // work it runs take interrupts).
    super::watchdog::start_this_cpu(true);
    // Release: everything this CPU set up is visible to whoever sees it online.
    percpu::current().online.store(true, Ordering::Release);
    idle_loop(index)
}

/// Turns the calling CPU (the boot CPU, once it has handed its own work to another CPU) into a
/// worker like the APs: it runs what [`run_on`] posts to it, forever.
pub fn become_worker() -> ! {
    idle_loop(percpu::index())
}

fn idle_loop(index: usize) -> ! {
    let mb = &MAILBOX[index];
    loop {
        x86_64::instructions::interrupts::disable();
        // Acquire pairs with the Release in `run_on`: the argument is visible.
        let work = mb.work.swap(0, Ordering::Acquire);
        if work != 0 {
            let arg = mb.arg.load(Ordering::Relaxed);
            x86_64::instructions::interrupts::enable();
            // SAFETY: only `run_on` stores non-zero values, and they are `fn(usize)` pointers.
            let f: fn(usize) = unsafe { core::mem::transmute::<usize, fn(usize)>(work) };
            f(arg);
            mb.done.fetch_add(1, Ordering::Release);
        } else {
            // `sti; hlt` back to back: a wake IPI that arrived after the check
            // above is taken right after sti and ends the hlt.
            x86_64::instructions::interrupts::enable_and_hlt();
        }
    }
}

/// Publishes `f(arg)` in CPU `index`'s mailbox without waking it. Returns the
/// value of its done counter to wait for, or None when the CPU is this one,
/// offline, or busy.
fn post(index: usize, f: fn(usize), arg: usize) -> Option<u64> {
    let slot = percpu::cpu(index);
    if index == percpu::index() || !slot.online.load(Ordering::Acquire) {
        return None;
    }
    let mb = &MAILBOX[index];
    let target = mb.done.load(Ordering::Acquire) + 1;
    mb.arg.store(arg, Ordering::Relaxed);
    // Release pairs with the idle loop's Acquire swap.
    mb.work
        .compare_exchange(0, f as usize, Ordering::Release, Ordering::Relaxed)
        .ok()?;
    Some(target)
}

/// Starts `f(arg)` on CPU `index` (not the calling CPU) with a wake IPI to
/// that CPU. Returns the done-counter value to wait for, or None when the CPU
/// is offline or busy.
pub fn run_on(index: usize, f: fn(usize), arg: usize) -> Option<u64> {
    let target = post(index, f, arg)?;
    apic::send_ipi(
        percpu::cpu(index).apic_id.load(Ordering::Relaxed),
        apic::Delivery::Fixed(irq::VECTOR_WAKE),
    );
    Some(target)
}

/// Waits until CPU `index` finished the work `run_on` returned `target` for.
/// If the work still sits in the mailbox after a while, the wake IPI was
/// lost (or the CPU is very slow to wake): it is sent again rather than
/// waiting forever. Extra wakes are harmless.
/// Whether CPU `index` has finished the work [`run_on`] returned `target` for (no wait).
pub fn is_done(index: usize, target: u64) -> bool {
    MAILBOX[index].done.load(Ordering::Acquire) >= target
}

pub fn wait_done(index: usize, target: u64) {
    const REWAKE_NS: u64 = 200_000_000;
    let mb = &MAILBOX[index];
    let mut last_wake = time::now_ns();
    while mb.done.load(Ordering::Acquire) < target {
        if mb.work.load(Ordering::Relaxed) != 0 && time::now_ns() - last_wake > REWAKE_NS {
            log::warn!("smp: cpu{index} has not picked up its work after 200 ms; sending another wake IPI");
            apic::send_ipi(
                percpu::cpu(index).apic_id.load(Ordering::Relaxed),
                apic::Delivery::Fixed(irq::VECTOR_WAKE),
            );
            last_wake = time::now_ns();
        }
        // Halts (idle=halt, interrupts on) until the tick or another
        // interrupt: a waiting boot CPU must not take host time from the
        // devices the workers drive.
        super::idle::wait_until(|| mb.done.load(Ordering::Acquire) >= target);
    }
}

/// Runs `f(cpu_index)` on every online CPU (this one included) and waits for
/// all: the work is posted to every mailbox, then one broadcast IPI wakes
/// all other CPUs at once.
pub fn on_each_cpu(f: fn(usize)) {
    let me = percpu::index();
    let mut pending: Vec<(usize, u64)> = Vec::new();
    for i in 0..MAX_CPUS {
        if i != me && percpu::cpu(i).online.load(Ordering::Acquire) {
            match post(i, f, i) {
                Some(t) => pending.push((i, t)),
                None => log::error!("smp: cpu{i} is busy; on_each_cpu skipped it"),
            }
        }
    }
    if !pending.is_empty() {
        apic::send_ipi_all_others(irq::VECTOR_WAKE);
    }
    f(me);
    for (i, t) in pending {
        wait_done(i, t);
    }
}

/// Prints the CPU table: a line per CPU for a few, else consecutive CPUs in
/// the same state on one line (a 256-CPU table stays a few lines).
pub fn report(table: &[CpuEntry]) {
    let not_started = table.iter().filter(|c| c.state == CpuState::NotStarted).count();
    kprintln!(
        "cpus: {} listed by the MADT, {} online, {} not started",
        table.len(),
        online(),
        not_started
    );
    if table.len() <= platform::irq::MAX_LISTING_COLUMNS {
        kprintln!("  cpu  apic-id  state");
        for c in table {
            kprintln!("  {:>3}  {:>7}  {}", c.index, c.apic_id, c.state.name());
        }
        return;
    }
    kprintln!("  cpu        apic-id      state");
    for run in platform::cpus::collapse(table) {
        let cpus = if run.first == run.last {
            alloc::format!("{}", run.first)
        } else {
            alloc::format!("{}-{}", run.first, run.last)
        };
        let ids = if run.first_apic_id == run.last_apic_id {
            alloc::format!("{}", run.first_apic_id)
        } else {
            alloc::format!("{}-{}", run.first_apic_id, run.last_apic_id)
        };
        kprintln!("  {cpus:<9}  {ids:<11}  {}", run.state.name());
    }
}
