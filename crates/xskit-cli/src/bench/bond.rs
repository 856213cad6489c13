//! `xskit bench bond`: seed 002's table on this machine. XDP_TX rates of a reflector on the
//! forwarding namespace of a three-namespace chain: xskit's plain XDP_TX program on one
//! device, and xskit's bond reflector (`xskit_bond.h`) as a bond of 1 member and of 2 members
//! (the packet leaving through the receiving member, or redirected to the other), each
//! against the plain program in the same run. The live-frames generator on host a (CPU 0)
//! sends one flow into m_a; the far hosts run a pass-through XDP program, which veth needs
//! to take frames sent with XDP_TX.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use xskit::{Interface, Mode, XdpProgram};
use xskit_bond::{XdpBond, XdpBondMode, XmitHashPolicy};
use xskit_testbed::{Chain, Host};
use xskit_traffic::XdpCounter;

use super::table::{finish, live_gen_args, median, start, GEN_CPU};

/// A reflector under test, counting what it sent back.
enum Reflector {
    Plain(Box<XdpCounter>),
    Bond(XdpBond),
}

impl Reflector {
    fn count(&self) -> Result<u64> {
        Ok(match self {
            Reflector::Plain(c) => c.packets()?,
            Reflector::Bond(b) => b.count()?,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    Plain,
    BondOf1,
    BondOf2Same,
    BondOf2Other,
}

impl Case {
    const ALL: [Case; 4] = [
        Case::Plain,
        Case::BondOf1,
        Case::BondOf2Same,
        Case::BondOf2Other,
    ];

    fn label(self) -> &'static str {
        match self {
            Case::Plain => "XDP_TX, plain program, one device",
            Case::BondOf1 => "bond of 1 member",
            Case::BondOf2Same => "bond of 2, out of the receiving member (XDP_TX)",
            Case::BondOf2Other => "bond of 2, out of the other member (XDP_REDIRECT)",
        }
    }
}

#[derive(Serialize)]
struct Row {
    case: &'static str,
    mpps: Vec<f64>,
    median_mpps: f64,
    ratio_to_plain: f64,
}

fn mac_string(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn attach(chain: &Chain, case: Case) -> Result<Reflector> {
    let names = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    chain
        .m_a
        .ns
        .run(move || -> Result<Reflector> {
            let m_a = Interface::by_name(&names[0])?;
            let m_c = Interface::by_name(&names[1])?;
            let layer2 = XdpBondMode::BalanceXor(XmitHashPolicy::Layer2);
            Ok(match case {
                Case::Plain => {
                    Reflector::Plain(Box::new(XdpCounter::reflect_all(&m_a, Mode::Drv)?))
                }
                Case::BondOf1 => Reflector::Bond(XdpBond::reflector(&[m_a], layer2, Mode::Drv)?),
                Case::BondOf2Same | Case::BondOf2Other => {
                    Reflector::Bond(XdpBond::reflector(&[m_a, m_c], layer2, Mode::Drv)?)
                }
            })
        })
        .context("entering the chain's namespace")?
}

/// A source MAC for the generator's frames whose reflection the layer2 hash sends to member
/// `member` of two: the hash is dst[5] ^ src[5] ^ 0x0800, so its parity is the two last
/// bytes' parities.
fn src_mac_for(m_a: [u8; 6], member: u8) -> [u8; 6] {
    let mut mac = [0x02, 0x58, 0x42, 0x00, 0x00, 0x10];
    mac[5] = (mac[5] & !1) | ((m_a[5] ^ member) & 1);
    mac
}

fn xdp_pass(host: &Host) -> Result<XdpProgram> {
    let name = host.ifname.clone();
    host.ns
        .run(move || -> Result<XdpProgram> {
            Ok(XdpProgram::attach(
                &Interface::by_name(&name)?,
                Mode::Drv,
                false,
            )?)
        })
        .context("entering a host's namespace")?
}

pub(super) fn run(runs: usize, secs: f64, json: bool) -> Result<i32> {
    if !xskit_testbed::have_privileges() {
        bail!("xskit bench bond builds a testbed of network namespaces: run it as root (e.g. with sudo)");
    }
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let chain = Chain::new().context("building the chain testbed")?;
    let _far_ends = (xdp_pass(&chain.a)?, xdp_pass(&chain.c)?);
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); Case::ALL.len()];
    // Interleaved, so that drift hits every case alike.
    for _ in 0..runs {
        for (i, case) in Case::ALL.into_iter().enumerate() {
            let reflector = attach(&chain, case)?;
            let member = u8::from(case == Case::BondOf2Other);
            let mut args = live_gen_args(&chain.a, &mac_string(chain.m_a.mac), 64, secs);
            args.extend([
                "--src-mac".to_string(),
                mac_string(src_mac_for(chain.m_a.mac, member)),
            ]);
            let before = reflector.count()?;
            let started = Instant::now();
            let generator = start(&exe, &chain.a, GEN_CPU, &args)?;
            finish(generator)?;
            let elapsed = started.elapsed().as_secs_f64();
            let sent_back = reflector.count()? - before;
            rates[i].push(sent_back as f64 / elapsed / 1e6);
            drop(reflector);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let plain = median(&rates[0]);
    let rows: Vec<Row> = Case::ALL
        .iter()
        .zip(&rates)
        .map(|(case, mpps)| Row {
            case: case.label(),
            mpps: mpps.clone(),
            median_mpps: median(mpps),
            ratio_to_plain: if plain > 0.0 {
                median(mpps) / plain
            } else {
                0.0
            },
        })
        .collect();
    if json {
        out!("{}", serde_json::to_string(&rows)?);
    } else {
        out!("XDP_TX on veth (64 B, one flow from the live-frames generator, CPU {GEN_CPU}), {runs} runs of {secs} s:");
        for r in &rows {
            let runs: Vec<String> = r.mpps.iter().map(|m| format!("{m:.2}")).collect();
            out!(
                "  {:<52} {:>5.2} Mpps ({})  {:.2}x",
                r.case,
                r.median_mpps,
                runs.join("/"),
                r.ratio_to_plain
            );
        }
    }
    Ok(0)
}
