//! `xskit bench bond`: the table of Jussi Maki's XDP bonding patch ("net, bonding: Add XDP
//! support to the bonding driver") on this machine. XDP_DROP rates on the forwarding
//! namespace of a three-namespace chain: xskit's plain drop program, and the bond's drop
//! program (the active-backup check first) as a bond of 1 and of 2 members. XDP_TX rates of a
//! reflector there: xskit's plain XDP_TX program on one
//! device, and xskit's bond reflector (`xskit_bond.h`) as a bond of 1 member and of 2 members
//! (the packet leaving through the receiving member, or redirected to the other), each
//! against the plain program in the same run; and an AF_XDP l2fwd (on the other CPU) through
//! a bond port of 2 members against one through a single port. The live-frames generator on host a (CPU 0)
//! sends one flow into m_a; the far hosts run a pass-through XDP program, which veth needs
//! to take frames sent with XDP_TX.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use xskit::{Frame, Interface, Mode, SocketConfig, Umem, UmemConfig, XdpProgram};
use xskit_bond::{BondMode, BondPort, XdpBond, XdpBondMode, XmitHashPolicy};
use xskit_pipeline::{FramePool, PipelinePort, SharedFrames, XskPort};
use xskit_testbed::{Chain, Host};
use xskit_traffic::XdpCounter;
use xskit_wire::ethernet;

use crate::procs::{finish, live_gen_args, start, GEN_CPU};
use crate::stats::median;

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
    DropPlain,
    DropBondOf1,
    DropBondOf2,
    Plain,
    BondOf1,
    BondOf2Same,
    BondOf2Other,
    AfXdpPort,
    AfXdpBondOf2,
}

impl Case {
    const ALL: [Case; 9] = [
        Case::DropPlain,
        Case::DropBondOf1,
        Case::DropBondOf2,
        Case::Plain,
        Case::BondOf1,
        Case::BondOf2Same,
        Case::BondOf2Other,
        Case::AfXdpPort,
        Case::AfXdpBondOf2,
    ];

    fn label(self) -> &'static str {
        match self {
            Case::DropPlain => "XDP_DROP, plain program, one device",
            Case::DropBondOf1 => "XDP_DROP, bond of 1 member",
            Case::DropBondOf2 => "XDP_DROP, bond of 2 (active-backup)",
            Case::Plain => "XDP_TX, plain program, one device",
            Case::BondOf1 => "bond of 1 member",
            Case::BondOf2Same => "bond of 2, out of the receiving member (XDP_TX)",
            Case::BondOf2Other => "bond of 2, out of the other member (XDP_REDIRECT)",
            Case::AfXdpPort => "AF_XDP l2fwd, one port",
            Case::AfXdpBondOf2 => "AF_XDP l2fwd through a bond port of 2",
        }
    }

    /// The case a ratio is taken against: the plain program of the same verdict for the XDP
    /// rows, the single AF_XDP port for the bond port.
    fn baseline(self) -> Case {
        match self {
            Case::DropPlain | Case::DropBondOf1 | Case::DropBondOf2 => Case::DropPlain,
            Case::AfXdpBondOf2 => Case::AfXdpPort,
            _ => Case::Plain,
        }
    }

    fn af_xdp(self) -> bool {
        matches!(self, Case::AfXdpPort | Case::AfXdpBondOf2)
    }
}

#[derive(Serialize)]
struct Row {
    case: &'static str,
    mpps: Vec<f64>,
    median_mpps: f64,
    /// Against `against`, in the same run.
    ratio: f64,
    against: &'static str,
}

/// The l2fwd loop: receive, swap MACs, send back through the port (a bond port picks the
/// member); returns the frames sent.
fn l2fwd<P: PipelinePort>(
    port: &mut P,
    umem: &Umem,
    pool: &mut FramePool,
    stop: &AtomicBool,
) -> Result<u64> {
    let mut frames: Vec<Frame> = Vec::with_capacity(64);
    let mut sent = 0u64;
    while !stop.load(Ordering::Relaxed) {
        port.complete(pool);
        port.refill(umem, pool)?;
        if port.receive(umem, pool, &mut frames, 64)? == 0 {
            continue;
        }
        for f in frames.iter_mut() {
            if let Ok(mut eth) = ethernet::Frame::new_checked(umem.data_mut(f)) {
                eth.swap_addrs();
            }
        }
        sent += port.send(umem, &mut frames, pool)? as u64;
    }
    port.complete(pool);
    Ok(sent)
}

type L2fwdThread = std::thread::JoinHandle<std::io::Result<Result<u64>>>;

/// Starts the AF_XDP l2fwd on m's side (one port on m_a, or a bond port of m_a and m_c) on
/// the CPU the generator leaves free; returns once its sockets are open.
fn start_af_xdp(chain: &Chain, bond: bool, stop: Arc<AtomicBool>) -> Result<L2fwdThread> {
    let names = [chain.m_a.ifname.clone(), chain.m_c.ifname.clone()];
    let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
    let handle = chain.m_a.ns.spawn(move || -> Result<u64> {
        let setup = || -> Result<_> {
            xskit_os::pin_current_thread(1)?;
            let umem = Umem::new(UmemConfig::default().frame_count(4096))?;
            let config = SocketConfig::default()
                .rx_size(1024)
                .tx_size(1024)
                .fill_size(1024)
                .completion_size(1024);
            let members = if bond { &names[..] } else { &names[..1] };
            let mut ports = Vec::new();
            for name in members {
                let program = XdpProgram::attach(&Interface::by_name(name)?, Mode::Drv, false)?;
                ports.push(XskPort::open(&umem, Arc::new(program), 0, &config)?);
            }
            let shared = SharedFrames::new(umem.take_frames().context("the UMEM's frames")?);
            Ok((umem, ports, shared))
        };
        let (umem, mut ports, shared) = match setup() {
            Ok(v) => {
                let _ = ready_tx.send(Ok(()));
                v
            }
            Err(e) => {
                let _ = ready_tx.send(Err(format!("{e:#}")));
                return Err(e);
            }
        };
        let mut pool = shared.pool(256);
        if bond {
            let mode = BondMode::BalanceXor {
                policy: XmitHashPolicy::Layer2,
            };
            let mut port = BondPort::new(ports, mode)?;
            l2fwd(&mut port, &umem, &mut pool, &stop)
        } else {
            let mut port = ports.remove(0);
            l2fwd(&mut port, &umem, &mut pool, &stop)
        }
    });
    match ready.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => bail!("the AF_XDP l2fwd: {e}"),
        Err(_) => bail!("the AF_XDP l2fwd thread ended before opening its sockets"),
    }
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
            let backup = XdpBondMode::ActiveBackup;
            Ok(match case {
                Case::DropPlain => {
                    Reflector::Plain(Box::new(XdpCounter::drop_all(&m_a, Mode::Drv, false)?))
                }
                Case::DropBondOf1 => Reflector::Bond(XdpBond::dropper(&[m_a], backup, Mode::Drv)?),
                Case::DropBondOf2 => {
                    Reflector::Bond(XdpBond::dropper(&[m_a, m_c], backup, Mode::Drv)?)
                }
                Case::Plain => {
                    Reflector::Plain(Box::new(XdpCounter::reflect_all(&m_a, Mode::Drv)?))
                }
                Case::BondOf1 => Reflector::Bond(XdpBond::reflector(&[m_a], layer2, Mode::Drv)?),
                Case::BondOf2Same | Case::BondOf2Other => {
                    Reflector::Bond(XdpBond::reflector(&[m_a, m_c], layer2, Mode::Drv)?)
                }
                Case::AfXdpPort | Case::AfXdpBondOf2 => {
                    bail!("{} is not an XDP reflector", case.label())
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

/// The bond table: each case's rate, median of `runs` runs of `secs` seconds, against its
/// baseline.
pub fn run(runs: usize, secs: f64) -> Result<BondTable> {
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
            rates[i].push(measure(&exe, &chain, case, secs)? / 1e6);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let index = |case: Case| Case::ALL.iter().position(|&c| c == case).unwrap_or(0);
    let rows = Case::ALL
        .iter()
        .zip(&rates)
        .map(|(&case, mpps)| {
            let base = median(&rates[index(case.baseline())]);
            Row {
                case: case.label(),
                mpps: mpps.clone(),
                median_mpps: median(mpps),
                ratio: if base > 0.0 { median(mpps) / base } else { 0.0 },
                against: case.baseline().label(),
            }
        })
        .collect();
    Ok(BondTable { runs, secs, rows })
}

/// One case's packets per second, one flow from the live-frames generator on a.
fn measure(exe: &str, chain: &Chain, case: Case, secs: f64) -> Result<f64> {
    let member = u8::from(case == Case::BondOf2Other);
    let mut args = live_gen_args(&chain.a, &mac_string(chain.m_a.mac), 64, secs);
    args.extend([
        "--src-mac".to_string(),
        mac_string(src_mac_for(chain.m_a.mac, member)),
    ]);
    if case.af_xdp() {
        let stop = Arc::new(AtomicBool::new(false));
        let forwarder = start_af_xdp(chain, case == Case::AfXdpBondOf2, stop.clone())?;
        let started = Instant::now();
        let generated = start(exe, &chain.a, GEN_CPU, &args).and_then(finish);
        let elapsed = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let sent = forwarder
            .join()
            .map_err(|_| anyhow::anyhow!("the AF_XDP l2fwd panicked"))???;
        generated?;
        Ok(sent as f64 / elapsed)
    } else {
        let reflector = attach(chain, case)?;
        let before = reflector.count()?;
        let started = Instant::now();
        finish(start(exe, &chain.a, GEN_CPU, &args)?)?;
        let elapsed = started.elapsed().as_secs_f64();
        Ok((reflector.count()? - before) as f64 / elapsed)
    }
}

/// The bond table as `--json` prints it.
#[derive(Serialize)]
#[serde(transparent)]
pub struct BondTable {
    #[serde(skip)]
    runs: usize,
    #[serde(skip)]
    secs: f64,
    rows: Vec<Row>,
}

impl BondTable {
    /// The table as text.
    pub fn lines(&self) -> Vec<String> {
        let (runs, secs) = (self.runs, self.secs);
        let mut lines = vec![format!("XDP_DROP, XDP_TX and AF_XDP l2fwd on veth (64 B, one flow from the live-frames generator on CPU {GEN_CPU}), {runs} runs of {secs} s; ratios against the plain program of the same verdict, and for the bond port against one port:")];
        for r in &self.rows {
            let runs: Vec<String> = r.mpps.iter().map(|m| format!("{m:.2}")).collect();
            lines.push(format!(
                "  {:<52} {:>5.2} Mpps ({})  {:.2}x",
                r.case,
                r.median_mpps,
                runs.join("/"),
                r.ratio
            ));
        }
        lines
    }
}
