//! Several job contexts on one CPU, by turns: cooperative switches between stacks of one CPU.
//!
//! A CPU that runs more than one context (more clones or jobs than CPUs) gives each context
//! beyond the first a stack of its own and switches only where a context would wait anyway:
//! after it has handed its burst to the device, and when it finds nothing to reap. Nothing
//! preempts a context, so one context's submission and bookkeeping never interleave with
//! another's and the per-CPU, lock-free I/O path is the same as with one context. A CPU that
//! runs one context never comes here.
//!
//! The CPU halts only when every live context has found nothing in a row (each `idle` after
//! the last progress): a completion for any of them ends the halt, and the turns go round
//! until its owner takes it.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::ptr::null_mut;
use core::sync::atomic::{AtomicPtr, Ordering};

use super::percpu::{self, MAX_CPUS};

/// The stack of each context beyond the first (which keeps the CPU's own): an AP's size.
const CONTEXT_STACK_BYTES: usize = 256 * 1024;

/// Written at the lowest word of each context's stack and checked whenever the context hands
/// over its turn: a context whose stack ran past its end stops the kernel with a clear message
/// rather than go on over the heap.
const STACK_GUARD: u64 = 0x6b63_6174_735f_6e75;

/// The contexts one CPU runs by turns. Lives on the stack of [`run_by_turns`], which returns
/// only when every context has finished; reached through [`CPU_TURNS`] and raw pointers only,
/// never held as a reference across a switch.
struct Turns {
    /// Runs context `i`.
    body: *const (dyn Fn(usize) + Sync),
    /// Each context's saved stack pointer while it is not running (context 0: the CPU's own
    /// stack).
    saved: Vec<usize>,
    finished: Vec<bool>,
    /// The stacks of contexts 1.. (context 0 has none here).
    stacks: Vec<Box<[u64]>>,
    current: usize,
    live: usize,
    /// `idle` calls since the last progress of any context.
    idle_streak: usize,
}

/// Each CPU's turns while it runs several contexts; null otherwise.
static CPU_TURNS: [AtomicPtr<Turns>; MAX_CPUS] = [const { AtomicPtr::new(null_mut()) }; MAX_CPUS];

/// The stack a context needs, which the heap could not give.
#[derive(Debug, Clone, Copy)]
pub struct NoStack {
    pub bytes: usize,
}

/// Runs `body(0)`, ..., `body(count - 1)` on this CPU by turns and returns when all have
/// returned. Each body must hand over its turn ([`yield_turn`], [`idle_turn`]) while it waits.
/// Without memory for the contexts' stacks none runs.
pub fn run_by_turns(count: usize, body: &(dyn Fn(usize) + Sync)) -> Result<(), NoStack> {
    if count <= 1 {
        if count == 1 {
            body(0);
        }
        return Ok(());
    }
    let mut stacks = Vec::new();
    stacks.try_reserve_exact(count - 1).map_err(|_| NoStack {
        bytes: CONTEXT_STACK_BYTES,
    })?;
    for _ in 1..count {
        let mut stack = Vec::new();
        stack.try_reserve_exact(CONTEXT_STACK_BYTES / 8).map_err(|_| NoStack {
            bytes: CONTEXT_STACK_BYTES,
        })?;
        stack.resize(CONTEXT_STACK_BYTES / 8, 0u64);
        stacks.push(stack.into_boxed_slice());
    }
    let me = percpu::index();
    // SAFETY: the lifetime is erased only for the pointer kept in `Turns`, which this function
    // clears before it returns, and it returns only when every context has finished: no
    // context calls `body` after the borrow ends.
    let body: *const (dyn Fn(usize) + Sync) = unsafe {
        core::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync + 'static)>(body)
    };
    let mut turns = Turns {
        body,
        saved: vec![0; count],
        finished: vec![false; count],
        stacks,
        current: 0,
        live: count,
        idle_streak: 0,
    };
    let turns_ptr: *mut Turns = &mut turns;
    for index in 1..count {
        turns.saved[index] = first_frame(&mut turns.stacks[index - 1], turns_ptr);
    }
    CPU_TURNS[me].store(turns_ptr, Ordering::Relaxed);
    // SAFETY: `turns` outlives every context (see above); body 0 runs on this stack.
    unsafe {
        ((*turns_ptr).body.as_ref().expect("set above"))(0);
        finish(turns_ptr);
    }
    CPU_TURNS[me].store(null_mut(), Ordering::Relaxed);
    Ok(())
}

/// Whether this CPU runs several contexts by turns (a backend asks once, at its start).
pub fn shared() -> bool {
    !CPU_TURNS[percpu::index()].load(Ordering::Relaxed).is_null()
}

/// Hands the CPU to the next live context (nothing when this CPU runs one context).
pub fn yield_turn() {
    let turns = CPU_TURNS[percpu::index()].load(Ordering::Relaxed);
    if !turns.is_null() {
        // SAFETY: non-null only while `run_by_turns` runs on this CPU, and only this CPU
        // reads its own entry.
        unsafe { switch_to_next(turns) };
    }
}

/// A context found nothing to do: once every live context has said so in a row, `wait` (the
/// caller's halt until an interrupt) runs; then the next context has its turn.
pub fn idle_turn(wait: impl FnOnce()) {
    let turns = CPU_TURNS[percpu::index()].load(Ordering::Relaxed);
    if turns.is_null() {
        wait();
        return;
    }
    // SAFETY: as in `yield_turn`; the reference ends before the switch.
    let all_idle = unsafe {
        let t = &mut *turns;
        t.idle_streak += 1;
        t.idle_streak >= t.live
    };
    if all_idle {
        // SAFETY: as above.
        unsafe { (*turns).idle_streak = 0 };
        wait();
    }
    // SAFETY: as in `yield_turn`.
    unsafe { switch_to_next(turns) };
}

/// A context took completions: the CPU is not idle.
pub fn progress() {
    let turns = CPU_TURNS[percpu::index()].load(Ordering::Relaxed);
    if !turns.is_null() {
        // SAFETY: as in `yield_turn`.
        unsafe { (*turns).idle_streak = 0 };
    }
}

/// A new context's stack: the registers `switch_stacks` pops (`rbx` the turns, `r12` the
/// entry), then `start_context` as the address it returns to, placed so that the stack is
/// 16-byte aligned after that return (the ABI's alignment at a call). Returns the stack
/// pointer to switch to.
fn first_frame(stack: &mut [u64], turns: *mut Turns) -> usize {
    stack[0] = STACK_GUARD;
    let base = stack.as_ptr() as usize;
    // The highest word index whose address is 16-byte aligned: `start_context` runs with the
    // stack pointer there.
    let mut top = stack.len() - 1;
    while !(base + top * 8).is_multiple_of(16) {
        top -= 1;
    }
    let frame = [
        0,                                 // r15
        0,                                 // r14
        0,                                 // r13
        context_entry as *const () as u64, // r12
        turns as u64,                      // rbx
        0,                                 // rbp
        start_context as *const () as u64, // the return address
    ];
    let first = top - frame.len();
    stack[first..top].copy_from_slice(&frame);
    base + first * 8
}

/// Where a new context begins: calls `context_entry(turns)` (in `rbx` and `r12`).
#[unsafe(naked)]
unsafe extern "C" fn start_context() -> ! {
    core::arch::naked_asm!("mov rdi, rbx", "call r12", "ud2")
}

/// The body of a context beyond the first, then its end.
extern "C" fn context_entry(turns: *mut Turns) -> ! {
    // SAFETY: `turns` is the live `Turns` of this CPU (set in its first frame); `current` is
    // this context, set by the switch that started it.
    unsafe {
        let index = (*turns).current;
        ((*turns).body.as_ref().expect("set by run_by_turns"))(index);
        finish(turns);
    }
    unreachable!("a finished context is never switched back to")
}

/// The current context has finished: the next live one runs, or, when none is left, context 0
/// (waiting in `run_by_turns` for the others). Returns only to context 0, once all are done.
///
/// # Safety
/// `turns` is this CPU's live `Turns`.
unsafe fn finish(turns: *mut Turns) {
    // SAFETY: the caller's contract; the reference ends before any switch.
    let (me, live, save, resume_first) = unsafe {
        let t = &mut *turns;
        let me = t.current;
        t.finished[me] = true;
        t.live -= 1;
        if me != 0 && t.live == 0 {
            t.current = 0;
        }
        (me, t.live, &mut t.saved[me] as *mut usize, t.saved[0])
    };
    if me != 0 && live == 0 {
        // SAFETY: context 0 waits in `switch_to_next` (below) with its stack saved.
        unsafe { switch_stacks(save, resume_first) };
    } else if live > 0 {
        // SAFETY: the caller's contract.
        unsafe { switch_to_next(turns) };
    }
}

/// Saves the current context and resumes the next one that has not finished (after the
/// current, round the ring); returns when the current context has its turn again. Nothing
/// when no other context is live.
///
/// # Safety
/// `turns` is this CPU's live `Turns`.
unsafe fn switch_to_next(turns: *mut Turns) {
    // SAFETY: the caller's contract; the references end before the switch.
    unsafe {
        let (save, next_rsp) = {
            let t = &mut *turns;
            let me = t.current;
            if me != 0 && t.stacks[me - 1][0] != STACK_GUARD {
                panic!("cpu{}: job context {me} ran past the end of its stack", percpu::index());
            }
            let count = t.saved.len();
            let Some(next) = (1..count).map(|step| (me + step) % count).find(|&i| !t.finished[i]) else {
                return;
            };
            t.current = next;
            (&mut t.saved[me] as *mut usize, t.saved[next])
        };
        switch_stacks(save, next_rsp);
    }
}

/// Saves the callee-saved registers on the current stack, stores the stack pointer at `save`,
/// and resumes the stack at `next` (saved the same way, or a `first_frame`).
#[unsafe(naked)]
unsafe extern "C" fn switch_stacks(save: *mut usize, next: usize) {
    core::arch::naked_asm!(
        "push rbp",
        "push rbx",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        "mov [rdi], rsp",
        "mov rsp, rsi",
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop rbx",
        "pop rbp",
        "ret",
    )
}
