//! `xskit bench` with no interface: every benchmark on a testbed, generator and benchmark in
//! separate processes pinned to different CPUs, gathered into one table.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use xskit_testbed::{Host, Testbed, TestbedConfig};

use crate::chart::{Machine, GENERATOR};
use crate::procs::{
    finish, finish_any, interrupt, live_gen_args, set_gro, start, strings, Proc, BENCH_CPU, GEN_CPU,
};
use crate::stats::{median, spread};
use crate::{Benchmark, Observer};

/// What to measure.
#[derive(Clone, Debug)]
pub struct Request {
    /// The `xskit` binary the benchmark processes run.
    pub exe: String,
    /// One benchmark, or (None) all of them.
    pub only: Option<Benchmark>,
    /// The txpush rows by frame size (64, 512, 1024, 1500) instead of the table.
    pub sizes: bool,
    /// Frame length without the FCS.
    pub size: usize,
    /// Runs per cell, 1 to 20; the median is reported with the spread.
    pub runs: usize,
    /// Seconds per cell.
    pub secs: f64,
}

/// One row of the table: a benchmark in a mode, with every run's Mpps.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Cell {
    /// The benchmark's name.
    pub bench: String,
    /// skb, drv, or "-" where no XDP mode applies.
    pub mode: String,
    /// Frame length without the FCS.
    pub size: usize,
    /// Each run's rate.
    pub mpps: Vec<f64>,
    /// Each run's process CPU per packet, where measured.
    pub cpu_ns_per_packet: Vec<f64>,
}

impl Cell {
    fn empty(bench: &str, mode: &str, size: usize) -> Cell {
        Cell {
            bench: bench.into(),
            mode: mode.into(),
            size,
            mpps: vec![],
            cpu_ns_per_packet: vec![],
        }
    }

    /// The median of the runs' Mpps.
    pub fn median(&self) -> f64 {
        median(&self.mpps)
    }
}

/// A cell's benchmark and mode.
type CellName<'a> = (&'a str, &'a str);

/// The table as `--json` prints it, and as `bench plot` reads it back.
#[derive(Serialize, Deserialize)]
pub struct Table {
    /// Each cell's measuring time.
    pub seconds_per_cell: f64,
    /// Runs per cell.
    pub runs: usize,
    /// The cells, in the order measured.
    pub cells: Vec<Cell>,
    /// Each benchmark over its peer or ceiling, medians.
    pub ratios: Vec<(String, f64)>,
    /// Where and when it was measured, and how (for the chart's caption).
    #[serde(default)]
    pub machine: Machine,
    /// How the DDoS rows' two sides shared the generators' CPU, where they were measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ddos_method: Option<String>,
}

impl Table {
    /// The table as text, one line each: the cells, the ratios, the notes.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![
            String::new(),
            format!(
                "{:<24} {:>6} {:>6} {:>10} {:>10} {:>12}",
                "benchmark", "mode", "bytes", "Mpps", "spread", "CPU ns/pkt"
            ),
        ];
        for c in &self.cells {
            lines.push(format!(
                "{:<24} {:>6} {:>6} {:>10.3} {:>10.3} {:>12.0}",
                c.bench,
                c.mode,
                c.size,
                c.median(),
                spread(&c.mpps),
                median(&c.cpu_ns_per_packet)
            ));
        }
        for (name, r) in &self.ratios {
            lines.push(format!("{name:<32} {r:>6.2}x"));
        }
        for note in crate::chart::generator_bound(self) {
            lines.push(format!("note: {note}"));
        }
        if let Some(method) = &self.ddos_method {
            lines.push(format!("note: the ddos rows were measured {method}"));
        }
        lines
    }

    fn median_of(&self, bench: &str, mode: &str) -> Option<f64> {
        self.cells
            .iter()
            .find(|c| c.bench == bench && c.mode == mode)
            .map(Cell::median)
    }

    /// The median of `x`'s runs over `p`'s, run by run, where both were measured in the same
    /// runs (side by side).
    fn paired_ratio(&self, x: &str, p: &str) -> Option<f64> {
        let cell = |bench| self.cells.iter().find(|c| c.bench == bench);
        let (x, p) = (cell(x)?, cell(p)?);
        let ratios: Vec<f64> = x.mpps.iter().zip(&p.mpps).map(|(x, p)| x / p).collect();
        (!ratios.is_empty() && x.mpps.len() == p.mpps.len()).then(|| median(&ratios))
    }

    /// Each benchmark against its peer or ceiling, where both were measured; then `shares`
    /// (what crossed during the floods, as shares of what was sent).
    fn add_ratios(&mut self, shares: Vec<(String, f64)>) {
        let mut pairs: Vec<(String, CellName, CellName)> = vec![
            (
                "rxdrop drv / AF_PACKET rx".into(),
                ("rxdrop", "drv"),
                ("afpacket-rx", "skb"),
            ),
            (
                "rxdrop drv / XDP_DROP ceiling".into(),
                ("rxdrop", "drv"),
                ("xdp-drop", "drv"),
            ),
            (
                "txpush skb / AF_PACKET tx".into(),
                ("txpush", "skb"),
                ("afpacket-tx", "skb"),
            ),
        ];
        for bench in ["fwd", "fwd --xdp-forward"] {
            for mode in ["skb", "drv"] {
                pairs.push((
                    format!("{bench} {mode} / kernel bridge"),
                    (bench, mode),
                    ("kernel bridge", "-"),
                ));
            }
        }
        for mode in ["skb", "drv"] {
            pairs.push((
                format!("fwd --xdp-forward {mode} / xdp redirect (devmap)"),
                ("fwd --xdp-forward", mode),
                ("xdp redirect (devmap)", mode),
            ));
        }
        for (name, (xb, xm), (pb, pm)) in pairs {
            if let (Some(x), Some(p)) = (self.median_of(xb, xm), self.median_of(pb, pm)) {
                self.ratios.push((name, x / p));
            }
        }
        // Measured side by side, run by run: the median of each run's ratio.
        let check = (
            "ddos method check: XDP_DROP / XDP_DROP",
            crate::fwd::DDOS_CHECK_M_A,
            crate::fwd::DDOS_CHECK_SIDE,
        );
        let floor = (
            "minimal source-port drop / XDP_DROP ceiling",
            crate::fwd::DDOS_FLOOR,
            crate::fwd::DDOS_FLOOR_CEILING,
        );
        let cases = crate::ddos::CASES.map(|c| (c.ratio, c.dropped, c.peer_cell));
        for (name, x, p) in cases.into_iter().chain([check, floor]) {
            if let Some(r) = self.paired_ratio(x, p) {
                self.ratios.push((name.into(), r));
            }
        }
        self.ratios.extend(shares);
    }
}

/// The (benchmark, mode, size) cells a request measures on the two-host testbed, in order.
pub fn plan(request: &Request) -> Vec<(Benchmark, &'static str, usize)> {
    let wanted = |b: Benchmark| request.only.is_none_or(|w| w == b);
    let mut plan = Vec::new();
    if request.sizes {
        for size in [64, 512, 1024, 1500] {
            for mode in ["skb", "drv"] {
                plan.push((Benchmark::Txpush, mode, size));
            }
        }
        return plan;
    }
    for bench in [Benchmark::Rxdrop, Benchmark::Txpush, Benchmark::L2fwd] {
        for mode in ["skb", "drv"] {
            if wanted(bench) {
                plan.push((bench, mode, request.size));
            }
        }
    }
    for (bench, mode) in [
        (Benchmark::AfpacketRx, "skb"),
        (Benchmark::AfpacketTx, "skb"),
        (Benchmark::XdpDrop, "drv"),
    ] {
        if wanted(bench) {
            plan.push((bench, mode, request.size));
        }
    }
    plan
}

/// The request's checks, before a testbed is built.
fn check(request: &Request) -> Result<()> {
    if request.runs == 0 || request.runs > 20 {
        bail!("--runs {} is out of range: use 1 to 20", request.runs);
    }
    if request.sizes && request.only.is_some_and(|b| b != Benchmark::Txpush) {
        bail!("--sizes is the txpush table: give no benchmark, or txpush");
    }
    if !xskit_testbed::have_privileges() {
        bail!("xskit bench without -i builds a testbed of network namespaces: run it as root (e.g. with sudo), or give -i IFACE");
    }
    Ok(())
}

/// Measures the table: every cell of the plan `runs` times, interleaved across runs so that
/// drift hits every cell alike; then, unless only the sizes were asked for, the forwarding
/// and DDoS rows; then the ratios.
pub fn run(request: &Request, observer: &mut dyn Observer) -> Result<Table> {
    check(request)?;
    let with_fwd = request.only.is_none_or(|b| b == Benchmark::Fwd) && !request.sizes;
    let ddos_method = with_fwd.then(crate::fwd::Method::from_env).transpose()?;
    let ddos_cases = with_fwd
        .then(crate::fwd::ChosenCases::from_env)
        .transpose()?;
    let bed = Testbed::new(&TestbedConfig::default()).context("building the testbed")?;
    let runner = Runner {
        exe: request.exe.clone(),
        secs: request.secs,
        bed,
    };
    let plan = plan(request);
    observer.begin(
        &format!(
            "testbed {} <-> {}: {} cell(s) x {} run(s), {:.1} s each; generator (live frames) on CPU {GEN_CPU}, benchmark on CPU {BENCH_CPU}",
            runner.bed.a.ns.name(),
            runner.bed.b.ns.name(),
            plan.len(),
            request.runs,
            request.secs
        ),
        plan.len() * request.runs,
    );
    let mut cells = runner.measure_plan(&plan, request, observer)?;
    let mut shares = Vec::new();
    if let (Some((method, description)), Some(chosen)) = (&ddos_method, &ddos_cases) {
        let (exe, secs, runs) = (&request.exe, request.secs, request.runs);
        cells.extend(crate::fwd::fwd_cells(
            exe,
            secs,
            runs,
            request.size,
            observer,
        )?);
        let (ddos, ddos_shares) =
            crate::fwd::ddos_cells(exe, secs, runs, (*method, description, chosen), observer)?;
        cells.extend(ddos);
        shares = ddos_shares;
    }
    let mut table = Table {
        seconds_per_cell: request.secs,
        runs: request.runs,
        cells,
        ratios: Vec::new(),
        machine: Machine::here(),
        ddos_method: ddos_method.map(|(_, description)| description),
    };
    table.add_ratios(shares);
    Ok(table)
}

struct Runner {
    exe: String,
    secs: f64,
    bed: Testbed,
}

impl Runner {
    fn start(&self, host: &Host, cpu: &str, args: &[String]) -> Result<Proc> {
        start(&self.exe, host, cpu, args)
    }

    fn bench_args(&self, bench: Benchmark, host: &Host, mode: &str, size: usize) -> Vec<String> {
        strings(&[
            "bench",
            bench.name(),
            "-i",
            &host.ifname,
            "-m",
            mode,
            "-s",
            &size.to_string(),
            "-d",
            &self.secs.to_string(),
            "--json",
        ])
    }

    /// A receive-side benchmark on b, fed by the live-frames generator flat out from a: its
    /// JSON and the generator's rate.
    fn receive_side(
        &self,
        bench: Benchmark,
        mode: &str,
        size: usize,
    ) -> Result<(serde_json::Value, f64)> {
        let (a, b) = (&self.bed.a, &self.bed.b);
        set_gro(b, bench == Benchmark::AfpacketRx || mode == "skb")?;
        let receiver = self.start(b, BENCH_CPU, &self.bench_args(bench, b, mode, size))?;
        let mac: Vec<String> = b.mac.iter().map(|x| format!("{x:02x}")).collect();
        let gen_args = live_gen_args(a, &mac.join(":"), size, self.secs + 2.0);
        let generator = self.start(a, GEN_CPU, &gen_args)?;
        let result = finish(receiver)?;
        // The measurement is over: stop the generator early and collect its rate.
        interrupt(&generator);
        let gen = finish_any(generator)?; // its status reports device drops: informational here
        Ok((result, gen["tx_pps"].as_f64().unwrap_or(0.0)))
    }

    /// A transmit-side benchmark on a.
    fn transmit_side(
        &self,
        bench: Benchmark,
        mode: &str,
        size: usize,
    ) -> Result<serde_json::Value> {
        let a = &self.bed.a;
        finish(self.start(a, GEN_CPU, &self.bench_args(bench, a, mode, size))?)
    }

    /// Every cell of the plan, `runs` times, and the generator's rate into each receiving
    /// mode (what a receive cell can reach at most).
    fn measure_plan(
        &self,
        plan: &[(Benchmark, &'static str, usize)],
        request: &Request,
        observer: &mut dyn Observer,
    ) -> Result<Vec<Cell>> {
        let mut cells: Vec<Cell> = plan
            .iter()
            .map(|(b, m, s)| Cell::empty(b.name(), m, *s))
            .collect();
        let mut generators: Vec<Cell> = ["skb", "drv"]
            .iter()
            .map(|mode| Cell::empty(GENERATOR, mode, request.size))
            .collect();
        let total = plan.len() * request.runs;
        for run in 0..request.runs {
            for (i, &(bench, mode, size)) in plan.iter().enumerate() {
                let (result, gen_pps) = if bench.transmits() {
                    (self.transmit_side(bench, mode, size)?, 0.0)
                } else {
                    self.receive_side(bench, mode, size)?
                };
                let rate = if bench.transmits() || bench == Benchmark::L2fwd {
                    "tx_pps"
                } else {
                    "rx_pps"
                };
                let pps = result[rate]
                    .as_f64()
                    .context("a benchmark's JSON without its rate")?;
                cells[i].mpps.push(pps / 1e6);
                cells[i]
                    .cpu_ns_per_packet
                    .extend(result["cpu_ns_per_packet"].as_f64());
                if gen_pps > 0.0 && bench == Benchmark::Rxdrop {
                    if let Some(g) = generators.iter_mut().find(|g| g.mode == mode) {
                        g.mpps.push(gen_pps / 1e6);
                    }
                }
                observer.line(&format!(
                    "  run {} {:<11} {:<4} {:>5} B  {:>7.3} Mpps",
                    run + 1,
                    bench.name(),
                    mode,
                    size,
                    pps / 1e6
                ));
                observer.cell_done(&progress(run * plan.len() + i + 1, total, &cells));
            }
        }
        cells.extend(generators.into_iter().filter(|g| !g.mpps.is_empty()));
        Ok(cells)
    }
}

/// The state after a cell, as `--json-lines` and `--metrics` show it.
fn progress(done: usize, total: usize, cells: &[Cell]) -> serde_json::Value {
    serde_json::json!({
        "cells_done": done,
        "cells_total": total,
        "cells": cells.iter().map(|c| serde_json::json!({
            "name": format!("{} {} {} B", c.bench, c.mode, c.size),
            "runs_done": c.mpps.len(),
            "mpps": c.mpps.last(),
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(only: Option<Benchmark>, sizes: bool) -> Request {
        Request {
            exe: "xskit".into(),
            only,
            sizes,
            size: 60,
            runs: 1,
            secs: 1.0,
        }
    }

    #[test]
    fn the_plan_covers_both_modes_and_the_baselines() {
        let all = plan(&request(None, false));
        assert_eq!(all.len(), 9);
        assert!(all.contains(&(Benchmark::Rxdrop, "skb", 60)));
        assert!(all.contains(&(Benchmark::XdpDrop, "drv", 60)));
        assert_eq!(plan(&request(Some(Benchmark::L2fwd), false)).len(), 2);
        assert!(plan(&request(Some(Benchmark::Fwd), false)).is_empty());
        let sizes = plan(&request(None, true));
        assert_eq!(sizes.len(), 8);
        assert!(sizes.iter().all(|(b, _, _)| *b == Benchmark::Txpush));
    }

    #[test]
    fn bad_requests_are_refused_before_a_testbed_is_built() {
        let mut r = request(None, false);
        r.runs = 0;
        assert!(check(&r).unwrap_err().to_string().contains("--runs 0"));
        let r = request(Some(Benchmark::Rxdrop), true);
        assert!(check(&r).unwrap_err().to_string().contains("--sizes"));
    }

    #[test]
    fn ratios_pair_each_benchmark_with_its_peer() {
        let cell = |bench: &str, mode: &str, mpps: f64| Cell {
            mpps: vec![mpps],
            ..Cell::empty(bench, mode, 60)
        };
        let mut table = Table {
            seconds_per_cell: 1.0,
            runs: 1,
            cells: vec![
                cell("rxdrop", "drv", 4.0),
                cell("afpacket-rx", "skb", 1.0),
                cell("fwd", "drv", 1.5),
                cell("kernel bridge", "-", 1.0),
            ],
            ratios: vec![],
            machine: Machine::default(),
            ddos_method: None,
        };
        table.add_ratios(vec![("ddos legitimate delivered intact".into(), 1.0)]);
        let names: Vec<_> = table.ratios.iter().map(|(n, r)| (n.as_str(), *r)).collect();
        assert_eq!(
            names,
            [
                ("rxdrop drv / AF_PACKET rx", 4.0),
                ("fwd drv / kernel bridge", 1.5),
                ("ddos legitimate delivered intact", 1.0)
            ]
        );
        assert!(table.lines().iter().any(|l| l.contains("4.00x")));
    }

    #[test]
    fn side_by_side_cells_are_compared_run_by_run() {
        let alone = crate::ddos::CASES[1];
        let (dropped, peer) = (alone.dropped, alone.peer_cell);
        let cell = |bench: &str, mpps: &[f64]| Cell {
            mpps: mpps.to_vec(),
            ..Cell::empty(bench, "drv", 64)
        };
        // Runs of 1.0, 0.8 and 2.0: their median is 1.0; the medians' ratio would be 2.0.
        let mut table = Table {
            seconds_per_cell: 1.0,
            runs: 3,
            cells: vec![
                cell(dropped, &[1.0, 4.0, 2.0]),
                cell(peer, &[1.0, 5.0, 1.0]),
            ],
            ratios: vec![],
            machine: Machine::default(),
            ddos_method: None,
        };
        table.add_ratios(Vec::new());
        assert_eq!(
            table.ratios,
            [("ddos rule alone / XDP_DROP ceiling".to_string(), 1.0)]
        );
        // Runs that do not pair up give no ratio.
        table.cells[1].mpps.pop();
        table.ratios.clear();
        table.add_ratios(Vec::new());
        assert!(table.ratios.is_empty());
    }
}
