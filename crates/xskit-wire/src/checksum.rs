//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// Adds `data` to a running one's-complement sum (32-bit accumulator, not yet folded to 16).
///
/// Sums big-endian 32-bit words into 64 bits and folds the carries back at the end, which
/// RFC 1071 section 2 allows ("sum in larger words, then fold"); it is several times faster
/// than 16 bits at a time.
#[inline]
pub fn accumulate(sum: u32, data: &[u8]) -> u32 {
    let mut acc = u64::from(sum);
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let rest = words.remainder();
    let mut pairs = rest.chunks_exact(2);
    for p in &mut pairs {
        acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    // Fold 64 -> 32 bits with end-around carry; the 16-bit fold happens in `fold`.
    while acc > 0xffff_ffff {
        acc = (acc & 0xffff_ffff) + (acc >> 32);
    }
    acc as u32
}

/// Folds a running sum to 16 bits.
#[inline]
pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The checksum of `data`: the complement of its folded one's-complement sum.
#[inline]
pub fn checksum(data: &[u8]) -> u16 {
    !fold(accumulate(0, data))
}

/// The IPv4 pseudo-header sum for an upper-layer checksum.
#[inline]
pub fn pseudo_header_v4(src: [u8; 4], dst: [u8; 4], protocol: u8, length: u16) -> u32 {
    // Six 16-bit words: no loop, and no carry to fold (the sum stays below 2^19).
    let word = |a: [u8; 4], i: usize| u32::from(u16::from_be_bytes([a[i], a[i + 1]]));
    word(src, 0)
        + word(src, 2)
        + word(dst, 0)
        + word(dst, 2)
        + u32::from(protocol)
        + u32::from(length)
}

/// [`pseudo_header_v4`] with every 16-bit word in the machine's byte order instead of the
/// network's: one's-complement sums commute with swapping the bytes of every word (RFC 1071),
/// so folded it is the network-order sum as the machine reads it, to be compared with a
/// field read the same way, neither side swapped.
#[inline]
pub fn pseudo_header_v4_machine_order(
    src: [u8; 4],
    dst: [u8; 4],
    protocol: u8,
    length: u16,
) -> u32 {
    let word = |a: [u8; 4], i: usize| u32::from(u16::from_ne_bytes([a[i], a[i + 1]]));
    word(src, 0)
        + word(src, 2)
        + word(dst, 0)
        + word(dst, 2)
        + u32::from(u16::from_ne_bytes([0, protocol]))
        + u32::from(u16::from_ne_bytes(length.to_be_bytes()))
}

/// The IPv6 pseudo-header sum for an upper-layer checksum.
#[inline]
pub fn pseudo_header_v6(src: [u8; 16], dst: [u8; 16], next_header: u8, length: u32) -> u32 {
    let mut sum = accumulate(0, &src);
    sum = accumulate(sum, &dst);
    sum.wrapping_add(length >> 16)
        .wrapping_add(length & 0xffff)
        .wrapping_add(u32::from(next_header))
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit field changes from `old` to `new`,
/// without touching the rest of the data: HC' = ~(~HC + ~m + m').
#[inline]
pub fn update(checksum: u16, old: u16, new: u16) -> u16 {
    let sum = u32::from(!checksum) + u32::from(!old) + u32::from(new);
    !fold(sum)
}

/// [`update`] for a 32-bit field (an IPv4 address), as two 16-bit words.
#[inline]
pub fn update_u32(checksum: u16, old: u32, new: u32) -> u16 {
    let c = update(checksum, (old >> 16) as u16, (new >> 16) as u16);
    update(c, old as u16, new as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 section 3: 0001 f203 f4f5 f6f7 sums to ddf2.
        assert_eq!(
            fold(accumulate(
                0,
                &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]
            )),
            0xddf2
        );
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(accumulate(0, &[0x12, 0x34, 0x56])), 0x1234 + 0x5600);
        assert_eq!(
            fold(accumulate(0, &[0x12, 0x34, 0x56, 0x78, 0x9a])),
            fold(0x1234 + 0x5678 + 0x9a00)
        );
        assert_eq!(
            fold(accumulate(7, &[0xff, 0xff, 0xff, 0xff])),
            fold(7 + 0xffff + 0xffff)
        );
    }

    proptest::proptest! {
        #[test]
        fn incremental_update_matches_recompute(
            mut data in proptest::collection::vec(proptest::prelude::any::<u8>(), 2..200),
            at in 0usize..100,
            new in proptest::prelude::any::<u16>(),
        ) {
            let at = (at % (data.len() / 2)) * 2;
            let before = checksum(&data);
            let old = u16::from_be_bytes([data[at], data[at + 1]]);
            data[at..at + 2].copy_from_slice(&new.to_be_bytes());
            let after = checksum(&data);
            let updated = update(before, old, new);
            // 0x0000 and 0xffff are the same one's-complement value.
            proptest::prop_assert!(updated == after || (updated ^ after) == 0xffff && (after == 0 || after == 0xffff));
        }

        #[test]
        fn the_ipv4_pseudo_header_sums_as_its_bytes_do(
            src in proptest::prelude::any::<[u8; 4]>(),
            dst in proptest::prelude::any::<[u8; 4]>(),
            protocol in proptest::prelude::any::<u8>(),
            length in proptest::prelude::any::<u16>(),
        ) {
            let mut bytes = [0u8; 12];
            bytes[..4].copy_from_slice(&src);
            bytes[4..8].copy_from_slice(&dst);
            bytes[9] = protocol;
            bytes[10..].copy_from_slice(&length.to_be_bytes());
            proptest::prop_assert_eq!(
                fold(pseudo_header_v4(src, dst, protocol, length)),
                fold(accumulate(0, &bytes))
            );
        }

        #[test]
        fn the_ipv4_pseudo_header_in_machine_order_is_the_same_sum(
            src in proptest::prelude::any::<[u8; 4]>(),
            dst in proptest::prelude::any::<[u8; 4]>(),
            protocol in proptest::prelude::any::<u8>(),
            length in proptest::prelude::any::<u16>(),
        ) {
            let network = fold(pseudo_header_v4(src, dst, protocol, length));
            let machine = fold(pseudo_header_v4_machine_order(src, dst, protocol, length));
            proptest::prop_assert_eq!(u16::from_ne_bytes(network.to_be_bytes()), machine);
        }

        #[test]
        fn large_inputs_do_not_overflow(data in proptest::collection::vec(0xffu8..=0xff, 0..70000)) {
            let naive: u64 = data.chunks(2).map(|c| u64::from(c[0]) << 8 | u64::from(*c.get(1).unwrap_or(&0))).sum();
            let mut n = naive;
            while n > 0xffff { n = (n & 0xffff) + (n >> 16); }
            proptest::prop_assert_eq!(u64::from(fold(accumulate(0, &data))), n);
        }
    }
}
