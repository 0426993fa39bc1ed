//! `cargo xtask preflight ACPIDUMP`: what baremq would do on a box, from the
//! text Linux's `acpidump` printed there, using the kernel's own
//! `platform::acpi` parsers on the host.
//!
//! What needs the hardware itself (CPUID, the IOMMU's status registers,
//! whether the PIT counts) is stated as what the kernel will check at boot.

use platform::acpi::{AcpiTables, Madt, NumaTopology, PhysMemory, cpu_index_order};
use platform::clock::Reference;

use crate::acpidump;

/// Figures the report is built from (the tests compare them with what the
/// dump's bytes hold, counted independently).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub madt_processor_entries: usize,
    pub usable_cpus: usize,
    pub x2apic_entries: usize,
    pub io_apics: usize,
    pub local_apic_nmi_entries: usize,
    pub numa_nodes: usize,
    pub srat_cpu_entries: usize,
    pub srat_memory_entries: usize,
    pub mcfg_windows: usize,
    pub dmar_units: usize,
    pub ivrs_units: usize,
    pub hpet: bool,
    pub pm_timer: bool,
}

/// The report: lines to print, the refusals/limits among them, the figures.
#[derive(Debug, Default)]
pub struct Report {
    pub text: String,
    /// Things that stop the boot (the kernel would print `BAREMQ: FAILURE`).
    pub fatal: Vec<String>,
    /// Limits and refusals the boot would survive (CPUs not started, tables ignored).
    pub limits: Vec<String>,
    pub counts: Counts,
    /// What AML evaluation found (`None` when the tables could not be read).
    pub aml: Option<AmlSummary>,
}

/// The AML figures the tests check.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AmlSummary {
    pub blocks: usize,
    pub load_problems: usize,
    pub bridges: Vec<platform::aml::HostBridge>,
    pub absent_bridges: usize,
    pub prt_tables: usize,
    pub routes: usize,
    pub unresolved_routes: usize,
    pub device_pxms: usize,
    pub problems: usize,
    pub steps: u64,
}

impl Report {
    fn line(&mut self, text: impl AsRef<str>) {
        self.text.push_str(text.as_ref());
        self.text.push('\n');
    }
    fn fatal(&mut self, text: String) {
        self.line(format!("  REFUSED (boot stops): {text}"));
        self.fatal.push(text);
    }
    fn limit(&mut self, text: String) {
        self.line(format!("  LIMIT: {text}"));
        self.limits.push(text);
    }
}

/// `cargo xtask preflight ACPIDUMP|DIR...`: prints the report of each dump, or for a folder one
/// summary line per dump in it (a lab's fleet at once) and a total; false when any dump could not
/// be read or the boot would stop.
pub fn cmd_preflight(args: &[String]) -> Result<bool, String> {
    if args.is_empty() || args.iter().any(|a| a.starts_with('-')) {
        return Err(
            "usage: cargo xtask preflight ACPIDUMP|DIR [ACPIDUMP|DIR...] (the text `acpidump` prints on the box; \
                    a folder: every dump in it, one line each)"
                .into(),
        );
    }
    let mut ok = true;
    for path in args {
        if std::path::Path::new(path).is_dir() {
            ok &= preflight_folder(std::path::Path::new(path))?;
            continue;
        }
        let text = std::fs::read_to_string(path).map_err(|e| format!("preflight: cannot read {path}: {e}"))?;
        let report = preflight_text(&text).map_err(|e| format!("preflight: {path}: {e}"))?;
        println!("== baremq preflight: {path}");
        print!("{}", report.text);
        let verdict = if report.fatal.is_empty() {
            format!(
                "the boot would get past firmware discovery ({} limit(s) above)",
                report.limits.len()
            )
        } else {
            ok = false;
            format!("the boot would stop: {}", report.fatal.join("; "))
        };
        println!("verdict: {verdict}");
    }
    Ok(ok)
}

/// One line per dump under `dir` (folders walked in name order; a file whose first line is not an
/// acpidump table header, such as a README or acpixtract's table list, is skipped and counted),
/// then the totals. A panic in the kernel's code on a dump
/// is caught and reported as that dump's verdict, not the end of the run.
fn preflight_folder(dir: &std::path::Path) -> Result<bool, String> {
    let mut files = Vec::new();
    collect_files(dir, &mut files)?;
    let (mut boots, mut stops, mut unreadable, mut panics, mut skipped) = (0usize, 0usize, 0usize, 0usize, 0usize);
    for file in &files {
        let name = file.strip_prefix(dir).unwrap_or(file).display().to_string();
        let Some(text) = std::fs::read_to_string(file)
            .ok()
            .filter(|t| acpidump::looks_like_a_dump(t))
        else {
            skipped += 1;
            continue;
        };
        match std::panic::catch_unwind(|| preflight_text(&text)) {
            Ok(Ok(report)) => {
                println!("{}", summary_line(&name, &report));
                if report.fatal.is_empty() {
                    boots += 1;
                } else {
                    stops += 1;
                }
            }
            Ok(Err(e)) => {
                unreadable += 1;
                println!("{name}: dump refused: {e}");
            }
            Err(_) => {
                panics += 1;
                println!("{name}: PANIC in the firmware code (see the message above)");
            }
        }
    }
    println!(
        "preflight: {} dump(s): {boots} would boot, {stops} would stop, {unreadable} refused as dumps, {panics} panicked \
         ({skipped} other file(s) skipped)",
        boots + stops + unreadable + panics
    );
    Ok(stops == 0 && unreadable == 0 && panics == 0)
}

fn collect_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), String> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("preflight: cannot read {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// `NAME: N CPUs, N I/O APICs, N root buses, N AML steps: verdict`.
fn summary_line(name: &str, report: &Report) -> String {
    let (buses, steps) = report.aml.as_ref().map_or((0, 0), |a| (a.bridges.len(), a.steps));
    let verdict = if report.fatal.is_empty() {
        format!("boots ({} limit(s))", report.limits.len())
    } else {
        format!("STOPS: {}", report.fatal.join("; "))
    };
    format!(
        "{name}: {} CPUs, {} I/O APICs, {buses} root buses, {steps} AML steps: {verdict}",
        report.counts.usable_cpus, report.counts.io_apics
    )
}

/// Parses the dump, rebuilds the tables and builds the report.
pub fn preflight_text(text: &str) -> Result<Report, String> {
    let dump = acpidump::parse(text)?;
    let rebuilt = acpidump::rebuild(&dump.tables);
    let walker = rebuilt.tables().map_err(|e| format!("rebuilt root table: {e}"))?;
    let mut report = Report::default();
    for diagnostic in &dump.diagnostics {
        report.line(format!("dump: {diagnostic}"));
    }
    report.line(format!("tables: {}", rebuilt.listed.join(" ")));
    console(&mut report, &walker);
    let madt = match walker.madt() {
        Ok(madt) => Some(madt),
        Err(e) => {
            report.line("cpus: -");
            report.fatal(format!("ACPI: {e}"));
            None
        }
    };
    if let Some(madt) = &madt {
        cpus(&mut report, madt);
    }
    numa(&mut report, &walker, madt.as_ref());
    pci(&mut report, &walker);
    aml(&mut report, &walker);
    clock(&mut report, &walker);
    iommu(&mut report, &walker);
    Ok(report)
}

/// SPCR, raw. Hook: when `platform::acpi::spcr` (the console work) is
/// merged, parse with it and print the console the kernel would choose.
fn console<M: PhysMemory>(report: &mut Report, tables: &AcpiTables<M>) {
    let spcr = match tables.find(platform::TableSignature(*b"SPCR")) {
        Ok(table) => table,
        Err(platform::Error::TableNotFound { .. }) => {
            report.line("console: no SPCR table (the kernel's console is COM1 at 0x3f8)");
            return;
        }
        Err(e) => {
            report.line(format!("console: SPCR unreadable: {e}"));
            return;
        }
    };
    let mut bytes = vec![0u8; spcr.length as usize];
    if spcr.length < 80 || spcr.read(tables.memory(), 0, &mut bytes).is_err() {
        report.line(format!(
            "console: SPCR of {} bytes, shorter than the 80 defined",
            spcr.length
        ));
        return;
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]);
    let u32_at = |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let address = u64::from_le_bytes(bytes[44..52].try_into().expect("8 bytes"));
    let space = match bytes[40] {
        0 => "mmio",
        1 => "io",
        _ => "other",
    };
    let baud = match bytes[58] {
        0 => "as configured".to_string(),
        3 => "9600".into(),
        4 => "19200".into(),
        6 => "57600".into(),
        7 => "115200".into(),
        other => format!("reserved code {other}"),
    };
    let pci = if u16_at(64) == 0xFFFF {
        "not a PCI device".to_string()
    } else {
        format!(
            "PCI {:04x}:{:04x} at {:02x}:{:02x}.{} segment {}",
            u16_at(66),
            u16_at(64),
            bytes[68],
            bytes[69],
            bytes[70],
            bytes[75]
        )
    };
    report.line(format!(
        "console: SPCR revision {} interface type {}, base {space}:{address:#x} (width {} bits), irq {} gsi {}, baud {baud}, {pci}",
        spcr.revision,
        bytes[36],
        bytes[41],
        bytes[53],
        u32_at(54)
    ));
    if address == 0 {
        report
            .limit("SPCR names no UART address (only its interrupt and baud): probe COM1/COM2 or give console=".into());
    }
    if bytes[58] != 0 && bytes[58] != 7 {
        report.limit(format!("SPCR asks for {baud} baud, not 115200"));
    }
}

fn cpus(report: &mut Report, madt: &Madt) {
    let usable: Vec<u32> = madt.usable_cpus().map(|c| c.apic_id).collect();
    let enabled = madt.cpus.iter().filter(|c| c.enabled).count();
    let online_capable = madt.cpus.iter().filter(|c| !c.enabled && c.online_capable).count();
    let x2apic = madt.cpus.iter().filter(|c| c.from_x2apic_entry).count();
    let max_id = usable.iter().copied().max().unwrap_or(0);
    let c = &mut report.counts;
    c.madt_processor_entries = madt.cpus.len() + madt.duplicate_apic_ids as usize;
    c.usable_cpus = usable.len();
    c.x2apic_entries = x2apic;
    c.io_apics = madt.io_apics.len();
    c.local_apic_nmi_entries = madt.local_apic_nmi_entries as usize;
    report.line(format!(
        "cpus: {} processor entries: {} usable ({enabled} enabled, {online_capable} online-capable), {} disabled, {} duplicate; {x2apic} from x2APIC entries; APIC ids up to {max_id}",
        madt.cpus.len() + madt.duplicate_apic_ids as usize,
        usable.len(),
        madt.cpus.len() - enabled - online_capable,
        madt.duplicate_apic_ids,
    ));
    report.line(format!(
        "  local APIC at {:#x}; NMI: {} LAPIC-NMI entr{} -> {} after collapsing, {} NMI source(s)",
        madt.local_apic_address,
        madt.local_apic_nmi_entries,
        if madt.local_apic_nmi_entries == 1 { "y" } else { "ies" },
        madt.local_apic_nmis.len(),
        madt.nmi_sources.len()
    ));
    for io in &madt.io_apics {
        report.line(format!(
            "  I/O APIC id {} at {:#x}, GSI base {}",
            io.id, io.address, io.gsi_base
        ));
    }
    let limit = platform::irq::MAX_CPUS;
    if usable.len() > limit {
        report.limit(format!(
            "{} usable CPUs, the kernel starts at most {limit} (the rest are listed as not started)",
            usable.len()
        ));
    }
    let high = usable.iter().filter(|&&id| id > 0xFF).count();
    if high > 0 {
        report.limit(format!(
            "{high} CPU(s) have APIC ids above 255: x2APIC mode is needed, and device interrupts (xAPIC MSI format) cannot target them; their completions come by IPI (completion=remote)"
        ));
    }
}

fn numa<M: PhysMemory>(report: &mut Report, tables: &AcpiTables<M>, madt: Option<&Madt>) {
    let srat = match tables.srat() {
        Ok(Some(srat)) => srat,
        Ok(None) => {
            report.line("numa: no SRAT (one node)");
            return;
        }
        Err(e) => {
            report.line("numa: -");
            report.limit(format!("SRAT ignored: {e}"));
            return;
        }
    };
    report.counts.srat_cpu_entries = srat.cpus.len();
    report.counts.srat_memory_entries = srat.memory.len();
    let slit = match tables.slit() {
        Ok(slit) => slit,
        Err(e) => {
            report.limit(format!("SLIT ignored: {e}"));
            None
        }
    };
    let slit_listed = slit.is_some();
    let topology = NumaTopology::new(&srat, slit);
    report.counts.numa_nodes = topology.nodes.len();
    // The kernel numbers CPUs from the boot CPU, then MADT order; assume
    // the boot CPU is the first usable entry (as firmware usually lists it).
    let usable: Vec<u32> = madt
        .map(|m| m.usable_cpus().map(|c| c.apic_id).collect())
        .unwrap_or_default();
    let order = match usable.first() {
        Some(&bsp) => cpu_index_order(usable.iter().copied(), bsp),
        None => Vec::new(),
    };
    report.line(format!(
        "numa: {} node(s) from SRAT revision {} ({} CPU, {} memory entries); SLIT: {}",
        topology.nodes.len(),
        srat.revision,
        srat.cpus.len(),
        srat.memory.len(),
        match (slit_listed, topology.has_distances()) {
            (false, _) => "none",
            (true, true) => "consistent",
            (true, false) => "inconsistent, ignored",
        }
    ));
    for node in &topology.nodes {
        report.line(format!("  numa: {}", topology.describe(node, &order)));
    }
    for node in &topology.nodes {
        if let Some(row) = topology.distances_from(node.node) {
            report.line(format!("  numa: node {} distances (SLIT): {row:?}", node.node));
        }
    }
    let unplaced = order
        .iter()
        .filter(|&&id| topology.node_of_apic_id(id).is_none())
        .count();
    if unplaced > 0 {
        report.limit(format!("{unplaced} usable CPU(s) have no SRAT entry (no node)"));
    }
}

fn pci<M: PhysMemory>(report: &mut Report, tables: &AcpiTables<M>) {
    match tables.mcfg() {
        Ok(Some(mcfg)) => {
            report.counts.mcfg_windows = mcfg.windows.len();
            report.line(format!("pci: MCFG with {} ECAM window(s)", mcfg.windows.len()));
            for w in &mcfg.windows {
                report.line(format!(
                    "  segment {} buses {:02x}-{:02x} ECAM at {:#x}",
                    w.segment, w.bus_start, w.bus_end, w.base
                ));
            }
        }
        Ok(None) => report.line("pci: no MCFG (port I/O configuration space, segment 0 only)"),
        Err(e) => {
            report.line("pci: -");
            report.fatal(format!("ACPI: {e}"));
        }
    }
}

/// How many problems are printed one per line (the rest are counted).
const AML_PROBLEM_LINES: usize = 8;

/// The DSDT and SSDTs through the kernel's AML interpreter. Operation
/// regions cannot reach the box's hardware here: every read returns 0 and
/// writes are dropped ([`platform::aml::FixedRegions`]), so values the
/// firmware computes from registers (a link's current IRQ, some `_STA`s)
/// show as 0 / absent where the box would give real ones.
fn aml<M: PhysMemory>(report: &mut Report, tables: &AcpiTables<M>) {
    use platform::aml::{RouteSource, WindowKind};
    let blocks = match tables.definition_blocks() {
        Ok(blocks) => blocks,
        Err(e) => {
            report.line("aml: -");
            report.limit(format!(
                "AML tables unreadable ({e}): the kernel scans every MCFG bus and routes INTx by the firmware line"
            ));
            return;
        }
    };
    let mut regions = platform::aml::FixedRegions::default();
    let mut interp = platform::aml::load(&mut regions, &blocks);
    let discovery = platform::aml::discover(&mut interp);
    let load_problems = interp.load_problems.clone();
    let (objects, steps, stack) = (interp.object_count(), interp.steps_total(), interp.stack_high_water());
    drop(interp);
    report.line(format!(
        "aml: {} definition block(s), {objects} objects, {steps} steps, {} KiB of stack at most; host: region reads return 0 ({} reads, {} writes dropped)",
        blocks.len(),
        stack.div_ceil(1024),
        regions.reads,
        regions.writes
    ));
    for problem in load_problems.iter().take(AML_PROBLEM_LINES) {
        report.line(format!("  load problem (block {}): {}", problem.table, problem.error));
    }
    if load_problems.len() > AML_PROBLEM_LINES {
        report.line(format!(
            "  ... {} more load problem(s)",
            load_problems.len() - AML_PROBLEM_LINES
        ));
    }
    for bridge in &discovery.bridges {
        let mut windows = Vec::new();
        for w in &bridge.windows {
            let kind = match w.kind {
                WindowKind::Memory => "mem",
                WindowKind::Io => "io",
                WindowKind::BusNumbers => "bus",
            };
            windows.push(format!("{kind} {:#x}-{:#x}", w.start, w.end()));
        }
        report.line(format!(
            "  host bridge {} ({}{}): segment {}, _BBN {}, buses {}, _PXM {}; windows: {}",
            bridge.path,
            bridge.id,
            bridge.uid.as_ref().map(|u| format!(" _UID {u}")).unwrap_or_default(),
            bridge.segment,
            bridge.bbn.map(|b| format!("{b:#04x}")).unwrap_or_else(|| "-".into()),
            bridge
                .buses
                .map(|(a, b)| format!("{a:02x}-{b:02x}"))
                .unwrap_or_else(|| "- (no bus range in _CRS)".into()),
            bridge.pxm.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            if windows.is_empty() {
                "-".into()
            } else {
                windows.join(", ")
            }
        ));
    }
    if discovery.absent > 0 {
        report.line(format!(
            "  {} host bridge(s) whose _STA says absent (skipped)",
            discovery.absent
        ));
    }
    let unresolved: usize = discovery.prts.iter().map(|t| t.unresolved).sum();
    report.line(format!(
        "  _PRT: {} table(s), {} route(s), {unresolved} unresolved (a link whose _CRS gives no IRQ)",
        discovery.prts.len(),
        discovery.route_count()
    ));
    for table in &discovery.prts {
        let links = table
            .routes
            .iter()
            .filter(|r| matches!(r.source, RouteSource::Link(_)))
            .count();
        report.line(format!(
            "    {} ({}): {} route(s), {} direct GSI, {links} through links",
            table.scope.path,
            if table.scope.hops.is_empty() {
                "root bus".to_string()
            } else {
                format!("bridge at {:02x?}", table.scope.hops)
            },
            table.routes.len(),
            table.routes.len() - links
        ));
    }
    if !discovery.proximity.is_empty() {
        report.line(format!("  devices with their own _PXM: {}", discovery.proximity.len()));
    }
    for problem in discovery.problems.iter().take(AML_PROBLEM_LINES) {
        report.line(format!("  problem: {}: {}", problem.path, problem.error));
    }
    if discovery.problems.len() > AML_PROBLEM_LINES {
        report.line(format!(
            "  ... {} more problem(s)",
            discovery.problems.len() - AML_PROBLEM_LINES
        ));
    }
    if discovery.bridges.is_empty() {
        report.limit("AML gives no PCI host bridge: the kernel scans every MCFG bus".into());
    }
    report.aml = Some(AmlSummary {
        blocks: blocks.len(),
        load_problems: load_problems.len(),
        bridges: discovery.bridges.clone(),
        absent_bridges: discovery.absent,
        prt_tables: discovery.prts.len(),
        routes: discovery.route_count(),
        unresolved_routes: unresolved,
        device_pxms: discovery.proximity.len(),
        problems: discovery.problems.len(),
        steps,
    });
}

fn clock<M: PhysMemory>(report: &mut Report, tables: &AcpiTables<M>) {
    let hpet = match tables.hpet() {
        Ok(Some(h)) => {
            report.line(format!(
                "clock: HPET {} at {:#x}, vendor {:#06x}, {}-bit counter",
                h.number,
                h.base,
                h.vendor_id(),
                if h.block_id & (1 << 13) != 0 { 64 } else { 32 }
            ));
            true
        }
        Ok(None) => {
            report.line("clock: no HPET table");
            false
        }
        Err(e) => {
            report.limit(format!("HPET table ignored: {e}"));
            false
        }
    };
    let pm = match tables.fadt() {
        Ok(Some(fadt)) => match fadt.pm_timer {
            Ok(pm) => {
                report.line(format!(
                    "clock: ACPI PM timer at I/O port {:#x}, {} bits (from {})",
                    pm.port,
                    pm.bits,
                    if pm.from_extended { "X_PM_TMR_BLK" } else { "PM_TMR_BLK" }
                ));
                true
            }
            Err(why) => {
                report.line(format!("clock: no usable ACPI PM timer ({why})"));
                false
            }
        },
        Ok(None) => {
            report.line("clock: no FADT, so no ACPI PM timer");
            false
        }
        Err(e) => {
            report.limit(format!("FADT ignored: {e}"));
            false
        }
    };
    report.counts.hpet = hpet;
    report.counts.pm_timer = pm;
    let reference = Reference::choose(hpet, pm);
    report.line(format!(
        "clock: the TSC rate comes from CPUID 0x15/0x16 when the CPU reports it (Intel), else it is measured against the {}{}",
        reference.name(),
        if reference == Reference::Pit {
            " (the boot stops if the PIT is gated off)"
        } else {
            ""
        }
    ));
}

fn iommu<M: PhysMemory>(report: &mut Report, tables: &AcpiTables<M>) {
    let mut any = false;
    match tables.dmar() {
        Ok(Some(dmar)) => {
            any = true;
            report.counts.dmar_units = dmar.units.len();
            report.line(format!(
                "iommu: DMAR (Intel VT-d), {} unit(s), {} reserved region(s), host address width {}, interrupt remapping {}, x2APIC opt-out {}",
                dmar.units.len(),
                dmar.reserved_regions.len(),
                dmar.host_address_width,
                if dmar.interrupt_remapping { "supported" } else { "not supported" },
                if dmar.x2apic_opt_out { "SET (the kernel stays in xAPIC mode where it can)" } else { "clear" }
            ));
            for unit in &dmar.units {
                report.line(format!(
                    "  VT-d unit at {:#x}, segment {}{}",
                    unit.register_base,
                    unit.segment,
                    if unit.include_pci_all {
                        ", all other devices"
                    } else {
                        ""
                    }
                ));
            }
        }
        Ok(None) => {}
        Err(e) => report.limit(format!("DMAR ignored: {e}")),
    }
    match tables.ivrs() {
        Ok(Some(ivrs)) => {
            any = true;
            report.counts.ivrs_units = ivrs.units.len();
            report.line(format!("iommu: IVRS (AMD-Vi), {} unit(s)", ivrs.units.len()));
            for unit in &ivrs.units {
                report.line(format!(
                    "  AMD-Vi unit at {:#x}, segment {} device {:02x}:{:02x}.{}",
                    unit.base,
                    unit.segment,
                    unit.device_id >> 8,
                    (unit.device_id >> 3) & 0x1F,
                    unit.device_id & 7
                ));
            }
        }
        Ok(None) => {}
        Err(e) => report.limit(format!("IVRS ignored: {e}")),
    }
    if any {
        report.line(
            "  state: read from the units' registers at boot; translation, interrupt remapping, queued invalidation and protected memory regions (VT-d) or IommuEn (AMD-Vi) left on by firmware are turned off and logged",
        );
    } else {
        report.line("iommu: no DMAR or IVRS table");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::PathBuf;

    /// `tests/acpi-corpus/`: real servers' acpidump texts kept in the repository.
    fn corpus_dir() -> PathBuf {
        crate::root().join("tests/acpi-corpus")
    }

    /// Every dump in the corpus. A missing or empty corpus fails the test:
    /// passing without having read a real table would prove nothing.
    fn corpus() -> Vec<(String, String)> {
        let dir = corpus_dir();
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
            panic!(
                "the ACPI corpus {} is missing ({e}); it is part of the repository",
                dir.display()
            )
        });
        let mut dumps: Vec<(String, String)> = entries
            .map(|e| e.expect("corpus entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "acpidump"))
            .map(|p| {
                let text = std::fs::read_to_string(&p).expect("corpus file");
                (p.file_name().unwrap().to_string_lossy().into_owned(), text)
            })
            .collect();
        dumps.sort();
        assert!(
            dumps.len() >= 6,
            "expected the six corpus dumps in {}, found {}",
            dir.display(),
            dumps.len()
        );
        dumps
    }

    /// The tables of a dump, read by a deliberately separate, minimal hex
    /// reader (not `acpidump::parse`): name -> byte vectors.
    fn independent_tables(text: &str) -> BTreeMap<String, Vec<Vec<u8>>> {
        let mut out: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some((name, _)) = line.split_once(" @ 0x") {
                out.entry(name.to_string()).or_default().push(Vec::new());
                current = Some(name.to_string());
            } else if line.starts_with("    ") && line.contains(": ") {
                let data = &line[line.find(": ").unwrap() + 2..];
                let bytes = out.get_mut(current.as_ref().unwrap()).unwrap().last_mut().unwrap();
                for i in 0..16 {
                    let Some(pair) = data.get(i * 3..i * 3 + 2) else { break };
                    match u8::from_str_radix(pair, 16) {
                        Ok(b) if data.as_bytes().get(i * 3 + 2).is_none_or(|&c| c == b' ') => bytes.push(b),
                        _ => break,
                    }
                }
            }
        }
        out
    }

    fn le16(b: &[u8], o: usize) -> u16 {
        u16::from_le_bytes([b[o], b[o + 1]])
    }
    fn le32(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
    }

    /// Counts straight from the bytes: entry types and lengths, flags bits.
    fn expected_counts(text: &str) -> Counts {
        let t = independent_tables(text);
        let mut c = Counts::default();
        if let Some(madt) = t.get("APIC").map(|v| &v[0]) {
            let mut usable_ids = BTreeSet::new();
            let mut o = 44;
            while o < madt.len() {
                let (ty, len) = (madt[o], usize::from(madt[o + 1]));
                let cpu = match ty {
                    0 => Some((u32::from(madt[o + 3]), le32(madt, o + 4))),
                    9 => Some((le32(madt, o + 4), le32(madt, o + 8))),
                    _ => None,
                };
                if let Some((id, flags)) = cpu {
                    c.madt_processor_entries += 1;
                    if flags & 3 != 0 && usable_ids.insert(id) {
                        c.usable_cpus += 1;
                    }
                }
                c.x2apic_entries += usize::from(ty == 9);
                c.io_apics += usize::from(ty == 1);
                c.local_apic_nmi_entries += usize::from(ty == 4 || ty == 10);
                o += len;
            }
        }
        if let Some(srat) = t.get("SRAT").map(|v| &v[0]) {
            let wide = srat[8] >= 2;
            let mut domains = BTreeSet::new();
            let mut o = 48;
            while o < srat.len() {
                let (ty, len) = (srat[o], usize::from(srat[o + 1]));
                match ty {
                    0 => {
                        c.srat_cpu_entries += 1;
                        let hi = if wide {
                            u32::from_le_bytes([0, srat[o + 9], srat[o + 10], srat[o + 11]])
                        } else {
                            0
                        };
                        if le32(srat, o + 4) & 1 != 0 {
                            domains.insert(u32::from(srat[o + 2]) | hi);
                        }
                    }
                    1 => {
                        c.srat_memory_entries += 1;
                        let length = u64::from(le32(srat, o + 16)) | (u64::from(le32(srat, o + 20)) << 32);
                        if le32(srat, o + 28) & 1 != 0 && length > 0 {
                            let d = le32(srat, o + 2);
                            domains.insert(if wide { d } else { d & 0xFF });
                        }
                    }
                    2 => {
                        c.srat_cpu_entries += 1;
                        if le32(srat, o + 12) & 1 != 0 {
                            domains.insert(le32(srat, o + 4));
                        }
                    }
                    _ => {}
                }
                o += len;
            }
            c.numa_nodes = domains.len();
        }
        if let Some(mcfg) = t.get("MCFG").map(|v| &v[0]) {
            c.mcfg_windows = (mcfg.len() - 44) / 16;
        }
        if let Some(dmar) = t.get("DMAR").map(|v| &v[0]) {
            let mut o = 48;
            while o < dmar.len() {
                c.dmar_units += usize::from(le16(dmar, o) == 0);
                o += usize::from(le16(dmar, o + 2));
            }
        }
        if let Some(ivrs) = t.get("IVRS").map(|v| &v[0]) {
            let mut bases = BTreeSet::new();
            let mut o = 48;
            while o < ivrs.len() {
                if matches!(ivrs[o], 0x10 | 0x11 | 0x40) {
                    bases.insert(&ivrs[o + 8..o + 16]);
                }
                o += usize::from(le16(ivrs, o + 2));
            }
            c.ivrs_units = bases.len();
        }
        c.hpet = t.contains_key("HPET");
        if let Some(fadt) = t.get("FACP").map(|v| &v[0]) {
            let x = if fadt.len() >= 220 {
                u64::from(le32(fadt, 212))
            } else {
                0
            };
            c.pm_timer = x != 0 || le32(fadt, 76) != 0;
        }
        c
    }

    #[test]
    fn every_corpus_dump_parses_and_the_counts_match_its_tables() {
        for (name, text) in corpus() {
            let report = preflight_text(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(report.fatal.is_empty(), "{name}: {:?}\n{}", report.fatal, report.text);
            let expected = expected_counts(&text);
            assert_eq!(report.counts, expected, "{name}:\n{}", report.text);
            // The report names every I/O APIC and every node.
            assert_eq!(
                report.text.matches("  I/O APIC id ").count(),
                expected.io_apics,
                "{name}"
            );
            let node_lines = report
                .text
                .lines()
                .filter(|l| l.starts_with("  numa: node ") && l.contains(": cpus "))
                .count();
            assert_eq!(node_lines, expected.numa_nodes, "{name}");
        }
    }

    /// Facts the corpus README states for each machine (written down by a
    /// person from the dumps), checked against the report.
    /// Facts read independently of baremq's interpreter: each dump's tables
    /// were extracted and disassembled with ACPICA (`acpixtract -a DUMP;
    /// iasl -d *.dat`), then counted in the `.dsl` text: host bridges =
    /// `Device`s whose `_HID` is `EisaId ("PNP0A08")`/`"PNP0A03"`; `_PRT`
    /// objects = `Method (.._PRT` / `Name (.._PRT` declarations; `_PRT`s
    /// below a bridge whose `_STA` reads hardware are counted apart, because
    /// on the host every register reads 0 and such a bridge reads as absent.
    /// (machine, AML blocks = DSDT + SSDTs, bridges declared, of which
    /// `_STA` reads hardware, `_PRT` objects, of which below those bridges)
    const AML_FACTS: [(&str, usize, usize, usize, usize, usize); 6] = [
        // PC40's _STA reads a register; 3 of the 10 _PRTs are below PC40.
        ("H8QG6", 2, 2, 1, 10, 3),
        ("PowerEdge_R820", 2, 6, 0, 12, 0),
        ("ProLiant_DL165", 3, 1, 0, 6, 0),
        ("ProLiant_DL360", 6, 1, 0, 14, 0),
        ("QuantaMicro", 11, 1, 0, 25, 0),
        ("X8DTT", 4, 1, 0, 9, 0),
    ];

    #[test]
    fn aml_of_every_corpus_dump_gives_its_host_bridges_and_prt_tables() {
        let dumps = corpus();
        assert_eq!(dumps.len(), AML_FACTS.len());
        for (prefix, blocks, declared, hardware_sta, prts, prts_below_those) in AML_FACTS {
            let (name, text) = dumps
                .iter()
                .find(|(name, _)| name.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} dump in the corpus"));
            let report = preflight_text(text).unwrap();
            let aml = report
                .aml
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no AML summary\n{}", report.text));
            assert_eq!(aml.blocks, blocks, "{name}");
            assert_eq!(aml.load_problems, 0, "{name}:\n{}", report.text);
            assert_eq!(aml.problems, 0, "{name}:\n{}", report.text);
            assert_eq!(aml.bridges.len(), declared - hardware_sta, "{name}:\n{}", report.text);
            assert_eq!(aml.absent_bridges, hardware_sta, "{name}:\n{}", report.text);
            assert_eq!(aml.prt_tables, prts - prts_below_those, "{name}:\n{}", report.text);
            assert!(aml.routes > 0 && aml.unresolved_routes == 0, "{name}:\n{}", report.text);
            assert!(report.fatal.is_empty(), "{name}: {:?}", report.fatal);
            // Bounded: far below the interpreter's budget.
            assert!(
                aml.steps < platform::aml::STEPS_IN_ALL / 10,
                "{name}: {} steps",
                aml.steps
            );
        }
    }

    #[test]
    fn r820_host_bridges_match_its_dsdt() {
        // From the disassembled DSDT: P0B1..P3B1 `Name (_BBN, 0x3F)`.. and
        // `Name (_PXM, 1..4)`; PCI0 `_BBN` returns 0 and `_PXM` is 1; PCI1's
        // `_BBN` returns 0x40 unless its buffer P1BN holds 0x80 (it holds 0x40), `_PXM` 2.
        let dumps = corpus();
        let (_, text) = dumps
            .iter()
            .find(|(name, _)| name.starts_with("PowerEdge_R820"))
            .unwrap();
        let report = preflight_text(text).unwrap();
        let bridges: Vec<(String, Option<u8>, Option<u32>)> = report
            .aml
            .unwrap()
            .bridges
            .iter()
            .map(|b| (b.path.to_string(), b.bbn, b.pxm))
            .collect();
        let expected = [
            ("\\_SB_.P0B1", 0x3F, 1),
            ("\\_SB_.P1B1", 0x7F, 2),
            ("\\_SB_.P2B1", 0xBF, 3),
            ("\\_SB_.P3B1", 0xFF, 4),
            ("\\_SB_.PCI0", 0x00, 1),
            ("\\_SB_.PCI1", 0x40, 2),
        ]
        .map(|(path, bbn, pxm)| (path.to_string(), Some(bbn), Some(pxm)));
        assert_eq!(bridges, expected);
    }

    #[test]
    fn corpus_machines_match_their_description() {
        let dumps: BTreeMap<String, String> = corpus().into_iter().collect();
        let report = |prefix: &str| {
            let (_, text) = dumps
                .iter()
                .find(|(name, _)| name.starts_with(prefix))
                .unwrap_or_else(|| panic!("no {prefix} dump in the corpus"));
            preflight_text(text).unwrap()
        };
        let r820 = report("PowerEdge_R820");
        assert_eq!((r820.counts.usable_cpus, r820.counts.io_apics), (80, 5));
        assert!(r820.counts.dmar_units > 0);
        // 80 CPUs are within the kernel's limit (platform::irq::MAX_CPUS): no CPU limit line.
        const { assert!(80 <= platform::irq::MAX_CPUS) };
        assert!(
            !r820.text.contains("usable CPUs, the kernel starts at most"),
            "{}",
            r820.text
        );
        assert!(r820.text.contains("SPCR names no UART address"), "{}", r820.text);
        let h8qg6 = report("H8QG6");
        assert_eq!(
            (h8qg6.counts.usable_cpus, h8qg6.counts.io_apics, h8qg6.counts.numa_nodes),
            (64, 3, 8)
        );
        assert!(h8qg6.text.contains("APIC ids up to 143"), "{}", h8qg6.text);
        let dl165 = report("ProLiant_DL165");
        assert_eq!((dl165.counts.usable_cpus, dl165.counts.numa_nodes), (16, 4));
        assert!(dl165.text.contains("baud 9600"), "{}", dl165.text);
        assert!(dl165.text.contains("LIMIT: SPCR asks for 9600 baud"), "{}", dl165.text);
        let dl360 = report("ProLiant_DL360");
        assert!(dl360.text.contains("segment 0 buses 00-3f"), "{}", dl360.text);
        assert!(dl360.counts.dmar_units > 0);
        let x8dtt = report("X8DTT");
        assert_eq!(x8dtt.counts.numa_nodes, 2);
        assert!(x8dtt.counts.dmar_units > 0);
        let quanta = report("QuantaMicro");
        assert_eq!(
            quanta.counts.local_apic_nmi_entries, quanta.counts.usable_cpus,
            "one NMI entry per CPU"
        );
        assert!(quanta.text.contains("-> 1 after collapsing"), "{}", quanta.text);
    }

    // ---- synthetic dumps -------------------------------------------------------------------

    fn table(sig: &[u8; 4], revision: u8, body: &[u8]) -> Vec<u8> {
        let mut t = sig.to_vec();
        t.extend_from_slice(&((36 + body.len()) as u32).to_le_bytes());
        t.extend_from_slice(&[revision, 0]);
        t.extend_from_slice(b"BAREMQTESTTABLE\0");
        t.extend_from_slice(&[0; 10]);
        t.extend_from_slice(body);
        let sum = t.iter().fold(0u8, |s, &b| s.wrapping_add(b));
        t[9] = sum.wrapping_neg();
        t
    }

    /// Prints `bytes` the way acpidump does.
    fn dump_text(name: &str, bytes: &[u8]) -> String {
        let mut out = format!("{name} @ 0x0000000000000000\n");
        for (i, chunk) in bytes.chunks(16).enumerate() {
            let hex: Vec<String> = chunk.iter().map(|b| format!("{b:02X}")).collect();
            let ascii: String = chunk
                .iter()
                .map(|&b| if b.is_ascii_graphic() { b as char } else { '.' })
                .collect();
            out.push_str(&format!("    {:04X}: {:<48} {ascii}\n", i * 16, hex.join(" ") + " "));
        }
        out.push('\n');
        out
    }

    /// A 2026-style 2-socket box: 512 x2APIC CPUs (ids up to 0x2ff), nine
    /// I/O APICs, one NMI entry per CPU, an IVRS with one IOMMU described twice.
    fn server_dump() -> String {
        let mut madt = vec![0, 0, 0xE0, 0xFE, 1, 0, 0, 0];
        for i in 0..512u32 {
            let id = if i < 256 { i } else { i + 256 };
            madt.extend_from_slice(&[9, 16, 0, 0]);
            madt.extend_from_slice(&id.to_le_bytes());
            madt.extend_from_slice(&1u32.to_le_bytes());
            madt.extend_from_slice(&i.to_le_bytes());
        }
        for i in 0..9u32 {
            madt.extend_from_slice(&[1, 12, i as u8, 0]);
            madt.extend_from_slice(&(0xFEC0_0000 + i * 0x10_0000).to_le_bytes());
            madt.extend_from_slice(&(i * 32).to_le_bytes());
        }
        for i in 0..512u32 {
            madt.extend_from_slice(&[10, 12, 5, 0]);
            madt.extend_from_slice(&i.to_le_bytes());
            madt.extend_from_slice(&[1, 0, 0, 0]);
        }
        let mut ivrs = vec![0u8; 12];
        for block in [0x10u8, 0x11] {
            let len: u16 = if block == 0x10 { 24 } else { 40 };
            let mut b = vec![block, 0];
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(&0x0002u16.to_le_bytes());
            b.extend_from_slice(&0x40u16.to_le_bytes());
            b.extend_from_slice(&0xF710_0000u64.to_le_bytes());
            b.resize(usize::from(len), 0);
            ivrs.extend_from_slice(&b);
        }
        dump_text("APIC", &table(b"APIC", 5, &madt)) + &dump_text("IVRS", &table(b"IVRS", 2, &ivrs))
    }

    #[test]
    fn a_server_sized_madt_reports_limits_instead_of_failing() {
        let text = server_dump();
        let report = preflight_text(&text).unwrap();
        assert!(report.fatal.is_empty(), "{}", report.text);
        assert_eq!(report.counts, expected_counts(&text));
        assert_eq!((report.counts.usable_cpus, report.counts.io_apics), (512, 9));
        assert_eq!(report.counts.ivrs_units, 1, "one IOMMU described by two IVHD types");
        assert!(
            report.text.contains("512 LAPIC-NMI entries -> 1 after collapsing"),
            "{}",
            report.text
        );
        assert!(
            report.text.contains("LIMIT: 256 CPU(s) have APIC ids above 255"),
            "{}",
            report.text
        );
        assert!(
            report
                .text
                .contains("AMD-Vi unit at 0xf7100000, segment 0 device 00:00.2"),
            "{}",
            report.text
        );
        assert!(
            report.text.contains("I/O APIC id 8 at 0xff400000, GSI base 256"),
            "{}",
            report.text
        );
    }

    #[test]
    fn a_broken_madt_is_reported_as_the_refusal_the_kernel_would_hit() {
        let mut madt = vec![0, 0, 0xE0, 0xFE, 1, 0, 0, 0];
        madt.extend_from_slice(&[0, 2]); // a local APIC entry of length 2
        let report = preflight_text(&dump_text("APIC", &table(b"APIC", 1, &madt))).unwrap();
        assert_eq!(report.fatal.len(), 1, "{}", report.text);
        assert!(
            report.fatal[0].contains("MADT entry type 0 at offset 44 has length 2"),
            "{:?}",
            report.fatal
        );
    }

    #[test]
    fn malformed_dump_text_gives_errors_naming_the_line() {
        let good = dump_text("APIC", &table(b"APIC", 1, &[0; 8]));
        assert!(acpidump::parse(&good).is_ok());
        let gap = good.replace("    0010:", "    0020:");
        assert!(
            acpidump::parse(&gap)
                .unwrap_err()
                .contains("continues at offset 0x20, expected 0x10")
        );
        let cut: String = good.lines().take(2).map(|l| format!("{l}\n")).collect();
        assert!(
            acpidump::parse(&cut)
                .unwrap_err()
                .contains("its length field says 44 bytes, the dump holds 16")
        );
        let bad_hex = good.replacen("41 50", "4G 50", 1);
        assert!(
            acpidump::parse(&bad_hex)
                .unwrap_err()
                .contains("line 2: \"4G\" is not a hex byte")
        );
        assert!(acpidump::parse("    0000: 41 50\n").unwrap_err().contains("before any"));
        assert!(acpidump::parse("hello\n").unwrap_err().contains("line 1"));
        assert!(acpidump::parse("").unwrap_err().contains("no tables"));
    }

    #[test]
    fn older_acpidump_spellings_of_the_rsdp_are_read() {
        // The first lines of a real dump (linuxhw/ACPI, a Toshiba Satellite C70D-B): the RSDP
        // under its signature padded to four characters, as older acpidump versions print it.
        let rsdp_lines = "  0000: 52 53 44 20 50 54 52 20 6D 54 4F 53 49 4E 56 02  RSD PTR mTOSINV.\n\
                          \x20 0010: C4 70 BC 9F 24 00 00 00 88 71 BC 9F 00 00 00 00  .p..$....q......\n\
                          \x20 0020: 88 00 00 00                                      ....\n";
        for header in [
            "RSD  @ 0x000000009FBFE014",
            "RSD PTR @ 0x000000009FBFE014",
            "RSDP @ 0x000000009FBFE014",
        ] {
            let dump = acpidump::parse(&format!("{header}\n{rsdp_lines}")).unwrap_or_else(|e| panic!("{header}: {e}"));
            assert_eq!(dump.tables.len(), 1, "{header}");
            assert_eq!(dump.tables[0].name, "RSDP", "{header}");
            assert_eq!(dump.tables[0].bytes.len(), 36, "{header}");
        }
    }

    #[test]
    fn a_folder_gives_one_line_per_dump_and_skips_other_files() {
        assert!(acpidump::looks_like_a_dump("RSDP @ 0x00000000000F05B0\n"));
        assert!(acpidump::looks_like_a_dump(
            "Firmware Warning (ACPI): Incorrect checksum in table [GSCI]\n\nDSDT @ 0x0000000000000000\n"
        ));
        assert!(!acpidump::looks_like_a_dump("# Real servers' ACPI tables\n"));
        assert!(!acpidump::looks_like_a_dump("\nIntel ACPI Component Architecture\n"));
        // The corpus folder holds six dumps and a README: every dump boots, the README is skipped.
        assert_eq!(preflight_folder(&corpus_dir()), Ok(true));
        let (name, text) = &corpus()[0];
        let line = summary_line(name, &preflight_text(text).unwrap());
        assert!(
            line.starts_with(&format!("{name}: ")) && line.contains(" CPUs, ") && line.contains(" AML steps: boots"),
            "{line}"
        );
    }

    /// Three real dumps kept for a quirk each (tests/acpi-corpus/README.md): a host bridge's
    /// QWord window over the whole 64-bit space (two AMD boards), and an RSDP header spelled
    /// `RSD  @`. Each gives a verdict, and the boards' host bridges are found.
    #[test]
    fn the_quirk_dumps_give_a_verdict() {
        let dir = corpus_dir().join("quirks");
        for (file, bridges) in [
            ("X399_Taichi_AB101543D5E5.acpidump", 2),
            ("ROG_ZENITH_II_EXTREME_ALPHA_BF6A37F4A7D0.acpidump", 4),
            ("Satellite_C70D-B_D0292BFAFD2C.acpidump", 1),
        ] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            let report = preflight_text(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(report.fatal.is_empty(), "{file}: {:?}", report.fatal);
            assert_eq!(report.aml.as_ref().map(|a| a.bridges.len()), Some(bridges), "{file}");
        }
    }

    #[test]
    fn table_headers_with_an_instance_suffix_are_read_by_their_signature() {
        // Some acpidump versions number repeated tables (`SSDT1 @`, `SSDT2 @`); the table is
        // known by the signature in its bytes, whatever the header calls it.
        let (_, text) = corpus()
            .into_iter()
            .find(|(n, _)| n.starts_with("ProLiant_DL360"))
            .unwrap();
        let plain = acpidump::parse(&text).unwrap();
        let mut n = 0;
        let numbered: String = text
            .lines()
            .map(|l| match l.strip_prefix("SSDT @") {
                Some(address) => {
                    n += 1;
                    format!("SSDT{n} @{address}\n")
                }
                None => format!("{l}\n"),
            })
            .collect();
        assert!(n >= 2, "the DL360 dump has several SSDTs");
        let renamed = acpidump::parse(&numbered).unwrap();
        assert_eq!(renamed.tables.len(), plain.tables.len());
        assert_eq!(
            preflight_text(&numbered).unwrap().text,
            preflight_text(&text).unwrap().text
        );
    }
}
