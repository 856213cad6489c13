//! `xskit fwd --capture FILE`: what the forwarder's XDP programs see, to pcapng, one
//! interface block per interface and each packet's verdict and rule as a packet comment
//! (Wireshark shows it as `frame.comment`), so that "why was this dropped?" has an answer in
//! the file. A cap on captures a second keeps capture from starving forwarding; what it
//! skips is counted.

use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Context, Result};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use serde::Serialize;
use xskit::capture::{Capture, CaptureConfig};
use xskit::Interface;
use xskit_fwd::reasons::LiveReasons;

/// What a capture did, for the summary.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub(crate) struct CaptureTally {
    pub(crate) captured: u64,
    /// Not captured because of the cap on captures a second.
    pub(crate) skipped: u64,
    /// The perf buffers had no room.
    pub(crate) lost: u64,
}

/// The capture thread; [`FwdCapture::finish`] stops it and closes the file.
pub(crate) struct FwdCapture {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Result<CaptureTally>>,
}

impl FwdCapture {
    /// Starts capturing on `interfaces` (where the forwarder's programs are attached) into
    /// `path`, at most `max_per_sec` packets a second (0: all). Returns once the capture
    /// runs, or with what prevented it.
    pub(crate) fn start(
        path: &Path,
        interfaces: Vec<String>,
        reasons: LiveReasons,
        max_per_sec: u32,
    ) -> Result<FwdCapture> {
        let file = File::create(path)
            .with_context(|| format!("--capture {}: cannot create it", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let (ready, started) = mpsc::sync_channel(1);
        let path = path.to_path_buf();
        let flag = stop.clone();
        // The captures are opened on the thread that reads them.
        let thread = std::thread::Builder::new()
            .name("xskit-capture".into())
            .spawn(move || capture(file, path, interfaces, reasons, max_per_sec, &flag, ready))?;
        match started.recv() {
            Ok(Ok(())) => Ok(FwdCapture { stop, thread }),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => Err(thread
                .join()
                .map_err(|_| anyhow!("the capture thread panicked"))?
                .err()
                .unwrap_or_else(|| anyhow!("the capture thread ended before it started"))),
        }
    }

    /// Stops the capture, flushes the file, and says what it did.
    pub(crate) fn finish(self) -> Result<CaptureTally> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow!("the capture thread panicked"))?
    }
}

type Writer = PcapNgWriter<BufWriter<File>>;

/// Opens a capture on each interface and starts the file with a block per interface.
fn open_all(
    file: File,
    path: &std::path::Path,
    interfaces: &[String],
    max_per_sec: u32,
) -> Result<(Vec<(u32, Capture)>, Writer)> {
    let config = CaptureConfig::default().max_per_sec(max_per_sec);
    let opened: Result<Vec<(u32, Capture)>> = interfaces
        .iter()
        .map(|name| {
            let iface = Interface::by_name(name)?;
            let c = Capture::open(&iface, &config)
                .with_context(|| format!("--capture: capturing on {name}"))?;
            Ok((iface.index(), c))
        })
        .collect();
    let write_error = |e: pcap_file::PcapError| anyhow!("--capture {}: {e}", path.display());
    opened.and_then(|captures| {
        let mut writer = PcapNgWriter::new(BufWriter::new(file)).map_err(write_error)?;
        for name in interfaces {
            let block = InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen: config.snaplen,
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Borrowed(name)),
                    // pcap-file writes nanoseconds.
                    InterfaceDescriptionOption::IfTsResol(9),
                ],
            };
            writer.write_pcapng_block(block).map_err(write_error)?;
        }
        Ok((captures, writer))
    })
}

fn capture(
    file: File,
    path: PathBuf,
    interfaces: Vec<String>,
    reasons: LiveReasons,
    max_per_sec: u32,
    stop: &AtomicBool,
    ready: mpsc::SyncSender<Result<()>>,
) -> Result<CaptureTally> {
    let write_error = |e: pcap_file::PcapError| anyhow!("--capture {}: {e}", path.display());
    let setup = open_all(file, &path, &interfaces, max_per_sec);
    let (mut captures, mut writer) = match setup {
        Ok(s) => {
            let _ = ready.send(Ok(()));
            s
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return Ok(CaptureTally::default());
        }
    };
    let indexes: Vec<u32> = captures.iter().map(|(i, _)| *i).collect();
    let mut tally = CaptureTally::default();
    let mut failed = None;
    let mut flushed_at = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) && failed.is_none() {
        // A forwarder killed at any moment leaves a file whole up to a second before.
        if flushed_at.elapsed() >= xskit_pipeline::CAPTURE_FLUSH_EVERY {
            std::io::Write::flush(writer.get_mut())
                .map_err(|e| anyhow!("--capture {}: {e}", path.display()))?;
            flushed_at = std::time::Instant::now();
        }
        let mut seen = 0;
        for (_, c) in captures.iter_mut() {
            seen += c.poll(Some(Duration::ZERO), |p| {
                if failed.is_some() {
                    return;
                }
                let interface_id = indexes.iter().position(|&i| i == p.ifindex).unwrap_or(0);
                let block = EnhancedPacketBlock {
                    interface_id: interface_id as u32,
                    timestamp: p
                        .time
                        .duration_since(SystemTime::UNIX_EPOCH)
                        .unwrap_or_default(),
                    original_len: p.len,
                    data: Cow::Borrowed(p.data),
                    options: vec![EnhancedPacketOption::Comment(Cow::Owned(
                        reasons.comment(p.verdict, p.why),
                    ))],
                };
                match writer.write_pcapng_block(block) {
                    Ok(_) => tally.captured += 1,
                    Err(e) => failed = Some(write_error(e)),
                }
            })?;
        }
        if seen == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // What is still in the buffers.
    for (_, c) in captures.iter_mut() {
        tally.skipped += c.skipped();
        tally.lost += c.lost();
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let mut inner = writer.into_inner();
    std::io::Write::flush(&mut inner).map_err(|e| anyhow!("--capture {}: {e}", path.display()))?;
    Ok(tally)
}
