//! Capture files as ports: a pcap or pcapng file read as a receive port, and a transmit port
//! written to pcap, so a pipeline can be run and debugged offline.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use pcap_file::pcap::{PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};

use super::pool::FramePool;
use crate::error::{Error, Result};
use xskit::{Frame, Umem};

enum Reader {
    Pcap(PcapReader<BufReader<File>>),
    PcapNg(PcapNgReader<BufReader<File>>),
}

/// A capture file read as a receive port.
pub struct PcapSource {
    path: PathBuf,
    reader: Reader,
    oversize: u64,
    done: bool,
    /// Packets handed out so far, to say which one a damaged file broke at.
    read: u64,
}

impl std::fmt::Debug for PcapSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapSource")
            .field("path", &self.path)
            .field("oversize", &self.oversize)
            .finish_non_exhaustive()
    }
}

/// A damaged record, in words a reader of the capture can act on: a file cut short (a
/// capture stopped while it was written, a partial copy) is told apart from a corrupt one.
fn damaged(what: &str, packet: u64, e: &pcap_file::PcapError) -> String {
    use pcap_file::PcapError as E;
    let cut_short = match e {
        E::IncompleteBuffer => true,
        E::IoError(io) => io.kind() == std::io::ErrorKind::UnexpectedEof,
        _ => false,
    };
    if cut_short {
        format!(
            "the file ends inside the {what} of packet {packet}: the capture was cut short \
             (stopped while being written, or copied in part); the packets before it are whole"
        )
    } else {
        let detail = match e {
            E::IoError(io) => io.to_string(),
            other => other.to_string(),
        };
        format!("the {what} of packet {packet} is corrupt ({detail})")
    }
}

fn pcap_error(path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::Pcap {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}

/// xskit's ports carry Ethernet frames: a capture of another link type (`tcpdump -i any`
/// writes Linux cooked headers) would be read as garbage, so it is refused.
fn ethernet_only(path: &Path, link: pcap_file::DataLink) -> Result<()> {
    if link != pcap_file::DataLink::ETHERNET {
        return Err(pcap_error(
            path,
            format!(
                "its link type is {link:?}, not Ethernet: capture on one interface \
                 (tcpdump -i IFACE, not -i any)"
            ),
        ));
    }
    Ok(())
}

impl PcapSource {
    /// Opens a pcap or pcapng file (told apart by its magic number).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let open =
            || File::open(path).map_err(|e| pcap_error(path, format!("cannot open it ({e})")));
        let mut magic = [0u8; 4];
        open()?
            .read_exact(&mut magic)
            .map_err(|_| pcap_error(path, "too short to be a capture file"))?;
        let file = BufReader::new(open()?);
        let reader = match u32::from_le_bytes(magic) {
            0x0a0d_0d0a => Reader::PcapNg(
                PcapNgReader::new(file)
                    .map_err(|e| pcap_error(path, format!("bad pcapng header: {e}")))?,
            ),
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
                let reader = PcapReader::new(file)
                    .map_err(|e| pcap_error(path, format!("bad pcap header: {e}")))?;
                ethernet_only(path, reader.header().datalink)?;
                Reader::Pcap(reader)
            }
            _ => {
                return Err(pcap_error(
                    path,
                    "not a pcap or pcapng file (unknown magic number)",
                ))
            }
        };
        Ok(PcapSource {
            path: path.to_path_buf(),
            reader,
            oversize: 0,
            done: false,
            read: 0,
        })
    }

    /// Packets skipped because they were larger than a frame.
    pub fn oversize(&self) -> u64 {
        self.oversize
    }

    /// True once the file is exhausted.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Hands the next packet's bytes to `f` (straight from the reader's buffer) and returns
    /// what `f` returns; `None` at the end of the file.
    pub fn next_packet_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>> {
        self.next_timed_packet_with(|_, data| f(data))
    }

    /// As [`PcapSource::next_packet_with`], with the packet's capture time (since the Unix
    /// epoch; zero for a pcapng simple packet, which has none).
    pub fn next_timed_packet_with<R>(
        &mut self,
        f: impl FnOnce(Duration, &[u8]) -> R,
    ) -> Result<Option<R>> {
        match &mut self.reader {
            Reader::Pcap(r) => match r.next_packet() {
                None => Ok(None),
                Some(Ok(p)) => {
                    self.read += 1;
                    Ok(Some(f(p.timestamp, &p.data)))
                }
                Some(Err(e)) => Err(pcap_error(&self.path, damaged("record", self.read + 1, &e))),
            },
            Reader::PcapNg(r) => loop {
                match r.next_block() {
                    None => break Ok(None),
                    Some(Ok(Block::EnhancedPacket(p))) => {
                        self.read += 1;
                        break Ok(Some(f(p.timestamp, &p.data)));
                    }
                    Some(Ok(Block::SimplePacket(p))) => {
                        self.read += 1;
                        break Ok(Some(f(Duration::ZERO, &p.data)));
                    }
                    Some(Ok(Block::InterfaceDescription(i))) => {
                        ethernet_only(&self.path, i.linktype)?;
                        continue;
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        break Err(pcap_error(&self.path, damaged("block", self.read + 1, &e)))
                    }
                }
            },
        }
    }

    /// Reads up to `max` packets into frames from `pool`; returns how many (0 at the end of
    /// the file, or when the pool is empty). Each packet is copied once, from the reader's
    /// buffer straight into its frame.
    pub fn receive(
        &mut self,
        umem: &Umem,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> Result<usize> {
        let mut got = 0;
        while got < max && !self.done {
            // Take the frame first, so the packet can go from the reader's buffer into it.
            if pool.alloc(out, 1) == 0 {
                // Nothing to read into: as on a wire with an empty fill ring, stop for now.
                break;
            }
            let mut frame = out.pop().expect("allocated one");
            umem.reset(&mut frame);
            // Some(fits) for a packet, None at the end of the file.
            let stored = self.next_packet_with(|data| umem.write(&mut frame, data).is_ok());
            match stored {
                Ok(Some(true)) => {
                    out.push(frame);
                    got += 1;
                }
                Ok(Some(false)) => {
                    self.oversize += 1;
                    pool.free_one(frame);
                }
                Ok(None) => {
                    self.done = true;
                    pool.free_one(frame);
                }
                Err(e) => {
                    pool.free_one(frame);
                    return Err(e);
                }
            }
        }
        Ok(got)
    }
}

/// How often a capture being written reaches its file, at least: a run that is killed
/// leaves a readable file up to then.
pub const CAPTURE_FLUSH_EVERY: Duration = Duration::from_secs(1);

/// A buffered file that its pcap writer and its owner both hold: the owner flushes it on a
/// clock, which the writer (owning what it writes to) has no way to be asked for.
#[derive(Clone)]
struct SharedFile(std::sync::Arc<std::sync::Mutex<BufWriter<File>>>);

impl SharedFile {
    fn lock(&self) -> std::sync::MutexGuard<'_, BufWriter<File>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::io::Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lock().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.lock().write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.lock().flush()
    }
}

/// A transmit port written to a pcap file.
pub struct PcapSink {
    path: PathBuf,
    writer: PcapWriter<SharedFile>,
    file: SharedFile,
    written: u64,
    /// When the file last had everything written; whether anything was written since.
    flushed_at: std::time::Instant,
    unflushed: bool,
}

impl std::fmt::Debug for PcapSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapSink")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl PcapSink {
    /// Creates (or truncates) a pcap file.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file =
            File::create(path).map_err(|e| pcap_error(path, format!("cannot create it ({e})")))?;
        let file = SharedFile(std::sync::Arc::new(std::sync::Mutex::new(BufWriter::new(
            file,
        ))));
        let writer = PcapWriter::new(file.clone()).map_err(|e| pcap_error(path, e))?;
        Ok(PcapSink {
            path: path.to_path_buf(),
            writer,
            file,
            written: 0,
            flushed_at: std::time::Instant::now(),
            unflushed: false,
        })
    }

    /// Writes every frame of `frames` and gives the frames back to `pool`; returns how many.
    pub fn send(
        &mut self,
        umem: &Umem,
        frames: &mut Vec<Frame>,
        pool: &mut FramePool,
    ) -> Result<usize> {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        for f in frames.iter() {
            self.write(now, umem.data(f))?;
        }
        let n = frames.len();
        pool.free(frames);
        Ok(n)
    }

    /// Writes one whole packet captured at `time` (since the Unix epoch).
    pub fn write(&mut self, time: Duration, data: &[u8]) -> Result<()> {
        self.write_with_len(time, data, data.len() as u32)
    }

    /// Writes the first bytes `data` of a packet of `len` bytes captured at `time` (a capture
    /// with a snap length).
    pub fn write_with_len(&mut self, time: Duration, data: &[u8], len: u32) -> Result<()> {
        self.writer
            .write_packet(&PcapPacket::new(time, len.max(data.len() as u32), data))
            .map_err(|e| pcap_error(&self.path, e))?;
        self.written += 1;
        self.unflushed = true;
        Ok(())
    }

    /// Writes what is buffered to the file if [`CAPTURE_FLUSH_EVERY`] has passed since it was
    /// last done (`now`): call it from the loop that writes, packets or not, so that a run
    /// killed at any moment leaves a file whole up to a second before.
    pub fn flush_if_due(&mut self, now: std::time::Instant) -> Result<()> {
        if !self.unflushed || now.duration_since(self.flushed_at) < CAPTURE_FLUSH_EVERY {
            return Ok(());
        }
        std::io::Write::flush(&mut self.file).map_err(|e| pcap_error(&self.path, e))?;
        (self.flushed_at, self.unflushed) = (now, false);
        Ok(())
    }

    /// Packets written.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes and closes the file.
    pub fn finish(self) -> Result<()> {
        let path = self.path;
        let mut inner = self.writer.into_writer();
        std::io::Write::flush(&mut inner).map_err(|e| pcap_error(&path, e))
    }
}

impl crate::PipelinePort for PcapSource {
    fn receive(
        &mut self,
        umem: &Umem,
        pool: &mut FramePool,
        out: &mut Vec<Frame>,
        max: usize,
    ) -> Result<usize> {
        PcapSource::receive(self, umem, pool, out, max)
    }

    /// A capture file is read, never written: transmits are dropped back to the pool.
    fn send(
        &mut self,
        _umem: &Umem,
        frames: &mut Vec<Frame>,
        pool: &mut FramePool,
    ) -> Result<usize> {
        pool.free(frames);
        Ok(0)
    }
}

impl crate::PipelinePort for PcapSink {
    /// Nothing arrives from a file being written.
    fn receive(
        &mut self,
        _umem: &Umem,
        _pool: &mut FramePool,
        _out: &mut Vec<Frame>,
        _max: usize,
    ) -> Result<usize> {
        Ok(0)
    }

    fn send(
        &mut self,
        umem: &Umem,
        frames: &mut Vec<Frame>,
        pool: &mut FramePool,
    ) -> Result<usize> {
        PcapSink::send(self, umem, frames, pool)
    }
}
