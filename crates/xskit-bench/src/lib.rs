#![doc = include_str!("../README.md")]

mod benchmarks;
#[cfg(feature = "harness")]
pub mod bond;
#[cfg(feature = "harness")]
pub mod chart;
#[cfg(feature = "harness")]
mod crossing;
#[cfg(feature = "harness")]
mod ddos;
#[cfg(feature = "harness")]
mod fwd;
#[cfg(feature = "harness")]
pub mod pipeline;
#[cfg(feature = "harness")]
mod procs;
#[cfg(feature = "harness")]
mod stats;
#[cfg(feature = "harness")]
pub mod table;

pub use benchmarks::Benchmark;

/// Told how a measurement goes while it runs: the text of each step, and the state after
/// each cell (for live JSON lines and metrics). Every method does nothing by default.
#[cfg(feature = "harness")]
pub trait Observer {
    /// Before the first cell: what will be measured, and how many cells that is.
    fn begin(&mut self, _heading: &str, _cells: usize) {}
    /// A step measured, as a line of text.
    fn line(&mut self, _text: &str) {}
    /// A cell of the plan measured: the table so far.
    fn cell_done(&mut self, _state: &serde_json::Value) {}
}

/// An observer that is told nothing.
#[cfg(feature = "harness")]
pub struct Quiet;

#[cfg(feature = "harness")]
impl Observer for Quiet {}
