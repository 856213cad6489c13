//! Reading a configuration file someone else may have written: only a regular file, never
//! more than a fixed size, and text whose first invalid byte is named by line and column.
//!
//! A rules file is the forwarder's input from people and from scripts: `/dev/zero` would
//! exhaust memory, a FIFO would block the start for ever, and a megabyte of one line would
//! fill every live line. What is read here is bounded before any of it is parsed.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest rules file read: far more than [`crate::MAX_RULES`] rules need.
pub const MAX_RULES_FILE_BYTES: u64 = 1 << 20;

/// A file that could not be read as bounded text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TextFileError {
    /// Opening or reading failed.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's words.
        error: std::io::Error,
    },
    /// A directory, FIFO, socket or device.
    #[error("{}: is a {kind}, not a regular file: give the path of a file", path.display())]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// Larger than the limit.
    #[error(
        "{}: is larger than {limit} bytes, the most xskit reads from such a file: is this the \
         right file?",
        path.display()
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// Not UTF-8.
    #[error(
        "{}: line {line}, column {column}: not UTF-8 text (byte {byte:#04x}): save the file \
         as UTF-8",
        path.display()
    )]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first invalid byte.
        line: usize,
        /// 1-based column (in characters) of the first invalid byte.
        column: usize,
        /// The byte.
        byte: u8,
    },
}

/// What a file is, in words, when it is not a regular file.
fn kind_of(t: std::fs::FileType) -> Option<&'static str> {
    use std::os::unix::fs::FileTypeExt;
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("directory")
    } else if t.is_fifo() {
        Some("FIFO")
    } else if t.is_socket() {
        Some("socket")
    } else if t.is_char_device() || t.is_block_device() {
        Some("device")
    } else {
        Some("special file")
    }
}

/// Reads `path` as UTF-8 text of at most `limit` bytes. Refuses anything but a regular file
/// before opening it, and opens without blocking, so that a FIFO put in its place between the
/// look and the open still cannot hold the caller.
pub fn read_bounded(path: &Path, limit: u64) -> Result<String, TextFileError> {
    use std::os::unix::fs::OpenOptionsExt;
    let io = |error| TextFileError::Io {
        path: path.to_path_buf(),
        error,
    };
    let not_regular = |t| {
        kind_of(t).map(|kind| TextFileError::NotRegular {
            path: path.to_path_buf(),
            kind,
        })
    };
    if let Some(e) = not_regular(std::fs::metadata(path).map_err(io)?.file_type()) {
        return Err(e);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    if let Some(e) = not_regular(file.metadata().map_err(io)?.file_type()) {
        return Err(e);
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(TextFileError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        // The prefix up to the first bad byte is valid by definition.
        let before = std::str::from_utf8(&bytes[..at]).unwrap_or_default();
        let (line, column) = line_and_column(before);
        TextFileError::NotUtf8 {
            path: path.to_path_buf(),
            line,
            column,
            byte: bytes[at],
        }
    })
}

/// The 1-based line and column (in characters) just after `before`.
pub(crate) fn line_and_column(before: &str) -> (usize, usize) {
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str, bytes: &[u8]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xskit-text-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f.toml");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn a_regular_file_within_the_limit_is_read_whole() {
        let p = temp("ok", b"default = \"drop\"\n");
        assert_eq!(read_bounded(&p, 100).unwrap(), "default = \"drop\"\n");
        let e = read_bounded(&p, 5).unwrap_err();
        assert!(matches!(e, TextFileError::TooLarge { limit: 5, .. }), "{e}");
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }

    #[test]
    fn what_is_not_a_regular_file_is_refused_before_it_is_read() {
        let e = read_bounded(Path::new("/dev/zero"), 100).unwrap_err();
        assert_eq!(
            e.to_string(),
            "/dev/zero: is a device, not a regular file: give the path of a file"
        );
        let e = read_bounded(Path::new("/"), 100).unwrap_err();
        assert!(
            matches!(
                e,
                TextFileError::NotRegular {
                    kind: "directory",
                    ..
                }
            ),
            "{e}"
        );
        let e = read_bounded(Path::new("/nonexistent/rules.toml"), 100).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/nonexistent/rules.toml: No such file"),
            "{e}"
        );
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let dir = std::env::temp_dir().join(format!("xskit-text-{}-fifo", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        assert!(made.unwrap().success());
        let e = read_bounded(&path, 100).unwrap_err();
        assert!(
            matches!(e, TextFileError::NotRegular { kind: "FIFO", .. }),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn invalid_utf8_is_named_by_line_and_column() {
        let p = temp("utf8", b"a = 1\nname = \"\xc3\xa9t\xff\"\n");
        let e = read_bounded(&p, 100).unwrap_err();
        assert!(
            matches!(
                e,
                TextFileError::NotUtf8 {
                    line: 2,
                    column: 11,
                    byte: 0xff,
                    ..
                }
            ),
            "{e:?}"
        );
        std::fs::remove_dir_all(p.parent().unwrap()).unwrap();
    }
}
