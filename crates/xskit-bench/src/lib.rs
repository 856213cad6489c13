#![doc = include_str!("../README.md")]

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
