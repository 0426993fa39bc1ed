//! SVG plots of a run: each plot varies one parameter along a categorical x axis and pins the rest
//! to the matrix's base point; every other parameter combination becomes one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::matrix::{Base, Completion, DeviceKind, Quiesce, size_word};
use super::results::Record;

/// One line of a chart: its legend name and one value per category index it has data for.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// `(category index, value)`, in category order.
    pub points: Vec<(usize, f64)>,
}

/// A line chart over categories.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// File name under the output folder.
    pub file: &'static str,
    /// Caption.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Y axis description.
    pub y_label: String,
    /// X axis categories, left to right.
    pub categories: Vec<String>,
    /// The lines.
    pub series: Vec<Series>,
    /// Logarithmic y axis (latencies span decades).
    pub log_y: bool,
}

/// Groups `records` into series keyed by `key`, with categories from `category`, one value each.
fn chart_from<K: Ord, C: Ord>(
    records: &[&Record],
    key: impl Fn(&Record) -> K,
    series_name: impl Fn(&K) -> String,
    category: impl Fn(&Record) -> C,
    category_name: impl Fn(&C) -> String,
    value: impl Fn(&Record) -> f64,
) -> (Vec<String>, Vec<Series>) {
    let mut categories: Vec<C> = records.iter().map(|r| category(r)).collect();
    categories.sort();
    categories.dedup();
    let mut grouped: BTreeMap<K, BTreeMap<usize, f64>> = BTreeMap::new();
    for r in records {
        let at = categories
            .binary_search(&category(r))
            .expect("every record's category is listed");
        // The first measurement of a point wins; a run has one per point anyway.
        grouped.entry(key(r)).or_default().entry(at).or_insert_with(|| value(r));
    }
    let series = grouped
        .into_iter()
        .map(|(k, values)| Series {
            name: series_name(&k),
            points: values.into_iter().collect(),
        })
        .collect();
    (categories.iter().map(category_name).collect(), series)
}

fn cpus_label(cpus: u32) -> String {
    if cpus == 1 {
        "1 CPU".into()
    } else {
        format!("{cpus} CPUs")
    }
}

/// The charts of a run. Only clean records are plotted.
pub fn charts(records: &[Record], base: &Base) -> Vec<Chart> {
    let ok: Vec<&Record> = records.iter().filter(|r| r.ok()).collect();
    let pinned = |r: &&Record, cpus: bool, iodepth: bool, completion: bool| {
        let p = &r.point;
        p.rw == base.rw
            && p.bs == base.bs
            && p.quiesce == base.quiesce
            && (!completion || p.completion == base.completion)
            && (!cpus || p.cpus == base.cpus)
            && (!iodepth || p.iodepth == base.iodepth)
    };
    let fixed = format!("{} bs={}", base.rw.as_str(), size_word(u64::from(base.bs)));
    let iops = |r: &Record| r.report.iops as f64;
    let mut out = Vec::new();

    let subset: Vec<&Record> = ok.iter().copied().filter(|r| pinned(r, false, false, true)).collect();
    let (categories, series) = chart_from(
        &subset,
        |r| (r.point.device, r.point.cpus),
        |(d, c): &(DeviceKind, u32)| format!("{}, {}", d.label(), cpus_label(*c)),
        |r| r.point.iodepth,
        |qd| qd.to_string(),
        iops,
    );
    out.push(Chart {
        file: "iops_vs_iodepth.svg",
        title: format!(
            "IOPS vs queue depth ({fixed}, completion={}, quiesce={})",
            base.completion.as_str(),
            base.quiesce.as_str()
        ),
        x_label: "iodepth per CPU (asked)".into(),
        y_label: "IOPS".into(),
        categories,
        series,
        log_y: false,
    });

    let subset: Vec<&Record> = ok.iter().copied().filter(|r| pinned(r, true, false, true)).collect();
    let mut by_line: BTreeMap<(DeviceKind, u32), &Record> = BTreeMap::new();
    for r in &subset {
        by_line.entry((r.point.device, r.point.iodepth)).or_insert(r);
    }
    let labels = ["p50", "p90", "p99", "p99.9", "p99.99"];
    out.push(Chart {
        file: "latency_percentiles.svg",
        title: format!(
            "Latency percentiles ({fixed}, {}, completion={}, quiesce={})",
            cpus_label(base.cpus),
            base.completion.as_str(),
            base.quiesce.as_str()
        ),
        x_label: "percentile".into(),
        y_label: "latency (us, log scale)".into(),
        categories: labels.iter().map(|l| l.to_string()).collect(),
        series: by_line
            .into_iter()
            .map(|((device, qd), r)| {
                let l = &r.report.lat_ns;
                let values = [l.p50, l.p90, l.p99, l.p99_9, l.p99_99];
                Series {
                    name: format!("{}, qd {qd}", device.label()),
                    points: values.iter().map(|&ns| ns as f64 / 1000.0).enumerate().collect(),
                }
            })
            .collect(),
        log_y: true,
    });

    let subset: Vec<&Record> = ok.iter().copied().filter(|r| pinned(r, false, false, true)).collect();
    let (categories, series) = chart_from(
        &subset,
        |r| (r.point.device, r.point.iodepth),
        |(d, qd): &(DeviceKind, u32)| format!("{}, qd {qd}", d.label()),
        |r| r.point.cpus,
        |c| c.to_string(),
        iops,
    );
    out.push(Chart {
        file: "cpu_scaling.svg",
        title: format!(
            "IOPS vs submitting CPUs ({fixed}, completion={}, quiesce={})",
            base.completion.as_str(),
            base.quiesce.as_str()
        ),
        x_label: "submitting CPUs".into(),
        y_label: "IOPS".into(),
        categories,
        series,
        log_y: false,
    });

    // Both quiesce policies appear here, so this filter does not pin quiesce.
    let subset: Vec<&Record> = ok
        .iter()
        .copied()
        .filter(|r| {
            let p = &r.point;
            p.rw == base.rw && p.bs == base.bs && p.cpus == base.cpus && p.iodepth == base.iodepth
        })
        .collect();
    let (categories, series) = chart_from(
        &subset,
        |r| (r.point.device, r.point.quiesce),
        |(d, q): &(DeviceKind, Quiesce)| format!("{}, quiesce={}", d.label(), q.as_str()),
        |r| r.point.completion,
        |c: &Completion| c.as_str().to_string(),
        iops,
    );
    out.push(Chart {
        file: "completion_policy.svg",
        title: format!(
            "IOPS by completion policy, lock-free vs locked quiesce ({fixed}, qd {}, {})",
            base.iodepth,
            cpus_label(base.cpus)
        ),
        x_label: "completion policy".into(),
        y_label: "IOPS".into(),
        categories,
        series,
        log_y: false,
    });
    out
}

/// Ticks at 1, 2 and 5 times each power of ten between `low` and `high`; in a narrow range, at
/// every integer multiple; failing that, the two ends.
fn log_ticks(low: f64, high: f64) -> Vec<f64> {
    let with_steps = |steps: &[f64]| {
        let mut ticks = Vec::new();
        let mut decade = 10f64.powi(low.log10().floor() as i32);
        while decade <= high {
            ticks.extend(steps.iter().map(|s| decade * s).filter(|t| (low..=high).contains(t)));
            decade *= 10.0;
        }
        ticks
    };
    let coarse = with_steps(&[1.0, 2.0, 5.0]);
    if coarse.len() >= 3 {
        return coarse;
    }
    // A narrow range: every integer multiple of the power of ten.
    let fine = with_steps(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    if fine.len() >= 2 { fine } else { vec![low, high] }
}

/// Axis numbers: `250k`, `1.5M`, `12.5`, `0.25`.
fn axis_number(v: &f64) -> String {
    let v = *v;
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if v.abs() >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if v.abs() >= 1e4 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        trim(format!("{v:.2}"))
    }
}

fn plot_err(e: impl std::fmt::Debug) -> String {
    format!("drawing a plot: {e:?}")
}

/// Above this max/min ratio of the values, the y axis becomes logarithmic.
const AUTO_LOG_RATIO: f64 = 30.0;

/// Distinct, dark enough colours for lines on white.
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (23, 190, 207),
    (127, 127, 127),
    (188, 189, 34),
];

fn series_color(index: usize) -> RGBColor {
    let (r, g, b) = COLORS[index % COLORS.len()];
    RGBColor(r, g, b)
}

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 600;
const LEGEND_WIDTH: u32 = 240;

/// Draws `chart` into `path` as SVG.
pub fn draw(chart: &Chart, path: &Path) -> Result<(), String> {
    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(plot_err)?;
    let values: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .collect();
    if values.is_empty() || chart.categories.is_empty() {
        root.draw(&Text::new(
            format!("{}: no clean measurement in this run", chart.title),
            (20, 280),
            ("sans-serif", 18),
        ))
        .map_err(plot_err)?;
        return root.present().map_err(plot_err);
    }
    let titled = root.titled(&chart.title, ("sans-serif", 18)).map_err(plot_err)?;
    // The legend gets its own column on the right, so it never hides a line.
    let (area, legend) = titled.split_horizontally(WIDTH - LEGEND_WIDTH);
    // Category i sits at x = 2i + 1 on an axis from 0 to 2n: each has a slot of width 2 centred
    // on it. (Integers, because plotters cannot put chosen ticks on a float axis.)
    let n = chart.categories.len() as i32;
    let x_range = (0..2 * n).with_key_points((0..n).map(|i| 2 * i + 1).collect());
    let label = |v: &i32| {
        usize::try_from((v - 1) / 2)
            .ok()
            .filter(|_| v % 2 == 1)
            .and_then(|i| chart.categories.get(i).cloned())
            .unwrap_or_default()
    };
    let max = values.iter().copied().fold(f64::MIN, f64::max);
    let min_positive = values.iter().copied().filter(|v| *v > 0.0).fold(f64::MAX, f64::min);
    // Lines two orders of magnitude apart (md0 next to null0) would sit flat on a linear axis.
    let log_y = chart.log_y || (min_positive < f64::MAX && max / min_positive > AUTO_LOG_RATIO);
    let y_label = if log_y && !chart.log_y {
        format!("{} (log scale)", chart.y_label)
    } else {
        chart.y_label.clone()
    };
    let mut builder = ChartBuilder::on(&area);
    builder.margin(16).x_label_area_size(48).y_label_area_size(84);

    // The two axis kinds have different types, so the drawing code is shared by a macro.
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc(chart.x_label.as_str())
                .y_desc(y_label.as_str())
                .x_labels(chart.categories.len())
                .x_label_formatter(&label)
                .y_labels(10)
                .y_label_formatter(&axis_number)
                .draw()
                .map_err(plot_err)?;
            for (i, series) in chart.series.iter().enumerate() {
                let color = series_color(i);
                let points: Vec<(i32, f64)> = series.points.iter().map(|&(at, v)| (2 * at as i32 + 1, v)).collect();
                ctx.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
                    .map_err(plot_err)?;
                ctx.draw_series(points.into_iter().map(|p| Circle::new(p, 3, color.filled())))
                    .map_err(plot_err)?;
            }
        }};
    }
    if log_y {
        let min = values.iter().copied().fold(f64::MAX, f64::min).max(1e-3);
        let (low, high) = (min / 1.5, max * 1.5);
        let y_range = (low..high).log_scale().with_key_points(log_ticks(low, high));
        let ctx = builder.build_cartesian_2d(x_range, y_range).map_err(plot_err)?;
        body!(ctx);
    } else {
        let ctx = builder.build_cartesian_2d(x_range, 0.0..max * 1.15).map_err(plot_err)?;
        body!(ctx);
    }
    for (i, series) in chart.series.iter().enumerate() {
        let color = series_color(i);
        let y = 40 + 22 * i as i32;
        legend
            .draw(&PathElement::new(vec![(4, y), (28, y)], color.stroke_width(3)))
            .map_err(plot_err)?;
        legend
            .draw(&Text::new(
                series.name.clone(),
                (34, y - 7),
                ("sans-serif", 13).into_font().color(&BLACK),
            ))
            .map_err(plot_err)?;
    }
    root.present().map_err(plot_err)
}

/// Draws every chart of `records` into `dir`. Returns the files written.
pub fn write_all(records: &[Record], base: &Base, dir: &Path) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    charts(records, base)
        .iter()
        .map(|chart| {
            let path = dir.join(chart.file);
            draw(chart, &path)?;
            Ok(path)
        })
        .collect()
}
