//! Network interfaces by name, with their netlink-reported attributes and XDP capabilities.

use crate::error::{Error, Result};
use crate::netlink::{self, DeviceFeatures, LinkInfo};
use crate::sys;

/// A network interface in the calling thread's network namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    name: String,
    index: u32,
}

impl Interface {
    /// Looks up `name`; fails with a clear error if there is no such interface here.
    pub fn by_name(name: &str) -> Result<Self> {
        let index = sys::if_nametoindex(name).ok_or_else(|| Error::NoSuchInterface {
            name: name.to_string(),
        })?;
        Ok(Interface {
            name: name.to_string(),
            index,
        })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Link attributes: MTU, queue counts, the attached XDP program.
    pub fn link_info(&self) -> Result<LinkInfo> {
        netlink::link_info(self.index).map_err(|e| match e.errno() {
            Some(libc::ENODEV) => Error::NoSuchInterface {
                name: self.name.clone(),
            },
            _ => Error::Syscall(e),
        })
    }

    /// Receive queues the device uses now (its ethtool channels), which can be fewer than
    /// [`LinkInfo::rx_queues`], the most it could use; that count when the driver does not say.
    pub fn active_rx_queues(&self) -> Result<u32> {
        Ok(self.active_queues()?.0)
    }

    /// Receive and transmit queues the device uses now (its ethtool channels): what a socket
    /// may bind to. [`LinkInfo::rx_queues`] and `tx_queues` are what was allocated, which can
    /// be more (a default veth allocates 2 and uses 1); those counts when the driver does
    /// not say.
    pub fn active_queues(&self) -> Result<(u32, u32)> {
        match sys::ethtool::active_queues(&self.name)? {
            Some(n) => Ok(n),
            None => {
                let link = self.link_info()?;
                Ok((link.rx_queues.max(1), link.tx_queues.max(1)))
            }
        }
    }

    /// The link's speed in Mbit/s and whether it is full duplex (ethtool), or `None` when the
    /// driver does not say.
    pub fn link_speed(&self) -> Result<Option<(u32, bool)>> {
        Ok(sys::ethtool::link_speed(&self.name)?)
    }

    /// The driver of the interface's device, from sysfs; `None` for a device without one
    /// (veth, a bond, a bridge).
    pub fn driver(&self) -> Option<Driver> {
        let dir = std::path::Path::new("/sys/class/net").join(&self.name);
        let driver = std::fs::canonicalize(dir.join("device/driver")).ok()?;
        let name = driver.file_name()?.to_string_lossy().into_owned();
        // A loadable module has an initstate; a driver built into the kernel has none.
        let module = std::fs::canonicalize(driver.join("module"))
            .is_ok_and(|m| m.join("initstate").exists());
        Some(Driver { name, module })
    }

    /// XDP and AF_XDP capabilities from the netdev netlink family.
    pub fn features(&self) -> Result<DeviceFeatures> {
        Ok(netlink::device_features(self.index)?)
    }

    /// Puts the interface in promiscuous mode until the returned guard is dropped, so that
    /// unicast frames for other hosts reach XDP: a NIC drops them by destination MAC before
    /// any program runs (veth does not filter, virtio_net and real NICs do). The kernel
    /// counts promiscuity per holder and drops this hold when the process ends, however it
    /// ends, so a setting made by someone else (`ip link set IF promisc on`) is left as it was.
    pub fn promiscuous(&self) -> Result<Promiscuous> {
        let fd = xskit_os::promisc::hold(self.index).map_err(|e| match e.errno() {
            Some(libc::EPERM | libc::EACCES) => {
                Error::not_permitted("putting an interface in promiscuous mode")
            }
            Some(libc::ENODEV) => Error::NoSuchInterface {
                name: self.name.clone(),
            },
            _ => Error::Syscall(e),
        })?;
        Ok(Promiscuous {
            iface: self.clone(),
            _hold: fd,
        })
    }
}

/// A device's driver ([`Interface::driver`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Driver {
    /// Its name (`virtio_net`, `ice`, `mlx5_core`).
    pub name: String,
    /// Whether it is a loadable module rather than part of the kernel.
    pub module: bool,
}

impl Driver {
    /// What transmitting in zero-copy through this driver costs, where xskit knows of a
    /// defect. virtio_net as a module (Debian's kernels): its AF_XDP transmit puts one
    /// virtio-net header, a static variable of the module, in front of every frame and maps
    /// it for DMA with the address arithmetic of the kernel's own image, which is wrong for a
    /// module's address; the device reads the header from another guest-physical page.
    pub fn zero_copy_transmit_caveat(&self) -> Option<&'static str> {
        (self.name == "virtio_net" && self.module).then_some(
            "virtio_net is a module here, and its zero-copy transmit (Linux 6.11 to 7.3 at \
             least) gives the device a wrong address for the virtio-net header in front of \
             every frame: where that address falls inside the VM's memory, the host drops \
             the frames or sends them with offload flags read from another page. Transmit in \
             copy mode on this device, or use a kernel with virtio_net built in",
        )
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.module { "module" } else { "built in" };
        write!(f, "{} ({kind})", self.name)
    }
}

/// An interface held in promiscuous mode ([`Interface::promiscuous`]); dropping it lets go.
#[derive(Debug)]
pub struct Promiscuous {
    iface: Interface,
    _hold: std::os::fd::OwnedFd,
}

impl Promiscuous {
    /// The interface held.
    pub fn interface(&self) -> &Interface {
        &self.iface
    }
}

/// An identity for the calling thread's network namespace (the inode of its nsfs file), so that
/// equal interface indexes in different namespaces are told apart.
pub(crate) fn current_netns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| m.ino())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_virtio_net_as_a_module_has_the_zero_copy_transmit_caveat() {
        let driver = |name: &str, module| Driver {
            name: name.into(),
            module,
        };
        assert!(driver("virtio_net", true)
            .zero_copy_transmit_caveat()
            .is_some_and(|c| c.contains("copy mode")));
        assert_eq!(
            driver("virtio_net", false).zero_copy_transmit_caveat(),
            None
        );
        assert_eq!(driver("ice", true).zero_copy_transmit_caveat(), None);
        assert_eq!(
            driver("virtio_net", true).to_string(),
            "virtio_net (module)"
        );
        assert_eq!(driver("ice", false).to_string(), "ice (built in)");
    }
}
