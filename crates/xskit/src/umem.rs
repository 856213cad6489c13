//! The checked side of the UMEM: layouts validated against the kernel's rules and the
//! machine's memory, and frame lengths checked, with errors that say what to change. The
//! memory itself and the frame handles are in the system layer.

use crate::error::{Error, Result};
use crate::sys::umem::{
    Frame, Umem, UmemConfig, ADDR_MASK, HUGE_PAGE_SIZE, MAX_FRAME_SIZE, MIN_FRAME_SIZE,
    XDP_PACKET_HEADROOM,
};

impl UmemConfig {
    /// Checks the layout against the kernel's rules, saying what to change.
    pub fn validate(&self) -> Result<()> {
        let fs = self.frame_size;
        if !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&fs) {
            return Err(Error::FrameSize {
                size: fs,
                reason: if fs > MAX_FRAME_SIZE {
                    format!(
                        "the kernel caps frames at the page size ({MAX_FRAME_SIZE}); for larger \
                         packets enable multi-buffer, which chains frames"
                    )
                } else {
                    format!("it must be between {MIN_FRAME_SIZE} and {MAX_FRAME_SIZE}")
                },
            });
        }
        if !self.unaligned && !fs.is_power_of_two() {
            return Err(Error::FrameSize {
                size: fs,
                reason: "aligned mode needs a power of two (2048 or 4096); use unaligned mode for other sizes".into(),
            });
        }
        if self.frame_count == 0 {
            return Err(Error::NoFrames);
        }
        if self.headroom >= fs - XDP_PACKET_HEADROOM {
            return Err(Error::Headroom {
                headroom: self.headroom,
                frame_size: fs,
                max: fs - XDP_PACKET_HEADROOM - 1,
            });
        }
        if !self.tx_metadata_len.is_multiple_of(8) || self.tx_metadata_len > 256 {
            return Err(Error::TxMetadataLen {
                len: self.tx_metadata_len,
            });
        }
        if self.len() > ADDR_MASK {
            return Err(Error::UmemAddressSpace { bytes: self.len() });
        }
        Ok(())
    }
}

impl Umem {
    /// Maps the memory for a UMEM laid out as `config` says. The kernel sees it once a socket
    /// is bound with it.
    pub fn new(config: UmemConfig) -> Result<Self> {
        config.validate()?;
        let mut len = config.len();
        // The kernel pins every page when a socket registers the UMEM: asking for more than
        // the machine has would end in the OOM killer, not an error.
        if let Some(available) = available_memory() {
            if len > available {
                return Err(Error::UmemTooLarge {
                    bytes: len,
                    available,
                });
            }
        }
        if config.huge_pages {
            len = len.div_ceil(HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE;
        }
        Umem::map(config).map_err(|e| {
            if config.huge_pages {
                Error::HugePages {
                    bytes: len,
                    os_error: e.os_error,
                }
            } else {
                Error::Syscall(e)
            }
        })
    }

    /// The UMEM another process handed over: its memfd `file`, laid out as `config` (which
    /// must say what the other process's did, [`UmemConfig::shareable`] included). Its
    /// frames are taken with [`Umem::take_frames_at`].
    pub fn adopt(file: std::os::fd::OwnedFd, config: UmemConfig) -> Result<Self> {
        config.validate()?;
        let mut len = config.len();
        if config.huge_pages {
            len = len.div_ceil(HUGE_PAGE_SIZE) * HUGE_PAGE_SIZE;
        }
        let have = xskit_os::fdpass::file_len(std::os::fd::AsFd::as_fd(&file))?;
        if !config.shareable || have < len {
            return Err(Error::UmemHandedOver {
                bytes: len,
                file: have,
            });
        }
        Ok(Umem::map_file(file, len, config)?)
    }

    /// Sets how many bytes of the frame are packet data.
    pub fn set_len(&self, frame: &mut Frame, len: usize) -> Result<()> {
        self.try_set_len(frame, len)
            .map_err(|capacity| Error::FrameOverflow { len, capacity })
    }

    /// Copies `data` into the frame and sets its length.
    pub fn write(&self, frame: &mut Frame, data: &[u8]) -> Result<()> {
        self.set_len(frame, data.len())?;
        self.data_mut(frame).copy_from_slice(data);
        Ok(())
    }
}

/// MemAvailable from /proc/meminfo, in bytes.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_umem_larger_than_memory_is_refused_before_mapping() {
        let e = Umem::new(UmemConfig {
            frame_count: u32::MAX,
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(e, Error::UmemTooLarge { .. }), "{e}");
        assert!(e.to_string().contains("smaller rings"), "{e}");
    }

    #[test]
    fn config_errors_say_what_to_change() {
        let bad = |cfg: UmemConfig| cfg.validate().unwrap_err().to_string();
        assert!(bad(UmemConfig {
            frame_size: 3000,
            ..Default::default()
        })
        .contains("power of two"));
        assert!(bad(UmemConfig {
            frame_size: 8192,
            huge_pages: true,
            ..Default::default()
        })
        .contains("multi-buffer"));
        assert!(bad(UmemConfig {
            frame_size: 1024,
            ..Default::default()
        })
        .contains("2048"));
        assert!(bad(UmemConfig {
            headroom: 4000,
            ..Default::default()
        })
        .contains("headroom"));
        assert!(UmemConfig {
            frame_size: 3000,
            unaligned: true,
            ..Default::default()
        }
        .validate()
        .is_ok());
    }
}
