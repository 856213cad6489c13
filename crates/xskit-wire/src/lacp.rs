//! IEEE 802.1AX slow protocols (EtherType 0x8809, sent to 01:80:C2:00:00:02): the LACPDU
//! and the Marker PDU. Each is 110 bytes after the Ethernet header, with fixed TLVs at fixed
//! offsets. A PDU whose subtype, version, TLV types or lengths are not the standard's is
//! refused by `check_len`, so that a receiver counts it as bad and ignores it.

use crate::{get_u16, set_u16, Error, Result};

/// The slow protocols' EtherType.
pub const ETHERTYPE: u16 = 0x8809;
/// The slow protocols' multicast destination.
pub const DESTINATION: [u8; 6] = [0x01, 0x80, 0xc2, 0x00, 0x00, 0x02];
/// Bytes of a LACPDU or Marker PDU after the Ethernet header.
pub const PDU_LEN: usize = 110;

/// Slow protocol subtypes.
pub mod subtype {
    /// LACP.
    pub const LACP: u8 = 1;
    /// The marker protocol.
    pub const MARKER: u8 = 2;
}

/// The bits of an actor's or partner's state.
pub mod state {
    /// LACP_Activity: active (sends PDUs on its own) rather than passive.
    pub const ACTIVITY: u8 = 0x01;
    /// LACP_Timeout: short (fast, 1 s periodic, 3 s timeout) rather than long.
    pub const TIMEOUT: u8 = 0x02;
    /// Aggregation: the link may be aggregated.
    pub const AGGREGATION: u8 = 0x04;
    /// Synchronization: the link is attached to the right aggregator.
    pub const SYNCHRONIZATION: u8 = 0x08;
    /// Collecting: frames received on the link are collected.
    pub const COLLECTING: u8 = 0x10;
    /// Distributing: frames are sent on the link.
    pub const DISTRIBUTING: u8 = 0x20;
    /// Defaulted: the partner information is the administrative default.
    pub const DEFAULTED: u8 = 0x40;
    /// Expired: the receive machine is in EXPIRED.
    pub const EXPIRED: u8 = 0x80;
}

/// One end of a link as a LACPDU describes it (the actor's or the partner's information).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct PortInfo {
    /// System priority (lower is preferred).
    pub system_priority: u16,
    /// System identifier (a MAC address).
    pub system: [u8; 6],
    /// The aggregation key: links with equal keys may aggregate.
    pub key: u16,
    /// Port priority (lower is preferred).
    pub port_priority: u16,
    /// Port number.
    pub port: u16,
    /// State bits ([`state`]).
    pub state: u8,
}

/// TLV types and lengths of the LACPDU, at their fixed offsets.
const ACTOR: usize = 2;
const PARTNER: usize = 22;
const COLLECTOR: usize = 42;
const TERMINATOR: usize = 58;

view! {
    /// A view over a LACPDU (the bytes after the Ethernet header).
    Lacpdu
}

fn port_info(b: &[u8], at: usize) -> PortInfo {
    PortInfo {
        system_priority: get_u16(b, at + 2),
        system: b[at + 4..at + 10].try_into().unwrap_or_default(),
        key: get_u16(b, at + 10),
        port_priority: get_u16(b, at + 12),
        port: get_u16(b, at + 14),
        state: b[at + 16],
    }
}

fn set_port_info(b: &mut [u8], at: usize, tlv: u8, info: &PortInfo) {
    b[at] = tlv;
    b[at + 1] = 20;
    set_u16(b, at + 2, info.system_priority);
    b[at + 4..at + 10].copy_from_slice(&info.system);
    set_u16(b, at + 10, info.key);
    set_u16(b, at + 12, info.port_priority);
    set_u16(b, at + 14, info.port);
    b[at + 16] = info.state;
    b[at + 17..at + 20].fill(0);
}

impl<T: AsRef<[u8]>> Lacpdu<T> {
    /// Checks 110 bytes, subtype 1, a version of 1 or later (a later version's version-1
    /// fields are read, as 802.1AX says), and the actor (1, 20), partner (2, 20), collector
    /// (3, 16) and terminator (0, 0) TLVs where they belong.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        let tlv = |at: usize, kind: u8, len: u8| b[at] == kind && b[at + 1] == len;
        if b.len() < PDU_LEN
            || b[0] != subtype::LACP
            || b[1] == 0
            || !tlv(ACTOR, 1, 20)
            || !tlv(PARTNER, 2, 20)
            || !tlv(COLLECTOR, 3, 16)
            || !tlv(TERMINATOR, 0, 0)
        {
            return Err(Error);
        }
        Ok(())
    }

    /// The LACP version.
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// The sender's information.
    pub fn actor(&self) -> PortInfo {
        port_info(self.buffer.as_ref(), ACTOR)
    }

    /// What the sender knows of its partner (the receiver, when all is well).
    pub fn partner(&self) -> PortInfo {
        port_info(self.buffer.as_ref(), PARTNER)
    }

    /// CollectorMaxDelay, in tens of microseconds.
    pub fn collector_max_delay(&self) -> u16 {
        get_u16(self.buffer.as_ref(), COLLECTOR + 2)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Lacpdu<T> {
    /// Writes a whole version-1 LACPDU, reserved bytes zeroed: 110 bytes.
    pub fn emit(&mut self, actor: &PortInfo, partner: &PortInfo, collector_max_delay: u16) {
        let b = self.buffer.as_mut();
        b[..PDU_LEN].fill(0);
        b[0] = subtype::LACP;
        b[1] = 1;
        set_port_info(b, ACTOR, 1, actor);
        set_port_info(b, PARTNER, 2, partner);
        b[COLLECTOR] = 3;
        b[COLLECTOR + 1] = 16;
        set_u16(b, COLLECTOR + 2, collector_max_delay);
    }
}

view! {
    /// A view over a Marker PDU: an information request, or the response echoing it.
    Marker
}

/// Marker TLV types.
pub mod marker {
    /// A request (Marker Information).
    pub const INFORMATION: u8 = 1;
    /// The answer (Marker Response).
    pub const RESPONSE: u8 = 2;
}

impl<T: AsRef<[u8]>> Marker<T> {
    /// Checks 110 bytes, subtype 2, version 1, an information or response TLV of length 16,
    /// and the terminator.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < PDU_LEN
            || b[0] != subtype::MARKER
            || b[1] != 1
            || !matches!(b[2], marker::INFORMATION | marker::RESPONSE)
            || b[3] != 16
            || b[18] != 0
            || b[19] != 0
        {
            return Err(Error);
        }
        Ok(())
    }

    /// True for a response, false for a request.
    pub fn is_response(&self) -> bool {
        self.buffer.as_ref()[2] == marker::RESPONSE
    }

    /// The requester's port.
    pub fn requester_port(&self) -> u16 {
        get_u16(self.buffer.as_ref(), 4)
    }

    /// The requester's system.
    pub fn requester_system(&self) -> [u8; 6] {
        self.buffer.as_ref()[6..12].try_into().unwrap_or_default()
    }

    /// The requester's transaction id.
    pub fn transaction(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[12], b[13], b[14], b[15]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Marker<T> {
    /// Writes a whole Marker PDU (a response when `response`), reserved bytes zeroed.
    pub fn emit(&mut self, response: bool, port: u16, system: [u8; 6], transaction: u32) {
        let b = self.buffer.as_mut();
        b[..PDU_LEN].fill(0);
        b[0] = subtype::MARKER;
        b[1] = 1;
        b[2] = if response {
            marker::RESPONSE
        } else {
            marker::INFORMATION
        };
        b[3] = 16;
        set_u16(b, 4, port);
        b[6..12].copy_from_slice(&system);
        b[12..16].copy_from_slice(&transaction.to_be_bytes());
    }

    /// Turns a request into its response in place (what a marker responder sends back).
    pub fn make_response(&mut self) {
        self.buffer.as_mut()[2] = marker::RESPONSE;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ACTOR_INFO: PortInfo = PortInfo {
        system_priority: 65535,
        system: [2, 0x58, 0x53, 0x42, 0, 1],
        key: 9,
        port_priority: 255,
        port: 1,
        state: state::ACTIVITY | state::TIMEOUT | state::AGGREGATION,
    };

    #[test]
    fn a_lacpdu_is_110_bytes_and_reads_back() {
        let mut pdu = [0xaau8; PDU_LEN];
        let partner = PortInfo {
            system: [2, 0, 0, 0, 0, 2],
            key: 17,
            port: 3,
            state: state::SYNCHRONIZATION | state::COLLECTING | state::DISTRIBUTING,
            ..PortInfo::default()
        };
        Lacpdu::new_unchecked(&mut pdu[..]).emit(&ACTOR_INFO, &partner, 5);
        let view = Lacpdu::new_checked(&pdu[..]).unwrap();
        assert_eq!(view.version(), 1);
        assert_eq!(view.actor(), ACTOR_INFO);
        assert_eq!(view.partner(), partner);
        assert_eq!(view.collector_max_delay(), 5);
        // The standard's layout, byte for byte where it is fixed.
        assert_eq!(&pdu[..4], &[1, 1, 1, 20]);
        assert_eq!(&pdu[4..6], &[0xff, 0xff], "actor system priority");
        assert_eq!(&pdu[22..24], &[2, 20]);
        assert_eq!(&pdu[42..44], &[3, 16]);
        assert_eq!(&pdu[58..60], &[0, 0]);
        assert!(pdu[60..].iter().all(|&b| b == 0), "reserved zeroed");
    }

    #[test]
    fn malformed_lacpdus_are_refused() {
        let mut good = [0u8; PDU_LEN];
        Lacpdu::new_unchecked(&mut good[..]).emit(&ACTOR_INFO, &PortInfo::default(), 0);
        for (at, value) in [
            (0, 2),
            (1, 0),
            (2, 9),
            (3, 19),
            (23, 21),
            (42, 4),
            (43, 0),
            (59, 1),
        ] {
            let mut bad = good;
            bad[at] = value;
            assert!(
                Lacpdu::new_checked(&bad[..]).is_err(),
                "byte {at} = {value}"
            );
        }
        assert!(Lacpdu::new_checked(&good[..PDU_LEN - 1]).is_err(), "short");
        let mut v2 = good;
        v2[1] = 2;
        assert!(
            Lacpdu::new_checked(&v2[..]).is_ok(),
            "a later version is read"
        );
    }

    #[test]
    fn a_marker_request_becomes_its_response() {
        let mut pdu = [0u8; PDU_LEN];
        Marker::new_unchecked(&mut pdu[..]).emit(false, 7, [2, 0, 0, 0, 0, 7], 0xdead_beef);
        let mut view = Marker::new_checked(&mut pdu[..]).unwrap();
        assert!(!view.is_response());
        view.make_response();
        let view = Marker::new_checked(&pdu[..]).unwrap();
        assert!(view.is_response());
        assert_eq!(
            (
                view.requester_port(),
                view.requester_system(),
                view.transaction()
            ),
            (7, [2, 0, 0, 0, 0, 7], 0xdead_beef)
        );
        let mut bad = pdu;
        bad[3] = 15;
        assert!(Marker::new_checked(&bad[..]).is_err());
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_a_checked_view_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..140),
        ) {
            if let Ok(v) = Lacpdu::new_checked(&bytes[..]) {
                let _ = (v.version(), v.actor(), v.partner(), v.collector_max_delay());
            }
            if let Ok(v) = Marker::new_checked(&bytes[..]) {
                let _ = (v.is_response(), v.requester_port(), v.requester_system(), v.transaction());
            }
        }

        #[test]
        fn a_lacpdu_with_bytes_changed_parses_or_is_refused_without_panic(
            changes in proptest::collection::vec((0usize..PDU_LEN, proptest::prelude::any::<u8>()), 1..4),
        ) {
            let mut pdu = [0u8; PDU_LEN];
            Lacpdu::new_unchecked(&mut pdu[..]).emit(&ACTOR_INFO, &PortInfo::default(), 0);
            for (at, value) in changes {
                pdu[at] = value;
            }
            if let Ok(v) = Lacpdu::new_checked(&pdu[..]) {
                let _ = (v.version(), v.actor(), v.partner(), v.collector_max_delay());
            }
        }

        #[test]
        fn what_is_emitted_reads_back(
            prio in 0u16.., key in 0u16.., port in 0u16.., st in 0u8.., delay in 0u16..,
            system in proptest::prelude::any::<[u8; 6]>(),
        ) {
            let actor = PortInfo { system_priority: prio, system, key, port_priority: !prio, port, state: st };
            let partner = PortInfo { key: !key, port: !port, state: !st, ..actor };
            let mut pdu = [0u8; PDU_LEN];
            Lacpdu::new_unchecked(&mut pdu[..]).emit(&actor, &partner, delay);
            let view = Lacpdu::new_checked(&pdu[..]).unwrap();
            proptest::prop_assert_eq!(view.actor(), actor);
            proptest::prop_assert_eq!(view.partner(), partner);
            proptest::prop_assert_eq!(view.collector_max_delay(), delay);
        }
    }
}
