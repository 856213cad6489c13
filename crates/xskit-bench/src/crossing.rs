//! The kernel's own traffic across `xskit fwd` while a flood is dropped: pings five a second
//! and an HTTP download (Python's server at c, curl at a), paced to last the flood, its bytes
//! compared with what was served. What a DDoS operator asks of a filter first: the flood
//! goes, the users' traffic stays.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xskit_testbed::Host;

/// The download's size.
const BLOB: usize = 1 << 20;
/// The HTTP server's port at c.
const PORT: u16 = 8080;
/// How long the first exchange (neighbours resolved through the forwarder) and the server's
/// start may take on a loaded machine.
const READY_WITHIN: Duration = Duration::from_secs(60);

/// What crossed during one flood.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Crossed {
    pub pings_sent: u64,
    pub pings_answered: u64,
    /// The download arrived whole, byte for byte.
    pub download_intact: bool,
}

impl Crossed {
    /// The progress line's words for it.
    pub(crate) fn words(&self) -> String {
        format!(
            ", pings {}/{}, download {}",
            self.pings_answered,
            self.pings_sent,
            if self.download_intact {
                "intact"
            } else {
                "NOT intact"
            }
        )
    }
}

/// Pings and a download from a to c under way, and the server c answers from.
pub(crate) struct Crossing {
    dir: PathBuf,
    blob: Vec<u8>,
    server: Child,
    ping: Option<Child>,
    curl: Option<Child>,
}

impl Crossing {
    /// Starts c's server, waits until it listens and a's pings reach c through the forwarder
    /// (the neighbours resolved, before any flood), then starts the pings and the download,
    /// paced to last `secs`.
    pub(crate) fn start(a: &Host, c: &Host, secs: f64) -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("xskit-crossing-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let blob: Vec<u8> = (0..BLOB as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(dir.join("blob"), &blob)?;
        let server =
            c.ns.command("python3")
                .args(["-m", "http.server", &PORT.to_string(), "--bind"])
                .arg(c.ip.to_string())
                .arg("--directory")
                .arg(&dir)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .context("starting Python's HTTP server at c (install python3)")?;
        let mut crossing = Crossing {
            dir,
            blob,
            server,
            ping: None,
            curl: None,
        };
        crossing.wait_ready(a, c)?;
        let count = ((secs * 5.0).ceil() as u64).max(2).to_string();
        crossing.ping = Some(
            a.ns.command("ping")
                .args(["-q", "-c", &count, "-i", "0.2", "-W", "2"])
                .arg(c.ip.to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("starting ping at a")?,
        );
        crossing.curl = Some(crossing.download(a, c.ip, secs)?);
        Ok(crossing)
    }

    /// Returns once c's server accepts connections and a's ping has an answer from c.
    fn wait_ready(&mut self, a: &Host, c: &Host) -> Result<()> {
        let deadline = Instant::now() + READY_WITHIN;
        let at = SocketAddr::from((c.ip, PORT));
        loop {
            let listening =
                c.ns.run(|| TcpStream::connect_timeout(&at, Duration::from_secs(1)).is_ok())?;
            if listening {
                break;
            }
            if let Some(status) = self.server.try_wait()? {
                bail!("Python's HTTP server at c stopped ({status})");
            }
            if Instant::now() > deadline {
                bail!("Python's HTTP server at c never listened on {at}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        while !ping_once(a, c.ip)? {
            if Instant::now() > deadline {
                bail!("a's pings never reached c through xskit fwd, before any flood");
            }
        }
        Ok(())
    }

    /// curl at a fetching the blob, its rate capped so that it lasts about `secs`.
    fn download(&self, a: &Host, c: Ipv4Addr, secs: f64) -> Result<Child> {
        let rate = ((BLOB as f64 / secs.max(0.1)) as u64).max(1024);
        a.ns.command("curl")
            .args(["-sS", "--max-time", "60", "--limit-rate", &rate.to_string()])
            .arg("-o")
            .arg(self.dir.join("got"))
            .arg(format!("http://{c}:{PORT}/blob"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting curl at a (install curl)")
    }

    /// Waits for the pings and the download; what crossed.
    pub(crate) fn finish(mut self) -> Result<Crossed> {
        let ping = self
            .ping
            .take()
            .context("no pings started")?
            .wait_with_output()?;
        let (pings_sent, pings_answered) = ping_counts(&String::from_utf8_lossy(&ping.stdout))
            .with_context(|| {
                format!(
                    "reading ping's summary: {}",
                    String::from_utf8_lossy(&ping.stderr)
                )
            })?;
        let curl = self.curl.take().context("no download started")?.wait()?;
        let got = std::fs::read(self.dir.join("got")).unwrap_or_default();
        Ok(Crossed {
            pings_sent,
            pings_answered,
            download_intact: curl.success() && got == self.blob,
        })
    }
}

impl Drop for Crossing {
    fn drop(&mut self) {
        for child in [
            Some(&mut self.server),
            self.ping.as_mut(),
            self.curl.as_mut(),
        ]
        .into_iter()
        .flatten()
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One ping from `from` to `ip`, waiting up to 3 s for its answer.
fn ping_once(from: &Host, ip: Ipv4Addr) -> Result<bool> {
    let status = from
        .ns
        .command("ping")
        .args(["-q", "-c", "1", "-W", "3"])
        .arg(ip.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .context("running ping (install iputils-ping)")?;
    Ok(status.success())
}

/// The packets ping's summary says it sent and had answered ("5 packets transmitted, 5
/// received, ...").
fn ping_counts(summary: &str) -> Option<(u64, u64)> {
    let line = summary
        .lines()
        .find(|l| l.contains("packets transmitted"))?;
    let mut numbers = line
        .split(',')
        .map(|part| part.split_whitespace().next()?.parse::<u64>().ok());
    Some((numbers.next()??, numbers.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_summaries_are_read_with_and_without_errors() {
        let ok = "--- 198.51.100.3 ping statistics ---\n\
                  15 packets transmitted, 15 received, 0% packet loss, time 2803ms\n";
        assert_eq!(ping_counts(ok), Some((15, 15)));
        let lossy = "15 packets transmitted, 13 received, +2 errors, 13.3% packet loss\n";
        assert_eq!(ping_counts(lossy), Some((15, 13)));
        assert_eq!(ping_counts("ping: connect: Network is unreachable\n"), None);
    }

    #[test]
    fn the_words_say_what_did_not_cross() {
        let c = Crossed {
            pings_sent: 15,
            pings_answered: 14,
            download_intact: false,
        };
        assert_eq!(c.words(), ", pings 14/15, download NOT intact");
    }
}
