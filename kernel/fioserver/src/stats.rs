//! The report messages: TS (`struct cmd_ts_pdu` = `struct thread_stat` + `struct
//! group_run_stats`, both packed), GS, DU (`struct cmd_du_pdu`) and ETA (`struct jobs_eta` and
//! its run-state string). Offsets are those of fio 3.33's structures on x86_64.

use crate::Error;
use crate::wire::{Fields, f64_to_wire, put_cstr, put_u16, put_u32, put_u64, put_u64s};
use alloc::string::String;
use alloc::vec::Vec;

/// Read, write, trim (`DDIR_RWDIR_CNT`); the sync count adds one (`DDIR_RWDIR_SYNC_CNT`).
pub const DIRECTIONS: usize = 3;
/// Depth buckets of the io_u maps (`FIO_IO_U_MAP_NR`): 1, 2, 4, 8, 16, 32, >=64.
pub const IO_U_MAP_NR: usize = 7;
pub const IO_U_LAT_N_NR: usize = 10;
pub const IO_U_LAT_U_NR: usize = 10;
pub const IO_U_LAT_M_NR: usize = 12;
/// Latency histogram: 29 groups of 64 buckets (`FIO_IO_U_PLAT_*`).
pub const PLAT_BITS: u32 = 6;
pub const PLAT_VAL: usize = 1 << PLAT_BITS;
pub const PLAT_GROUP_NR: usize = 29;
pub const PLAT_NR: usize = PLAT_GROUP_NR * PLAT_VAL;
/// Room for this many percentiles (`FIO_IO_U_LIST_MAX_LEN`).
pub const PERCENTILE_LIST_MAX: usize = 20;
pub const MAX_NR_BLOCK_INFOS: usize = 8192;
pub const JOBNAME_LEN: usize = 128;
pub const VERROR_LEN: usize = 128;
pub const DESCRIPTION_LEN: usize = 256;

/// The histogram bucket fio counts a latency of `ns` nanoseconds in (its `plat_val_to_idx`).
pub fn plat_index(ns: u64) -> usize {
    let msb = if ns == 0 { 0 } else { 63 - ns.leading_zeros() };
    if msb <= PLAT_BITS {
        return ns as usize;
    }
    let error_bits = msb - PLAT_BITS;
    let base = (error_bits as usize + 1) << PLAT_BITS;
    let offset = ((ns >> error_bits) as usize) & (PLAT_VAL - 1);
    (base + offset).min(PLAT_NR - 1)
}

/// The latency, in nanoseconds, that fio reports for bucket `idx` (its `plat_idx_to_val`: the
/// middle of the bucket's range).
pub fn plat_value(idx: usize) -> u64 {
    let idx = idx.min(PLAT_NR - 1);
    if idx < (PLAT_VAL << 1) {
        return idx as u64;
    }
    let error_bits = (idx >> PLAT_BITS) as u32 - 1;
    let base = 1u64 << (error_bits + PLAT_BITS);
    let k = (idx % PLAT_VAL) as u64;
    // (k + 0.5) * 2^error_bits, in integers.
    base + ((2 * k + 1) << error_bits) / 2
}

/// `struct io_stat`: min, max, sample count, mean and the running sum of squared deviations
/// (Welford's S), 56 bytes (each double sits in a 16-byte union).
pub const IO_STAT_LEN: usize = 56;
const IO_STAT_MAX: usize = 0;
const IO_STAT_MIN: usize = 8;
const IO_STAT_SAMPLES: usize = 16;
const IO_STAT_MEAN: usize = 24;
const IO_STAT_S: usize = 40;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct IoStat {
    pub min: u64,
    pub max: u64,
    pub samples: u64,
    pub mean: f64,
    /// Sum of squared deviations from the mean; fio derives the standard deviation from it.
    pub s: f64,
}

impl IoStat {
    fn put(&self, b: &mut [u8], off: usize) {
        put_u64(b, off + IO_STAT_MAX, self.max);
        put_u64(b, off + IO_STAT_MIN, self.min);
        put_u64(b, off + IO_STAT_SAMPLES, self.samples);
        put_u64(b, off + IO_STAT_MEAN, f64_to_wire(self.mean));
        put_u64(b, off + IO_STAT_S, f64_to_wire(self.s));
    }

    fn get(f: &Fields<'_>, off: usize) -> Result<Self, Error> {
        Ok(Self {
            max: f.u64(off + IO_STAT_MAX)?,
            min: f.u64(off + IO_STAT_MIN)?,
            samples: f.u64(off + IO_STAT_SAMPLES)?,
            mean: f.f64(off + IO_STAT_MEAN)?,
            s: f.f64(off + IO_STAT_S)?,
        })
    }
}

/// `struct group_run_stats`, packed: 164 bytes.
pub const GS_LEN: usize = 164;
pub const GS_MAX_RUN: usize = 0;
pub const GS_MIN_RUN: usize = 24;
pub const GS_MAX_BW: usize = 48;
pub const GS_MIN_BW: usize = 72;
pub const GS_IOBYTES: usize = 96;
pub const GS_AGG: usize = 120;
pub const GS_KB_BASE: usize = 144;
pub const GS_UNIT_BASE: usize = 148;
pub const GS_SIG_FIGS: usize = 152;
pub const GS_GROUPID: usize = 156;
pub const GS_UNIFIED_RW_REP: usize = 160;

/// fio's unit for bandwidth figures: bytes per second (`N2S_BYTEPERSEC`).
pub const UNIT_BYTES_PER_SEC: u32 = 4;

/// A group's totals per direction: runtimes in ms, bandwidths and aggregate in bytes/s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupRunStats {
    pub max_run_ms: [u64; DIRECTIONS],
    pub min_run_ms: [u64; DIRECTIONS],
    pub max_bw: [u64; DIRECTIONS],
    pub min_bw: [u64; DIRECTIONS],
    pub io_bytes: [u64; DIRECTIONS],
    pub agg_bw: [u64; DIRECTIONS],
    pub kb_base: u32,
    pub unit_base: u32,
    pub sig_figs: u32,
    pub groupid: u32,
    pub unified_rw_rep: u32,
}

impl Default for GroupRunStats {
    fn default() -> Self {
        Self {
            max_run_ms: [0; DIRECTIONS],
            min_run_ms: [0; DIRECTIONS],
            max_bw: [0; DIRECTIONS],
            min_bw: [0; DIRECTIONS],
            io_bytes: [0; DIRECTIONS],
            agg_bw: [0; DIRECTIONS],
            kb_base: 1024,
            unit_base: UNIT_BYTES_PER_SEC,
            sig_figs: 4,
            groupid: 0,
            unified_rw_rep: 0,
        }
    }
}

impl GroupRunStats {
    fn put(&self, b: &mut [u8], off: usize) {
        put_u64s(b, off + GS_MAX_RUN, &self.max_run_ms);
        put_u64s(b, off + GS_MIN_RUN, &self.min_run_ms);
        put_u64s(b, off + GS_MAX_BW, &self.max_bw);
        put_u64s(b, off + GS_MIN_BW, &self.min_bw);
        put_u64s(b, off + GS_IOBYTES, &self.io_bytes);
        put_u64s(b, off + GS_AGG, &self.agg_bw);
        put_u32(b, off + GS_KB_BASE, self.kb_base);
        put_u32(b, off + GS_UNIT_BASE, self.unit_base);
        put_u32(b, off + GS_SIG_FIGS, self.sig_figs);
        put_u32(b, off + GS_GROUPID, self.groupid);
        put_u32(b, off + GS_UNIFIED_RW_REP, self.unified_rw_rep);
    }

    fn get(f: &Fields<'_>, off: usize) -> Result<Self, Error> {
        let mut g = Self::default();
        f.u64s(off + GS_MAX_RUN, &mut g.max_run_ms)?;
        f.u64s(off + GS_MIN_RUN, &mut g.min_run_ms)?;
        f.u64s(off + GS_MAX_BW, &mut g.max_bw)?;
        f.u64s(off + GS_MIN_BW, &mut g.min_bw)?;
        f.u64s(off + GS_IOBYTES, &mut g.io_bytes)?;
        f.u64s(off + GS_AGG, &mut g.agg_bw)?;
        g.kb_base = f.u32(off + GS_KB_BASE)?;
        g.unit_base = f.u32(off + GS_UNIT_BASE)?;
        g.sig_figs = f.u32(off + GS_SIG_FIGS)?;
        g.groupid = f.u32(off + GS_GROUPID)?;
        g.unified_rw_rep = f.u32(off + GS_UNIFIED_RW_REP)?;
        Ok(g)
    }

    /// The GS message's payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; GS_LEN];
        self.put(&mut b, 0);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        Self::get(&Fields::new(payload, GS_LEN, "GS")?, 0)
    }
}

/// `struct thread_stat`, packed: field offsets and its size.
pub mod ts {
    pub const NAME: usize = 0;
    pub const VERROR: usize = 128;
    pub const ERROR: usize = 256;
    pub const THREAD_NUMBER: usize = 260;
    pub const GROUPID: usize = 264;
    pub const PID: usize = 268;
    pub const DESCRIPTION: usize = 272;
    pub const MEMBERS: usize = 528;
    pub const UNIFIED_RW_REP: usize = 532;
    pub const DISABLE_PRIO_STAT: usize = 536;
    /// `sync_stat` carries `aligned(8)`, which the packed structure keeps: 4 bytes of padding
    /// before it.
    pub const SYNC_STAT: usize = 544;
    pub const CLAT_STAT: usize = 600;
    pub const SLAT_STAT: usize = 768;
    pub const LAT_STAT: usize = 936;
    pub const BW_STAT: usize = 1104;
    pub const IOPS_STAT: usize = 1272;
    pub const USR_TIME: usize = 1440;
    pub const SYS_TIME: usize = 1448;
    pub const CTX: usize = 1456;
    pub const MINF: usize = 1464;
    pub const MAJF: usize = 1472;
    pub const CLAT_PERCENTILES: usize = 1480;
    pub const LAT_PERCENTILES: usize = 1484;
    pub const SLAT_PERCENTILES: usize = 1488;
    pub const PERCENTILE_PRECISION: usize = 1496;
    /// 20 entries of 16 bytes (`fio_fp64_t`), the double in the first 8.
    pub const PERCENTILE_LIST: usize = 1504;
    pub const IO_U_MAP: usize = 1824;
    pub const IO_U_SUBMIT: usize = 1880;
    pub const IO_U_COMPLETE: usize = 1936;
    pub const IO_U_LAT_N: usize = 1992;
    pub const IO_U_LAT_U: usize = 2072;
    pub const IO_U_LAT_M: usize = 2152;
    /// `[slat, clat, lat][read, write, trim][1856]`.
    pub const IO_U_PLAT: usize = 2248;
    pub const IO_U_SYNC_PLAT: usize = 135880;
    pub const TOTAL_IO_U: usize = 150728;
    pub const SHORT_IO_U: usize = 150760;
    pub const DROP_IO_U: usize = 150784;
    pub const TOTAL_SUBMIT: usize = 150808;
    pub const TOTAL_COMPLETE: usize = 150816;
    pub const IO_BYTES: usize = 150824;
    pub const RUNTIME: usize = 150848;
    pub const TOTAL_RUN_TIME: usize = 150872;
    pub const CONTINUE_ON_ERROR: usize = 150880;
    pub const FIRST_ERROR: usize = 150884;
    pub const TOTAL_ERR_COUNT: usize = 150888;
    pub const NR_ZONE_RESETS: usize = 150896;
    pub const NR_BLOCK_INFOS: usize = 150904;
    pub const BLOCK_INFOS: usize = 150912;
    pub const KB_BASE: usize = 183680;
    pub const UNIT_BASE: usize = 183684;
    pub const LATENCY_DEPTH: usize = 183688;
    pub const LATENCY_TARGET: usize = 183696;
    pub const LATENCY_PERCENTILE: usize = 183704;
    pub const LATENCY_WINDOW: usize = 183720;
    pub const SIG_FIGS: usize = 183728;
    pub const SS_DUR: usize = 183732;
    pub const SS_STATE: usize = 183740;
    pub const SS_HEAD: usize = 183744;
    pub const SS_LIMIT: usize = 183748;
    pub const SS_SLOPE: usize = 183764;
    pub const SS_DEVIATION: usize = 183780;
    pub const SS_CRITERION: usize = 183796;
    pub const IOPRIO: usize = 183812;
    pub const SS_IOPS_DATA_OFFSET: usize = 183816;
    pub const SS_BW_DATA_OFFSET: usize = 183824;
    pub const CLAT_PRIO_OFFSET: usize = 183832;
    pub const NR_CLAT_PRIO: usize = 183856;
    pub const CACHEHIT: usize = 183868;
    pub const CACHEMISS: usize = 183876;
    /// The size, with 4 bytes of tail padding: `sync_stat`'s alignment of 8 is the structure's.
    pub const LEN: usize = 183888;
}

/// The TS payload: `thread_stat`, then `group_run_stats` at [`ts::LEN`], then 4 bytes of tail
/// padding (`struct cmd_ts_pdu` keeps the alignment of 8).
pub const TS_LEN: usize = (ts::LEN + GS_LEN).next_multiple_of(8);
/// Steady-state flag that would add ring buffers after the TS payload (`FIO_SS_DATA`); this
/// server never sets it.
pub const SS_DATA: u32 = 1 << 2;

/// Index of each latency kind in `io_u_plat` (`enum fio_lat`).
pub const SLAT: usize = 0;
pub const CLAT: usize = 1;
pub const LAT: usize = 2;

/// One direction's figures in a job's report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DirStats {
    pub io_bytes: u64,
    pub runtime_ms: u64,
    pub total_ios: u64,
    pub short_ios: u64,
    pub drop_ios: u64,
    pub clat: IoStat,
    pub slat: IoStat,
    pub lat: IoStat,
    /// Bandwidth samples in KiB/s.
    pub bw: IoStat,
    pub iops: IoStat,
    /// Histograms indexed by [`SLAT`], [`CLAT`], [`LAT`]: empty, or [`PLAT_NR`] buckets (see
    /// [`plat_index`]).
    pub plat: [Vec<u64>; 3],
}

/// One job's (or one reporting group's) final statistics, as fio's `thread_stat`. Fields the
/// box has no figure for stay zero, as in fio.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadStat {
    pub name: String,
    pub verror: String,
    pub description: String,
    pub error: u32,
    pub thread_number: u32,
    pub groupid: u32,
    pub pid: u32,
    pub members: u32,
    pub unified_rw_rep: u32,
    pub disable_prio_stat: u32,
    pub dirs: [DirStats; DIRECTIONS],
    pub sync: IoStat,
    pub sync_total_ios: u64,
    pub sync_plat: Vec<u64>,
    pub usr_time: u64,
    pub sys_time: u64,
    pub ctx: u64,
    pub minf: u64,
    pub majf: u64,
    pub clat_percentiles: bool,
    pub lat_percentiles: bool,
    pub slat_percentiles: bool,
    pub percentile_precision: u64,
    /// At most [`PERCENTILE_LIST_MAX`] percentiles (e.g. 50.0, 99.0); the client reports
    /// these, computed from the histograms.
    pub percentile_list: Vec<f64>,
    pub io_u_map: [u64; IO_U_MAP_NR],
    pub io_u_submit: [u64; IO_U_MAP_NR],
    pub io_u_complete: [u64; IO_U_MAP_NR],
    pub io_u_lat_n: [u64; IO_U_LAT_N_NR],
    pub io_u_lat_u: [u64; IO_U_LAT_U_NR],
    pub io_u_lat_m: [u64; IO_U_LAT_M_NR],
    pub total_submit: u64,
    pub total_complete: u64,
    pub total_run_time_ms: u64,
    pub continue_on_error: u16,
    pub first_error: u32,
    pub total_err_count: u64,
    pub nr_zone_resets: u64,
    pub kb_base: u32,
    pub unit_base: u32,
    pub latency_depth: u32,
    pub latency_target: u64,
    pub latency_percentile: f64,
    pub latency_window: u64,
    pub sig_figs: u32,
    pub ioprio: u32,
    pub cachehit: u64,
    pub cachemiss: u64,
}

impl Default for ThreadStat {
    fn default() -> Self {
        Self {
            name: String::new(),
            verror: String::new(),
            description: String::new(),
            error: 0,
            thread_number: 1,
            groupid: 0,
            pid: 0,
            members: 1,
            unified_rw_rep: 0,
            disable_prio_stat: 0,
            dirs: Default::default(),
            sync: IoStat::default(),
            sync_total_ios: 0,
            sync_plat: Vec::new(),
            usr_time: 0,
            sys_time: 0,
            ctx: 0,
            minf: 0,
            majf: 0,
            clat_percentiles: true,
            lat_percentiles: false,
            slat_percentiles: false,
            percentile_precision: 0,
            percentile_list: Vec::new(),
            io_u_map: [0; IO_U_MAP_NR],
            io_u_submit: [0; IO_U_MAP_NR],
            io_u_complete: [0; IO_U_MAP_NR],
            io_u_lat_n: [0; IO_U_LAT_N_NR],
            io_u_lat_u: [0; IO_U_LAT_U_NR],
            io_u_lat_m: [0; IO_U_LAT_M_NR],
            total_submit: 0,
            total_complete: 0,
            total_run_time_ms: 0,
            continue_on_error: 0,
            first_error: 0,
            total_err_count: 0,
            nr_zone_resets: 0,
            kb_base: 1024,
            unit_base: UNIT_BYTES_PER_SEC,
            latency_depth: 0,
            latency_target: 0,
            latency_percentile: 0.0,
            latency_window: 0,
            sig_figs: 4,
            ioprio: 0,
            cachehit: 0,
            cachemiss: 0,
        }
    }
}

/// Size of one `fio_fp64_t`.
const FP64_LEN: usize = 16;

fn put_plat(b: &mut [u8], off: usize, plat: &[u64], what: &'static str) -> Result<(), Error> {
    match plat.len() {
        0 => Ok(()),
        PLAT_NR => {
            put_u64s(b, off, plat);
            Ok(())
        }
        _ => Err(Error::ValueOutOfRange { what }),
    }
}

/// An all-zero histogram travels as an empty one.
fn get_plat(f: &Fields<'_>, off: usize) -> Result<Vec<u64>, Error> {
    let v = f.u64_vec(off, PLAT_NR)?;
    Ok(if v.iter().all(|&c| c == 0) { Vec::new() } else { v })
}

impl ThreadStat {
    /// The TS payload for this job with its group's totals: exactly [`TS_LEN`] bytes (no
    /// per-priority or steady-state tail).
    pub fn encode_ts(&self, group: &GroupRunStats) -> Result<Vec<u8>, Error> {
        if self.percentile_list.len() > PERCENTILE_LIST_MAX {
            return Err(Error::ValueOutOfRange {
                what: "TS percentile_list",
            });
        }
        let mut b = alloc::vec![0u8; TS_LEN];
        put_cstr(&mut b, ts::NAME, JOBNAME_LEN, &self.name);
        put_cstr(&mut b, ts::VERROR, VERROR_LEN, &self.verror);
        put_cstr(&mut b, ts::DESCRIPTION, DESCRIPTION_LEN, &self.description);
        put_u32(&mut b, ts::ERROR, self.error);
        put_u32(&mut b, ts::THREAD_NUMBER, self.thread_number);
        put_u32(&mut b, ts::GROUPID, self.groupid);
        put_u32(&mut b, ts::PID, self.pid);
        put_u32(&mut b, ts::MEMBERS, self.members);
        put_u32(&mut b, ts::UNIFIED_RW_REP, self.unified_rw_rep);
        put_u32(&mut b, ts::DISABLE_PRIO_STAT, self.disable_prio_stat);
        self.sync.put(&mut b, ts::SYNC_STAT);
        for (d, dir) in self.dirs.iter().enumerate() {
            let at = |base: usize| base + d * IO_STAT_LEN;
            dir.clat.put(&mut b, at(ts::CLAT_STAT));
            dir.slat.put(&mut b, at(ts::SLAT_STAT));
            dir.lat.put(&mut b, at(ts::LAT_STAT));
            dir.bw.put(&mut b, at(ts::BW_STAT));
            dir.iops.put(&mut b, at(ts::IOPS_STAT));
            for (kind, plat) in dir.plat.iter().enumerate() {
                let off = ts::IO_U_PLAT + 8 * PLAT_NR * (kind * DIRECTIONS + d);
                put_plat(&mut b, off, plat, "TS io_u_plat")?;
            }
            put_u64(&mut b, ts::TOTAL_IO_U + 8 * d, dir.total_ios);
            put_u64(&mut b, ts::SHORT_IO_U + 8 * d, dir.short_ios);
            put_u64(&mut b, ts::DROP_IO_U + 8 * d, dir.drop_ios);
            put_u64(&mut b, ts::IO_BYTES + 8 * d, dir.io_bytes);
            put_u64(&mut b, ts::RUNTIME + 8 * d, dir.runtime_ms);
        }
        put_u64(&mut b, ts::TOTAL_IO_U + 8 * DIRECTIONS, self.sync_total_ios);
        put_plat(&mut b, ts::IO_U_SYNC_PLAT, &self.sync_plat, "TS io_u_sync_plat")?;
        put_u64(&mut b, ts::USR_TIME, self.usr_time);
        put_u64(&mut b, ts::SYS_TIME, self.sys_time);
        put_u64(&mut b, ts::CTX, self.ctx);
        put_u64(&mut b, ts::MINF, self.minf);
        put_u64(&mut b, ts::MAJF, self.majf);
        put_u32(&mut b, ts::CLAT_PERCENTILES, u32::from(self.clat_percentiles));
        put_u32(&mut b, ts::LAT_PERCENTILES, u32::from(self.lat_percentiles));
        put_u32(&mut b, ts::SLAT_PERCENTILES, u32::from(self.slat_percentiles));
        put_u64(&mut b, ts::PERCENTILE_PRECISION, self.percentile_precision);
        for (i, &p) in self.percentile_list.iter().enumerate() {
            put_u64(&mut b, ts::PERCENTILE_LIST + FP64_LEN * i, f64_to_wire(p));
        }
        put_u64s(&mut b, ts::IO_U_MAP, &self.io_u_map);
        put_u64s(&mut b, ts::IO_U_SUBMIT, &self.io_u_submit);
        put_u64s(&mut b, ts::IO_U_COMPLETE, &self.io_u_complete);
        put_u64s(&mut b, ts::IO_U_LAT_N, &self.io_u_lat_n);
        put_u64s(&mut b, ts::IO_U_LAT_U, &self.io_u_lat_u);
        put_u64s(&mut b, ts::IO_U_LAT_M, &self.io_u_lat_m);
        put_u64(&mut b, ts::TOTAL_SUBMIT, self.total_submit);
        put_u64(&mut b, ts::TOTAL_COMPLETE, self.total_complete);
        put_u64(&mut b, ts::TOTAL_RUN_TIME, self.total_run_time_ms);
        put_u16(&mut b, ts::CONTINUE_ON_ERROR, self.continue_on_error);
        put_u32(&mut b, ts::FIRST_ERROR, self.first_error);
        put_u64(&mut b, ts::TOTAL_ERR_COUNT, self.total_err_count);
        put_u64(&mut b, ts::NR_ZONE_RESETS, self.nr_zone_resets);
        // No trim-cycle tracking: nr_block_infos stays 0.
        put_u32(&mut b, ts::KB_BASE, self.kb_base);
        put_u32(&mut b, ts::UNIT_BASE, self.unit_base);
        put_u32(&mut b, ts::LATENCY_DEPTH, self.latency_depth);
        put_u64(&mut b, ts::LATENCY_TARGET, self.latency_target);
        put_u64(&mut b, ts::LATENCY_PERCENTILE, f64_to_wire(self.latency_percentile));
        put_u64(&mut b, ts::LATENCY_WINDOW, self.latency_window);
        put_u32(&mut b, ts::SIG_FIGS, self.sig_figs);
        // Steady state is not tracked: ss_dur, ss_state and the ring-buffer offsets stay 0, as
        // do the per-priority counts (no tail after the structure).
        put_u32(&mut b, ts::IOPRIO, self.ioprio);
        put_u64(&mut b, ts::CACHEHIT, self.cachehit);
        put_u64(&mut b, ts::CACHEMISS, self.cachemiss);
        group.put(&mut b, ts::LEN);
        Ok(b)
    }

    /// Reads a TS payload back. The per-priority and steady-state tails fio may add are
    /// checked for bounds and skipped.
    pub fn decode_ts(payload: &[u8]) -> Result<(Self, GroupRunStats), Error> {
        let f = Fields::new(payload, TS_LEN, "TS")?;
        let nr_block_infos = f.u64(ts::NR_BLOCK_INFOS)?;
        if nr_block_infos > MAX_NR_BLOCK_INFOS as u64 {
            return Err(Error::LengthOutOfRange {
                what: "TS nr_block_infos",
                len: usize::try_from(nr_block_infos).unwrap_or(usize::MAX),
                limit: MAX_NR_BLOCK_INFOS,
            });
        }
        for d in 0..DIRECTIONS {
            if f.u32(ts::NR_CLAT_PRIO + 4 * d)? != 0 {
                let off = f.u64(ts::CLAT_PRIO_OFFSET + 8 * d)?;
                if off < TS_LEN as u64 || off >= payload.len() as u64 {
                    return Err(Error::LengthOutOfRange {
                        what: "TS clat_prio_offset",
                        len: usize::try_from(off).unwrap_or(usize::MAX),
                        limit: payload.len(),
                    });
                }
            }
        }
        let mut t = ThreadStat {
            name: f.cstr(ts::NAME, JOBNAME_LEN)?,
            verror: f.cstr(ts::VERROR, VERROR_LEN)?,
            description: f.cstr(ts::DESCRIPTION, DESCRIPTION_LEN)?,
            error: f.u32(ts::ERROR)?,
            thread_number: f.u32(ts::THREAD_NUMBER)?,
            groupid: f.u32(ts::GROUPID)?,
            pid: f.u32(ts::PID)?,
            members: f.u32(ts::MEMBERS)?,
            unified_rw_rep: f.u32(ts::UNIFIED_RW_REP)?,
            disable_prio_stat: f.u32(ts::DISABLE_PRIO_STAT)?,
            sync: IoStat::get(&f, ts::SYNC_STAT)?,
            sync_total_ios: f.u64(ts::TOTAL_IO_U + 8 * DIRECTIONS)?,
            sync_plat: get_plat(&f, ts::IO_U_SYNC_PLAT)?,
            usr_time: f.u64(ts::USR_TIME)?,
            sys_time: f.u64(ts::SYS_TIME)?,
            ctx: f.u64(ts::CTX)?,
            minf: f.u64(ts::MINF)?,
            majf: f.u64(ts::MAJF)?,
            clat_percentiles: f.u32(ts::CLAT_PERCENTILES)? != 0,
            lat_percentiles: f.u32(ts::LAT_PERCENTILES)? != 0,
            slat_percentiles: f.u32(ts::SLAT_PERCENTILES)? != 0,
            percentile_precision: f.u64(ts::PERCENTILE_PRECISION)?,
            total_submit: f.u64(ts::TOTAL_SUBMIT)?,
            total_complete: f.u64(ts::TOTAL_COMPLETE)?,
            total_run_time_ms: f.u64(ts::TOTAL_RUN_TIME)?,
            continue_on_error: f.u16(ts::CONTINUE_ON_ERROR)?,
            first_error: f.u32(ts::FIRST_ERROR)?,
            total_err_count: f.u64(ts::TOTAL_ERR_COUNT)?,
            nr_zone_resets: f.u64(ts::NR_ZONE_RESETS)?,
            kb_base: f.u32(ts::KB_BASE)?,
            unit_base: f.u32(ts::UNIT_BASE)?,
            latency_depth: f.u32(ts::LATENCY_DEPTH)?,
            latency_target: f.u64(ts::LATENCY_TARGET)?,
            latency_percentile: f.f64(ts::LATENCY_PERCENTILE)?,
            latency_window: f.u64(ts::LATENCY_WINDOW)?,
            sig_figs: f.u32(ts::SIG_FIGS)?,
            ioprio: f.u32(ts::IOPRIO)?,
            cachehit: f.u64(ts::CACHEHIT)?,
            cachemiss: f.u64(ts::CACHEMISS)?,
            ..ThreadStat::default()
        };
        for d in 0..DIRECTIONS {
            let at = |base: usize| base + d * IO_STAT_LEN;
            let dir = &mut t.dirs[d];
            dir.clat = IoStat::get(&f, at(ts::CLAT_STAT))?;
            dir.slat = IoStat::get(&f, at(ts::SLAT_STAT))?;
            dir.lat = IoStat::get(&f, at(ts::LAT_STAT))?;
            dir.bw = IoStat::get(&f, at(ts::BW_STAT))?;
            dir.iops = IoStat::get(&f, at(ts::IOPS_STAT))?;
            for kind in 0..3 {
                dir.plat[kind] = get_plat(&f, ts::IO_U_PLAT + 8 * PLAT_NR * (kind * DIRECTIONS + d))?;
            }
            dir.total_ios = f.u64(ts::TOTAL_IO_U + 8 * d)?;
            dir.short_ios = f.u64(ts::SHORT_IO_U + 8 * d)?;
            dir.drop_ios = f.u64(ts::DROP_IO_U + 8 * d)?;
            dir.io_bytes = f.u64(ts::IO_BYTES + 8 * d)?;
            dir.runtime_ms = f.u64(ts::RUNTIME + 8 * d)?;
        }
        for i in 0..PERCENTILE_LIST_MAX {
            let p = f.f64(ts::PERCENTILE_LIST + FP64_LEN * i)?;
            if p == 0.0 {
                break;
            }
            t.percentile_list.push(p);
        }
        f.u64s(ts::IO_U_MAP, &mut t.io_u_map)?;
        f.u64s(ts::IO_U_SUBMIT, &mut t.io_u_submit)?;
        f.u64s(ts::IO_U_COMPLETE, &mut t.io_u_complete)?;
        f.u64s(ts::IO_U_LAT_N, &mut t.io_u_lat_n)?;
        f.u64s(ts::IO_U_LAT_U, &mut t.io_u_lat_u)?;
        f.u64s(ts::IO_U_LAT_M, &mut t.io_u_lat_m)?;
        Ok((t, GroupRunStats::get(&f, ts::LEN)?))
    }
}

/// `struct disk_util_stat` (name and counters) and `struct disk_util_agg`: DU's 256 bytes.
pub const DU_LEN: usize = 256;
pub const DU_NAME: usize = 0;
pub const DU_NAME_LEN: usize = 64;
pub const DU_IOS: usize = 64;
pub const DU_MERGES: usize = 80;
pub const DU_SECTORS: usize = 96;
pub const DU_TICKS: usize = 112;
pub const DU_IO_TICKS: usize = 128;
pub const DU_TIME_IN_QUEUE: usize = 136;
pub const DU_MSEC: usize = 144;
/// The aggregate part (for devices made of others, such as md arrays); zero for a plain disk.
pub const DU_AGG: usize = 152;
pub const DU_AGG_SLAVECOUNT: usize = DU_AGG + 80;
pub const DU_AGG_MAX_UTIL: usize = DU_AGG + 88;

/// DU: one disk's counters as `/sys/block/<dev>/stat` gives them ([0] read, [1] write).
/// fio sends one per disk it watched, and none when it watched none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskUtil {
    pub name: String,
    pub ios: [u64; 2],
    pub merges: [u64; 2],
    pub sectors: [u64; 2],
    pub ticks: [u64; 2],
    pub io_ticks: u64,
    pub time_in_queue: u64,
    pub msec: u64,
}

impl DiskUtil {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = alloc::vec![0u8; DU_LEN];
        put_cstr(&mut b, DU_NAME, DU_NAME_LEN, &self.name);
        put_u64s(&mut b, DU_IOS, &self.ios);
        put_u64s(&mut b, DU_MERGES, &self.merges);
        put_u64s(&mut b, DU_SECTORS, &self.sectors);
        put_u64s(&mut b, DU_TICKS, &self.ticks);
        put_u64(&mut b, DU_IO_TICKS, self.io_ticks);
        put_u64(&mut b, DU_TIME_IN_QUEUE, self.time_in_queue);
        put_u64(&mut b, DU_MSEC, self.msec);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, DU_LEN, "DU")?;
        let mut d = Self {
            name: f.cstr(DU_NAME, DU_NAME_LEN)?,
            ..Self::default()
        };
        f.u64s(DU_IOS, &mut d.ios)?;
        f.u64s(DU_MERGES, &mut d.merges)?;
        f.u64s(DU_SECTORS, &mut d.sectors)?;
        f.u64s(DU_TICKS, &mut d.ticks)?;
        d.io_ticks = f.u64(DU_IO_TICKS)?;
        d.time_in_queue = f.u64(DU_TIME_IN_QUEUE)?;
        d.msec = f.u64(DU_MSEC)?;
        Ok(d)
    }
}

/// `struct jobs_eta` (168 bytes) followed by the run-state string and its NUL.
pub const ETA_HEAD_LEN: usize = 168;
pub const ETA_NR_RUNNING: usize = 0;
pub const ETA_NR_RAMP: usize = 4;
pub const ETA_NR_PENDING: usize = 8;
pub const ETA_NR_SETTING_UP: usize = 12;
pub const ETA_M_RATE: usize = 16;
pub const ETA_T_RATE: usize = 40;
pub const ETA_RATE: usize = 64;
pub const ETA_M_IOPS: usize = 88;
pub const ETA_T_IOPS: usize = 100;
pub const ETA_IOPS: usize = 112;
pub const ETA_ELAPSED_SEC: usize = 128;
pub const ETA_ETA_SEC: usize = 136;
pub const ETA_IS_POW2: usize = 144;
pub const ETA_UNIT_BASE: usize = 148;
pub const ETA_SIG_FIGS: usize = 152;
pub const ETA_FILES_OPEN: usize = 156;
pub const ETA_NR_THREADS: usize = 160;
pub const ETA_RUN_STR: usize = 168;
/// The longest run-state string accepted on decode.
pub const ETA_RUN_STR_MAX: usize = 4096;

/// ETA: progress figures, from the box's counters. Rates in KiB/s (fio's `calc_rate`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eta {
    pub nr_running: u32,
    pub nr_ramp: u32,
    pub nr_pending: u32,
    pub nr_setting_up: u32,
    pub m_rate: [u64; DIRECTIONS],
    pub t_rate: [u64; DIRECTIONS],
    pub rate: [u64; DIRECTIONS],
    pub m_iops: [u32; DIRECTIONS],
    pub t_iops: [u32; DIRECTIONS],
    pub iops: [u32; DIRECTIONS],
    pub elapsed_sec: u64,
    pub eta_sec: u64,
    pub is_pow2: u32,
    pub unit_base: u32,
    pub sig_figs: u32,
    pub files_open: u32,
    pub nr_threads: u32,
    /// One state letter per job, as fio's (`R` running, `P` pending, `_` done, ...).
    pub run_str: String,
}

impl Default for Eta {
    fn default() -> Self {
        Self {
            nr_running: 0,
            nr_ramp: 0,
            nr_pending: 0,
            nr_setting_up: 0,
            m_rate: [0; DIRECTIONS],
            t_rate: [0; DIRECTIONS],
            rate: [0; DIRECTIONS],
            m_iops: [0; DIRECTIONS],
            t_iops: [0; DIRECTIONS],
            iops: [0; DIRECTIONS],
            elapsed_sec: 0,
            eta_sec: 0,
            is_pow2: 1,
            unit_base: UNIT_BYTES_PER_SEC,
            sig_figs: 4,
            files_open: 0,
            nr_threads: 0,
            run_str: String::new(),
        }
    }
}

impl Eta {
    /// The payload always ends in the string's NUL: the client copies `run_str` with strcpy.
    pub fn encode(&self) -> Vec<u8> {
        let run = self.run_str.as_bytes();
        let run = &run[..run.iter().position(|&b| b == 0).unwrap_or(run.len())];
        let mut b = alloc::vec![0u8; ETA_HEAD_LEN + run.len() + 1];
        put_u32(&mut b, ETA_NR_RUNNING, self.nr_running);
        put_u32(&mut b, ETA_NR_RAMP, self.nr_ramp);
        put_u32(&mut b, ETA_NR_PENDING, self.nr_pending);
        put_u32(&mut b, ETA_NR_SETTING_UP, self.nr_setting_up);
        put_u64s(&mut b, ETA_M_RATE, &self.m_rate);
        put_u64s(&mut b, ETA_T_RATE, &self.t_rate);
        put_u64s(&mut b, ETA_RATE, &self.rate);
        for d in 0..DIRECTIONS {
            put_u32(&mut b, ETA_M_IOPS + 4 * d, self.m_iops[d]);
            put_u32(&mut b, ETA_T_IOPS + 4 * d, self.t_iops[d]);
            put_u32(&mut b, ETA_IOPS + 4 * d, self.iops[d]);
        }
        put_u64(&mut b, ETA_ELAPSED_SEC, self.elapsed_sec);
        put_u64(&mut b, ETA_ETA_SEC, self.eta_sec);
        put_u32(&mut b, ETA_IS_POW2, self.is_pow2);
        put_u32(&mut b, ETA_UNIT_BASE, self.unit_base);
        put_u32(&mut b, ETA_SIG_FIGS, self.sig_figs);
        put_u32(&mut b, ETA_FILES_OPEN, self.files_open);
        put_u32(&mut b, ETA_NR_THREADS, self.nr_threads);
        b[ETA_RUN_STR..ETA_RUN_STR + run.len()].copy_from_slice(run);
        b
    }

    pub fn decode(payload: &[u8]) -> Result<Self, Error> {
        let f = Fields::new(payload, ETA_HEAD_LEN, "ETA")?;
        let tail = &payload[ETA_RUN_STR..];
        let Some(nul) = tail.iter().position(|&b| b == 0) else {
            return Err(Error::Truncated {
                what: "ETA run_str",
                need: payload.len() + 1,
                have: payload.len(),
            });
        };
        if nul > ETA_RUN_STR_MAX {
            return Err(Error::LengthOutOfRange {
                what: "ETA run_str",
                len: nul,
                limit: ETA_RUN_STR_MAX,
            });
        }
        let mut e = Eta {
            nr_running: f.u32(ETA_NR_RUNNING)?,
            nr_ramp: f.u32(ETA_NR_RAMP)?,
            nr_pending: f.u32(ETA_NR_PENDING)?,
            nr_setting_up: f.u32(ETA_NR_SETTING_UP)?,
            elapsed_sec: f.u64(ETA_ELAPSED_SEC)?,
            eta_sec: f.u64(ETA_ETA_SEC)?,
            is_pow2: f.u32(ETA_IS_POW2)?,
            unit_base: f.u32(ETA_UNIT_BASE)?,
            sig_figs: f.u32(ETA_SIG_FIGS)?,
            files_open: f.u32(ETA_FILES_OPEN)?,
            nr_threads: f.u32(ETA_NR_THREADS)?,
            run_str: crate::wire::text_until_nul(tail),
            ..Eta::default()
        };
        f.u64s(ETA_M_RATE, &mut e.m_rate)?;
        f.u64s(ETA_T_RATE, &mut e.t_rate)?;
        f.u64s(ETA_RATE, &mut e.rate)?;
        for d in 0..DIRECTIONS {
            e.m_iops[d] = f.u32(ETA_M_IOPS + 4 * d)?;
            e.t_iops[d] = f.u32(ETA_T_IOPS + 4 * d)?;
            e.iops[d] = f.u32(ETA_IOPS + 4 * d)?;
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn u64_at(b: &[u8], off: usize) -> u64 {
        u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
    }

    fn u32_at(b: &[u8], off: usize) -> u32 {
        u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
    }

    #[test]
    fn thread_stat_offsets_follow_from_the_field_sizes() {
        // Each offset is the previous one plus the previous field's size.
        assert_eq!(ts::VERROR, JOBNAME_LEN);
        assert_eq!(ts::ERROR, ts::VERROR + VERROR_LEN);
        assert_eq!(ts::DESCRIPTION, ts::PID + 4);
        assert_eq!(ts::MEMBERS, ts::DESCRIPTION + DESCRIPTION_LEN);
        // 540 rounded up to 8 for the aligned sync_stat.
        assert_eq!(ts::SYNC_STAT, (ts::DISABLE_PRIO_STAT + 4).next_multiple_of(8));
        assert_eq!(ts::CLAT_STAT, ts::SYNC_STAT + IO_STAT_LEN);
        assert_eq!(ts::SLAT_STAT, ts::CLAT_STAT + DIRECTIONS * IO_STAT_LEN);
        assert_eq!(ts::IOPS_STAT + DIRECTIONS * IO_STAT_LEN, ts::USR_TIME);
        assert_eq!(ts::PERCENTILE_LIST + PERCENTILE_LIST_MAX * 16, ts::IO_U_MAP);
        assert_eq!(ts::IO_U_LAT_M + IO_U_LAT_M_NR * 8, ts::IO_U_PLAT);
        assert_eq!(ts::IO_U_PLAT + 3 * DIRECTIONS * PLAT_NR * 8, ts::IO_U_SYNC_PLAT);
        assert_eq!(ts::IO_U_SYNC_PLAT + PLAT_NR * 8, ts::TOTAL_IO_U);
        assert_eq!(ts::TOTAL_IO_U + 4 * 8, ts::SHORT_IO_U);
        assert_eq!(ts::BLOCK_INFOS + MAX_NR_BLOCK_INFOS * 4, ts::KB_BASE);
        // Packed: sig_figs (4 bytes) directly followed by the 8-byte ss_dur.
        assert_eq!(ts::SS_DUR, ts::SIG_FIGS + 4);
        assert_eq!(ts::SS_LIMIT + 4 * 16, ts::IOPRIO);
        assert_eq!(ts::CLAT_PRIO_OFFSET + DIRECTIONS * 8, ts::NR_CLAT_PRIO);
        assert_eq!(ts::NR_CLAT_PRIO + DIRECTIONS * 4, ts::CACHEHIT);
        // sync_stat's alignment of 8 is the structure's too: 4 bytes of tail padding.
        assert_eq!((ts::CACHEMISS + 8).next_multiple_of(8), ts::LEN);
        assert_eq!(ts::LEN - (ts::CACHEMISS + 8), 4);
        assert_eq!(TS_LEN, 184_056);
        assert_eq!(PLAT_NR, 1856);
    }

    #[test]
    fn group_stats_golden_layout() {
        let g = GroupRunStats {
            max_run_ms: [1, 2, 3],
            min_run_ms: [4, 5, 6],
            max_bw: [7, 8, 9],
            min_bw: [10, 11, 12],
            io_bytes: [13, 14, 15],
            agg_bw: [16, 17, 18],
            kb_base: 1024,
            unit_base: 4,
            sig_figs: 4,
            groupid: 3,
            unified_rw_rep: 0,
        };
        let b = g.encode();
        assert_eq!(b.len(), GS_LEN);
        // Eighteen u64s in field order, then five u32s.
        for (i, expected) in (1..=18u64).enumerate() {
            assert_eq!(u64_at(&b, 8 * i), expected);
        }
        assert_eq!([144, 148, 152, 156, 160].map(|o| u32_at(&b, o)), [1024, 4, 4, 3, 0]);
        assert_eq!(GroupRunStats::decode(&b).unwrap(), g);
        assert!(matches!(GroupRunStats::decode(&b[..163]), Err(Error::Truncated { .. })));
    }

    fn sample_stat() -> ThreadStat {
        let mut t = ThreadStat {
            name: "job-a".to_string(),
            description: "a job".to_string(),
            thread_number: 2,
            groupid: 0,
            pid: 77,
            percentile_list: vec![1.0, 50.0, 99.9],
            total_submit: 10,
            total_complete: 9,
            total_run_time_ms: 1234,
            first_error: 5,
            continue_on_error: 3,
            ..ThreadStat::default()
        };
        t.dirs[0].io_bytes = 4096 * 10;
        t.dirs[0].total_ios = 10;
        t.dirs[0].runtime_ms = 100;
        t.dirs[0].clat = IoStat {
            min: 3,
            max: 9,
            samples: 10,
            mean: 5.5,
            s: 2.25,
        };
        t.dirs[1].bw = IoStat {
            min: 1,
            max: 2,
            samples: 3,
            mean: 1.5,
            s: 0.5,
        };
        let mut hist = vec![0u64; PLAT_NR];
        hist[plat_index(1000)] = 10;
        t.dirs[2].plat[LAT] = hist;
        t.io_u_map = [1, 2, 3, 4, 5, 6, 7];
        t.io_u_lat_m[11] = 42;
        t
    }

    #[test]
    fn thread_stat_golden_fields() {
        let t = sample_stat();
        let g = GroupRunStats {
            groupid: 0,
            ..GroupRunStats::default()
        };
        let b = t.encode_ts(&g).unwrap();
        assert_eq!(b.len(), TS_LEN);
        assert_eq!(&b[0..6], b"job-a\0");
        assert_eq!(u32_at(&b, ts::THREAD_NUMBER), 2);
        assert_eq!(u32_at(&b, ts::PID), 77);
        assert_eq!(&b[ts::DESCRIPTION..ts::DESCRIPTION + 6], b"a job\0");
        assert_eq!(u32_at(&b, ts::MEMBERS), 1);
        // Read's clat io_stat: max, min, samples, then the doubles' IEEE 754 bits.
        assert_eq!(u64_at(&b, ts::CLAT_STAT), 9);
        assert_eq!(u64_at(&b, ts::CLAT_STAT + 8), 3);
        assert_eq!(u64_at(&b, ts::CLAT_STAT + 16), 10);
        assert_eq!(u64_at(&b, ts::CLAT_STAT + 24), 5.5f64.to_bits());
        assert_eq!(u64_at(&b, ts::CLAT_STAT + 40), 2.25f64.to_bits());
        // Write's bw io_stat is the second of three.
        assert_eq!(u64_at(&b, ts::BW_STAT + IO_STAT_LEN), 2);
        assert_eq!(u64_at(&b, ts::PERCENTILE_LIST + 16), 50.0f64.to_bits());
        assert_eq!(u64_at(&b, ts::PERCENTILE_LIST + 48), 0);
        assert_eq!(u64_at(&b, ts::IO_U_MAP + 48), 7);
        assert_eq!(u64_at(&b, ts::IO_U_LAT_M + 88), 42);
        // lat histogram of trim: kind 2, direction 2.
        let idx = plat_index(1000);
        assert_eq!(u64_at(&b, ts::IO_U_PLAT + 8 * (PLAT_NR * (2 * 3 + 2) + idx)), 10);
        assert_eq!(u64_at(&b, ts::TOTAL_IO_U), 10);
        assert_eq!(u64_at(&b, ts::IO_BYTES), 40960);
        assert_eq!(u64_at(&b, ts::RUNTIME), 100);
        assert_eq!(u64_at(&b, ts::TOTAL_RUN_TIME), 1234);
        assert_eq!(
            u16::from_le_bytes([b[ts::CONTINUE_ON_ERROR], b[ts::CONTINUE_ON_ERROR + 1]]),
            3
        );
        assert_eq!(u32_at(&b, ts::FIRST_ERROR), 5);
        assert_eq!(u32_at(&b, ts::KB_BASE), 1024);
        assert_eq!(u32_at(&b, ts::SIG_FIGS), 4);
        assert_eq!(u32_at(&b, ts::CLAT_PERCENTILES), 1);
        // No tails: no per-priority stats, no steady-state data, no block infos.
        assert_eq!(u64_at(&b, ts::NR_BLOCK_INFOS), 0);
        assert_eq!(u32_at(&b, ts::SS_STATE), 0);
        assert_eq!([0, 1, 2].map(|d| u32_at(&b, ts::NR_CLAT_PRIO + 4 * d)), [0, 0, 0]);
        // The group follows the structure.
        assert_eq!(u32_at(&b, ts::LEN + GS_KB_BASE), 1024);
    }

    #[test]
    fn thread_stat_round_trip() {
        let t = sample_stat();
        let g = GroupRunStats {
            groupid: 0,
            io_bytes: [1, 2, 3],
            ..GroupRunStats::default()
        };
        let b = t.encode_ts(&g).unwrap();
        let (t2, g2) = ThreadStat::decode_ts(&b).unwrap();
        assert_eq!(t2, t);
        assert_eq!(g2, g);
    }

    #[test]
    fn thread_stat_refuses_what_does_not_fit() {
        let mut t = sample_stat();
        t.percentile_list = vec![1.0; PERCENTILE_LIST_MAX + 1];
        assert!(matches!(
            t.encode_ts(&GroupRunStats::default()),
            Err(Error::ValueOutOfRange { .. })
        ));
        let mut t = sample_stat();
        t.dirs[0].plat[CLAT] = vec![1; 10];
        assert!(matches!(
            t.encode_ts(&GroupRunStats::default()),
            Err(Error::ValueOutOfRange { .. })
        ));
    }

    #[test]
    fn thread_stat_decode_checks_wire_counts() {
        let mut b = sample_stat().encode_ts(&GroupRunStats::default()).unwrap();
        assert!(matches!(
            ThreadStat::decode_ts(&b[..TS_LEN - 1]),
            Err(Error::Truncated { .. })
        ));
        put_u64(&mut b, ts::NR_BLOCK_INFOS, 8193);
        assert!(matches!(
            ThreadStat::decode_ts(&b),
            Err(Error::LengthOutOfRange {
                what: "TS nr_block_infos",
                ..
            })
        ));
        put_u64(&mut b, ts::NR_BLOCK_INFOS, 0);
        put_u32(&mut b, ts::NR_CLAT_PRIO, 1);
        put_u64(&mut b, ts::CLAT_PRIO_OFFSET, u64::MAX);
        assert!(matches!(
            ThreadStat::decode_ts(&b),
            Err(Error::LengthOutOfRange {
                what: "TS clat_prio_offset",
                ..
            })
        ));
    }

    #[test]
    fn disk_util_golden_layout() {
        let d = DiskUtil {
            name: "sda".to_string(),
            ios: [1, 2],
            merges: [3, 4],
            sectors: [5, 6],
            ticks: [7, 8],
            io_ticks: 9,
            time_in_queue: 10,
            msec: 11,
        };
        let b = d.encode();
        assert_eq!(b.len(), DU_LEN);
        assert_eq!(&b[0..4], b"sda\0");
        for (i, expected) in (1..=11u64).enumerate() {
            assert_eq!(u64_at(&b, DU_IOS + 8 * i), expected);
        }
        assert_eq!(DU_AGG, DU_MSEC + 8);
        assert!(b[DU_AGG..].iter().all(|&x| x == 0));
        assert_eq!(DiskUtil::decode(&b).unwrap(), d);
    }

    #[test]
    fn eta_golden_layout_with_its_string() {
        let e = Eta {
            nr_running: 1,
            nr_pending: 2,
            m_rate: [3, 4, 5],
            rate: [6, 7, 8],
            t_iops: [9, 10, 11],
            iops: [12, 13, 14],
            elapsed_sec: 15,
            eta_sec: 16,
            nr_threads: 2,
            run_str: "RP".to_string(),
            ..Eta::default()
        };
        let b = e.encode();
        assert_eq!(b.len(), ETA_HEAD_LEN + 3);
        assert_eq!(u32_at(&b, 0), 1);
        assert_eq!(u32_at(&b, 8), 2);
        assert_eq!(u64_at(&b, 16), 3);
        assert_eq!(u64_at(&b, 64), 6);
        assert_eq!(u32_at(&b, 100), 9);
        assert_eq!(u32_at(&b, 112), 12);
        assert_eq!(u32_at(&b, 124), 0); // padding before elapsed_sec
        assert_eq!(u64_at(&b, 128), 15);
        assert_eq!(u64_at(&b, 136), 16);
        assert_eq!(u32_at(&b, 144), 1); // is_pow2
        assert_eq!(u32_at(&b, 160), 2);
        assert_eq!(&b[168..], b"RP\0");
        assert_eq!(Eta::decode(&b).unwrap(), e);
        // An empty string still ends in its NUL.
        assert_eq!(Eta::default().encode().len(), ETA_HEAD_LEN + 1);
        assert!(matches!(
            Eta::decode(&b[..170]),
            Err(Error::Truncated {
                what: "ETA run_str",
                ..
            })
        ));
    }

    #[test]
    fn histogram_buckets_match_fios_scheme() {
        // Exact below 128 ns.
        for ns in 0..128 {
            assert_eq!(plat_index(ns), ns as usize);
            assert_eq!(plat_value(ns as usize), ns);
        }
        // 128..255 in steps of 2, reported at the middle of the bucket.
        assert_eq!(plat_index(128), 128);
        assert_eq!(plat_index(129), 128);
        assert_eq!(plat_index(130), 129);
        assert_eq!(plat_value(128), 129);
        // Every value lands in a bucket whose range holds it: within 1/128 of its value.
        for ns in [300u64, 1000, 4096, 99_999, 1 << 30, 1 << 33] {
            let v = plat_value(plat_index(ns));
            assert!(v.abs_diff(ns) * 128 <= ns, "{ns} -> {v}");
        }
        // Past the last group, everything goes to the last bucket.
        assert_eq!(plat_index(u64::MAX), PLAT_NR - 1);
    }
}
