//! Modes, side by side. There are three types because there are three questions:
//!
//! | type | answers | where |
//! |---|---|---|
//! | [`Mode`] | what you ask for: where the XDP program runs and whether the socket copies | [`crate::PortConfig`], [`crate::SocketConfig`], [`crate::XdpProgram::attach`] |
//! | [`AttachedMode`] | where an attached program runs now (after `Auto` chose) | [`crate::XdpProgram::mode`] |
//! | [`ModeInfo`] | what a port got: the program's mode, zero-copy or not, and each fallback taken | [`crate::Port::mode`] |
//!
//! A program and a socket read the same [`Mode`] each for its own part: the program runs
//! native for `Drv` and `ZeroCopy` and generic for `Skb`; the socket binds zero-copy for
//! `ZeroCopy`, copy for `Skb` and `Drv`, and tries zero-copy before copy for `Auto`.

use std::fmt;

use crate::error::{Error, Result};

/// The mode to run in, as asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Zero-copy if the device can, else native copy, else generic (SKB).
    #[default]
    Auto,
    /// Generic XDP (XDP_FLAGS_SKB_MODE), copy: works on every device.
    Skb,
    /// Native XDP in the driver (XDP_FLAGS_DRV_MODE), copy: an error if the driver lacks it.
    Drv,
    /// Native XDP, zero-copy (XDP_ZEROCOPY): an error if the device cannot.
    ZeroCopy,
}

impl Mode {
    /// Every mode, in the order of the CLI's help.
    pub const ALL: [Mode; 4] = [Mode::Auto, Mode::Skb, Mode::Drv, Mode::ZeroCopy];

    /// The mode's name: `auto`, `skb`, `drv` or `zc`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Skb => "skb",
            Mode::Drv => "drv",
            Mode::ZeroCopy => "zc",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Mode::Auto),
            "skb" => Ok(Mode::Skb),
            "drv" | "native" => Ok(Mode::Drv),
            "zc" | "zero-copy" => Ok(Mode::ZeroCopy),
            _ => Err(Error::UnknownMode {
                text: s.to_string(),
            }),
        }
    }
}

/// Where an attached XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttachedMode {
    /// Generic (SKB) XDP.
    Skb,
    /// Native (driver) XDP.
    Drv,
}

impl fmt::Display for AttachedMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AttachedMode::Skb => "xdp-skb",
            AttachedMode::Drv => "xdp-drv",
        })
    }
}

impl From<AttachedMode> for Mode {
    /// The copy mode of a program that runs in `mode`.
    fn from(mode: AttachedMode) -> Mode {
        match mode {
            AttachedMode::Skb => Mode::Skb,
            AttachedMode::Drv => Mode::Drv,
        }
    }
}

/// The mode a port obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModeInfo {
    /// Where the XDP program runs (`None` for a transmit-only port, which has none).
    pub attach: Option<AttachedMode>,
    /// Zero-copy, as XDP_OPTIONS reports it.
    pub zero_copy: bool,
    /// Reasons for each fallback taken.
    pub fallbacks: Vec<String>,
    /// What the user should know of this mode on this device
    /// ([`crate::Driver::zero_copy_transmit_caveat`] for a port that transmits in zero-copy).
    pub caveats: Vec<String>,
}

impl fmt::Display for ModeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let copy = if self.zero_copy { "zero-copy" } else { "copy" };
        match self.attach {
            Some(attach) => write!(f, "{attach} {copy}"),
            None => write!(f, "tx-only {copy}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back() {
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>().unwrap(), m);
        }
        let e = "fast".parse::<Mode>().unwrap_err().to_string();
        assert!(e.contains("unknown mode 'fast'"), "{e}");
    }
}
