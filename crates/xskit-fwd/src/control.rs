//! The control protocol of a running forwarder, for `xskit ctl` and for programs that drive
//! a forwarder: one JSON object a line each way over a Unix stream socket, a request then its
//! answer, as many as the client likes on one connection.
//!
//! A request names the protocol's version and a command:
//!
//! ```json
//! {"version":1,"command":"status"}
//! ```
//!
//! The answer carries the version, `ok`, and either `result` or `error`:
//!
//! ```json
//! {"version":1,"ok":true,"result":{"counters":{...},"elapsed_s":12.0,...}}
//! {"version":1,"ok":false,"error":"unknown command \"stats\": the commands are status, rules"}
//! ```
//!
//! Commands: `status` (the forwarder's counters as its `--json-lines` interval lines show
//! them, as of its last interval), `rules` (its rules in order, then the unclassifiable
//! rule, each with its counters) and `apply` (`"rules"` holds a rules file's text: put in
//! force whole, or refused with the running rules untouched; sets that name a file are kept
//! as they run, see [`crate::rules::RuleSet::from_toml_keeping_sets`]). A request line is at
//! most [`MAX_REQUEST`] bytes; an apply's, whose `"command"` must come before its `"rules"`,
//! at most [`MAX_LONG_REQUEST`].

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The protocol's version; a request of another is refused, naming both.
pub const VERSION: u32 = 1;
/// The longest request line, its newline included.
pub const MAX_REQUEST: usize = 64 * 1024;
/// The longest `apply` or `set` line: a rules file of the most bytes there may be, each
/// escaped, or a few hundred thousand set elements.
pub const MAX_LONG_REQUEST: usize = 8 << 20;
const _: () = assert!(MAX_LONG_REQUEST > 2 * crate::text_file::MAX_RULES_FILE_BYTES as usize);
/// How long an apply may take before its asker is told it timed out.
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// What a client asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Command {
    /// The counters, as the `--json-lines` interval lines show them.
    Status,
    /// The rules in order, then the unclassifiable rule, with their counters.
    Rules,
    /// Put the rules in the request's `rules` in force.
    Apply,
    /// Add (`"op":"add"`) the request's `elements` to the set `set`, take them out
    /// (`"del"`), or list its elements (`"list"`).
    Set,
    /// Hand the forwarder over to the asker (`xskit fwd --takeover`): see
    /// [`HandoverClient`].
    Handover,
    /// Within a handover: pause the workers and say where the frames are.
    Pause,
    /// Within a handover: the asker (`"pid"`) has everything and takes over now.
    Commit,
}

impl Command {
    /// Every command, as the protocol names them.
    pub const ALL: [(&'static str, Command); 7] = [
        ("status", Command::Status),
        ("rules", Command::Rules),
        ("apply", Command::Apply),
        ("set", Command::Set),
        ("handover", Command::Handover),
        ("pause", Command::Pause),
        ("commit", Command::Commit),
    ];
}

/// A request line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// [`VERSION`].
    pub version: u32,
    /// What is asked.
    pub command: Command,
    /// For `apply`: the rules file's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
    /// For `set`: `add`, `del` or `list`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<SetOp>,
    /// For `set`: the set's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set: Option<String>,
    /// For `set` `add` and `del`: the elements (`"198.51.100.0/24"`, and for `add` to a set
    /// with timeouts `"198.51.100.7 timeout 10m"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elements: Vec<String>,
    /// For `set` `add`: the timeout of elements without one of their own (`"10m"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// For `commit`: the process taking over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

/// What a `set` request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SetOp {
    /// Add the elements.
    Add,
    /// Take them out.
    Del,
    /// List the set's elements.
    List,
}

impl Request {
    /// A request for `command` in this protocol's version.
    pub fn new(command: Command) -> Request {
        Request {
            version: VERSION,
            command,
            rules: None,
            op: None,
            set: None,
            elements: Vec::new(),
            timeout: None,
            pid: None,
        }
    }

    /// A request to change or list the set `set`.
    pub fn set(op: SetOp, set: &str, elements: Vec<String>, timeout: Option<String>) -> Request {
        Request {
            op: Some(op),
            set: Some(set.to_string()),
            elements,
            timeout,
            ..Request::new(Command::Set)
        }
    }

    /// A request to apply the rules file text `rules`.
    pub fn apply(rules: String) -> Request {
        Request {
            rules: Some(rules),
            ..Request::new(Command::Apply)
        }
    }
}

/// An answer line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    /// [`VERSION`].
    pub version: u32,
    /// Whether the command was carried out; `result` then holds what it gives.
    pub ok: bool,
    /// What the command gives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// Why the request was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    fn answer(result: serde_json::Value) -> Response {
        Response {
            version: VERSION,
            ok: true,
            result: Some(result),
            error: None,
        }
    }

    /// A refusal saying what was wrong.
    pub fn refusal(error: impl Into<String>) -> Response {
        Response {
            version: VERSION,
            ok: false,
            result: None,
            error: Some(error.into()),
        }
    }

    /// The line to send, newline included.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).unwrap_or_else(|e| {
            format!(r#"{{"version":{VERSION},"ok":false,"error":"unprintable answer: {e}"}}"#)
        });
        line.push('\n');
        line
    }
}

/// The request in `line` (its newline may be there or not), or what is wrong with it.
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    let commands = || Command::ALL.map(|(name, _)| name).join(", ");
    let value: serde_json::Value = serde_json::from_slice(line).map_err(|e| {
        format!(r#"not a JSON object ({e}): send {{"version":{VERSION},"command":"status"}}"#)
    })?;
    let version = value.get("version").and_then(serde_json::Value::as_u64);
    if version != Some(u64::from(VERSION)) {
        let given = value
            .get("version")
            .map_or("none".into(), ToString::to_string);
        return Err(format!(
            "protocol version {given}: this forwarder speaks version {VERSION}"
        ));
    }
    let name = value.get("command").and_then(serde_json::Value::as_str);
    let Some(name) = name else {
        return Err(format!("no \"command\": the commands are {}", commands()));
    };
    let command = Command::ALL
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, command)| command)
        .ok_or_else(|| {
            let shown: String = name
                .chars()
                .take(64)
                .flat_map(char::escape_default)
                .collect();
            format!(
                "unknown command \"{shown}\": the commands are {}",
                commands()
            )
        })?;
    match command {
        Command::Apply => match value.get("rules").and_then(serde_json::Value::as_str) {
            Some(text) => Ok(Request::apply(text.to_string())),
            None => Err("apply needs \"rules\": the rules file's text, as a string".into()),
        },
        Command::Set => serde_json::from_value::<Request>(value)
            .map_err(|e| format!("a set request: {e}"))
            .and_then(|r| match (&r.op, &r.set) {
                (Some(_), Some(_)) => Ok(r),
                _ => Err("set needs \"op\" (add, del or list) and \"set\" (its name)".into()),
            }),
        Command::Commit => match value.get("pid").and_then(serde_json::Value::as_u64) {
            Some(pid) => Ok(Request {
                pid: u32::try_from(pid).ok(),
                ..Request::new(Command::Commit)
            }),
            None => Err("commit needs \"pid\": the process taking over".into()),
        },
        _ => Ok(Request::new(command)),
    }
}

/// Whether `line` asks for a handover (answered on the connection itself, descriptors and
/// all: [`serve_handover`]).
pub fn asks_handover(line: &[u8]) -> bool {
    parse_request(line).is_ok_and(|r| r.command == Command::Handover)
}

/// Whether `line` asks for an apply or a set's change or elements (which wait on the
/// forwarder: answer it off the event loop).
pub fn waits_on_forwarder(line: &[u8]) -> bool {
    parse_request(line).is_ok_and(|r| matches!(r.command, Command::Apply | Command::Set))
}

/// The answer to a `set` request, through `changer`.
fn set_request(request: Request, changer: &crate::RuleChanger) -> Response {
    let (Some(op), Some(set)) = (request.op, request.set) else {
        return Response::refusal("set needs \"op\" and \"set\"");
    };
    if op == SetOp::List {
        return match changer.set_elements(&set, APPLY_TIMEOUT) {
            Ok(elements) => {
                Response::answer(serde_json::json!({ "set": set, "elements": elements }))
            }
            Err(e) => Response::refusal(e.to_string()),
        };
    }
    let timeout = match request.timeout.as_deref().map(|t| {
        crate::duration::parse_within(t, "timeout", (crate::sets::MAX_ELEMENT_TIMEOUT, "365d"))
    }) {
        Some(Err(e)) => return Response::refusal(e),
        Some(Ok(t)) => Some(t),
        None => None,
    };
    let (add, del) = match op {
        SetOp::Add => (request.elements, Vec::new()),
        _ => (Vec::new(), request.elements),
    };
    let change = crate::SetChange {
        set,
        add,
        del,
        timeout,
    };
    applied(changer.change_set(change, APPLY_TIMEOUT))
}

/// The answer to an apply.
fn applied(result: crate::Result<crate::Applied>) -> Response {
    match result {
        Ok(a) => Response::answer(serde_json::json!({
            "generation": a.generation,
            "rules": a.rules,
            "kept": a.kept,
            "added": a.added,
            "removed": a.removed,
        })),
        Err(e) => Response::refusal(format!("{e}; the running rules stand")),
    }
}

/// The answer to `line` from a forwarder whose last interval line (what `--json-lines`
/// prints) is `latest`, `None` before its first, and whose rules `changer` changes (none:
/// applies are refused). An apply waits for the forwarder, up to [`APPLY_TIMEOUT`].
pub fn respond(
    line: &[u8],
    latest: Option<&serde_json::Value>,
    changer: Option<&crate::RuleChanger>,
) -> Response {
    let request = match parse_request(line) {
        Ok(r) => r,
        Err(e) => return Response::refusal(e),
    };
    if matches!(request.command, Command::Apply | Command::Set) {
        let Some(changer) = changer else {
            return Response::refusal("this forwarder is not running yet: ask again in a second");
        };
        return match (request.command, request.rules.clone()) {
            (Command::Apply, Some(text)) => applied(changer.apply_text(text, APPLY_TIMEOUT)),
            _ => set_request(request, changer),
        };
    }
    let Some(latest) = latest else {
        return Response::refusal("the forwarder has not counted yet: ask again in a second");
    };
    match request.command {
        Command::Status => Response::answer(latest.clone()),
        Command::Rules => {
            let counters = &latest["counters"];
            let mut rules = counters["rules"].as_array().cloned().unwrap_or_default();
            rules.extend(counters.get("unclassifiable").cloned());
            Response::answer(serde_json::json!({
                "generation": counters["rules_generation"],
                "rules": rules,
            }))
        }
        Command::Apply | Command::Set => Response::refusal("asked of a running forwarder"),
        Command::Handover | Command::Pause | Command::Commit => Response::refusal(
            "pause and commit belong to a handover, on its connection: send handover first",
        ),
    }
}

/// The control socket's file name for a forwarder on `interfaces` in the network namespace
/// whose nsfs inode is `netns`: forwarders in two namespaces may use the same names.
pub fn socket_name(interfaces: &[String], netns: u64) -> String {
    format!("{}.sock", forwarder_name(interfaces, netns))
}

/// A forwarder's name, by its interfaces and network namespace (whose nsfs inode is
/// `netns`): its control socket's file is named after it, and the directory of its kept
/// programs' pins.
pub fn forwarder_name(interfaces: &[String], netns: u64) -> String {
    format!("fwd-{}-net{netns}", interfaces.join("+"))
}

/// Whether `name` is [`socket_name`] of a forwarder in namespace `netns`, and its interfaces.
pub fn parse_socket_name(name: &str, netns: u64) -> Option<Vec<String>> {
    let rest = name.strip_prefix("fwd-")?;
    let rest = rest.strip_suffix(&format!("-net{netns}.sock"))?;
    Some(rest.split('+').map(str::to_string).collect())
}

/// What went wrong talking to a forwarder.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Nothing listens at the socket's path.
    #[error("no forwarder answers at {path} (is `xskit fwd` running, in this network namespace?)")]
    Unreachable {
        /// The socket's path.
        path: PathBuf,
        /// What connecting said.
        source: std::io::Error,
    },
    /// The socket's permissions keep this user out.
    #[error(
        "{path}: permission denied: the control socket is its owner's (mode 0600); run as \
         root, or start the forwarder with --control-group naming a group of yours"
    )]
    PermissionDenied {
        /// The socket's path.
        path: PathBuf,
    },
    /// Sending or receiving failed (or the answer took too long).
    #[error("talking to the forwarder at {path}")]
    Io {
        /// The socket's path.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The answer was not a line of this protocol.
    #[error("the forwarder at {path} answered what is not this protocol: {reason}")]
    Protocol {
        /// The socket's path.
        path: PathBuf,
        /// What was wrong with it.
        reason: String,
    },
    /// The forwarder refused the request, saying why.
    #[error("the forwarder refused: {0}")]
    Refused(String),
}

/// A connection to a forwarder's control socket.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    stream: BufReader<UnixStream>,
}

impl Client {
    /// Connects to the socket at `path`; answers are waited for at most `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Client, ControlError> {
        let stream = UnixStream::connect(path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                ControlError::PermissionDenied { path: path.into() }
            } else {
                ControlError::Unreachable {
                    path: path.into(),
                    source,
                }
            }
        })?;
        let io = |source| ControlError::Io {
            path: path.into(),
            source,
        };
        stream.set_read_timeout(Some(timeout)).map_err(io)?;
        stream.set_write_timeout(Some(timeout)).map_err(io)?;
        Ok(Client {
            path: path.into(),
            stream: BufReader::new(stream),
        })
    }

    /// Sends `command` and returns its result.
    pub fn call(&mut self, command: Command) -> Result<serde_json::Value, ControlError> {
        self.send(&Request::new(command))
    }

    /// Asks the forwarder to put the rules file text `rules` in force; returns what it did
    /// (`generation`, `rules`, `kept`, `added`, `removed`).
    pub fn apply(&mut self, rules: String) -> Result<serde_json::Value, ControlError> {
        self.send(&Request::apply(rules))
    }

    /// Adds `elements` to the running set `set` (`SetOp::Add`), takes them out (`Del`), or
    /// lists it (`List`, no elements); `timeout` for added elements without one of their own.
    pub fn set(
        &mut self,
        op: SetOp,
        set: &str,
        elements: Vec<String>,
        timeout: Option<String>,
    ) -> Result<serde_json::Value, ControlError> {
        self.send(&Request::set(op, set, elements, timeout))
    }

    /// Sends `request` and returns its result.
    pub fn send(&mut self, request: &Request) -> Result<serde_json::Value, ControlError> {
        let io = |source| ControlError::Io {
            path: self.path.clone(),
            source,
        };
        let mut line = serde_json::to_string(request).unwrap_or_default();
        line.push('\n');
        self.stream
            .get_mut()
            .write_all(line.as_bytes())
            .map_err(io)?;
        let mut answer = String::new();
        self.stream.read_line(&mut answer).map_err(io)?;
        let response: Response =
            serde_json::from_str(&answer).map_err(|e| ControlError::Protocol {
                path: self.path.clone(),
                reason: format!("{e}: {:?}", answer.chars().take(200).collect::<String>()),
            })?;
        match (response.ok, response.result, response.error) {
            (true, Some(result), _) => Ok(result),
            (_, _, error) => Err(ControlError::Refused(
                error.unwrap_or_else(|| "no reason given".into()),
            )),
        }
    }
}

/// Hands the forwarder `changer` drives over to the process at the other end of `stream`,
/// which asked with a `handover` request (read off the stream already). Three steps, each
/// the successor's request and this answer, so that the workers pause only for the time the
/// successor needs once its programs are loaded:
///
/// 1. the descriptors go over with one byte (SCM_RIGHTS, [`xskit_os::fdpass`]), then the
///    answer line with [`crate::handover::HandedState`];
/// 2. `pause`: the workers pause; the answer carries [`crate::handover::PausedState`];
/// 3. `commit`: this forwarder's run ends ([`crate::Forwarder::run`] returns).
///
/// Anything else (a refusal, the connection closed, no `pause` within
/// [`crate::handover::LOAD_WAIT`] or no `commit` within [`crate::handover::HANDOVER_WAIT`])
/// resumes it. Returns the successor's process id once it committed, or why it did not.
///
/// `extra` are the application's own descriptors to hand over beside the forwarder's, by
/// name (a listening socket the successor serves on: no connection is refused meanwhile);
/// the successor takes them with [`crate::handover::Inherited::take_extra`].
pub fn serve_handover(
    stream: UnixStream,
    changer: &crate::RuleChanger,
    extra: &[(&str, std::os::fd::BorrowedFd<'_>)],
) -> Result<u32, String> {
    use std::os::fd::AsFd;
    let io = |e: std::io::Error| format!("talking to the successor: {e}");
    stream.set_nonblocking(false).map_err(io)?;
    stream
        .set_read_timeout(Some(crate::handover::HANDOVER_WAIT))
        .map_err(io)?;
    stream
        .set_write_timeout(Some(crate::handover::HANDOVER_WAIT))
        .map_err(io)?;
    let mut stream = BufReader::new(stream);
    let handing = match changer
        .hand_over(APPLY_TIMEOUT)
        .and_then(|h| with_extra(h, extra))
    {
        Ok(h) => h,
        Err(e) => {
            let _ = xskit_os::fdpass::send_fds(stream.get_ref().as_fd(), &[]);
            return Err(refuse(stream.get_mut(), e.to_string()));
        }
    };
    send_handing(stream.get_mut(), &handing)?;
    drop(handing);
    // The successor loads its programs meanwhile: nothing has stopped yet.
    let wait =
        |stream: &BufReader<UnixStream>, limit| stream.get_ref().set_read_timeout(Some(limit));
    wait(&stream, crate::handover::LOAD_WAIT).map_err(io)?;
    read_request_of(&mut stream, Command::Pause)?;
    wait(&stream, crate::handover::HANDOVER_WAIT).map_err(io)?;
    let paused = match changer.pause_for_successor(APPLY_TIMEOUT) {
        Ok(p) => p,
        Err(e) => return Err(refuse(stream.get_mut(), e.to_string())),
    };
    let line = Response::answer(serde_json::json!({ "paused": paused })).to_line();
    let pid = stream
        .get_mut()
        .write_all(line.as_bytes())
        .map_err(io)
        .and_then(|()| read_request_of(&mut stream, Command::Commit))
        .and_then(|r| r.pid.ok_or_else(|| "a commit without its pid".to_string()));
    if let Err(e) = changer.end_handover(pid.as_ref().ok().copied(), APPLY_TIMEOUT) {
        return Err(refuse(stream.get_mut(), e.to_string()));
    }
    let pid = pid?;
    let done = Response::answer(serde_json::json!({ "pid": std::process::id() }));
    let _ = stream.get_mut().write_all(done.to_line().as_bytes());
    Ok(pid)
}

/// `handing` with the application's `extra` descriptors after the forwarder's.
fn with_extra(
    mut handing: crate::handover::Handing,
    extra: &[(&str, std::os::fd::BorrowedFd<'_>)],
) -> crate::Result<crate::handover::Handing> {
    for (name, fd) in extra {
        let fd = fd
            .try_clone_to_owned()
            .map_err(|e| crate::Error::TakeOver {
                reason: format!("duplicating the {name} descriptor to hand over: {e}"),
            })?;
        handing.state.extra.push((*name).to_string());
        handing.fds.push(fd);
    }
    Ok(handing)
}

/// Tells the successor why not; returns the reason.
fn refuse(stream: &mut UnixStream, reason: String) -> String {
    let _ = stream.write_all(Response::refusal(reason.clone()).to_line().as_bytes());
    reason
}

/// The descriptors, then the state's line.
fn send_handing(stream: &mut UnixStream, handing: &crate::handover::Handing) -> Result<(), String> {
    use std::os::fd::AsFd;
    let fds: Vec<_> = handing.fds.iter().map(AsFd::as_fd).collect();
    xskit_os::fdpass::send_fds(stream.as_fd(), &fds).map_err(|e| e.to_string())?;
    let line = Response::answer(serde_json::json!({ "state": handing.state })).to_line();
    stream
        .write_all(line.as_bytes())
        .map_err(|e| format!("sending the state: {e}"))
}

/// The successor's next request, which must be `command`.
fn read_request_of(
    stream: &mut BufReader<UnixStream>,
    command: Command,
) -> Result<Request, String> {
    let mut line = Vec::new();
    let mut limited = std::io::Read::take(&mut *stream, MAX_REQUEST as u64);
    match limited.read_until(b'\n', &mut line) {
        Ok(0) => return Err("the successor went away".into()),
        Err(e) => return Err(format!("the successor did not go on: {e}")),
        Ok(_) => {}
    }
    let request = parse_request(&line)?;
    if request.command != command {
        return Err(format!(
            "the successor sent {:?} where {command:?} belongs",
            request.command
        ));
    }
    Ok(request)
}

impl crate::handover::Predecessor for HandoverClient {
    fn pause(&mut self) -> crate::Result<crate::handover::PausedState> {
        HandoverClient::pause(self).map_err(|e| crate::Error::TakeOver {
            reason: format!("pausing the forwarder handing over: {e}"),
        })
    }

    fn commit(self: Box<Self>) -> crate::Result<()> {
        HandoverClient::commit(*self).map_err(|e| crate::Error::TakeOver {
            reason: format!("committing: {e}"),
        })
    }
}

/// A successor's side of a handover (`xskit fwd --takeover`): ask, check what came, then
/// commit, or drop it to give up (the forwarder asked resumes).
#[derive(Debug)]
pub struct HandoverClient {
    path: PathBuf,
    stream: BufReader<UnixStream>,
}

impl HandoverClient {
    /// Asks the forwarder at `path` to hand over: it sends its descriptors and what it runs,
    /// and forwards on until [`HandoverClient::pause`].
    pub fn request(
        path: &Path,
    ) -> Result<(HandoverClient, crate::handover::Inherited), ControlError> {
        use std::os::fd::AsFd;
        let client = Client::connect(path, APPLY_TIMEOUT)?;
        let mut this = HandoverClient {
            path: client.path,
            stream: client.stream,
        };
        let mut line = serde_json::to_string(&Request::new(Command::Handover)).unwrap_or_default();
        line.push('\n');
        this.stream
            .get_mut()
            .write_all(line.as_bytes())
            .map_err(|e| this.io(e))?;
        let fds =
            xskit_os::fdpass::recv_fds(this.stream.get_ref().as_fd(), xskit_os::fdpass::MAX_FDS)
                .map_err(|e| this.io(e.os_error))?;
        let result = this.answer()?;
        let state =
            serde_json::from_value(result["state"].clone()).map_err(|e| this.protocol(e))?;
        let inherited =
            crate::handover::Inherited::new(state, fds).map_err(|e| this.protocol(e))?;
        Ok((this, inherited))
    }

    /// Asks the forwarder to pause its workers (packets wait in the rings from now until this
    /// process runs) and say where its frames are.
    pub fn pause(&mut self) -> Result<crate::handover::PausedState, ControlError> {
        let mut line = serde_json::to_string(&Request::new(Command::Pause)).unwrap_or_default();
        line.push('\n');
        self.stream
            .get_mut()
            .write_all(line.as_bytes())
            .map_err(|e| self.io(e))?;
        let result = self.answer()?;
        serde_json::from_value(result["paused"].clone()).map_err(|e| self.protocol(e))
    }

    /// Tells the forwarder this process takes over now: it ends its run without touching a
    /// ring again. Returns once it has agreed.
    pub fn commit(mut self) -> Result<(), ControlError> {
        let request = Request {
            pid: Some(std::process::id()),
            ..Request::new(Command::Commit)
        };
        let mut line = serde_json::to_string(&request).unwrap_or_default();
        line.push('\n');
        self.stream
            .get_mut()
            .write_all(line.as_bytes())
            .map_err(|e| self.io(e))?;
        self.answer().map(drop)
    }

    fn answer(&mut self) -> Result<serde_json::Value, ControlError> {
        let mut answer = String::new();
        self.stream.read_line(&mut answer).map_err(|e| self.io(e))?;
        let response: Response = serde_json::from_str(&answer).map_err(|e| self.protocol(e))?;
        match (response.ok, response.result, response.error) {
            (true, Some(result), _) => Ok(result),
            (_, _, error) => Err(ControlError::Refused(
                error.unwrap_or_else(|| "no reason given".into()),
            )),
        }
    }

    fn io(&self, source: std::io::Error) -> ControlError {
        ControlError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn protocol(&self, e: impl std::fmt::Display) -> ControlError {
        ControlError::Protocol {
            path: self.path.clone(),
            reason: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latest() -> serde_json::Value {
        serde_json::json!({
            "interval": true,
            "counters": {
                "rules": [{"name": "dns", "packets": 3}, {"name": "default", "packets": 9}],
                "unclassifiable": {"name": "unclassifiable", "packets": 1},
            }
        })
    }

    #[test]
    fn status_answers_the_last_interval_and_rules_lists_every_rule() {
        let status = respond(
            br#"{"version":1,"command":"status"}"#,
            Some(&latest()),
            None,
        );
        assert_eq!(status.result, Some(latest()));
        let rules = respond(
            b"{\"version\":1,\"command\":\"rules\"}\n",
            Some(&latest()),
            None,
        );
        let names: Vec<_> = rules.result.unwrap()["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["dns", "default", "unclassifiable"]);
    }

    #[test]
    fn bad_requests_are_refused_saying_what_is_wrong() {
        let refused = |line: &[u8]| respond(line, Some(&latest()), None).error.unwrap();
        assert!(refused(b"\x00\xffgarbage").contains("not a JSON object"));
        assert!(refused(b"[1,2]").contains("protocol version none"));
        assert!(refused(br#"{"version":2,"command":"status"}"#).contains("speaks version 1"));
        assert!(refused(br#"{"version":1}"#).contains("the commands are status, rules, apply, set"));
        let odd = refused(br#"{"version":1,"command":"st\u001b[2Jats"}"#);
        assert!(
            odd.contains(r"st\u{1b}[2Jats") && !odd.contains('\u{1b}'),
            "{odd}"
        );
        let none_yet = respond(br#"{"version":1,"command":"status"}"#, None, None);
        assert!(none_yet.error.unwrap().contains("not counted yet"));
    }

    #[test]
    fn an_apply_carries_its_rules_text_and_waits_for_a_running_forwarder() {
        let line = serde_json::to_string(&Request::apply("default = \"drop\"\n".into())).unwrap();
        assert!(waits_on_forwarder(line.as_bytes()), "{line}");
        assert_eq!(
            parse_request(line.as_bytes()).unwrap().rules.as_deref(),
            Some("default = \"drop\"\n")
        );
        let no_rules = respond(br#"{"version":1,"command":"apply"}"#, None, None);
        assert!(no_rules.error.unwrap().contains("apply needs \"rules\""));
        let not_yet = respond(line.as_bytes(), Some(&latest()), None);
        assert!(not_yet.error.unwrap().contains("not running yet"));
        assert!(!waits_on_forwarder(br#"{"version":1,"command":"status"}"#));
    }

    #[test]
    fn answers_are_one_line_each() {
        let line = respond(br#"{"version":1,"command":"rules"}"#, Some(&latest()), None).to_line();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(line.ends_with('\n'));
        let back: Response = serde_json::from_str(&line).unwrap();
        assert!(back.ok);
    }

    #[test]
    fn socket_names_carry_the_interfaces_and_the_namespace() {
        let name = socket_name(&["eth0".into(), "eth1".into()], 4026531840);
        assert_eq!(name, "fwd-eth0+eth1-net4026531840.sock");
        assert_eq!(
            parse_socket_name(&name, 4026531840),
            Some(vec!["eth0".to_string(), "eth1".to_string()])
        );
        assert_eq!(parse_socket_name(&name, 1), None, "another namespace's");
        assert_eq!(parse_socket_name("fwd-123.json", 4026531840), None);
    }
}
