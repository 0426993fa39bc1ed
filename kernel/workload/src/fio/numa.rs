//! fio's NUMA options: `numa_cpu_nodes` (the clones run on those nodes' CPUs) and
//! `numa_mem_policy` (where their buffers come from). The nodes are the box's, from its SRAT, so
//! `numa_cpu_nodes` is resolved to CPUs by whoever knows them ([`place_on_nodes`], the kernel at
//! boot) before a job is placed; a job whose nodes were never resolved is refused, never run on
//! the wrong CPUs.

use alloc::format;
use alloc::vec::Vec;

use super::{Builder, FioRun, Setting, unsupported};
use crate::error::WorkloadError;
use crate::values::CpuSet;

/// The node-list form (fio's: `0`, `0,2`, `0-1`).
const NODE_LIST_FORM: &str = "a node list such as 0, 0,2 or 0-1";

impl Builder {
    /// The NUMA options; `Ok(false)`: not one of them.
    pub(super) fn apply_numa(&mut self, s: &Setting<'_>) -> Result<bool, WorkloadError> {
        match s.key {
            "numa_cpu_nodes" => {
                let nodes = CpuSet::parse(s.need()?).ok_or_else(|| s.bad(NODE_LIST_FORM))?;
                self.numa_cpu_nodes = Some(nodes);
            }
            "numa_mem_policy" => {
                let value = s.need()?;
                let (mode, nodes) = value.split_once(':').unwrap_or((value, ""));
                self.spec.buffer_interleave.clear();
                self.spec.buffer_node = match mode {
                    "default" | "local" if nodes.is_empty() => None,
                    "bind" | "prefer" => {
                        let set = CpuSet::parse(nodes).ok_or_else(|| s.bad(NODE_LIST_FORM))?;
                        let mut list = set.iter();
                        match (list.next(), list.next()) {
                            (Some(node), None) => Some(node),
                            _ => {
                                return Err(unsupported(
                                    s.job,
                                    &format!("numa_mem_policy={value}"),
                                    "a clone's buffers come from one node here: give one node (bind:N or prefer:N)",
                                ));
                            }
                        }
                    }
                    "interleave" => {
                        // fio interleaves pages; here each I/O buffer comes from the next node.
                        let set = CpuSet::parse(nodes).ok_or_else(|| s.bad(NODE_LIST_FORM))?;
                        self.spec.buffer_interleave = set.iter().collect();
                        None
                    }
                    _ => return Err(s.bad("default, local, prefer:N, bind:N or interleave:LIST")),
                };
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Puts the clones of each job with `numa_cpu_nodes` on those nodes' CPUs: its `cpus_allowed`
/// becomes the `online` CPUs whose node (`node_of_cpu`) is listed, within the `cpus_allowed` it
/// already had. A list that leaves no CPU is refused, naming the nodes.
pub fn place_on_nodes(
    run: &mut FioRun,
    online: &[u32],
    node_of_cpu: &dyn Fn(u32) -> Option<u32>,
) -> Result<(), WorkloadError> {
    for job in &mut run.jobs {
        let Some(nodes) = job.numa_cpu_nodes.take() else {
            continue;
        };
        let cpus: Vec<u32> = online
            .iter()
            .copied()
            .filter(|&cpu| node_of_cpu(cpu).is_some_and(|node| nodes.contains(node)))
            .filter(|&cpu| job.cpus_allowed.is_none_or(|allowed| allowed.contains(cpu)))
            .collect();
        if cpus.is_empty() {
            return Err(unsupported(
                &job.name,
                &format!("numa_cpu_nodes={nodes}"),
                "no online CPU of the box is on those nodes (within cpus_allowed); the kernel's boot lines \
                 `numa: node N: cpus ...` list them",
            ));
        }
        job.cpus_allowed = Some(CpuSet::from_cpus(&cpus));
    }
    Ok(())
}
