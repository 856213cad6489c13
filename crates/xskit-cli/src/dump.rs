//! `xskit dump`: what an interface receives at its XDP hook, as xdpdump shows it, with or
//! without xskit running there (tcpdump sees nothing of what an XDP program redirects).

use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use xskit::capture::{Capture, CaptureConfig};
use xskit::Interface;
use xskit_wire::{ethernet, ip_protocol, ipv4, ipv6, tcp, udp, EtherType};

use crate::opts::{stop_flag, stopped, thousands, ModeArg};

#[derive(Args, Debug)]
pub(crate) struct DumpArgs {
    /// The interface.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    interface: String,
    /// Write the packets to FILE (pcap) instead of a line each; `-` is stdout, for a pipe
    /// into tshark or tcpdump -r -.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    write: Option<PathBuf>,
    /// Bytes of each packet kept (its whole length is recorded all the same).
    #[arg(short = 's', long, default_value_t = 262_144, value_name = "N")]
    snaplen: u32,
    /// Stop after N packets (that pass the filter).
    #[arg(short = 'c', long, value_name = "N")]
    count: Option<u64>,
    /// Stop after this long: seconds (2.5) or a duration (30s, 5m, 1h).
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = crate::opts::seconds)]
    duration: Option<f64>,
    /// Where a capture program of xskit's own runs on an interface with no program (with
    /// xskit's program attached, that program captures, in its mode).
    #[arg(short = 'm', long, value_enum, default_value_t = ModeArg::Auto)]
    mode: ModeArg,
    /// Print the summary at the end as one JSON object.
    #[arg(long)]
    json: bool,
    /// A filter in tcpdump's language (pcap-filter(7)), e.g. `udp port 53`: compiled by
    /// libpcap and applied to each captured packet.
    #[arg(value_name = "FILTER", trailing_var_arg = true)]
    filter: Vec<String>,
}

#[derive(Serialize)]
struct DumpReport {
    interface: String,
    through: String,
    duration_s: f64,
    captured: u64,
    filtered_out: u64,
    lost: u64,
}

/// tcpdump's time of day: `14:05:09.123456`, UTC.
fn time_of_day(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        d.subsec_micros()
    )
}

fn ports(protocol: u8, l4: &[u8]) -> Option<(u16, u16, String)> {
    match protocol {
        ip_protocol::UDP => {
            let u = udp::Packet::new_checked(l4).ok()?;
            let len = usize::from(u.len()).saturating_sub(udp::HEADER_LEN);
            Some((u.src_port(), u.dst_port(), format!("UDP, length {len}")))
        }
        ip_protocol::TCP => {
            let t = tcp::Packet::new_checked(l4).ok()?;
            let names = [
                (0x02, 'S'),
                (0x01, 'F'),
                (0x04, 'R'),
                (0x08, 'P'),
                (0x10, '.'),
            ];
            let flags: String = names
                .iter()
                .filter(|(bit, _)| t.flags() & bit != 0)
                .map(|(_, c)| *c)
                .collect();
            Some((
                t.src_port(),
                t.dst_port(),
                format!("Flags [{flags}], length {}", t.payload().len()),
            ))
        }
        _ => None,
    }
}

fn transport(src: String, dst: String, protocol: u8, l4: &[u8]) -> String {
    match (protocol, ports(protocol, l4)) {
        (_, Some((sp, dp, what))) => format!("{src}.{sp} > {dst}.{dp}: {what}"),
        (ip_protocol::ICMP, None) | (ip_protocol::ICMPV6, None) => {
            let kind = match (protocol, l4.first()) {
                (ip_protocol::ICMP, Some(8)) | (ip_protocol::ICMPV6, Some(128)) => "echo request",
                (ip_protocol::ICMP, Some(0)) | (ip_protocol::ICMPV6, Some(129)) => "echo reply",
                _ => "type other",
            };
            format!("{src} > {dst}: ICMP {kind}, length {}", l4.len())
        }
        _ => format!("{src} > {dst}: protocol {protocol}, length {}", l4.len()),
    }
}

/// One line about a packet, in tcpdump's manner.
fn summary(data: &[u8], len: u32) -> String {
    let Ok(frame) = ethernet::Frame::new_checked(data) else {
        return format!("truncated frame, length {len}");
    };
    let Ok(inner) = frame.untagged() else {
        return format!("malformed VLAN tags, length {len}");
    };
    let vlan = match inner.vids {
        [Some(outer), Some(inner)] => format!("vlan {outer}, vlan {inner}, "),
        [Some(vid), None] => format!("vlan {vid}, "),
        _ => String::new(),
    };
    let rest = match inner.ethertype {
        EtherType::Ipv4 => match ipv4::Packet::new_checked(inner.payload) {
            Ok(ip) => format!(
                "IP {}",
                transport(
                    Ipv4Addr::from(ip.src_addr()).to_string(),
                    Ipv4Addr::from(ip.dst_addr()).to_string(),
                    ip.protocol(),
                    ip.payload()
                )
            ),
            Err(_) => "IP, truncated".into(),
        },
        EtherType::Ipv6 => match ipv6::Packet::new_checked(inner.payload) {
            Ok(ip) => {
                let (protocol, l4) = ip.upper_layer().unwrap_or((ip.next_header(), &[]));
                format!(
                    "IP6 {}",
                    transport(
                        Ipv6Addr::from(ip.src_addr()).to_string(),
                        Ipv6Addr::from(ip.dst_addr()).to_string(),
                        protocol,
                        l4
                    )
                )
            }
            Err(_) => "IP6, truncated".into(),
        },
        EtherType::Arp => "ARP".into(),
        EtherType::Unknown(t) => format!("ethertype 0x{t:04x}"),
        EtherType::Vlan | EtherType::QinQ => "VLAN".into(),
    };
    format!("{vlan}{rest}, frame length {len}")
}

/// The filter in tcpdump's language, compiled by libpcap (None: every packet).
fn compile_filter(words: &[String]) -> Result<Option<pcap::BpfProgram>> {
    if words.is_empty() {
        return Ok(None);
    }
    let expr = words.join(" ");
    let dead = pcap::Capture::dead(pcap::Linktype::ETHERNET)
        .context("preparing libpcap to compile the filter")?;
    let program = dead
        .compile(&expr, true)
        .map_err(|e| anyhow::anyhow!("the filter {expr:?} is not tcpdump's language: {e}"))?;
    Ok(Some(program))
}

/// What the run ended with, for the summary.
fn print_summary(args: &DumpArgs, report: &DumpReport) -> Result<()> {
    if args.json {
        crate::opts::print_json("dump", report)?;
    } else {
        let lost = match report.lost {
            0 => "none lost".to_string(),
            n => format!(
                "{} lost (the perf buffer was full: a slower rate or a narrower filter keeps up)",
                thousands(n)
            ),
        };
        note!(
            "{} packets captured, {} filtered out, {lost}",
            thousands(report.captured),
            thousands(report.filtered_out),
        );
    }
    Ok(())
}

/// Every mistake of the command line at once, before anything is opened; the run's
/// duration and compiled filter.
fn checked(args: &DumpArgs) -> Result<(Option<Duration>, Option<pcap::BpfProgram>)> {
    let mut m = crate::opts::Mistakes::default();
    m.take(crate::opts::interface_exists(Ok(&args.interface)));
    let duration = m.take(match args.duration {
        Some(d) if !(d > 0.0 && d < 1e6) => Err(anyhow::anyhow!(
            "--duration {d} must be a positive number of seconds"
        )),
        d => Ok(d.map(Duration::from_secs_f64)),
    });
    if args.snaplen == 0 {
        m.note(anyhow::anyhow!("-s 0: the snap length is at least 1 byte"));
    }
    let filter = m.take(compile_filter(&args.filter));
    m.finish_with(duration.zip(filter))
}

pub(crate) fn run(args: &DumpArgs) -> Result<i32> {
    let (duration, filter) = checked(args)?;
    let to_stdout = args.write.as_deref() == Some(std::path::Path::new("-"));
    if to_stdout && args.json {
        bail!("-w - writes the capture to stdout, where --json would go too: drop one of them");
    }
    let iface = Interface::by_name(&args.interface)?;
    let config = CaptureConfig::default()
        .snaplen(args.snaplen)
        .mode(args.mode.into());
    let mut capture = Capture::open(&iface, &config)
        .with_context(|| format!("capturing on {}", args.interface))?;
    let mut sink = args
        .write
        .as_ref()
        .map(|p| {
            let path = if to_stdout {
                std::path::Path::new("/dev/stdout")
            } else {
                p.as_path()
            };
            xskit_pipeline::PcapSink::create(path)
        })
        .transpose()?;
    let stop = stop_flag()?;
    note!(
        "xskit dump: capturing on {} through {}; Ctrl-C stops",
        args.interface,
        capture.through()
    );
    let start = Instant::now();
    let limit = args.count.unwrap_or(u64::MAX);
    let (mut captured, mut filtered_out) = (0u64, 0u64);
    let mut failure = None;
    while captured < limit && !stopped(&stop) && duration.is_none_or(|d| start.elapsed() < d) {
        capture.poll(Some(Duration::from_millis(100)), |p| {
            if captured >= limit || failure.is_some() {
                return;
            }
            if filter.as_ref().is_some_and(|f| !f.filter(p.data)) {
                filtered_out += 1;
                return;
            }
            captured += 1;
            match sink.as_mut() {
                Some(s) => {
                    let at = p
                        .time
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .unwrap_or_default();
                    if let Err(e) = s.write_with_len(at, p.data, p.len) {
                        failure = Some(e);
                    }
                }
                None => out!("{} {}", time_of_day(p.time), summary(p.data, p.len)),
            }
        })?;
        if let Some(e) = failure.take() {
            return Err(anyhow::Error::new(e).context("writing the capture"));
        }
        if let Some(s) = sink.as_mut() {
            s.flush_if_due(Instant::now())
                .context("writing the capture")?;
        }
    }
    if let Some(s) = sink {
        s.finish()?;
    }
    let report = DumpReport {
        interface: args.interface.clone(),
        through: capture.through().to_string(),
        duration_s: start.elapsed().as_secs_f64(),
        captured,
        filtered_out,
        lost: capture.lost(),
    };
    drop(capture);
    print_summary(args, &report)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_like_tcpdump() {
        let addrs = xskit_traffic::probe::ProbeAddrs {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: [198, 51, 100, 1],
            dst_ip: [198, 51, 100, 2],
        };
        let mut frame = [0u8; 64];
        xskit_traffic::probe::write(&mut frame, 64, 1, &addrs).unwrap();
        assert_eq!(
            summary(&frame, 64),
            "IP 198.51.100.1.9 > 198.51.100.2.9: UDP, length 22, frame length 64"
        );
        assert_eq!(summary(&frame[..10], 64), "truncated frame, length 64");
        assert_eq!(
            time_of_day(SystemTime::UNIX_EPOCH + Duration::from_micros(3_723_000_042)),
            "01:02:03.000042"
        );
    }
}
