//! A filter's state handed to the filter of a successor that takes over
//! ([`crate::carry`]): its maps' descriptors and what forwarders before it counted, out; and
//! in, the buckets and blocks copied into this filter's maps and the counts added when read.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use aya::maps::{Array, HashMap as BpfHashMap, IterableMap, Map, MapData, PerCpuArray};
use xskit_os::sync::LockUnpoisoned;

use super::{
    map_error, read_counter, read_police, FilterMaps, PoliceCount, RuleCounter, XdpFilter,
};
use crate::carry::{counter_moves, CarriedFilter};
use crate::error::Result;
use crate::sys::filter::{BlockedRepr, CounterRepr, PoliceCountRepr, PolicerRepr, SourceKeyRepr};

/// What the forwarders before this one counted, added to this filter's own counts.
#[derive(Default)]
pub(super) struct Carried {
    /// Counted by forwarders before the one handing over, by this filter's counter index.
    counters: HashMap<u32, RuleCounter>,
    /// Likewise the rate-limit counts, by this filter's slot.
    police: HashMap<u16, PoliceCount>,
    /// The maps of the filter that handed over, read whenever this one's are.
    handed: Option<HandedCounts>,
}

/// The counting maps of the filter that handed over, and which of its entries each of this
/// filter's continues.
struct HandedCounts {
    counters: PerCpuArray<MapData, CounterRepr>,
    police_counts: PerCpuArray<MapData, PoliceCountRepr>,
    /// This filter's counter index -> the handed filter's.
    counter_from: HashMap<u32, u32>,
    /// This filter's slot -> the handed filter's.
    police_from: HashMap<u16, u16>,
}

impl Carried {
    /// What was counted before this filter on its counter `index`.
    pub(super) fn counter(&self, index: u32) -> Result<RuleCounter> {
        let base = self.counters.get(&index).copied().unwrap_or_default();
        let handed = self.handed.as_ref().and_then(|h| {
            let from = h.counter_from.get(&index)?;
            Some(read_counter(&h.counters, *from))
        });
        Ok(base.plus(handed.transpose()?.unwrap_or_default()))
    }

    /// What was counted before this filter of the rate limit in `slot`.
    pub(super) fn police(&self, slot: u16) -> Result<PoliceCount> {
        let base = self.police.get(&slot).copied().unwrap_or_default();
        let handed = self.handed.as_ref().and_then(|h| {
            let from = h.police_from.get(&slot)?;
            Some(read_police(&h.police_counts, *from))
        });
        Ok(base.plus(handed.transpose()?.unwrap_or_default()))
    }

    /// `slot` goes to a new rule: what was carried into it is forgotten.
    pub(super) fn forget(&mut self, slot: u16) {
        self.counters.remove(&u32::from(slot));
        self.police.remove(&slot);
        if let Some(h) = self.handed.as_mut() {
            h.counter_from.remove(&u32::from(slot));
            h.police_from.remove(&slot);
        }
    }

    /// Every counter index and slot something was carried into.
    fn indexes(&self) -> (Vec<u32>, Vec<u16>) {
        let mut counters: Vec<u32> = self.counters.keys().copied().collect();
        let mut slots: Vec<u16> = self.police.keys().copied().collect();
        if let Some(h) = &self.handed {
            counters.extend(h.counter_from.keys());
            slots.extend(h.police_from.keys());
        }
        counters.sort_unstable();
        counters.dedup();
        slots.sort_unstable();
        slots.dedup();
        (counters, slots)
    }
}

/// A map handed over by descriptor, as the type its place says.
fn handed_map<M>(fd: OwnedFd, what: &'static str) -> Result<M>
where
    M: TryFrom<Map, Error = aya::maps::MapError>,
{
    let data = MapData::from_fd(fd).map_err(|e| map_error(what, e))?;
    let map = Map::from_map_data(data).map_err(|e| map_error(what, e))?;
    M::try_from(map).map_err(|e| map_error(what, e))
}

/// Another descriptor of `map`, for a successor.
fn map_fd<K: aya::Pod, V>(map: &impl IterableMap<K, V>) -> Result<OwnedFd> {
    map.map()
        .fd()
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| map_error("duplicating a map's descriptor for the successor", e))
}

/// The maps a filter hands over, in the order they come.
struct HandedMaps {
    counters: PerCpuArray<MapData, CounterRepr>,
    police_counts: PerCpuArray<MapData, PoliceCountRepr>,
    policers: Array<MapData, PolicerRepr>,
    sources: Option<BpfHashMap<MapData, SourceKeyRepr, u64>>,
    blocked: Option<Array<MapData, BlockedRepr>>,
}

impl HandedMaps {
    fn open(from: &CarriedFilter, fds: Vec<OwnedFd>) -> Result<Self> {
        let mut fds = fds.into_iter();
        let mut next = |what| {
            fds.next().ok_or_else(|| crate::error::Error::TakeOver {
                reason: format!("the forwarder handed over no descriptor for {what}"),
            })
        };
        let what = "taking the handed filter's counters";
        Ok(HandedMaps {
            counters: handed_map(next("counters")?, what)?,
            police_counts: handed_map(next("rate-limit counts")?, what)?,
            policers: handed_map(next("rate limits")?, what)?,
            sources: match from.sources {
                true => Some(handed_map(next("per-source buckets")?, what)?),
                false => None,
            },
            blocked: match from.blocked {
                true => Some(handed_map(next("blocked sources")?, what)?),
                false => None,
            },
        })
    }
}

impl XdpFilter {
    /// The program object it was built from (`carry::program_id`).
    pub fn program_id(&self) -> u64 {
        self.maps.lock_unpoisoned().program_id
    }

    /// What this filter carries to a successor's, and its maps' descriptors in the order
    /// [`CarriedFilter`] says.
    pub fn carried(&self) -> Result<(CarriedFilter, Vec<OwnedFd>)> {
        let maps = self.maps.lock_unpoisoned();
        let (indexes, slots) = maps.carried.indexes();
        let mut counters = Vec::new();
        for index in indexes {
            let c = maps.carried.counter(index)?;
            if c != RuleCounter::default() {
                counters.push((index, c.packets, c.bytes));
            }
        }
        let mut police = Vec::new();
        for slot in slots {
            let p = maps.carried.police(slot)?;
            if p != PoliceCount::default() {
                police.push((slot, p.words()));
            }
        }
        let mut fds = vec![
            map_fd(&maps.counters)?,
            map_fd(&maps.police_counts)?,
            map_fd(&maps.policers)?,
        ];
        if let Some(m) = &maps.source_buckets {
            fds.push(map_fd(m)?);
        }
        if let Some(m) = &maps.blocked {
            fds.push(map_fd(m.map())?);
        }
        let carried = CarriedFilter {
            program: maps.program_id,
            counters,
            police,
            sources: maps.source_buckets.is_some(),
            blocked: maps.blocked.is_some(),
        };
        Ok((carried, fds))
    }

    /// Takes over the state of the filter that handed `from` and `fds` over: for each
    /// (its slot, this filter's) of `slots`, the rule's counts from then on include what it
    /// counted, and a rule whose rate limit is the same keeps its bucket, its per-source
    /// buckets and the sources it blocked. Call it once the rules and limits are written,
    /// before the program goes on its link. Refused (nothing carried) when the filters were
    /// built from other program objects.
    pub fn carry(
        &self,
        from: &CarriedFilter,
        fds: Vec<OwnedFd>,
        slots: &[(u16, u16)],
    ) -> Result<bool> {
        let mut maps = self.maps.lock_unpoisoned();
        if from.program != maps.program_id {
            return Ok(false);
        }
        let handed = HandedMaps::open(from, fds)?;
        let buckets = maps.carry_buckets(&handed, slots)?;
        maps.carry_sources(&handed, &buckets)?;
        let moves = counter_moves(slots);
        let new_of: HashMap<u32, u32> = moves.iter().copied().collect();
        let new_slot_of: HashMap<u16, u16> = slots.iter().copied().collect();
        maps.carried = Carried {
            counters: from
                .counters
                .iter()
                .filter_map(|&(i, packets, bytes)| {
                    Some((*new_of.get(&i)?, RuleCounter { packets, bytes }))
                })
                .collect(),
            police: from
                .police
                .iter()
                .filter_map(|&(slot, words)| {
                    let new = *new_slot_of.get(&slot)?;
                    Some((new, PoliceCount::from_words(words)))
                })
                .collect(),
            handed: Some(HandedCounts {
                counters: handed.counters,
                police_counts: handed.police_counts,
                counter_from: moves.iter().map(|&(old, new)| (new, old)).collect(),
                police_from: slots.iter().map(|&(old, new)| (new, old)).collect(),
            }),
        };
        Ok(true)
    }
}

impl FilterMaps {
    /// Copies the bucket of each moved rule whose limit is the same into its new slot; the
    /// moves of the buckets copied.
    fn carry_buckets(
        &mut self,
        handed: &HandedMaps,
        slots: &[(u16, u16)],
    ) -> Result<HashMap<u32, u32>> {
        let what = "carrying the rate limits' buckets";
        let mut carried = HashMap::new();
        for &(old, new) in slots {
            if !self.limits.contains_key(&new) {
                continue;
            }
            let (old, new) = (u32::from(old), u32::from(new));
            let before = handed
                .policers
                .get(&old, 0)
                .map_err(|e| map_error(what, e))?;
            let mut now = self.policers.get(&new, 0).map_err(|e| map_error(what, e))?;
            let limit = |p: PolicerRepr| PolicerRepr { tat: 0, ..p };
            if limit(before) != limit(now) {
                continue;
            }
            now.tat = before.tat;
            self.policers
                .set(new, now, 0)
                .map_err(|e| map_error(what, e))?;
            carried.insert(old, new);
        }
        Ok(carried)
    }

    /// Copies the per-source buckets and blocked sources of the rules whose buckets moved
    /// (`buckets`: the handed slot -> this filter's) into their new slots. A table fuller
    /// than this filter's room keeps what fits.
    fn carry_sources(&mut self, handed: &HandedMaps, buckets: &HashMap<u32, u32>) -> Result<()> {
        if let (Some(from), Some(to)) = (&handed.sources, self.source_buckets.as_mut()) {
            copy_moved(from, to, buckets, "reading the handed per-source buckets")?;
        }
        if let (Some(from), Some(to)) = (&handed.blocked, self.blocked.as_mut()) {
            to.copy_moved(from, buckets)?;
        }
        Ok(())
    }
}

/// Copies each entry of `from` whose rule moved (`moves`: its slot -> the new one) into `to`,
/// under the new slot; what does not fit is left.
fn copy_moved<V: aya::Pod>(
    from: &BpfHashMap<MapData, SourceKeyRepr, V>,
    to: &mut BpfHashMap<MapData, SourceKeyRepr, V>,
    moves: &HashMap<u32, u32>,
    what: &'static str,
) -> Result<()> {
    for key in from.keys() {
        let key = key.map_err(|e| map_error(what, e))?;
        // Gone meanwhile (run out), or not a moved rule's: left.
        let (Some(&rule), Ok(value)) = (moves.get(&key.rule), from.get(&key, 0)) else {
            continue;
        };
        let _ = to.insert(SourceKeyRepr { rule, ..key }, value, 0);
    }
    Ok(())
}
