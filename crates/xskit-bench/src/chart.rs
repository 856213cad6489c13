//! The testbed table as an SVG bar chart (`--plot`, `bench plot RESULTS.json`): the median
//! of each cell with the spread of its runs, a legend, the generator's rate per mode, and a
//! caption saying where, when and how it was measured.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::table::{Cell, Table};

/// Where the bars start, their longest and their height, in pixels.
const LEFT: f64 = 260.0;
const WIDTH: f64 = 420.0;
const BAR: f64 = 22.0;

/// The name of the generator's cells.
pub const GENERATOR: &str = "generator (live frames)";

/// Receive cells within this share of the generator's rate took nearly all they were offered:
/// a floor of what the receiver can take, not its ceiling.
const BOUND_SHARE: f64 = 0.9;

/// Where and when a table was measured, and the command that measured it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Machine {
    /// "Linux" and the kernel release.
    pub kernel: String,
    /// The CPU's model name.
    pub cpu: String,
    /// CPUs available to the process.
    pub cpus: usize,
    /// UTC, RFC 3339.
    pub date: String,
    /// The command line that measured it.
    pub invocation: String,
}

impl Machine {
    /// This machine, now, and this process's command line.
    pub fn here() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_default();
        let mut args = std::env::args();
        let _exe = args.next();
        Machine {
            kernel: format!("Linux {}", read("/proc/sys/kernel/osrelease").trim()),
            cpu,
            cpus: std::thread::available_parallelism().map_or(0, usize::from),
            date: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            invocation: std::iter::once("xskit".to_string())
                .chain(args)
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// The receive cells whose rate the generator bounded (within 10% of what it sent into
/// that mode), as sentences.
pub fn generator_bound(table: &Table) -> Vec<String> {
    let generator = |mode: &str| {
        table
            .cells
            .iter()
            .find(|c| c.bench == GENERATOR && c.mode == mode)
            .map(Cell::median)
    };
    // The generator's rate is measured in the rxdrop runs: only they can be held to it.
    table
        .cells
        .iter()
        .filter(|c| c.bench == "rxdrop")
        .filter_map(|c| {
            let g = generator(&c.mode)?;
            (g > 0.0 && c.median() >= BOUND_SHARE * g).then(|| {
                format!(
                    "{} {}: {:.3} Mpps is {:.0}% of the generator's {:.3}: it took nearly all it \
                     was offered, so this is what it can take at least, not its ceiling (on veth \
                     the receive side's XDP work runs on the generator's CPU)",
                    c.bench,
                    c.mode,
                    c.median(),
                    100.0 * c.median() / g,
                    g
                )
            })
        })
        .collect()
}

fn colour(mode: &str) -> &'static str {
    match mode {
        "skb" => "#4e79a7",
        "drv" => "#f28e2b",
        _ => "#8c8c8c",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// `text` in lines of at most about `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(format!("  {word}"));
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines
}

/// One cell's bar at height `y`: its label, the median, the spread of its runs, the value.
fn draw_bar(s: &mut String, c: &Cell, y: f64, max: f64, bound: &[String]) {
    let (left, width, bar) = (LEFT, WIDTH, BAR);
    let top = |c: &Cell| c.mpps.iter().copied().fold(0.0f64, f64::max);
    let w = c.median() / max * width;
    let label = format!("{} {} {} B", c.bench, c.mode, c.size);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
        left - 8.0,
        y + bar * 0.7,
        escape(&label)
    );
    let _ = writeln!(
        s,
        r#"<rect x="{left}" y="{y}" width="{w:.1}" height="{bar}" fill="{}"/>"#,
        colour(&c.mode)
    );
    let low = c.mpps.iter().copied().fold(f64::INFINITY, f64::min);
    if c.mpps.len() > 1 && low.is_finite() {
        let (x0, x1, mid) = (
            left + low / max * width,
            left + top(c) / max * width,
            y + bar / 2.0,
        );
        let _ = writeln!(
            s,
            r##"<path d="M{x0:.1} {mid} H{x1:.1} M{x0:.1} {:.1} V{:.1} M{x1:.1} {:.1} V{:.1}" stroke="#222" stroke-width="1.5"/>"##,
            mid - 5.0,
            mid + 5.0,
            mid - 5.0,
            mid + 5.0
        );
    }
    let marker = if bound
        .iter()
        .any(|b| b.starts_with(&format!("{} {}:", c.bench, c.mode)))
    {
        " (took all it was offered: see the note)"
    } else {
        ""
    };
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{}">{:.3}{marker}</text>"#,
        left + top(c).max(c.median()) / max * width + 6.0,
        y + bar * 0.7,
        c.median()
    );
}

/// Where, when and how the table was measured: the caption's first two lines.
fn machine_caption(m: &Machine) -> Vec<String> {
    vec![
        format!(
            "{} · {} · {} CPU(s) {} · {}",
            if m.date.is_empty() {
                "date unknown"
            } else {
                &m.date
            },
            if m.kernel.is_empty() {
                "kernel unknown"
            } else {
                &m.kernel
            },
            m.cpus,
            m.cpu,
            "veth testbed, generator and benchmark pinned to different CPUs"
        ),
        format!(
            "measured by: {}",
            if m.invocation.is_empty() {
                "?"
            } else {
                &m.invocation
            }
        ),
    ]
}

/// A horizontal bar per cell: the median, a line from the slowest run to the fastest.
pub fn svg(table: &Table) -> String {
    let rows = &table.cells;
    let top = |c: &Cell| c.mpps.iter().copied().fold(0.0f64, f64::max);
    let max = rows.iter().map(top).fold(0.0f64, f64::max).max(1e-9);
    let (left, width, bar, gap) = (LEFT, WIDTH, BAR, 8.0);
    let bound = generator_bound(table);
    let rows_end = 60.0 + rows.len() as f64 * (bar + gap);
    let caption_lines = 2 + bound
        .iter()
        .map(|b| wrap(&format!("note: {b}"), 120).len())
        .sum::<usize>();
    let height = rows_end + 14.0 + caption_lines as f64 * 16.0;
    let total_width = left + width + 320.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{total_width}" height="{height}" font-family="sans-serif" font-size="13">"#
    );
    let _ = writeln!(
        s,
        r#"<text x="10" y="22" font-size="15">xskit bench on veth: Mpps, median of {} run(s) of {:.1} s; lines: slowest to fastest run</text>"#,
        table.runs, table.seconds_per_cell
    );
    for (i, (mode, name)) in [("skb", "SKB mode"), ("drv", "DRV mode"), ("-", "other")]
        .iter()
        .enumerate()
    {
        let x = left + i as f64 * 110.0;
        let _ = writeln!(
            s,
            r#"<rect x="{x}" y="32" width="12" height="12" fill="{}"/><text x="{}" y="43">{name}</text>"#,
            colour(mode),
            x + 16.0
        );
    }
    for (i, c) in rows.iter().enumerate() {
        let y = 56.0 + i as f64 * (bar + gap);
        draw_bar(&mut s, c, y, max, &bound);
    }
    let mut caption = machine_caption(&table.machine);
    for note in &bound {
        caption.extend(wrap(&format!("note: {note}"), 120));
    }
    for (i, line) in caption.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="10" y="{:.1}" font-size="11" fill="#444">{}</text>"##,
            rows_end + 14.0 + i as f64 * 16.0,
            escape(line)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Writes the chart of `table` to `path`.
pub fn write(table: &Table, path: &Path) -> Result<()> {
    std::fs::write(path, svg(table)).with_context(|| format!("writing {}", path.display()))
}

/// `xskit bench plot RESULTS.json [--plot OUT.svg]`: the chart of a saved table, measured
/// again by nothing. Returns where it went.
pub fn replot(results: &Path, out: Option<&Path>) -> Result<std::path::PathBuf> {
    let text = std::fs::read_to_string(results)
        .with_context(|| format!("reading {}", results.display()))?;
    let table: Table = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not the JSON of `xskit bench --json` (the testbed table)",
            results.display()
        )
    })?;
    let out = out.map_or_else(|| results.with_extension("svg"), Path::to_path_buf);
    if out == results {
        anyhow::bail!(
            "the chart would overwrite {}: give --plot OUT.svg",
            results.display()
        );
    }
    write(&table, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(bench: &str, mode: &str, mpps: &[f64]) -> Cell {
        Cell {
            bench: bench.into(),
            mode: mode.into(),
            size: 64,
            mpps: mpps.to_vec(),
            cpu_ns_per_packet: vec![],
        }
    }

    fn table() -> Table {
        Table {
            seconds_per_cell: 3.0,
            runs: 3,
            cells: vec![
                cell("rxdrop", "skb", &[1.0, 1.2, 1.1]),
                cell("rxdrop", "drv", &[2.9, 3.0, 2.95]),
                cell(GENERATOR, "skb", &[4.0, 4.0, 4.0]),
                cell(GENERATOR, "drv", &[3.1, 3.1, 3.1]),
            ],
            ratios: vec![],
            machine: Machine {
                kernel: "Linux 6.18".into(),
                cpu: "Test <CPU>".into(),
                cpus: 2,
                date: "2026-11-23T14:00:00Z".into(),
                invocation: "xskit bench --runs 3 --plot x.svg".into(),
            },
            ddos_method: None,
        }
    }

    #[test]
    fn a_receive_rate_near_the_generators_is_called_generator_bound() {
        let notes = generator_bound(&table());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].starts_with("rxdrop drv: 2.950 Mpps is 95%"),
            "{notes:?}"
        );
    }

    #[test]
    fn the_chart_has_error_bars_a_legend_and_a_caption() {
        let svg = svg(&table());
        assert_eq!(
            svg.matches("<path ").count(),
            4,
            "a spread per cell of several runs"
        );
        assert!(svg.contains("SKB mode") && svg.contains("DRV mode"));
        assert!(svg.contains("Linux 6.18") && svg.contains("2026-11-23T14:00:00Z"));
        assert!(svg.contains("xskit bench --runs 3 --plot x.svg"));
        assert!(svg.contains("Test &lt;CPU&gt;"), "text is escaped");
        assert!(svg.contains("(took all it was offered: see the note)"));
        assert_eq!(
            svg.matches("generator (live frames) ").count(),
            2,
            "one per mode"
        );
    }

    #[test]
    fn plot_redraws_a_saved_table_and_refuses_other_json() {
        let dir = std::env::temp_dir().join(format!("xskit-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let saved = dir.join("results.json");
        let mut json = serde_json::to_value(table()).unwrap();
        json["command"] = "bench".into();
        json["schema_version"] = 1.into();
        std::fs::write(&saved, json.to_string()).unwrap();
        let out = replot(&saved, None).unwrap();
        assert_eq!(out, dir.join("results.svg"));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), svg(&table()));
        std::fs::write(&saved, r#"{"command":"gen","tx_packets":1}"#).unwrap();
        let err = replot(&saved, None).unwrap_err();
        assert!(format!("{err:#}").contains("not the JSON of `xskit bench --json`"));
        assert!(replot(&dir.join("missing.json"), None).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
