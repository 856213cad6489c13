//! The kernel's table of blocked sources, as user space reads and writes it: an array the
//! program addresses openly by a hash of the source (`blocked_find` and `block` in
//! bpf/xdp_filter.c). User space never hashes: it reads every slot, clears a slot in place
//! (a removed block, which a lookup goes on past), and copies a handed table slot for slot.

use std::collections::HashMap;

use aya::maps::{Array, IterableMap, MapData};

use super::map_error;
use crate::abi::{BLOCK_CLAIMED, BLOCK_GONE};
use crate::error::Result;
use crate::sys::filter::{BlockedRepr, SourceKeyRepr};

/// A blocked table, in the program's map.
pub(super) struct BlockedTable {
    map: Array<MapData, BlockedRepr>,
}

/// True when `slot` blocks its source at CLOCK_MONOTONIC `now_ns`.
fn live_at(slot: &BlockedRepr, now_ns: u64) -> bool {
    slot.until > now_ns && slot.until != BLOCK_CLAIMED
}

/// A slot whose block was removed.
fn gone() -> BlockedRepr {
    BlockedRepr {
        until: BLOCK_GONE,
        ..BlockedRepr::default()
    }
}

impl BlockedTable {
    pub(super) fn new(map: Array<MapData, BlockedRepr>) -> Self {
        BlockedTable { map }
    }

    /// The map, for a successor.
    pub(super) fn map(&self) -> &Array<MapData, BlockedRepr> {
        &self.map
    }

    /// Every slot that ever held a block: (index, slot).
    fn used(&self, what: &'static str) -> Result<Vec<(u32, BlockedRepr)>> {
        let all = read_all(&self.map, what)?;
        Ok(all.into_iter().filter(|(_, s)| s.until != 0).collect())
    }

    /// The blocks in force at CLOCK_MONOTONIC `now_ns`: (source, packets dropped since,
    /// nanoseconds left).
    pub(super) fn live(&self, now_ns: u64) -> Result<Vec<(SourceKeyRepr, u64, u64)>> {
        Ok(self
            .used("reading the blocked sources")?
            .into_iter()
            .filter(|(_, s)| live_at(s, now_ns))
            .map(|(_, s)| (s.key(), u64::from(s.drops), s.until - now_ns))
            .collect())
    }

    /// Removes every block whose rule slot `stale` says.
    pub(super) fn remove_where(&mut self, stale: impl Fn(u32) -> bool) -> Result<()> {
        const WHAT: &str = "removing the blocked sources of rules gone";
        for (i, s) in self.used(WHAT)? {
            if s.until != BLOCK_GONE && s.until != BLOCK_CLAIMED && stale(u32::from(s.rule)) {
                self.map.set(i, gone(), 0).map_err(|e| map_error(WHAT, e))?;
            }
        }
        Ok(())
    }

    /// Copies the blocks of `from`, the table of a filter that handed over, of the rules
    /// that moved (`moves`: its slot -> this filter's) slot for slot, and marks every other
    /// slot it used as removed, so that lookups go on past it as they did there. False,
    /// nothing copied, when the tables differ in size (another `block_table`): each slot's
    /// place depends on it.
    pub(super) fn copy_moved(
        &mut self,
        from: &Array<MapData, BlockedRepr>,
        moves: &HashMap<u32, u32>,
    ) -> Result<bool> {
        const WHAT: &str = "carrying the handed blocked sources";
        if from.len() != self.map.len() {
            return Ok(false);
        }
        for (i, s) in read_all(from, WHAT)? {
            let moved = moves.get(&u32::from(s.rule)).map(|&r| u16::try_from(r));
            let copy = match moved {
                Some(Ok(rule)) if s.until != BLOCK_CLAIMED => BlockedRepr { rule, ..s },
                _ if s.until == 0 => continue,
                _ => gone(),
            };
            self.map.set(i, copy, 0).map_err(|e| map_error(WHAT, e))?;
        }
        Ok(true)
    }
}

/// Every slot of `map`: a few system calls of many thousand slots each, or one a slot where
/// the kernel has no batch command for arrays.
fn read_all(
    map: &Array<MapData, BlockedRepr>,
    what: &'static str,
) -> Result<Vec<(u32, BlockedRepr)>> {
    match xskit::maps::lookup_batch::<u32, BlockedRepr>(map.map()) {
        Ok(all) => Ok(all),
        Err(e) if crate::set_tables::batch_unsupported(&e) => (0..map.len())
            .map(|i| Ok((i, map.get(&i, 0).map_err(|e| map_error(what, e))?)))
            .collect(),
        Err(e) => Err(map_error(what, e)),
    }
}
