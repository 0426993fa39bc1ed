//! fio's `flow`: jobs that share a `flow_id` keep their I/O counts in the proportion of their
//! weights. Each clone counts the I/Os it issued; the group counts all of them (from 1) and the
//! weights of its running clones. Before an I/O a clone whose share of the group's count is above
//! its share of the weights does not issue: with `flow_sleep` it lets what it has in flight
//! complete and then waits that long, else it tries again at once (fio 3.33, `flow.c`). A clone
//! that ends takes its count and weight out of the group, so the others are not held back by it.
//!
//! Jobs of one wave meet here, on different CPUs: the group is two atomic counters and nothing
//! else. They are a proportion, not a hand-over of data: every access is relaxed, as fio's.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::plan::JobPlan;

/// fio's largest `flow` weight (`FLOW_MAX_WEIGHT`).
pub const MAX_FLOW_WEIGHT: u32 = 1000;

/// The counters of one `flow_id` in a wave.
#[derive(Debug)]
pub struct FlowGroup {
    /// I/Os issued by the group's clones, plus one (fio starts it at 1).
    issued: AtomicU64,
    /// The weights of the group's clones that have not ended.
    weights: AtomicU64,
}

impl FlowGroup {
    fn new(weights: u64) -> Self {
        Self {
            issued: AtomicU64::new(1),
            weights: AtomicU64::new(weights),
        }
    }
}

/// The flow group of each of a wave's jobs (in order; `None` for a job without `flow`): jobs with
/// the same `flow_id` share one, whose weight is every clone's.
pub fn flow_groups(plans: &[&JobPlan]) -> Vec<Option<Arc<FlowGroup>>> {
    let mut groups: Vec<(u32, Arc<FlowGroup>)> = Vec::new();
    for plan in plans.iter().filter(|p| p.spec.flow_weight > 0) {
        let weight = u64::from(plan.spec.flow_weight) * plan.cpus.len() as u64;
        match groups.iter().find(|(id, _)| *id == plan.spec.flow_id) {
            Some((_, group)) => {
                group.weights.fetch_add(weight, Ordering::Relaxed);
            }
            None => groups.push((plan.spec.flow_id, Arc::new(FlowGroup::new(weight)))),
        }
    }
    plans
        .iter()
        .map(|plan| {
            (plan.spec.flow_weight > 0)
                .then(|| groups.iter().find(|(id, _)| *id == plan.spec.flow_id))
                .flatten()
                .map(|(_, group)| Arc::clone(group))
        })
        .collect()
}

/// What a held-back clone waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hold {
    Free,
    /// Its I/Os in flight to complete (`flow_sleep` set), then the sleep.
    Draining,
    /// The end of its `flow_sleep`.
    Until(u64),
}

/// One clone's place in its flow group.
#[derive(Debug)]
pub(crate) struct FlowGate {
    group: Arc<FlowGroup>,
    weight: u64,
    issued: u64,
    sleep_ns: u64,
    hold: Hold,
}

impl FlowGate {
    pub(crate) fn new(group: Arc<FlowGroup>, weight: u32, sleep_ns: u64) -> Self {
        Self {
            group,
            weight: u64::from(weight),
            issued: 0,
            sleep_ns,
            hold: Hold::Free,
        }
    }

    /// Whether the clone may issue an I/O now (`in_flight` of its own outstanding); if so the
    /// I/O is counted.
    pub(crate) fn admit(&mut self, now_ns: u64, in_flight: usize) -> bool {
        match self.hold {
            Hold::Free => {}
            Hold::Draining if in_flight > 0 => return false,
            Hold::Draining => {
                self.hold = Hold::Until(now_ns.saturating_add(self.sleep_ns));
                return false;
            }
            Hold::Until(at) if now_ns < at => return false,
            Hold::Until(_) => self.hold = Hold::Free,
        }
        let issued = self.group.issued.load(Ordering::Relaxed);
        let weights = self.group.weights.load(Ordering::Relaxed);
        // issued / group issued > weight / group weights, without division.
        if u128::from(self.issued) * u128::from(weights) > u128::from(self.weight) * u128::from(issued) {
            if self.sleep_ns > 0 {
                self.hold = Hold::Draining;
            }
            return false;
        }
        self.group.issued.fetch_add(1, Ordering::Relaxed);
        self.issued += 1;
        true
    }
}

impl Drop for FlowGate {
    /// The clone ended (or failed): its count and weight leave the group.
    fn drop(&mut self) {
        self.group.issued.fetch_sub(self.issued, Ordering::Relaxed);
        self.group.weights.fetch_sub(self.weight, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_clones_issue_in_the_proportion_of_their_weights() {
        let group = Arc::new(FlowGroup::new(1 + 8));
        let mut light = FlowGate::new(Arc::clone(&group), 1, 0);
        let mut heavy = FlowGate::new(Arc::clone(&group), 8, 0);
        // Both try as fast as they can, in turn.
        for _ in 0..9000 {
            light.admit(0, 0);
            heavy.admit(0, 0);
        }
        let ratio = heavy.issued as f64 / light.issued as f64;
        assert!(
            (7.5..8.5).contains(&ratio),
            "8:1 wanted, got {} : {}",
            heavy.issued,
            light.issued
        );
        drop(light);
        // The light clone ended: the heavy one is no longer held back by it.
        let before = heavy.issued;
        for _ in 0..100 {
            assert!(heavy.admit(0, 0));
        }
        assert_eq!(heavy.issued, before + 100);
        drop(heavy);
        assert_eq!(group.issued.load(Ordering::Relaxed), 1);
        assert_eq!(group.weights.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_held_clone_with_flow_sleep_drains_then_sleeps() {
        let group = Arc::new(FlowGroup::new(2));
        let mut a = FlowGate::new(Arc::clone(&group), 1, 1000);
        let _b = FlowGate::new(Arc::clone(&group), 1, 1000);
        // a alone issues while its count is at most half the group's (which starts at 1).
        assert!(a.admit(0, 0));
        assert!(a.admit(0, 1), "1 of 2: its half share");
        assert!(!a.admit(0, 2), "2 of 3 is above its half share");
        assert!(!a.admit(10, 1), "its I/O is still in flight");
        assert!(!a.admit(20, 0), "drained: the sleep starts now");
        assert!(!a.admit(500, 0), "sleeping until 1020");
        assert!(!a.admit(1020, 0), "awake, but still above its share");
    }
}
