//! The metrics endpoint's HTTP side, sized to stay available whoever connects: an exporter
//! bound where Prometheus can reach it is reachable by others too.
//!
//! - One thread runs an event loop ([`crate::serve::EventLoop`]): an idle or slow connection
//!   costs a small task and its socket, never a thread, so a scrape is answered while a
//!   thousand others are held open.
//! - At most [`MAX_CONNECTIONS`] are open at once (fewer where the open-files limit is
//!   lower). A connection past that makes room by closing the oldest one still waiting for
//!   its request, which is told `503` and `Retry-After`; a scrape is answered in
//!   milliseconds, so it is never the oldest waiting.
//! - A request's head must arrive whole within [`REQUEST_TIME`] of the connection being
//!   accepted, and be at most [`MAX_HEAD`] bytes: an idle or slow client is closed, an
//!   oversized head refused (`431`). Lines may end in CRLF or a bare LF.
//! - Only `GET` of `/metrics` or `/` is answered (`405` for other methods, `404` for other
//!   paths, `400` for what is not HTTP); one request per connection.
//! - Stopping closes every connection at once: a held connection never delays shutdown.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// The most connections open at once, where the open-files limit allows as many.
pub(crate) const MAX_CONNECTIONS: usize = 4096;
/// How long a connection has, from being accepted, to send its request's head.
pub(crate) const REQUEST_TIME: Duration = Duration::from_secs(5);
/// How long an answered connection is read from, its data thrown away, before it is closed.
const LINGER: Duration = Duration::from_secs(1);
/// The largest request head read.
pub(crate) const MAX_HEAD: usize = 8 * 1024;

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
    /// Displaced by a newer connection when the endpoint was full.
    Unavailable,
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
            Answer::Unavailable => "503 Service Unavailable",
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

/// Where the blank line that ends a request head is: the head's length. Lines end in CRLF
/// or, as many clients send, a bare LF.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes.iter().enumerate().find_map(|(i, &b)| {
        let rest = &bytes[i..];
        (b == b'\n').then_some(())?;
        match rest.get(1..3) {
            Some(b"\r\n") => Some(i + 3),
            _ if rest.get(1) == Some(&b'\n') => Some(i + 2),
            _ => None,
        }
    })
}

/// Reads a request head: `None` when the client gave up or sent no head; the answer
/// otherwise. The caller bounds the time.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Answer> {
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.ok().filter(|&n| n > 0)?;
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

/// The response to `answer`: its head and body.
fn response(answer: Answer, render: &Render) -> (String, String) {
    let (answer, body, content_type) = match answer {
        Answer::Metrics => match render() {
            Ok(text) => (
                answer,
                text,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            ),
            Err(_) => (Answer::Failed, "encoding failed\n".into(), "text/plain"),
        },
        Answer::NotFound => (answer, "xskit serves /metrics\n".into(), "text/plain"),
        other => (other, "xskit answers GET /metrics\n".into(), "text/plain"),
    };
    let allow = if answer == Answer::MethodNotAllowed {
        "Allow: GET\r\n"
    } else {
        ""
    };
    let retry = if answer == Answer::Unavailable {
        "Retry-After: 1\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}{retry}Connection: close\r\n\r\n",
        answer.status(),
        body.len()
    );
    (head, body)
}

/// Writes a response and closes the connection the way that keeps it readable: the write
/// side first, then what the client still sends is read and thrown away until it closes, so
/// the kernel sends no reset that could destroy the response before the client reads it.
async fn answer_and_close(stream: &mut TcpStream, answer: Answer, render: &Render) {
    let (head, body) = response(answer, render);
    let written = tokio::time::timeout(REQUEST_TIME, async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    if !matches!(written, Ok(Ok(()))) {
        return;
    }
    let mut sink = [0u8; 1024];
    let _ = tokio::time::timeout(LINGER, async {
        while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Renders the metrics text, or an error.
pub(crate) type Render = dyn Fn() -> Result<String, std::fmt::Error> + Send + Sync;

/// The connections waiting for their request's head, oldest first: the ones a newcomer may
/// displace when the endpoint is full.
#[derive(Default)]
struct Waiting {
    next: u64,
    open: usize,
    by_age: BTreeMap<u64, oneshot::Sender<()>>,
}

type Shared = Arc<Mutex<Waiting>>;

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Waiting> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One connection: its request read within REQUEST_TIME of being accepted (or a 503 if a
/// newcomer displaced it first), then answered.
async fn serve_one(
    mut stream: TcpStream,
    id: u64,
    displaced: oneshot::Receiver<()>,
    shared: Shared,
    render: Arc<Render>,
) {
    let mut buf = Vec::with_capacity(512);
    let answer = tokio::select! {
        head = tokio::time::timeout(REQUEST_TIME, read_head(&mut stream, &mut buf)) => head.ok().flatten(),
        _ = displaced => Some(Answer::Unavailable),
    };
    lock(&shared).by_age.remove(&id);
    if let Some(answer) = answer {
        answer_and_close(&mut stream, answer, render.as_ref()).await;
    }
    lock(&shared).open -= 1;
}

/// Accepts connections until `stop`, making room as [`MAX_CONNECTIONS`] says.
async fn accept_all(
    listener: TcpListener,
    render: Arc<Render>,
    limit: usize,
    shared: Shared,
    stop: Arc<tokio::sync::Notify>,
) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.notified() => return,
        };
        let Ok((stream, _)) = accepted else {
            // Out of file descriptors or a connection reset before it was taken: try again
            // after the others have had a moment to close.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (tell, displaced) = oneshot::channel();
        let id = {
            let mut waiting = lock(&shared);
            if waiting.open >= limit {
                match waiting.by_age.pop_first() {
                    Some((_, oldest)) => drop(oldest.send(())),
                    None => {
                        // Every connection is being answered: this one is told to come back,
                        // with what fits in the socket's buffer now, and closed.
                        let (head, body) = response(Answer::Unavailable, render.as_ref());
                        let _ = stream.try_write(format!("{head}{body}").as_bytes());
                        continue;
                    }
                }
            }
            waiting.open += 1;
            waiting.next += 1;
            let id = waiting.next;
            waiting.by_age.insert(id, tell);
            id
        };
        tokio::spawn(serve_one(
            stream,
            id,
            displaced,
            shared.clone(),
            render.clone(),
        ));
    }
}

/// The listening endpoint: it stops, closing every connection, when dropped.
pub(crate) struct Endpoint {
    addr: SocketAddr,
    shared: Shared,
    stop: Arc<tokio::sync::Notify>,
}

impl Endpoint {
    /// Serves `render`'s text on `listener` from `events`, keeping at most `limit`
    /// connections open, until the loop ends.
    pub(crate) fn start(
        events: &crate::serve::EventLoop,
        listener: std::net::TcpListener,
        render: Arc<Render>,
        limit: usize,
    ) -> std::io::Result<Endpoint> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let listener = events.enter(|| TcpListener::from_std(listener))?;
        let (shared, stop) = (Shared::default(), Arc::new(tokio::sync::Notify::new()));
        events.spawn(accept_all(
            listener,
            render,
            limit,
            shared.clone(),
            stop.clone(),
        ));
        Ok(Endpoint { addr, shared, stop })
    }

    /// Stops accepting (what comes next waits in the socket's queue for whoever else
    /// listens on it: a successor) and waits up to `limit` for the connections accepted to
    /// be answered.
    pub(crate) fn finish(&self, limit: Duration) {
        self.stop.notify_one();
        let deadline = std::time::Instant::now() + limit;
        while lock(&self.shared).open > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
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

    fn render() -> Arc<Render> {
        Arc::new(|| Ok("# EOF\n".to_string()))
    }

    fn scrape(addr: SocketAddr, request: &[u8]) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(request).unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        text
    }

    /// Reads what the server sends until it closes the connection.
    fn until_closed(mut s: std::net::TcpStream) -> String {
        let mut text = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut text);
        String::from_utf8_lossy(&text).into_owned()
    }

    #[test]
    fn a_full_endpoint_answers_a_scrape_by_closing_the_oldest_idle_connection_with_a_503() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let events = crate::serve::EventLoop::start("xskit-test").unwrap();
        let endpoint = Endpoint::start(&events, listener, render(), 4).unwrap();
        let addr = endpoint.addr();
        let idle: Vec<_> = (0..4)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        // Each idle connection is open on the server's side once a scrape after it is
        // answered (connections are accepted in order).
        let text = scrape(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
        let mut idle = idle.into_iter();
        let oldest = until_closed(idle.next().unwrap());
        assert!(
            oldest.starts_with("HTTP/1.1 503 Service Unavailable"),
            "{oldest}"
        );
        assert!(oldest.contains("Retry-After: 1"), "{oldest}");
        let text = scrape(addr, b"GET /metrics HTTP/1.1\n\n");
        assert!(
            text.starts_with("HTTP/1.1 200 OK"),
            "a bare-LF request: {text}"
        );
        drop(events);
        for held in idle {
            assert_eq!(
                until_closed(held),
                "",
                "stopping closes every connection at once"
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
        assert_eq!(head_end(b"GET / HTTP/1.1\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.1\nHost: x\r\n\r\n"), Some(26));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(head_end(b"GET / HTTP/1.1\n"), None);
        assert_eq!(
            answer_for(b"GET /metrics HTTP/1.1\nHost: x\n\n"),
            Answer::Metrics
        );
    }
}
