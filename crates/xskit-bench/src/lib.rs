//! xskit's benchmark harness: the testbed table of `xskit bench` (every benchmark in SKB and
//! DRV mode against AF_PACKET and the XDP_DROP ceiling, `xskit fwd` against the kernel's
//! bridge, a DDoS mix), its SVG chart, the bond table (XDP_DROP, XDP_TX and AF_XDP l2fwd
//! through xskit's bond programs, as in the XDP bonding patch's table) and the in-memory
//! pipeline benchmark.
//!
//! The `xskit` binary links this crate only when built with its `bench-harness` feature
//! (`scripts/setup.sh bench` does); `xskit bench -i IF`, a benchmark on your own interface,
//! needs none of it. The measurements run `xskit` itself as child processes, each pinned to a
//! CPU in a namespace of a testbed built for the run and removed after it.

pub mod bond;
pub mod chart;
mod fwd;
pub mod pipeline;
mod procs;
mod stats;
pub mod table;

/// Told how a measurement goes while it runs: the text of each step, and the state after
/// each cell (for live JSON lines and metrics). Every method does nothing by default.
pub trait Observer {
    /// Before the first cell: what will be measured, and how many cells that is.
    fn begin(&mut self, _heading: &str, _cells: usize) {}
    /// A step measured, as a line of text.
    fn line(&mut self, _text: &str) {}
    /// A cell of the plan measured: the table so far.
    fn cell_done(&mut self, _state: &serde_json::Value) {}
}

/// An observer that is told nothing.
pub struct Quiet;

impl Observer for Quiet {}
