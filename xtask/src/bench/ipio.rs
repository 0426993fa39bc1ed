//! `cargo xtask bench --ipio`: after the matrix, the work per I/O of a few points, exactly
//! (`cargo xtask ipio`: guest instructions, memory accesses and MMIO reads and writes per I/O
//! under the TCG plugin, one vCPU, 4k randread), printed after the summary and written to
//! `target/bench/ipio.json` and `ipio.csv`. Opt-in: the four points take several minutes.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ipio::{Device, Setup};

/// The points measured: null0 at QD32 and QD1, md0 and nvme0n1 at QD32.
pub(crate) const POINTS: [(Device, u32); 4] = [
    (Device::Null, 32),
    (Device::Null, 1),
    (Device::Md, 32),
    (Device::Nvme, 32),
];

/// One point's figures per I/O.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IpioRow {
    pub(crate) device: String,
    pub(crate) qd: u32,
    pub(crate) instructions: f64,
    pub(crate) memory_accesses: f64,
    pub(crate) mmio_reads: f64,
    pub(crate) mmio_writes: f64,
}

impl IpioRow {
    fn new(device: Device, qd: u32, total: [f64; 4]) -> Self {
        IpioRow {
            device: device.qemu_and_name().1.to_string(),
            qd,
            instructions: total[0],
            memory_accesses: total[1],
            mmio_reads: total[2],
            mmio_writes: total[3],
        }
    }
}

/// Measures every point with `kernel`, writes `ipio.json` and `ipio.csv` to `out_dir` and
/// returns the rows.
pub(crate) fn run(kernel: &Path, out_dir: &Path) -> Result<Vec<IpioRow>, String> {
    println!(
        "\nbench: --ipio: work per I/O under the TCG plugin ({} points)",
        POINTS.len()
    );
    let measurer = Setup::for_kernel(kernel)?;
    let mut rows = Vec::with_capacity(POINTS.len());
    for (device, qd) in POINTS {
        let per_io = measurer.measure(device, qd, crate::ipio::Shape::RANDREAD_4K, |_| String::new())?;
        rows.push(IpioRow::new(device, qd, per_io.total));
    }
    let write = |name: &str, text: String| {
        let path = out_dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))
    };
    write(
        "ipio.json",
        serde_json::to_string_pretty(&rows).map_err(|e| format!("ipio.json: {e}"))?,
    )?;
    write("ipio.csv", to_csv(&rows))?;
    Ok(rows)
}

/// The summary's table (Markdown).
pub(crate) fn render(rows: &[IpioRow]) -> String {
    let [short, long] = crate::ipio::JOB_IOS;
    let mut s = format!(
        "Work per I/O (cargo xtask ipio: exact counts under the TCG plugin, 1 vCPU, 4k randread, \
         marginal over jobs of {short} and {long} I/Os):\n\n\
         | device | QD | instructions | memory accesses | MMIO reads | MMIO writes |\n\
         |---|--:|--:|--:|--:|--:|\n"
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {:.2} |\n",
            r.device, r.qd, r.instructions, r.memory_accesses, r.mmio_reads, r.mmio_writes
        ));
    }
    s
}

/// `ipio.csv`: a header and one line per point.
pub(crate) fn to_csv(rows: &[IpioRow]) -> String {
    let mut s = String::from("device,qd,instructions,memory_accesses,mmio_reads,mmio_writes\n");
    for r in rows {
        s.push_str(&format!(
            "{},{},{:.1},{:.1},{:.4},{:.4}\n",
            r.device, r.qd, r.instructions, r.memory_accesses, r.mmio_reads, r.mmio_writes
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<IpioRow> {
        vec![
            IpioRow::new(Device::Null, 32, [1099.24, 560.0, 0.0, 0.0]),
            IpioRow::new(Device::Md, 32, [2012.0, 1000.5, 0.001, 1.0625]),
        ]
    }

    #[test]
    fn the_table_names_each_point_with_its_figures() {
        let t = render(&rows());
        assert!(t.contains("| null0 | 32 | 1099 | 560 | 0.00 | 0.00 |"), "{t}");
        assert!(t.contains("| md0 | 32 | 2012 | 1000 | 0.00 | 1.06 |"), "{t}");
        assert_eq!(t.lines().filter(|l| l.starts_with("| ")).count(), 3);
    }

    #[test]
    fn csv_has_a_header_and_a_line_per_point() {
        let c = to_csv(&rows());
        let lines: Vec<&str> = c.lines().collect();
        assert_eq!(
            lines,
            [
                "device,qd,instructions,memory_accesses,mmio_reads,mmio_writes",
                "null0,32,1099.2,560.0,0.0000,0.0000",
                "md0,32,2012.0,1000.5,0.0010,1.0625"
            ]
        );
    }

    #[test]
    fn the_json_round_trips() {
        let text = serde_json::to_string_pretty(&rows()).unwrap();
        let back: Vec<IpioRow> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, rows());
    }

    #[test]
    fn the_points_are_the_issues_four() {
        let names: Vec<(&str, u32)> = POINTS.iter().map(|(d, q)| (d.qemu_and_name().1, *q)).collect();
        assert_eq!(names, [("null0", 32), ("null0", 1), ("md0", 32), ("nvme0n1", 32)]);
    }
}
