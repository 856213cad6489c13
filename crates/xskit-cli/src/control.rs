//! `xskit fwd`'s control socket: a Unix stream socket that answers the control protocol
//! ([`xskit_fwd::control`]) on the event loop the metrics endpoint uses, sized, as that
//! endpoint is, to stay available whoever connects:
//!
//! - At most [`MAX_CLIENTS`] connections are kept. A connection past that makes room by
//!   closing the oldest one still waiting for a request (told why); a well-behaved client
//!   asks as soon as it connects and is answered in microseconds, so it is never the oldest.
//! - A client that sends nothing for [`IDLE`] is closed; a request line is at most
//!   [`MAX_REQUEST`] bytes (a longer one is refused and its connection closed), but for an
//!   `apply`'s or a `set`'s, read [`BIG_READS`] at a time up to [`MAX_LONG_REQUEST`]. Those
//!   wait for the forwarder off the loop, on one of its few blocking threads.
//! - The socket is its owner's alone (mode 0600), or its group's too with `--control-group`
//!   (0660); the file goes when the forwarder does.

use std::collections::VecDeque;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use xskit_fwd::control::{respond, waits_on_forwarder, Response, MAX_LONG_REQUEST, MAX_REQUEST};
use xskit_fwd::RuleChanger;

use crate::serve::EventLoop;

/// The most connections kept open at once.
pub(crate) const MAX_CLIENTS: usize = 64;
/// How long a connection may wait before its next request.
pub(crate) const IDLE: Duration = Duration::from_secs(10);

/// Request lines longer than [`MAX_REQUEST`] read at once at most (memory: each up to
/// [`MAX_LONG_REQUEST`]).
pub(crate) const BIG_READS: usize = 2;

/// What every connection answers from.
struct Shared {
    /// The forwarder's last interval line, what `status` answers.
    latest: Mutex<Option<Value>>,
    /// What applies rules, once the forwarder runs.
    changer: Mutex<Option<RuleChanger>>,
    big_reads: tokio::sync::Semaphore,
    /// Descriptors handed to a successor beside the forwarder's, by name.
    extra: Mutex<Vec<(&'static str, std::os::fd::OwnedFd)>>,
}

type Latest = Arc<Shared>;

/// The open connections waiting for a request, oldest first: each one's number and what
/// closes it.
type Waiting = Arc<Mutex<VecDeque<(u64, oneshot::Sender<()>)>>>;

/// The control socket, served until dropped; its file is removed then.
pub(crate) struct ControlServer {
    path: PathBuf,
    latest: Latest,
    /// The socket file's inode: removed at exit only if it is still this one.
    inode: u64,
    /// Handed over: the path is the successor's, whatever is there now.
    handed_over: bool,
}

impl ControlServer {
    /// Listens at `path` (0600, or 0660 for `group`) on `events`; with `replace`, in the
    /// place of the forwarder listening there now (which handed over to this one and leaves).
    pub(crate) fn start(
        events: &EventLoop,
        path: &Path,
        group: Option<u32>,
        replace: bool,
    ) -> Result<Self> {
        if replace {
            take_place_at(path)?;
        } else {
            make_room_at(path)?;
        }
        let listener = std::os::unix::net::UnixListener::bind(path)
            .with_context(|| format!("listening at {}", path.display()))?;
        let mode = if group.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting the permissions of {}", path.display()))?;
        if let Some(gid) = group {
            std::os::unix::fs::chown(path, None, Some(gid))
                .with_context(|| format!("giving {} to group {gid}", path.display()))?;
        }
        let inode = std::fs::metadata(path)?.ino();
        listener.set_nonblocking(true)?;
        let listener = events.enter(|| UnixListener::from_std(listener))?;
        let latest = Arc::new(Shared {
            latest: Mutex::new(None),
            changer: Mutex::new(None),
            big_reads: tokio::sync::Semaphore::new(BIG_READS),
            extra: Mutex::new(Vec::new()),
        });
        events.spawn(accept_all(listener, Arc::clone(&latest)));
        Ok(ControlServer {
            path: path.to_path_buf(),
            latest,
            inode,
            handed_over: false,
        })
    }

    /// Where it listens.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Makes `line` (an interval line, as `--json-lines` prints it) what `status` answers.
    pub(crate) fn publish(&self, line: Value) {
        *self
            .latest
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(line);
    }

    /// Leaves the socket's path to the successor this forwarder handed over to: it is not
    /// removed at exit. The successor replaces the file in the same moment this one leaves,
    /// so a look at whose file it is could be made just before the successor's and remove
    /// the successor's socket.
    pub(crate) fn leave_to_successor(&mut self) {
        self.handed_over = true;
    }

    /// Hands `fd` (another descriptor of it) to a successor as `name`, beside the
    /// forwarder's: a listening socket it serves on, so that none is refused meanwhile.
    pub(crate) fn hand_also(
        &self,
        name: &'static str,
        fd: std::os::fd::BorrowedFd<'_>,
    ) -> Result<()> {
        let fd = fd
            .try_clone_to_owned()
            .with_context(|| format!("keeping the {name} socket for a successor"))?;
        self.latest
            .extra
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name, fd));
        Ok(())
    }

    /// Takes applies from now on, through `changer`.
    pub(crate) fn take_applies(&self, changer: RuleChanger) {
        *self
            .latest
            .changer
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(changer);
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        if self.handed_over {
            return;
        }
        if std::fs::metadata(&self.path).is_ok_and(|m| m.ino() == self.inode) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Clears `path` for a new socket: a socket nobody answers on (a forwarder killed before it
/// could remove it) is removed; a live one, or anything that is not a socket, is left and
/// refused.
fn make_room_at(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) {
        bail!(
            "{} exists and is not a socket: remove it or give --control another path",
            path.display()
        );
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(anyhow!(
            "another forwarder answers at {}: stop it, or give --control another path",
            path.display()
        )),
        Err(_) => std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display())),
    }
}

/// Clears `path` of the socket of the forwarder this one took over from: its file is
/// removed (the forwarder leaving removes it only while it is still its own).
fn take_place_at(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()) => {
            std::fs::remove_file(path)
                .with_context(|| format!("taking the place of {}", path.display()))
        }
        Ok(_) => make_room_at(path),
        Err(_) => Ok(()),
    }
}

async fn accept_all(listener: UnixListener, latest: Latest) {
    let waiting = Waiting::default();
    let mut next = 0u64;
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of descriptors, or a connection gone before it was taken: wait a moment
            // rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (close, closed) = oneshot::channel();
        let evicted = {
            let mut waiting = waiting.lock().unwrap_or_else(PoisonError::into_inner);
            let evicted = (waiting.len() >= MAX_CLIENTS)
                .then(|| waiting.pop_front())
                .flatten();
            waiting.push_back((next, close));
            evicted
        };
        if let Some((_, close)) = evicted {
            let _ = close.send(());
        }
        let task = serve(stream, Arc::clone(&latest), closed);
        let waiting = Arc::clone(&waiting);
        let id = next;
        tokio::spawn(async move {
            task.await;
            let mut waiting = waiting.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.retain(|(n, _)| *n != id);
        });
        next += 1;
    }
}

/// Answers `stream`'s requests until it closes, goes idle, misbehaves, or is `closed` to
/// make room.
async fn serve(stream: UnixStream, latest: Latest, mut closed: oneshot::Receiver<()>) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    loop {
        let mut line = Vec::new();
        let got = tokio::select! {
            got = read_request(&mut read, &mut line, &latest) => got,
            _ = &mut closed => {
                let refusal = Response::refusal(format!(
                    "closed to make room: {MAX_CLIENTS} connections were open"
                ));
                let _ = write.write_all(refusal.to_line().as_bytes()).await;
                return;
            }
        };
        let answer = match got {
            Ok(true) if xskit_fwd::control::asks_handover(&line) => {
                let stream = read.into_inner().reunite(write);
                return hand_over(stream, &latest).await;
            }
            Ok(true) => answer(line, &latest).await,
            Ok(false) => return,
            Err(refusal) => refusal,
        };
        let whole = answer
            .error
            .as_deref()
            .is_none_or(|e| !e.starts_with(TOO_LONG));
        let sent = tokio::time::timeout(IDLE, write.write_all(answer.to_line().as_bytes())).await;
        if !whole || !matches!(sent, Ok(Ok(()))) {
            return;
        }
    }
}

/// How a refusal of an over-long request starts.
const TOO_LONG: &str = "a request is one line of at most";

/// Reads one request line into `line`, bounded (what follows stays in `read` for the next
/// request): true with a whole line, false at the end or when idle for too long; a refusal
/// for a line too long.
async fn read_request(
    read: &mut BufReader<tokio::net::unix::OwnedReadHalf>,
    line: &mut Vec<u8>,
    shared: &Shared,
) -> std::result::Result<bool, Response> {
    let too_long = |max: usize| Response::refusal(format!("{TOO_LONG} {max} bytes"));
    let mut limited = (&mut *read).take(MAX_REQUEST as u64);
    match tokio::time::timeout(IDLE, limited.read_until(b'\n', line)).await {
        Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return Ok(false),
        Ok(Ok(_)) if line.ends_with(b"\n") => return Ok(true),
        Ok(Ok(n)) if n < MAX_REQUEST => return Ok(false),
        Ok(Ok(_)) => {}
    }
    // Longer than a short request: only an apply's rules or a set's elements may be (their
    // "command" comes first), read a few at a time.
    let long_kind = |word: &[u8]| line.windows(word.len()).any(|w| w == word);
    if !long_kind(b"\"apply\"") && !long_kind(b"\"set\"") {
        return Err(too_long(MAX_REQUEST));
    }
    let Ok(_permit) = shared.big_reads.try_acquire() else {
        return Err(Response::refusal(format!(
            "{TOO_LONG} {MAX_REQUEST} bytes while other long requests are read: try again"
        )));
    };
    let rest = (MAX_LONG_REQUEST - MAX_REQUEST) as u64;
    let mut limited = (&mut *read).take(rest);
    match tokio::time::timeout(IDLE, limited.read_until(b'\n', line)).await {
        Ok(Ok(_)) if line.ends_with(b"\n") => Ok(true),
        Ok(Ok(n)) if n as u64 == rest => Err(too_long(MAX_LONG_REQUEST)),
        _ => Ok(false),
    }
}

/// The answer to the request `line`; an apply is waited for off the event loop.
async fn answer(line: Vec<u8>, shared: &Arc<Shared>) -> Response {
    let latest = shared
        .latest
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    if !waits_on_forwarder(&line) {
        return respond(&line, latest.as_ref(), None);
    }
    let changer = shared
        .changer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let applied = tokio::task::spawn_blocking(move || {
        let answer = respond(&line, latest.as_ref(), changer.as_ref());
        note_apply(&answer);
        answer
    });
    applied
        .await
        .unwrap_or_else(|e| Response::refusal(format!("the apply failed: {e}")))
}

/// Serves a successor's handover on its connection, off the event loop (it waits on the
/// forwarder and on the successor).
async fn hand_over(
    stream: std::result::Result<UnixStream, tokio::net::unix::ReuniteError>,
    shared: &Arc<Shared>,
) {
    let changer = shared
        .changer
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let Ok(stream) = stream.map(UnixStream::into_std) else {
        return;
    };
    let Ok(stream) = stream else {
        return;
    };
    let extra: Vec<(&'static str, std::os::fd::OwnedFd)> = shared
        .extra
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter_map(|(name, fd)| Some((*name, fd.try_clone().ok()?)))
        .collect();
    let served = tokio::task::spawn_blocking(move || match changer {
        Some(changer) => {
            let extra: Vec<_> = extra
                .iter()
                .map(|(name, fd)| (*name, std::os::fd::AsFd::as_fd(fd)))
                .collect();
            xskit_fwd::control::serve_handover(stream, &changer, &extra)
        }
        None => {
            let refusal = Response::refusal("this forwarder is not running yet");
            let _ = xskit_os::fdpass::send_fds(std::os::fd::AsFd::as_fd(&stream), &[]);
            let _ = std::io::Write::write_all(&mut &stream, refusal.to_line().as_bytes());
            Err("asked before it ran".into())
        }
    })
    .await;
    match served {
        Ok(Ok(pid)) => note!("xskit fwd: handed over to forwarder {pid}; stopping"),
        Ok(Err(e)) => note!("xskit fwd: a handover did not happen ({e}); forwarding on"),
        Err(e) => note!("xskit fwd: a handover failed ({e}); forwarding on"),
    }
}

/// Says on the forwarder's standard error what an apply over the socket did.
fn note_apply(answer: &Response) {
    match (&answer.result, &answer.error) {
        (Some(r), _) if r.get("generation").is_some() => note!(
            "xskit fwd: changed over the control socket: generation {} in force, {} rules ({} \
             kept with their counters, {} new, {} gone)",
            r["generation"],
            r["rules"],
            r["kept"],
            r["added"],
            r["removed"]
        ),
        (None, Some(e)) => note!("xskit fwd: a change over the control socket refused: {e}"),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Write};

    fn server(name: &str) -> (EventLoop, ControlServer, PathBuf) {
        let path =
            std::env::temp_dir().join(format!("xskit-ctl-{}-{name}.sock", std::process::id()));
        let events = EventLoop::start("xskit-test").unwrap();
        let server = ControlServer::start(&events, &path, None, false).unwrap();
        server.publish(serde_json::json!({"interval": true, "counters": {"rules": []}}));
        (events, server, path)
    }

    #[test]
    fn requests_sent_together_are_answered_in_turn_and_the_socket_is_the_owners() {
        let (_events, server, path) = server("together");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut stream = std::os::unix::net::UnixStream::connect(&path).unwrap();
        stream
            .write_all(b"{\"version\":1,\"command\":\"status\"}\nnonsense\n{\"version\":1,\"command\":\"rules\"}\n")
            .unwrap();
        let answers: Vec<Response> = std::io::BufReader::new(stream)
            .lines()
            .take(3)
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect();
        assert_eq!(
            answers.iter().map(|a| a.ok).collect::<Vec<_>>(),
            [true, false, true]
        );
        drop(server);
        assert!(!path.exists(), "the socket file goes with the server");
    }

    #[test]
    fn a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced() {
        let (events, first, path) = server("taken");
        let e = ControlServer::start(&events, &path, None, false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("another forwarder answers"), "{e}");
        drop(first);
        // A socket file nobody listens on, as a killed forwarder leaves it.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let second = ControlServer::start(&events, &path, None, false).unwrap();
        drop(second);
        std::fs::write(&path, b"a file").unwrap();
        let e = ControlServer::start(&events, &path, None, false)
            .err()
            .unwrap();
        assert!(e.to_string().contains("is not a socket"), "{e}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_forwarder_that_handed_over_leaves_the_path_to_its_successor() {
        let (events, mut first, path) = server("handed");
        first.leave_to_successor();
        // Gone before the successor is there: its own file stays for the successor to
        // replace.
        drop(first);
        assert!(path.exists(), "the successor's path is left alone");
        let second = ControlServer::start(&events, &path, None, true).unwrap();
        let mut third = ControlServer::start(&events, &path, None, true).unwrap();
        drop(second);
        assert!(path.exists(), "a predecessor removes only its own file");
        third.leave_to_successor();
        drop(third);
        std::fs::remove_file(&path).unwrap();
    }
}
