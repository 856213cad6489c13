//! Telling a service manager how a long-running command stands (systemd's `Type=notify`,
//! through `$NOTIFY_SOCKET`): ready once it forwards, stopping once asked to stop. Without
//! the variable nothing is sent.

use sd_notify::NotifyState;

/// Says the command is ready (its ports open, its programs attached), with `status` for
/// `systemctl status`.
pub(crate) fn ready(status: &str, took_over: bool) {
    // A forwarder that took over is the service's main process from now on.
    if took_over {
        tell(&[
            NotifyState::MainPid(std::process::id()),
            NotifyState::Ready,
            NotifyState::Status(status),
        ]);
    } else {
        tell(&[NotifyState::Ready, NotifyState::Status(status)]);
    }
}

/// Says the command is stopping.
pub(crate) fn stopping() {
    tell(&[NotifyState::Stopping]);
}

/// A manager that cannot be told is said once on stderr; the command goes on (it forwards
/// either way, and the manager's own timeout says the rest).
fn tell(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        note!("xskit: could not tell the service manager at NOTIFY_SOCKET ({e}); going on");
    }
}
