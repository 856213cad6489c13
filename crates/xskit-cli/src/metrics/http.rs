//! The metrics endpoint's HTTP side, sized to stay small whoever connects: an exporter bound
//! where Prometheus can reach it is reachable by others too.
//!
//! - A fixed pool of [`WORKERS`] threads answers; [`QUEUED`] more connections may wait their
//!   turn, and any past those are answered `503` and closed at once, as node_exporter's
//!   `--web.max-requests` does. No thread or buffer is made per connection.
//! - A request's head must arrive whole within [`REQUEST_TIME`] of the connection being
//!   accepted (time spent queued counts), and be at most [`MAX_HEAD`] bytes: an idle or slow
//!   client is closed, an oversized head refused (`431`).
//! - Only `GET` of `/metrics` or `/` is answered (`405` for other methods, `404` for other
//!   paths, `400` for what is not HTTP); one request per connection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Threads that answer requests.
pub(crate) const WORKERS: usize = 2;
/// Accepted connections that may wait for a worker.
pub(crate) const QUEUED: usize = 16;
/// How long a connection has, from being accepted, to send its request's head.
pub(crate) const REQUEST_TIME: Duration = Duration::from_secs(5);
/// The largest request head read.
pub(crate) const MAX_HEAD: usize = 8 * 1024;
/// How often the accepting thread looks whether it should stop.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// What a request gets, decided from its head alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Metrics,
    NotFound,
    MethodNotAllowed,
    BadRequest,
    HeadTooLarge,
    /// The metrics could not be rendered.
    Failed,
}

impl Answer {
    fn status(self) -> &'static str {
        match self {
            Answer::Metrics => "200 OK",
            Answer::NotFound => "404 Not Found",
            Answer::MethodNotAllowed => "405 Method Not Allowed",
            Answer::BadRequest => "400 Bad Request",
            Answer::HeadTooLarge => "431 Request Header Fields Too Large",
            Answer::Failed => "500 Internal Server Error",
        }
    }
}

/// The answer to a complete request head (up to and including its blank line).
pub(crate) fn answer_for(head: &[u8]) -> Answer {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Answer::HeadTooLarge,
        Ok(httparse::Status::Partial) | Err(_) => return Answer::BadRequest,
    }
    let path = request.path.unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    if path != "/metrics" && path != "/" {
        return Answer::NotFound;
    }
    if request.method != Some("GET") {
        return Answer::MethodNotAllowed;
    }
    Answer::Metrics
}

/// Where the blank line that ends a request head is: the head's length.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Reads a request head until `deadline`: `Ok(None)` when the client gave up, was too slow,
/// or sent no head; the answer otherwise.
fn read_head(stream: &mut TcpStream, deadline: Instant, buf: &mut Vec<u8>) -> Option<Answer> {
    buf.clear();
    let mut chunk = [0u8; 1024];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return None;
        }
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        let before = buf.len().saturating_sub(3);
        let take = n.min(MAX_HEAD - buf.len());
        buf.extend_from_slice(&chunk[..take]);
        if let Some(end) = head_end(&buf[before..]) {
            return Some(answer_for(&buf[..before + end]));
        }
        if buf.len() == MAX_HEAD {
            return Some(Answer::HeadTooLarge);
        }
    }
}

fn respond(stream: &mut TcpStream, answer: Answer, body: &str, content_type: &str) {
    let allow = if answer == Answer::MethodNotAllowed {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
        answer.status(),
        body.len()
    );
    // A client that stops reading is its own affair: the write gives up at its timeout.
    let _ = stream.set_write_timeout(Some(REQUEST_TIME));
    let _ = stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()));
}

/// Renders the metrics text, or an error.
pub(crate) type Render = dyn Fn() -> Result<String, std::fmt::Error> + Send + Sync;

type Queue = Arc<Mutex<Receiver<(TcpStream, Instant)>>>;

fn work(queue: &Queue, render: &Render) {
    let mut buf = Vec::with_capacity(MAX_HEAD);
    loop {
        // The lock is held only while waiting for the next connection.
        let next = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((mut stream, accepted)) = next else {
            return;
        };
        if stream.set_nonblocking(false).is_err() {
            continue;
        }
        let Some(answer) = read_head(&mut stream, accepted + REQUEST_TIME, &mut buf) else {
            continue;
        };
        match answer {
            Answer::Metrics => match render() {
                Ok(text) => respond(
                    &mut stream,
                    answer,
                    &text,
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                ),
                Err(_) => respond(
                    &mut stream,
                    Answer::Failed,
                    "encoding failed\n",
                    "text/plain",
                ),
            },
            Answer::NotFound => {
                respond(&mut stream, answer, "xskit serves /metrics\n", "text/plain")
            }
            other => respond(
                &mut stream,
                other,
                "xskit answers GET /metrics\n",
                "text/plain",
            ),
        }
    }
}

/// A connection no worker can take: told so, without waiting on it, and closed.
fn refuse(mut stream: TcpStream) {
    let _ = stream.set_nonblocking(true);
    let _ = stream.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n",
    );
}

fn accept(listener: &TcpListener, queue: &SyncSender<(TcpStream, Instant)>, stop: &AtomicBool) {
    let mut scratch = xskit_os::PollSet::default();
    while !stop.load(Ordering::Relaxed) {
        let readable = xskit_os::poll_readable(&[listener.as_fd()], &mut scratch, Some(STOP_CHECK));
        if !matches!(readable, Ok(true)) {
            continue;
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        match queue.try_send((stream, Instant::now())) {
            Ok(()) => {}
            Err(TrySendError::Full((stream, _))) => refuse(stream),
            Err(TrySendError::Disconnected(_)) => return,
        }
    }
}

/// The listening endpoint: its threads stop when it is dropped.
pub(crate) struct Endpoint {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    addr: SocketAddr,
}

impl Endpoint {
    /// Serves `render`'s text on `listener`.
    pub(crate) fn start(listener: TcpListener, render: Arc<Render>) -> std::io::Result<Endpoint> {
        let addr = listener.local_addr()?;
        // A connection reset between poll(2) and accept(2) must not leave the acceptor
        // blocked where it cannot see the stop flag.
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let (sender, receiver) = sync_channel(QUEUED);
        let queue: Queue = Arc::new(Mutex::new(receiver));
        let mut endpoint = Endpoint {
            stop: stop.clone(),
            threads: Vec::with_capacity(WORKERS + 1),
            addr,
        };
        for i in 0..WORKERS {
            let (queue, render) = (queue.clone(), render.clone());
            endpoint.threads.push(
                std::thread::Builder::new()
                    .name(format!("xskit-metrics-{i}"))
                    .spawn(move || work(&queue, render.as_ref()))?,
            );
        }
        endpoint.threads.push(
            std::thread::Builder::new()
                .name("xskit-metrics".into())
                .spawn(move || accept(&listener, &sender, &stop))?,
        );
        Ok(endpoint)
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The acceptor stops within STOP_CHECK and drops the queue's sender, which ends the
        // workers once each has finished its connection (REQUEST_TIME at most).
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_get_of_metrics_or_the_root_is_answered() {
        let cases: [(&[u8], Answer); 9] = [
            (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", Answer::Metrics),
            (b"GET / HTTP/1.0\r\n\r\n", Answer::Metrics),
            (b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", Answer::Metrics),
            (
                b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\n",
                Answer::MethodNotAllowed,
            ),
            (b"DELETE / HTTP/1.1\r\n\r\n", Answer::MethodNotAllowed),
            (b"GET /admin HTTP/1.1\r\n\r\n", Answer::NotFound),
            (b"GET /metrics/../x HTTP/1.1\r\n\r\n", Answer::NotFound),
            (
                b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\r\n\r\n",
                Answer::BadRequest,
            ),
            (b"GET /metrics HTTP/9\r\n\r\n", Answer::BadRequest),
        ];
        for (head, want) in cases {
            assert_eq!(
                answer_for(head),
                want,
                "{:?}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn too_many_headers_is_too_large() {
        let mut head = b"GET /metrics HTTP/1.1\r\n".to_vec();
        for i in 0..40 {
            head.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        head.extend_from_slice(b"\r\n");
        assert_eq!(answer_for(&head), Answer::HeadTooLarge);
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
    }
}
