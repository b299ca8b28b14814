//! [`Error`]: why a shared limiter could not be opened or used.

use std::io;
use std::path::PathBuf;

/// Why a shared limiter could not be opened or used.
#[derive(Debug)]
pub enum Error {
    /// The file or its directory could not be created, opened or mapped.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file holds a limiter with another parameter.
    Mismatch {
        /// The file.
        path: PathBuf,
        /// Which parameter.
        field: &'static str,
        /// The file's value.
        stored: u64,
        /// The value asked for.
        requested: u64,
    },
    /// Not a ratebound table, another layout version, or a damaged or
    /// truncated one.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file belongs to another user, or others may read or write it.
    Permissions {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file was made before the host's last boot: its times are of a
    /// clock that has since restarted.
    StaleBoot {
        /// The file.
        path: PathBuf,
    },
    /// A limiter error: a bad quota, `n` over the limit, a full table.
    Limit(ratebound::Error),
}

impl From<ratebound::Error> for Error {
    fn from(e: ratebound::Error) -> Error {
        Error::Limit(e)
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Mismatch {
                path,
                field,
                stored,
                requested,
            } => write!(
                f,
                "{}: holds a limiter with {field} {stored}, not {requested} (remove the file to change the limit)",
                path.display()
            ),
            Error::Corrupt { path, reason } => {
                write!(
                    f,
                    "{}: not a usable ratebound table: {reason}",
                    path.display()
                )
            }
            Error::Permissions { path, reason } => write!(f, "{}: {reason}", path.display()),
            Error::StaleBoot { path } => write!(
                f,
                "{}: made before the host's last boot, its times are void; remove it",
                path.display()
            ),
            Error::Limit(e) => e.fmt(f),
        }
    }
}

impl Error {
    /// A stable, machine-readable identifier, the same in Rust, Python and
    /// Node: `shm_io`, `shm_mismatch`, `shm_corrupt`, `shm_permissions`,
    /// `shm_stale_boot`, or the core's code for [`Error::Limit`].
    pub fn code(&self) -> &'static str {
        match self {
            Error::Io { .. } => "shm_io",
            Error::Mismatch { .. } => "shm_mismatch",
            Error::Corrupt { .. } => "shm_corrupt",
            Error::Permissions { .. } => "shm_permissions",
            Error::StaleBoot { .. } => "shm_stale_boot",
            Error::Limit(e) => e.code(),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Limit(e) => Some(e),
            _ => None,
        }
    }
}
