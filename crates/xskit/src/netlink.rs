//! Device queries over netlink: link attributes (queues, MTU, the attached XDP program) from
//! rtnetlink, and XDP/AF_XDP capabilities from the generic netlink `netdev` family.

use crate::sys::netlink::NetlinkSocket;
use crate::sys::SyscallError;

const NLMSG_HDRLEN: usize = 16;
const NLA_HDRLEN: usize = 4;
const NLA_TYPE_MASK: u16 = 0x3fff;

const RTM_GETLINK: u16 = 18;
const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTMGRP_LINK: u32 = 1;
const IFF_UP: u32 = 0x1;
const IFF_LOWER_UP: u32 = 0x1_0000;
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINK: u16 = 5;
const IFLA_MASTER: u16 = 10;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const IFLA_BOND_MODE: u16 = 1;
const IFLA_BOND_ACTIVE_SLAVE: u16 = 2;
const IFLA_BOND_XMIT_HASH_POLICY: u16 = 14;
const IFLA_STATS64: u16 = 23;
const IFLA_NUM_TX_QUEUES: u16 = 31;
const IFLA_NUM_RX_QUEUES: u16 = 32;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_XDP: u16 = 43;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;

const GENL_ID_CTRL: u16 = 0x10;
const CTRL_CMD_GETFAMILY: u8 = 3;
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
const NETDEV_CMD_DEV_GET: u8 = 1;
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
const NETDEV_A_DEV_XDP_ZC_MAX_SEGS: u16 = 4;
const NETDEV_A_DEV_XDP_RX_METADATA_FEATURES: u16 = 5;
const NETDEV_A_DEV_XSK_FEATURES: u16 = 6;

/// Which XDP program, if any, is attached to a device, and in which mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpAttachment {
    /// The id of the native (driver) mode program, or 0.
    pub drv_prog_id: u32,
    /// The id of the generic (SKB) mode program, or 0.
    pub skb_prog_id: u32,
    /// The id reported without a mode (offloaded or single-mode kernels), or 0.
    pub prog_id: u32,
}

impl XdpAttachment {
    /// The id of any attached program.
    pub fn any(&self) -> Option<u32> {
        [self.drv_prog_id, self.skb_prog_id, self.prog_id]
            .into_iter()
            .find(|&id| id != 0)
    }

    /// "native" or "generic" for the mode the attached program runs in.
    pub fn mode_name(&self) -> &'static str {
        if self.drv_prog_id != 0 {
            "native"
        } else if self.skb_prog_id != 0 {
            "generic"
        } else {
            "unknown"
        }
    }
}

/// Link attributes of a device, from RTM_GETLINK.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkInfo {
    /// The interface index.
    pub ifindex: u32,
    /// The interface name.
    pub name: String,
    /// The MTU.
    pub mtu: u32,
    /// The hardware address, for Ethernet-like devices.
    pub mac: Option<[u8; 6]>,
    /// Receive queues.
    pub rx_queues: u32,
    /// Transmit queues.
    pub tx_queues: u32,
    /// The attached XDP program.
    pub xdp: XdpAttachment,
    /// The device's packet counters (`IFLA_STATS64`).
    pub stats: LinkStats,
    /// Administratively up (IFF_UP).
    pub admin_up: bool,
    /// Carrier (IFF_LOWER_UP): the link is up and can carry packets.
    pub carrier: bool,
    /// The device this one is enslaved to (a bond, a bridge), by ifindex.
    pub master: Option<u32>,
    /// The link's kind (`IFLA_INFO_KIND`: "veth", "bond", "bridge", ...), when it has one.
    pub kind: Option<String>,
    /// The device this one is tied to (`IFLA_LINK`): a veth's peer, a VLAN's parent.
    pub link: Option<u32>,
    /// Whether `link` is in another network namespace (`IFLA_LINK_NETNSID` given), where
    /// its ifindex names some other device.
    pub link_elsewhere: bool,
    /// A kernel bond's settings, for a link of kind "bond".
    pub bond: Option<KernelBond>,
}

/// The settings of a kernel bond (`IFLA_INFO_DATA` of a "bond" link).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelBond {
    /// `BOND_MODE_*`: 0 balance-rr, 1 active-backup, 2 balance-xor, 3 broadcast, 4 802.3ad,
    /// 5 balance-tlb, 6 balance-alb.
    pub mode: u8,
    /// `BOND_XMIT_POLICY_*` (0 layer2, 1 layer3+4, 2 layer2+3, 3 encap2+3, 4 encap3+4,
    /// 5 vlan+srcmac).
    pub xmit_hash_policy: u8,
    /// The active member's ifindex (active-backup), if any.
    pub active_slave: Option<u32>,
}

impl KernelBond {
    /// The mode's name, as `ip link` spells it.
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            0 => "balance-rr",
            1 => "active-backup",
            2 => "balance-xor",
            3 => "broadcast",
            4 => "802.3ad",
            5 => "balance-tlb",
            6 => "balance-alb",
            _ => "unknown",
        }
    }

    /// The transmit hash policy's name, as `ip link` spells it.
    pub fn policy_name(&self) -> &'static str {
        match self.xmit_hash_policy {
            0 => "layer2",
            1 => "layer3+4",
            2 => "layer2+3",
            3 => "encap2+3",
            4 => "encap3+4",
            5 => "vlan+srcmac",
            _ => "unknown",
        }
    }
}

/// A device's counters, the first eight of `struct rtnl_link_stats64`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets received.
    pub rx_packets: u64,
    /// Packets transmitted.
    pub tx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Received packets dropped (no buffer, too long, ...).
    pub rx_dropped: u64,
    /// Packets the device dropped on transmit (on veth: the peer refused them, for example
    /// frames above its MTU).
    pub tx_dropped: u64,
}

/// `netdev_xdp_act` bits of `xdp-features`.
pub mod xdp_act {
    /// XDP_PASS, XDP_DROP, XDP_TX.
    pub const BASIC: u64 = 1 << 0;
    /// XDP_REDIRECT to other devices and sockets.
    pub const REDIRECT: u64 = 1 << 1;
    /// Frames redirected from elsewhere can be transmitted (ndo_xdp_xmit).
    pub const NDO_XMIT: u64 = 1 << 2;
    /// AF_XDP zero-copy.
    pub const XSK_ZEROCOPY: u64 = 1 << 3;
    /// Hardware offload.
    pub const HW_OFFLOAD: u64 = 1 << 4;
    /// Multi-buffer receive.
    pub const RX_SG: u64 = 1 << 5;
    /// Multi-buffer ndo_xdp_xmit.
    pub const NDO_XMIT_SG: u64 = 1 << 6;
}

/// XDP and AF_XDP capabilities of a device, from the netdev generic netlink family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceFeatures {
    /// `xdp-features`: a set of [`xdp_act`] bits.
    pub xdp_features: u64,
    /// `xdp-zc-max-segs`: buffers per packet in zero-copy multi-buffer mode.
    pub zc_max_segs: u32,
    /// `xdp-rx-metadata-features` bits (timestamp, hash, vlan tag).
    pub rx_metadata_features: u64,
    /// `xsk-features` bits (tx timestamp, tx checksum, launch time).
    pub xsk_features: u64,
}

impl DeviceFeatures {
    /// Native (driver) XDP.
    pub fn native_xdp(&self) -> bool {
        self.xdp_features & xdp_act::BASIC != 0
    }
    /// AF_XDP zero-copy.
    pub fn zero_copy(&self) -> bool {
        self.xdp_features & xdp_act::XSK_ZEROCOPY != 0
    }
    /// AF_XDP transmit checksum offload in zero-copy (`xsk-features` tx-checksum): the
    /// driver honours transmit metadata's checksum request.
    pub fn tx_checksum(&self) -> bool {
        self.xsk_features & (1 << 1) != 0
    }
    /// Multi-buffer receive in native mode.
    pub fn rx_sg(&self) -> bool {
        self.xdp_features & xdp_act::RX_SG != 0
    }
    /// Names of the `xdp-features` bits that are set.
    pub fn xdp_feature_names(&self) -> Vec<&'static str> {
        const NAMES: [&str; 7] = [
            "basic",
            "redirect",
            "ndo-xmit",
            "xsk-zerocopy",
            "hw-offload",
            "rx-sg",
            "ndo-xmit-sg",
        ];
        NAMES
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.xdp_features & (1 << bit) != 0)
            .map(|(_, name)| *name)
            .collect()
    }
    /// Names of the `xsk-features` bits that are set.
    pub fn xsk_feature_names(&self) -> Vec<&'static str> {
        const NAMES: [&str; 3] = ["tx-timestamp", "tx-checksum", "tx-launch-time-fifo"];
        NAMES
            .iter()
            .enumerate()
            .filter(|(bit, _)| self.xsk_features & (1 << bit) != 0)
            .map(|(_, name)| *name)
            .collect()
    }
}

/// A netlink request under construction.
struct Request {
    buf: Vec<u8>,
}

impl Request {
    fn new(msg_type: u16, flags: u16) -> Self {
        let mut buf = vec![0u8; NLMSG_HDRLEN];
        buf[4..6].copy_from_slice(&msg_type.to_ne_bytes());
        buf[6..8].copy_from_slice(&(flags | libc::NLM_F_REQUEST as u16).to_ne_bytes());
        buf[8..12].copy_from_slice(&1u32.to_ne_bytes()); // sequence number
        Request { buf }
    }

    fn bytes(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    fn attr(&mut self, kind: u16, payload: &[u8]) {
        let len = (NLA_HDRLEN + payload.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(payload);
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        let len = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

/// Iterates over the netlink attributes in `data`, stopping at the first malformed one.
fn attrs(data: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.len() < NLA_HDRLEN {
            return None;
        }
        let len = u16::from_ne_bytes([rest[0], rest[1]]) as usize;
        let kind = u16::from_ne_bytes([rest[2], rest[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > rest.len() {
            return None;
        }
        let payload = &rest[NLA_HDRLEN..len];
        let aligned = (len + 3) & !3;
        rest = rest.get(aligned..).unwrap_or(&[]);
        Some((kind, payload))
    })
}

fn u32_of(payload: &[u8]) -> Option<u32> {
    payload
        .get(..4)
        .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
}

fn u64_of(payload: &[u8]) -> Option<u64> {
    match payload.len() {
        4 => u32_of(payload).map(u64::from),
        8.. => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&payload[..8]);
            Some(u64::from_ne_bytes(b))
        }
        _ => None,
    }
}

/// Sends `request` and collects the payloads of the answer's messages (after their netlink
/// header) until the kernel acks or says done.
fn transact(protocol: libc::c_int, request: Vec<u8>) -> Result<Vec<(u16, Vec<u8>)>, SyscallError> {
    let sock = NetlinkSocket::open(protocol)?;
    sock.send(&request)?;
    ANSWER.with_borrow_mut(|buf| collect_answer(&sock, buf))
}

thread_local! {
    /// Where answers are received, one buffer a thread, zeroed once: the supervisor asks
    /// after its links several times a second, and zeroing 32 KiB a request cost more than
    /// the request itself.
    static ANSWER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 32 * 1024]);
}

/// The payloads of the answer to the request just sent on `sock`, received into `buf`.
fn collect_answer(
    sock: &NetlinkSocket,
    buf: &mut [u8],
) -> Result<Vec<(u16, Vec<u8>)>, SyscallError> {
    let mut out = Vec::new();
    loop {
        let n = sock.recv(buf)?;
        let mut rest = &buf[..n];
        while rest.len() >= NLMSG_HDRLEN {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let kind = u16::from_ne_bytes([rest[4], rest[5]]);
            if len < NLMSG_HDRLEN || len > rest.len() {
                return Err(SyscallError {
                    call: "netlink: malformed answer",
                    os_error: std::io::Error::from_raw_os_error(libc::EPROTO),
                });
            }
            let payload = &rest[NLMSG_HDRLEN..len];
            match kind as libc::c_int {
                libc::NLMSG_DONE => return Ok(out),
                libc::NLMSG_ERROR => {
                    let errno = payload
                        .get(..4)
                        .map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                        .unwrap_or(-libc::EPROTO);
                    if errno == 0 {
                        return Ok(out);
                    }
                    return Err(SyscallError {
                        call: "netlink request",
                        os_error: std::io::Error::from_raw_os_error(-errno),
                    });
                }
                _ => out.push((kind, payload.to_vec())),
            }
            rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
        }
    }
}

/// Link attributes of the device with index `ifindex` in the calling thread's namespace.
pub fn link_info(ifindex: u32) -> Result<LinkInfo, SyscallError> {
    let mut req = Request::new(RTM_GETLINK, libc::NLM_F_ACK as u16);
    // struct ifinfomsg: family, pad, type, index, flags, change.
    let mut ifinfo = [0u8; 16];
    ifinfo[4..8].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    req.bytes(&ifinfo);
    let answers = transact(libc::NETLINK_ROUTE, req.finish())?;
    let (_, payload) = answers
        .into_iter()
        .find(|(kind, _)| *kind == RTM_NEWLINK)
        .ok_or(SyscallError {
            call: "netlink RTM_GETLINK: no answer",
            os_error: std::io::Error::from_raw_os_error(libc::ENODEV),
        })?;
    Ok(parse_ifinfo(&payload).unwrap_or_else(|| parse_link(ifindex, &[])))
}

/// Every link of the calling thread's namespace (an RTM_GETLINK dump).
pub fn links() -> Result<Vec<LinkInfo>, SyscallError> {
    let mut req = Request::new(RTM_GETLINK, libc::NLM_F_DUMP as u16);
    req.bytes(&[0u8; 16]);
    let answers = transact(libc::NETLINK_ROUTE, req.finish())?;
    Ok(answers
        .iter()
        .filter(|(kind, _)| *kind == RTM_NEWLINK)
        .filter_map(|(_, payload)| parse_ifinfo(payload))
        .collect())
}

/// A struct ifinfomsg and its attributes: the link it describes.
fn parse_ifinfo(payload: &[u8]) -> Option<LinkInfo> {
    let header = payload.get(..16)?;
    let ifindex = i32::from_ne_bytes([header[4], header[5], header[6], header[7]]) as u32;
    let flags = u32::from_ne_bytes([header[8], header[9], header[10], header[11]]);
    let mut info = parse_link(ifindex, &payload[16..]);
    info.admin_up = flags & IFF_UP != 0;
    info.carrier = flags & IFF_LOWER_UP != 0;
    Some(info)
}

/// A change of a link, as the kernel announces it to RTMGRP_LINK.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkEvent {
    /// The link as it is now (for a removed link: as it was).
    pub link: LinkInfo,
    /// The link was deleted, or left this network namespace.
    pub removed: bool,
}

/// The kernel's link notifications (carrier up and down, links added and removed) in the
/// calling thread's network namespace, as they happen: the event-driven analogue of polling
/// each link (bonding's miimon).
#[derive(Debug)]
pub struct LinkEvents {
    sock: NetlinkSocket,
    buf: Vec<u8>,
    pending: std::collections::VecDeque<LinkEvent>,
}

impl LinkEvents {
    /// Subscribes to the link notifications of this thread's namespace.
    pub fn subscribe() -> Result<Self, SyscallError> {
        let sock = NetlinkSocket::open(libc::NETLINK_ROUTE)?;
        sock.subscribe(RTMGRP_LINK)?;
        Ok(LinkEvents {
            sock,
            buf: vec![0u8; 64 * 1024],
            pending: std::collections::VecDeque::new(),
        })
    }

    /// The next link event, waiting up to `timeout` (`None`: until one comes); `None` when
    /// none came in time or a signal cut the wait short.
    pub fn next(
        &mut self,
        timeout: Option<std::time::Duration>,
    ) -> Result<Option<LinkEvent>, SyscallError> {
        if let Some(e) = self.pending.pop_front() {
            return Ok(Some(e));
        }
        if xskit_os::poll(self.sock.fd(), libc::POLLIN, timeout)? & libc::POLLIN == 0 {
            return Ok(None);
        }
        let n = self.sock.recv(&mut self.buf)?;
        let mut rest = &self.buf[..n];
        while rest.len() >= NLMSG_HDRLEN {
            let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
            let kind = u16::from_ne_bytes([rest[4], rest[5]]);
            if len < NLMSG_HDRLEN || len > rest.len() {
                break;
            }
            if kind == RTM_NEWLINK || kind == RTM_DELLINK {
                if let Some(link) = parse_ifinfo(&rest[NLMSG_HDRLEN..len]) {
                    self.pending.push_back(LinkEvent {
                        link,
                        removed: kind == RTM_DELLINK,
                    });
                }
            }
            rest = rest.get((len + 3) & !3..).unwrap_or(&[]);
        }
        Ok(self.pending.pop_front())
    }
}

fn parse_link(ifindex: u32, data: &[u8]) -> LinkInfo {
    let mut info = LinkInfo {
        ifindex,
        ..LinkInfo::default()
    };
    for (kind, payload) in attrs(data) {
        match kind {
            IFLA_ADDRESS => info.mac = payload.try_into().ok(),
            IFLA_IFNAME => info.name = c_string(payload),
            IFLA_MTU => info.mtu = u32_of(payload).unwrap_or(0),
            IFLA_MASTER => info.master = u32_of(payload).filter(|&m| m != 0),
            IFLA_LINK => info.link = u32_of(payload).filter(|&l| l != 0 && l != ifindex),
            IFLA_LINK_NETNSID => info.link_elsewhere = true,
            IFLA_LINKINFO => parse_link_info(payload, &mut info),
            IFLA_NUM_RX_QUEUES => info.rx_queues = u32_of(payload).unwrap_or(0),
            IFLA_NUM_TX_QUEUES => info.tx_queues = u32_of(payload).unwrap_or(0),
            IFLA_STATS64 => info.stats = parse_stats64(payload).unwrap_or(info.stats),
            IFLA_XDP => {
                for (xkind, xpayload) in attrs(payload) {
                    let value = u32_of(xpayload).unwrap_or(0);
                    match xkind {
                        IFLA_XDP_PROG_ID => info.xdp.prog_id = value,
                        IFLA_XDP_DRV_PROG_ID => info.xdp.drv_prog_id = value,
                        IFLA_XDP_SKB_PROG_ID => info.xdp.skb_prog_id = value,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    info
}

/// A NUL-terminated name.
fn c_string(payload: &[u8]) -> String {
    let name = payload.split(|&b| b == 0).next().unwrap_or(&[]);
    String::from_utf8_lossy(name).into_owned()
}

/// IFLA_LINKINFO: the link's kind and, for a bond, its mode, hash policy and active member.
fn parse_link_info(payload: &[u8], info: &mut LinkInfo) {
    for (ikind, ipayload) in attrs(payload) {
        match ikind {
            IFLA_INFO_KIND => info.kind = Some(c_string(ipayload)),
            IFLA_INFO_DATA if info.kind.as_deref() == Some("bond") => {
                let mut bond = KernelBond::default();
                for (bkind, bpayload) in attrs(ipayload) {
                    match bkind {
                        IFLA_BOND_MODE => bond.mode = bpayload.first().copied().unwrap_or(0),
                        IFLA_BOND_XMIT_HASH_POLICY => {
                            bond.xmit_hash_policy = bpayload.first().copied().unwrap_or(0)
                        }
                        IFLA_BOND_ACTIVE_SLAVE => {
                            bond.active_slave = u32_of(bpayload).filter(|&i| i != 0)
                        }
                        _ => {}
                    }
                }
                info.bond = Some(bond);
            }
            _ => {}
        }
    }
}

/// IFLA_STATS64's first eight counters, if the attribute holds them.
fn parse_stats64(payload: &[u8]) -> Option<LinkStats> {
    let v: Vec<u64> = payload
        .chunks_exact(8)
        .take(8)
        .map(|c| u64::from_ne_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    let [rx_packets, tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors, rx_dropped, tx_dropped] =
        v[..]
    else {
        return None;
    };
    Some(LinkStats {
        rx_packets,
        tx_packets,
        rx_bytes,
        tx_bytes,
        rx_errors,
        tx_errors,
        rx_dropped,
        tx_dropped,
    })
}

fn genl_request(family: u16, cmd: u8, version: u8, flags: u16) -> Request {
    let mut req = Request::new(family, flags);
    req.bytes(&[cmd, version, 0, 0]);
    req
}

fn netdev_family_id() -> Result<u16, SyscallError> {
    let mut req = genl_request(GENL_ID_CTRL, CTRL_CMD_GETFAMILY, 1, libc::NLM_F_ACK as u16);
    req.attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0");
    let answers = transact(libc::NETLINK_GENERIC, req.finish())?;
    let id = answers
        .iter()
        .flat_map(|(_, p)| attrs(p.get(4..).unwrap_or(&[])))
        .find(|(kind, _)| *kind == CTRL_ATTR_FAMILY_ID)
        .and_then(|(_, p)| p.get(..2).map(|b| u16::from_ne_bytes([b[0], b[1]])))
        .ok_or(SyscallError {
            call: "genetlink: no netdev family (kernel older than 6.3)",
            os_error: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
        });
    id
}

/// The XDP and AF_XDP capabilities of the device with index `ifindex`.
pub fn device_features(ifindex: u32) -> Result<DeviceFeatures, SyscallError> {
    let family = netdev_family_id()?;
    let mut req = genl_request(family, NETDEV_CMD_DEV_GET, 1, libc::NLM_F_ACK as u16);
    req.attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes());
    let answers = transact(libc::NETLINK_GENERIC, req.finish())?;
    let mut features = DeviceFeatures::default();
    for (_, payload) in &answers {
        for (kind, value) in attrs(payload.get(4..).unwrap_or(&[])) {
            match kind {
                NETDEV_A_DEV_XDP_FEATURES => features.xdp_features = u64_of(value).unwrap_or(0),
                NETDEV_A_DEV_XDP_ZC_MAX_SEGS => features.zc_max_segs = u32_of(value).unwrap_or(0),
                NETDEV_A_DEV_XDP_RX_METADATA_FEATURES => {
                    features.rx_metadata_features = u64_of(value).unwrap_or(0)
                }
                NETDEV_A_DEV_XSK_FEATURES => features.xsk_features = u64_of(value).unwrap_or(0),
                _ => {}
            }
        }
    }
    Ok(features)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_walk_stops_at_lying_length() {
        // A valid u32 attribute followed by one whose length runs past the buffer.
        let mut data = vec![8, 0, 4, 0, 0x34, 0x12, 0, 0];
        data.extend_from_slice(&[200, 0, 3, 0, 1, 2]);
        let found: Vec<_> = attrs(&data).collect();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].0, 4);
        assert_eq!(u32_of(found[0].1), Some(0x1234));
    }

    #[test]
    fn attribute_walk_rejects_short_header() {
        assert_eq!(attrs(&[2, 0, 1]).count(), 0);
        assert_eq!(attrs(&[2, 0, 1, 0]).count(), 0, "length below header size");
    }

    #[test]
    fn link_parse_reads_nested_xdp() {
        let mut req = Request::new(0, 0);
        req.attr(IFLA_MTU, &1500u32.to_ne_bytes());
        req.attr(IFLA_NUM_RX_QUEUES, &4u32.to_ne_bytes());
        let mut nested = Request { buf: Vec::new() };
        nested.attr(IFLA_XDP_SKB_PROG_ID, &77u32.to_ne_bytes());
        req.attr(IFLA_XDP, &nested.buf);
        let info = parse_link(3, &req.buf[NLMSG_HDRLEN..]);
        assert_eq!(info.mtu, 1500);
        assert_eq!(info.rx_queues, 4);
        assert_eq!(info.xdp.any(), Some(77));
        assert_eq!(info.xdp.mode_name(), "generic");
    }

    #[test]
    fn link_parse_reads_a_kernel_bond_and_a_master() {
        let mut req = Request::new(0, 0);
        req.attr(IFLA_MASTER, &9u32.to_ne_bytes());
        let mut data = Request { buf: Vec::new() };
        data.attr(IFLA_BOND_MODE, &[2]);
        data.attr(IFLA_BOND_ACTIVE_SLAVE, &5u32.to_ne_bytes());
        data.attr(IFLA_BOND_XMIT_HASH_POLICY, &[1]);
        let mut linkinfo = Request { buf: Vec::new() };
        linkinfo.attr(IFLA_INFO_KIND, b"bond\0");
        linkinfo.attr(IFLA_INFO_DATA, &data.buf);
        req.attr(IFLA_LINKINFO, &linkinfo.buf);
        let info = parse_link(3, &req.buf[NLMSG_HDRLEN..]);
        assert_eq!(info.master, Some(9));
        assert_eq!(info.kind.as_deref(), Some("bond"));
        let bond = info.bond.expect("a bond");
        assert_eq!(
            (bond.mode_name(), bond.policy_name()),
            ("balance-xor", "layer3+4")
        );
        assert_eq!(bond.active_slave, Some(5));
    }
}
