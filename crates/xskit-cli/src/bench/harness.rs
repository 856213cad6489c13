//! The benchmarks that build their own testbed (the table, `bench bond`), the in-memory
//! `bench pipeline` and `bench plot`, run through the `xskit-bench` crate and rendered here.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use xskit_bench::table::Request;
use xskit_bench::Observer;

use super::{BenchArgs, Kind};
use crate::opts::{print_json, Live, ModeArg};

/// `xskit bench plot RESULTS.json [--plot OUT.svg]`.
pub(super) fn plot(args: &BenchArgs) -> Result<i32> {
    let Some(results) = &args.results else {
        bail!("bench plot draws a saved table: xskit bench plot RESULTS.json [--plot OUT.svg]");
    };
    let out = xskit_bench::chart::replot(results, args.plot.as_deref())?;
    out!("chart written to {}", out.display());
    Ok(0)
}

/// `xskit bench pipeline`.
pub(super) fn pipeline(args: &BenchArgs) -> Result<i32> {
    let report = xskit_bench::pipeline::run(args.runs, args.packets)?;
    render(args, &report, report.lines())
}

/// `xskit bench bond`.
pub(super) fn bond(args: &BenchArgs) -> Result<i32> {
    let secs = args.run.duration()?.unwrap_or(Duration::from_secs(2));
    let table = xskit_bench::bond::run(args.runs.max(1), secs.as_secs_f64())?;
    render(args, &table, table.lines())
}

fn render(args: &BenchArgs, json: &impl serde::Serialize, lines: Vec<String>) -> Result<i32> {
    if args.run.json_output() {
        print_json("bench", json)?;
    } else {
        for line in lines {
            out!("{line}");
        }
    }
    Ok(0)
}

/// The benchmark of the testbed table that `kind` names (None: all of them).
fn bench_of(kind: Option<Kind>) -> Result<Option<Kind>> {
    match kind {
        Some(k) if !k.in_testbed_table() => bail!("{}", super::not_in_table(k)),
        k => Ok(k),
    }
}

/// `xskit bench [KIND]` without -i: the testbed table.
pub(super) fn table(args: &BenchArgs) -> Result<i32> {
    if args.port.mode != ModeArg::Auto {
        bail!("without -i the table covers both skb and drv mode; --mode applies only with -i");
    }
    let request = Request {
        exe: std::env::current_exe()?.to_string_lossy().into_owned(),
        only: bench_of(args.kind)?,
        sizes: args.sizes,
        size: args.size,
        runs: args.runs,
        secs: args
            .run
            .duration()?
            .unwrap_or(Duration::from_secs(3))
            .as_secs_f64(),
    };
    let json = args.run.json_output();
    let mut shown = Shown::new(args.run.live("bench")?, !json);
    let table = xskit_bench::table::run(&request, &mut shown)?;
    shown.clear();
    if json {
        print_json("bench", &table)?;
    } else {
        for line in table.lines() {
            out!("{line}");
        }
    }
    if let Some(path) = &args.plot {
        xskit_bench::chart::write(&table, path)?;
        if !json {
            out!("chart written to {}", path.display());
        }
    }
    Ok(0)
}

/// The table's run as the user sees it: each step's line (text output), "cell 3 of 24, 1:20
/// elapsed, about 4:00 left" on stderr when both outputs are a terminal, and each cell's
/// state on --json-lines and --metrics.
struct Shown {
    live: Live,
    text: bool,
    bar: bool,
    done: usize,
    total: usize,
    started: Instant,
}

impl Shown {
    fn new(live: Live, text: bool) -> Shown {
        live.announce_metrics();
        let bar = text && std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
        Shown {
            live,
            text,
            bar,
            done: 0,
            total: 0,
            started: Instant::now(),
        }
    }

    fn draw(&self) {
        if !self.bar || self.done >= self.total {
            return;
        }
        let elapsed = self.started.elapsed().as_secs();
        let left = if self.done == 0 {
            String::new()
        } else {
            let per_cell = elapsed as f64 / self.done as f64;
            let secs = (per_cell * (self.total - self.done) as f64) as u64;
            format!(", about {}:{:02} left", secs / 60, secs % 60)
        };
        eprint!(
            "\r\x1b[K  cell {} of {}, {}:{:02} elapsed{left}",
            self.done + 1,
            self.total,
            elapsed / 60,
            elapsed % 60
        );
    }

    /// Takes the progress line off the terminal before a line is printed.
    fn clear(&self) {
        if self.bar {
            eprint!("\r\x1b[K");
        }
    }
}

impl Observer for Shown {
    fn begin(&mut self, heading: &str, cells: usize) {
        self.total = cells;
        if self.text {
            out!("{heading}");
        }
        self.draw();
    }

    fn line(&mut self, text: &str) {
        if self.text {
            self.clear();
            out!("{text}");
            self.draw();
        }
    }

    fn cell_done(&mut self, state: &serde_json::Value) {
        self.done += 1;
        self.draw();
        self.live.tick(state);
    }
}
