//! One XDP program for a device or a bond: an object that includes `xskit_bond.h` and ends
//! with `return xskit_bond_xmit(ctx)` is attached to every member; [`XdpBond`] fills its
//! maps (the usable members, the mode, the policy) and rewrites them when a member goes down
//! or comes up, while the programs stay attached. A one-member bond is a plain device.

use aya::maps::{Array, DevMap, MapData, PerCpuArray};
use xskit::{Interface, Mode, ProgramObject, XdpProgram};

use crate::members::Members;
use crate::{bpf, Error, Result, XmitHashPolicy};

static REFLECT_OBJ: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_bond_reflect.o"));
static DROP_OBJ: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_bond_drop.o"));

/// The most members `xskit_bond.h` takes (XSKIT_BOND_MAX_MEMBERS).
pub const MAX_MEMBERS: usize = 8;

/// How an XDP bond picks the member a packet leaves on (what XDP's bond in Linux offers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum XdpBondMode {
    /// Everything out of the active member.
    ActiveBackup,
    /// The member `hash % usable`.
    BalanceXor(XmitHashPolicy),
    /// Members in turn, `packets_per_slave` each, counted per CPU.
    BalanceRr {
        /// Packets on a member before the next one's turn.
        packets_per_slave: u32,
    },
}

/// The slots of `xskit_bond_config`.
mod setting {
    pub(super) const MODE: u32 = 0;
    pub(super) const POLICY: u32 = 1;
    pub(super) const USABLE: u32 = 2;
    pub(super) const ACTIVE: u32 = 3;
    pub(super) const RR_PER: u32 = 4;
}

/// `enum xskit_bond_mode`.
fn mode_id(mode: XdpBondMode) -> u32 {
    match mode {
        XdpBondMode::ActiveBackup => 1,
        XdpBondMode::BalanceXor(_) => 2,
        XdpBondMode::BalanceRr { .. } => 3,
    }
}

/// One member's attached program and its maps.
struct Attached {
    program: XdpProgram,
    config: Array<MapData, u32>,
    ifindex: Array<MapData, u32>,
    devmap: DevMap<MapData>,
    counter: Option<PerCpuArray<MapData, u64>>,
    drops: PerCpuArray<MapData, u64>,
}

/// An XDP program attached to every member of a bond, sending packets back out of the bond.
pub struct XdpBond {
    members: Vec<Interface>,
    attached: Vec<Attached>,
    mode: XdpBondMode,
    /// Which members may carry traffic, and the active one.
    state: Members,
}

impl std::fmt::Debug for XdpBond {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XdpBond")
            .field("members", &self.members)
            .field("mode", &self.mode)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl XdpBond {
    /// Attaches xskit's bond reflector (`bpf/xdp_bond_reflect.c`: MACs swapped, out of the
    /// bond) to every member.
    pub fn reflector(members: &[Interface], mode: XdpBondMode, attach: Mode) -> Result<Self> {
        Self::attach(
            members,
            ProgramObject::new(REFLECT_OBJ, "xskit_bond_reflect"),
            Some("reflected"),
            mode,
            attach,
        )
    }

    /// Attaches xskit's bond XDP_DROP program (`bpf/xdp_bond_drop.c`: refuses what an inactive
    /// member receives, as the bond's programs do, then drops and counts) to every member:
    /// what a drop program pays for being a bond's.
    pub fn dropper(members: &[Interface], mode: XdpBondMode, attach: Mode) -> Result<Self> {
        Self::attach(
            members,
            ProgramObject::new(DROP_OBJ, "xskit_bond_drop_all"),
            Some("dropped_here"),
            mode,
            attach,
        )
    }

    /// Attaches `object` (which includes `xskit_bond.h`) to every member and fills its maps;
    /// `counter` names a per-CPU u64 array of the object to read with [`XdpBond::count`].
    pub fn attach(
        members: &[Interface],
        object: ProgramObject<'_>,
        counter: Option<&str>,
        mode: XdpBondMode,
        attach: Mode,
    ) -> Result<Self> {
        let state = Members::new(members.len())?;
        for (i, m) in members.iter().enumerate() {
            if members[..i].iter().any(|o| o.index() == m.index()) {
                return Err(Error::MemberTwice {
                    name: m.name().to_string(),
                });
            }
        }
        let mut attached = Vec::with_capacity(members.len());
        for iface in members {
            let program = XdpProgram::attach_object(iface, object, attach, false)?;
            attached.push(Attached {
                config: program.take_map("xskit_bond_config")?,
                ifindex: program.take_map("xskit_bond_ifindex")?,
                devmap: program.take_map("xskit_bond_members")?,
                counter: counter.map(|name| program.take_map(name)).transpose()?,
                drops: program.take_map("xskit_bond_drops")?,
                program,
            });
        }
        let mut bond = XdpBond {
            members: members.to_vec(),
            attached,
            mode,
            state,
        };
        bond.write_maps()?;
        Ok(bond)
    }

    /// Marks a member up or down (carrier) and rewrites every member's maps; the programs
    /// stay attached. An active member that goes down hands over to the first usable one.
    pub fn set_up(&mut self, member: usize, up: bool) -> Result<()> {
        self.state.set_up(member, up)?;
        self.write_maps()
    }

    /// Lets a member carry traffic or not (the control plane's "distributing", LACP's).
    pub fn set_distributing(&mut self, member: usize, distributing: bool) -> Result<()> {
        self.state.set_distributing(member, distributing)?;
        self.write_maps()
    }

    /// The usable members, in slot order.
    pub fn usable(&self) -> &[usize] {
        self.state.usable()
    }

    /// The attached programs, in member order.
    pub fn programs(&self) -> impl Iterator<Item = &XdpProgram> {
        self.attached.iter().map(|a| &a.program)
    }

    fn write_maps(&mut self) -> Result<()> {
        let usable = self.state.usable();
        let active_slot = self.state.active_slot() as u32;
        let (policy, per) = match self.mode {
            XdpBondMode::BalanceXor(p) => (p.id(), 0),
            XdpBondMode::BalanceRr { packets_per_slave } => (0, packets_per_slave),
            XdpBondMode::ActiveBackup => (0, 0),
        };
        for a in &mut self.attached {
            // Fewer slots first, so no packet reads a slot being rewritten; then the slots,
            // then their number.
            a.config
                .set(setting::USABLE, 0, 0)
                .map_err(bpf("writing the bond's settings"))?;
            for (slot, &m) in usable.iter().enumerate() {
                let ifindex = self.members[m].index();
                a.ifindex
                    .set(slot as u32, ifindex, 0)
                    .map_err(bpf("writing the bond's members"))?;
                a.devmap
                    .set(slot as u32, ifindex, None, 0)
                    .map_err(bpf("writing the bond's devmap"))?;
            }
            for (key, value) in [
                (setting::MODE, mode_id(self.mode)),
                (setting::POLICY, policy),
                (setting::ACTIVE, active_slot),
                (setting::RR_PER, per),
                (setting::USABLE, usable.len() as u32),
            ] {
                a.config
                    .set(key, value, 0)
                    .map_err(bpf("writing the bond's settings"))?;
            }
        }
        Ok(())
    }

    /// The object's counter (`counter` of [`XdpBond::attach`]), summed over members and CPUs.
    pub fn count(&self) -> Result<u64> {
        let mut total = 0;
        for a in &self.attached {
            if let Some(c) = &a.counter {
                total += c
                    .get(&0, 0)
                    .map_err(bpf("reading the counter"))?
                    .iter()
                    .sum::<u64>();
            }
        }
        Ok(total)
    }

    /// Packets dropped for want of a usable member, summed over members and CPUs.
    pub fn dropped(&self) -> Result<u64> {
        self.drops(&[0, 1])
    }

    /// Packets that arrived on an inactive member (active-backup) and were dropped.
    pub fn dropped_inactive(&self) -> Result<u64> {
        self.drops(&[2])
    }

    /// Makes `member` the active one (active-backup), if it is usable.
    pub fn set_active(&mut self, member: usize) -> Result<()> {
        self.state.set_active(member)?;
        self.write_maps()
    }

    /// The active member (active-backup).
    pub fn active(&self) -> Option<usize> {
        self.state.active()
    }

    fn drops(&self, slots: &[u32]) -> Result<u64> {
        let mut total = 0;
        for a in &self.attached {
            for &slot in slots {
                total += a
                    .drops
                    .get(&slot, 0)
                    .map_err(bpf("reading the drop counter"))?
                    .iter()
                    .sum::<u64>();
            }
        }
        Ok(total)
    }
}
