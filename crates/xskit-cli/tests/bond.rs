//! `xskit bond hash`: per packet of a capture, the Linux bond's hash and member. No root.

use std::process::Command;

use xskit_wire::bond_hash::{xmit_hash, XmitHashPolicy};

const XSKIT: &str = env!("CARGO_BIN_EXE_xskit");

/// A classic pcap of `frames` (Ethernet), written by hand: a 24-byte header, then 16 bytes
/// before each frame.
fn pcap(name: &str, frames: &[Vec<u8>]) -> std::path::PathBuf {
    pcap_of(name, 1, frames)
}

/// A classic pcap of link type `link` (1: Ethernet, 113: Linux cooked).
fn pcap_of(name: &str, link: u32, frames: &[Vec<u8>]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("xskit-bond-{}-{name}.pcap", std::process::id()));
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65535u32.to_le_bytes());
    out.extend_from_slice(&link.to_le_bytes());
    for f in frames {
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    std::fs::write(&path, out).unwrap();
    path
}

fn udp(sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 0x0b]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 51, 100, 1]);
    f[30..34].copy_from_slice(&[203, 0, 113, 9]);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&53u16.to_be_bytes());
    f
}

#[test]
fn bond_hash_names_each_packets_member() {
    let frames: Vec<Vec<u8>> = (0..16).map(|i| udp(40000 + i)).collect();
    let file = pcap("flows", &frames);
    let out = Command::new(XSKIT)
        .args([
            "bond",
            "hash",
            "--policy",
            "layer3+4",
            "--members",
            "3",
            "--json",
        ])
        .arg("--pcap")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["policy"], "layer3+4");
    assert_eq!(
        (&json["command"], &json["schema_version"]),
        (&"bond".into(), &1.into())
    );
    let packets = json["rows"].as_array().unwrap();
    assert_eq!(packets.len(), 16);
    for (p, f) in packets.iter().zip(&frames) {
        let hash = xmit_hash(XmitHashPolicy::Layer34, f);
        assert_eq!(p["hash"].as_u64().unwrap(), u64::from(hash));
        assert_eq!(p["member"].as_u64().unwrap(), u64::from(hash % 3));
    }
    // The first flow is the written vector of xskit-wire's tests.
    assert_eq!(packets[0]["hash"].as_u64().unwrap(), 0x1e94_2de5);
    let shares: u64 = json["per_member"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(shares, 16);
}

#[test]
fn bond_hash_takes_dpdks_policies_named_apart() {
    let file = pcap("dpdk", &[udp(1000)]);
    let out = Command::new(XSKIT)
        .args([
            "bond",
            "hash",
            "--policy",
            "dpdk-l34",
            "--members",
            "2",
            "--json",
        ])
        .arg("--pcap")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&file);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["policy"], "dpdk-l34");
    // By hand: the addresses loaded little-endian, 0x016433c6 ^ 0x097100cb = 0x0815330d; the
    // ports 1000 and 53, 0xe803 ^ 0x3500 = 0xdd03; together 0x0815ee0e; ^ >> 16 gives
    // 0x0815e61b, ^ >> 8 gives 0x081df3fd.
    assert_eq!(json["rows"][0]["hash"].as_u64().unwrap(), 0x081d_f3fd);
    assert_eq!(json["rows"][0]["member"].as_u64().unwrap(), 1);
}

#[test]
fn bond_hash_bad_input_gets_clear_errors() {
    let file = pcap("one", &[udp(1)]);
    let not_pcap = std::env::temp_dir().join(format!("xskit-bond-{}.txt", std::process::id()));
    std::fs::write(&not_pcap, b"hello, not a capture").unwrap();
    for (args, expected, code) in [
        (vec!["--members", "0"], "--members 0 is out of range", 1),
        (
            vec!["--policy", "layer9"],
            "possible values: layer2, layer2+3",
            2,
        ),
    ] {
        let out = Command::new(XSKIT)
            .args(["bond", "hash", "--pcap"])
            .arg(&file)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let cooked = pcap_of("cooked", 113, &[udp(1)]);
    for (path, expected) in [
        (cooked.as_path(), "not Ethernet"),
        (not_pcap.as_path(), "not a pcap or pcapng file"),
        (
            std::path::Path::new("/nonexistent/x.pcap"),
            "cannot open it",
        ),
    ] {
        let out = Command::new(XSKIT)
            .args(["bond", "hash", "--pcap"])
            .arg(path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        let named = err.contains(&path.display().to_string());
        assert!(err.contains(expected) && named, "{err}");
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&not_pcap);
    let _ = std::fs::remove_file(&cooked);
}
