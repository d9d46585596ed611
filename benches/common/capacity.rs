//! Shared by the load drivers `benches/sweep.rs` and `benches/expiry.rs`
//! (included with `#[path]`): the `--sizes` argument, the measured points
//! (one CSV per bench under `docs/plots/`) and the plot of read capacity
//! against table size (`docs/plots/read-capacity.svg`), drawn from every
//! bench's CSV present, by a small hand-written SVG writer.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One measured point: a series, the table's size in items and the read
/// capacity one run of the job consumed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    pub series: String,
    pub items: u64,
    pub rcu: f64,
}

/// `--sizes 1000,5000` or `--sizes=1000,5000` among the bench's arguments
/// (the test kit's).
pub(crate) use worker_testkit::bench::sizes_arg;

/// `docs/plots/` of the crate.
pub(crate) fn plots_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/plots")
}

/// Write `docs/plots/read-capacity-<bench>.csv` (replacing that bench's
/// points) and redraw `docs/plots/read-capacity.svg` from all CSVs there.
pub(crate) fn record(bench: &str, points: &[Point], machine_note: &str) {
    let dir = plots_dir();
    std::fs::create_dir_all(&dir).expect("create docs/plots");
    let csv = dir.join(format!("read-capacity-{bench}.csv"));
    let mut text = String::from("series,items,rcu\n");
    for p in points {
        writeln!(text, "{},{},{}", p.series, p.items, p.rcu).expect("write to string");
    }
    std::fs::write(&csv, text).expect("write the points CSV");
    let mut all = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read docs/plots")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("read-capacity-") && n.ends_with(".csv"))
        })
        .collect();
    entries.sort();
    for path in entries {
        let text = std::fs::read_to_string(&path).expect("read a points CSV");
        all.extend(parse_csv(&text));
    }
    let svg = dir.join("read-capacity.svg");
    std::fs::write(&svg, render_svg(&all, machine_note)).expect("write the SVG");
    eprintln!("wrote {} and {}", csv.display(), svg.display());
}

pub(crate) fn parse_csv(text: &str) -> Vec<Point> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.rsplitn(3, ',');
            let rcu = f.next().and_then(|v| v.parse().ok()).expect("rcu column");
            let items = f.next().and_then(|v| v.parse().ok()).expect("items column");
            let series = f.next().expect("series column").to_owned();
            Point { series, items, rcu }
        })
        .collect()
}

const W: f64 = 760.0;
const H: f64 = 480.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 220.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 70.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Decades covering `[lo, hi]` (both > 0): (first exponent, last exponent).
fn decades(lo: f64, hi: f64) -> (i32, i32) {
    let a = lo.log10().floor() as i32;
    let mut b = hi.log10().ceil() as i32;
    if b <= a {
        b = a + 1;
    }
    (a, b)
}

fn label(exp: i32) -> String {
    let v = 10f64.powi(exp);
    if exp >= 0 {
        let n = v as u64;
        let s = n.to_string();
        let mut out = String::new();
        for (i, ch) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(ch);
        }
        out
    } else {
        format!("{v}")
    }
}

/// A log-log line plot of read capacity against table size, one series per
/// distinct `series`, in order of first appearance.
pub(crate) fn render_svg(points: &[Point], note: &str) -> String {
    let mut series: Vec<&str> = Vec::new();
    for p in points {
        if !series.contains(&p.series.as_str()) {
            series.push(&p.series);
        }
    }
    let pos: Vec<&Point> = points
        .iter()
        .filter(|p| p.items > 0 && p.rcu > 0.0)
        .collect();
    let (xa, xb) = if pos.is_empty() {
        (3, 5)
    } else {
        decades(
            pos.iter().map(|p| p.items as f64).fold(f64::MAX, f64::min),
            pos.iter().map(|p| p.items as f64).fold(0.0, f64::max),
        )
    };
    let (ya, yb) = if pos.is_empty() {
        (0, 4)
    } else {
        decades(
            pos.iter().map(|p| p.rcu).fold(f64::MAX, f64::min),
            pos.iter().map(|p| p.rcu).fold(0.0, f64::max),
        )
    };
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let x = |v: f64| LEFT + (v.log10() - xa as f64) / (xb - xa) as f64 * pw;
    let y = |v: f64| TOP + ph - (v.log10() - ya as f64) / (yb - ya) as f64 * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">Read capacity per run against table size (DynamoDB Local)</text>"#,
        LEFT + pw / 2.0
    );
    // Grid and tick labels: decades, with 2 and 5 as minor lines.
    for e in xa..=xb {
        for (m, major) in [(1.0, true), (2.0, false), (5.0, false)] {
            let v = m * 10f64.powi(e);
            if e == xb && m > 1.0 {
                continue;
            }
            let px = x(v);
            let _ = writeln!(
                s,
                r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="{}" />"##,
                TOP + ph,
                if major { "#bbb" } else { "#eee" }
            );
            if major {
                let _ = writeln!(
                    s,
                    r#"<text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                    TOP + ph + 18.0,
                    label(e)
                );
            }
        }
    }
    for e in ya..=yb {
        for (m, major) in [(1.0, true), (2.0, false), (5.0, false)] {
            let v = m * 10f64.powi(e);
            if e == yb && m > 1.0 {
                continue;
            }
            let py = y(v);
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="{}" />"##,
                LEFT + pw,
                if major { "#bbb" } else { "#eee" }
            );
            if major {
                let _ = writeln!(
                    s,
                    r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
                    LEFT - 6.0,
                    py + 4.0,
                    label(e)
                );
            }
        }
    }
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">table size (items, log scale)</text>"#,
        LEFT + pw / 2.0,
        H - 30.0
    );
    let _ = writeln!(
        s,
        r#"<text transform="translate(22,{:.1}) rotate(-90)" text-anchor="middle">read capacity units per run (log scale)</text>"#,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{:.1}" font-size="10" fill="#555">{}</text>"##,
        H - 10.0,
        esc(note)
    );
    for (i, name) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut pts: Vec<&&Point> = pos.iter().filter(|p| p.series == *name).collect();
        pts.sort_by_key(|p| p.items);
        let path: Vec<String> = pts
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.items as f64), y(p.rcu)))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for p in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"><title>{}: {} items, {} RCU</title></circle>"#,
                x(p.items as f64),
                y(p.rcu),
                esc(name),
                p.items,
                p.rcu
            );
        }
        let ly = TOP + 10.0 + i as f64 * 22.0;
        let lx = LEFT + pw + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><circle cx="{}" cy="{ly}" r="3.5" fill="{color}"/>"#,
            lx + 24.0,
            lx + 12.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 30.0,
            ly + 4.0,
            esc(name)
        );
    }
    s.push_str("</svg>\n");
    s
}
