//! Which members of a bond may carry traffic, shared by [`crate::XdpBond`] and
//! [`crate::BondPort`]: a member is usable when its carrier is up (link monitoring) and a
//! control plane lets it distribute (LACP; always, without one); active-backup's active
//! member is one of the usable ones, the first when the active one is lost.

use crate::{Error, Result, MAX_MEMBERS};

#[derive(Clone, Debug)]
pub(crate) struct Members {
    up: Vec<bool>,
    distributing: Vec<bool>,
    /// The usable members, in member order: rebuilt on every change.
    usable: Vec<usize>,
    active: Option<usize>,
}

impl Members {
    /// `count` members (1 to [`MAX_MEMBERS`]), all up; the first is active.
    pub(crate) fn new(count: usize) -> Result<Self> {
        if count == 0 || count > MAX_MEMBERS {
            return Err(Error::MemberCount { count });
        }
        let mut members = Members {
            up: vec![true; count],
            distributing: vec![true; count],
            usable: Vec::with_capacity(count),
            active: None,
        };
        members.rebuild();
        Ok(members)
    }

    fn check(&self, index: usize) -> Result<()> {
        if index >= self.up.len() {
            return Err(Error::NoSuchMember {
                index,
                count: self.up.len(),
            });
        }
        Ok(())
    }

    pub(crate) fn set_up(&mut self, index: usize, up: bool) -> Result<()> {
        self.check(index)?;
        self.up[index] = up;
        self.rebuild();
        Ok(())
    }

    pub(crate) fn set_distributing(&mut self, index: usize, distributing: bool) -> Result<()> {
        self.check(index)?;
        self.distributing[index] = distributing;
        self.rebuild();
        Ok(())
    }

    /// Makes `index` active if it is usable; otherwise the active member stays.
    pub(crate) fn set_active(&mut self, index: usize) -> Result<()> {
        self.check(index)?;
        if self.usable.contains(&index) {
            self.active = Some(index);
        }
        Ok(())
    }

    pub(crate) fn usable(&self) -> &[usize] {
        &self.usable
    }

    pub(crate) fn active(&self) -> Option<usize> {
        self.active
    }

    /// The active member's position among the usable ones (its slot), 0 without one.
    pub(crate) fn active_slot(&self) -> usize {
        self.active
            .and_then(|a| self.usable.iter().position(|&u| u == a))
            .unwrap_or(0)
    }

    fn rebuild(&mut self) {
        self.usable.clear();
        self.usable
            .extend((0..self.up.len()).filter(|&i| self.up[i] && self.distributing[i]));
        if self.active.is_none_or(|a| !self.usable.contains(&a)) {
            self.active = self.usable.first().copied();
        }
    }
}
