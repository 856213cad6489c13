#!/usr/bin/env python3
"""Writes fuzz/seeds/<target>/: a few small, valid inputs per target for libFuzzer to start
from (it mutates them; the seeds are never changed by a run). Run again after changing it."""
import os
import struct
import zlib

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
MAC_A, MAC_B = bytes([2, 0, 0, 0, 0, 1]), bytes([2, 0, 0, 0, 0, 2])
V4_A, V4_B = bytes([198, 51, 100, 1]), bytes([198, 51, 100, 2])
V6_A = bytes.fromhex("20010db8000000000000000000000001")
V6_B = bytes.fromhex("20010db8000000000000000000000002")


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def eth(proto, payload, tags=()):
    head = MAC_B + MAC_A
    for tpid, vid in tags:
        head += struct.pack("!HH", tpid, vid)
    return head + struct.pack("!H", proto) + payload


def ip4(proto, payload, frag=0):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, frag, 64, proto, 0, V4_A, V4_B)
    return h[:10] + struct.pack("!H", csum(h)) + h[12:] + payload


def ip6(nxt, payload):
    return struct.pack("!IHBB", 0x60000000, len(payload), nxt, 64) + V6_A + V6_B + payload


def udp(sport=40000, dport=53, data=b"xskit"):
    return struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data


def tcp(sport=40000, dport=80, data=b"", flags=0x18):
    return struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 0x50, flags, 1024, 0, 0) + data


def icmp(kind, rest=b"\0\x01\0\x01xskit"):
    return bytes([kind, 0, 0, 0]) + rest


def partial(frame, l4_at, field, pseudo_len, proto, v6=False):
    """The frame with its L4 checksum field holding just the pseudo-header sum."""
    if v6:
        pseudo = V6_A + V6_B + struct.pack("!IxxxB", pseudo_len, proto)
    else:
        pseudo = V4_A + V4_B + struct.pack("!BBH", 0, proto, pseudo_len)
    s = ~csum(pseudo) & 0xFFFF
    at = l4_at + field
    return frame[:at] + struct.pack("!H", s) + frame[at + 2:]


def frames():
    big = tcp(data=bytes(range(256)) * 12)
    return {
        "udp4": eth(0x0800, ip4(17, udp())),
        "tcp4": eth(0x0800, ip4(6, tcp())),
        "icmp4": eth(0x0800, ip4(1, icmp(8))),
        "icmp4-error": eth(0x0800, ip4(1, icmp(3, b"\0" * 4 + ip4(17, udp())))),
        "frag4": eth(0x0800, ip4(17, udp(), frag=0x0008)),
        "vlan-udp4": eth(0x0800, ip4(17, udp()), tags=[(0x8100, 5)]),
        "qinq-udp4": eth(0x0800, ip4(17, udp()), tags=[(0x88A8, 5), (0x8100, 7)]),
        "udp6": eth(0x86DD, ip6(17, udp())),
        "tcp6": eth(0x86DD, ip6(6, tcp())),
        "hbh-udp6": eth(0x86DD, ip6(0, bytes([17, 0, 1, 4, 0, 0, 0, 0]) + udp())),
        "frag-udp6": eth(0x86DD, ip6(44, bytes([17, 0, 0, 1, 0, 0, 0, 9]) + udp())),
        "icmp6-error": eth(0x86DD, ip6(58, icmp(1, b"\0" * 4 + ip6(17, udp())))),
        "arp": eth(0x0806, struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + MAC_A + V4_A + bytes(6) + V4_B),
        "tcp4-super": eth(0x0800, ip4(6, big)),
        "udp4-partial": partial(eth(0x0800, ip4(17, udp())), 34, 6, 13, 17),
        "tcp4-partial": partial(eth(0x0800, ip4(6, tcp(data=b"abc"))), 34, 16, 23, 6),
        "tcp6-partial": partial(eth(0x86DD, ip6(6, tcp(data=b"abc"))), 54, 16, 23, 6, v6=True),
    }


def lacp():
    def info(kind, system, key, port, state):
        return struct.pack("!BBH6sHHHBxxx", kind, 20, 0x8000, system, key, 0x80, port, state)

    pdu = bytes([1, 1]) + info(1, MAC_A, 1, 1, 0x3D) + info(2, MAC_B, 1, 2, 0x3D)
    pdu += struct.pack("!BBH12x", 3, 16, 5) + bytes([0, 0]) + bytes(50)
    marker = bytes([2, 1, 1, 16]) + struct.pack("!H6sI2x", 1, MAC_A, 7) + bytes([0, 0]) + bytes(90)
    return {"lacpdu": pdu, "marker": marker}


def pcaps(fr):
    packets = [fr["udp4"], fr["tcp6"], fr["vlan-udp4"]]
    pcap = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, p in enumerate(packets):
        pcap += struct.pack("<IIII", 1700000000 + i, 0, len(p), len(p)) + p

    def block(kind, body):
        n = 12 + len(body) + (-len(body) % 4)
        return struct.pack("<II", kind, n) + body + bytes(-len(body) % 4) + struct.pack("<I", n)

    ng = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    ng += block(1, struct.pack("<HHI", 1, 0, 65535))
    for p in packets:
        ng += block(6, struct.pack("<IIIII", 0, 0, 0, len(p), len(p)) + p)
    ng += block(3, struct.pack("<I", len(fr["udp6"])) + fr["udp6"])
    return {"pcap": pcap, "pcapng": ng}


RULES = [
    b'default = "forward"\n[[rule]]\nname = "no-dns"\nprotocol = "udp"\ndst_port = 53\naction = "drop"\n',
    b'default = "drop"\nunclassifiable = "pass"\n[[rule]]\ndst = "198.51.100.0/24"\nsrc = "203.0.113.7"\n'
    b'protocol = "tcp"\ndst_port = "1-1024"\nsrc_port = 443\naction = "forward"\n'
    b'[[rule]]\ndst = "2001:db8::/32"\nprotocol = "icmpv6"\naction = "pass"\n',
    b'[[rule]]\nname = "slow"\nprotocol = 17\naction = "rate-limit"\nrate = "10kpps"\nburst = 64\n',
]


def write(target, name, data):
    d = os.path.join(HERE, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    fr = frames()
    for name, f in fr.items():
        for target in ["ethernet", "checksum", "bond_hash", "twin_bond_hash"]:
            write(target, name, f)
        l3 = f[14:]
        if f[12:14] == b"\x08\x00":
            write("ipv4", name, l3)
        if f[12:14] == b"\x86\xdd":
            write("ipv6", name, l3)
        # A drop rule on UDP/53 and a forward on TCP, then the frame.
        for target in ["classify", "twin_filter"]:
            write(target, name, bytes([2 + 9 * 2, 1, 0, 0x11, 0, 0, 0, 0x22, 2]) + f)
    write("gso", "tcp4-super", struct.pack("<H", 1500) + fr["tcp4-super"])
    write("gso", "tcp6", struct.pack("<H", 60) + fr["tcp6"])
    for name, pdu in lacp().items():
        write("lacp", name, pdu)
    for name, data in pcaps(fr).items():
        write("pcap", name, data)
    for i, text in enumerate(RULES):
        write("rules_toml", "rules-%d.toml" % i, text)
    # (shape, descriptors): aligned and unaligned UMEMs, addresses in, at and past the end.
    descs = [(0, 64, 0), (4096 * 15 + 256, 1500, 0), (1 << 48 | 100, 60, 0), (2**64 - 1, 2**32 - 1, 7)]
    raw = b"".join(struct.pack("<QII", *d) for d in descs)
    write("ring_descriptors", "aligned", bytes([0]) + struct.pack("<Q", len(descs)) + raw)
    write("ring_descriptors", "unaligned", bytes([0x31]) + struct.pack("<Q", len(descs)) + raw)
    print("seeds written, crc %08x" % zlib.crc32(b"".join(fr.values())))


if __name__ == "__main__":
    main()
