//! The engine: decides a [`Request`] against a [`Config`]'s rules.

use std::sync::Arc;

use crate::api::{Code, DescriptorStatus, Request, Response};
use crate::model::Config;

/// A request the engine refuses to decide: too large, or malformed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// A part of the request is larger than the engine takes.
    TooLarge {
        /// What (`"descriptors"`, `"entries"`, `"value"`, ...).
        what: &'static str,
        /// Its size.
        size: u64,
        /// The most taken.
        max: u64,
    },
    /// A field is missing or out of range.
    Invalid {
        /// What is wrong, naming the field and the value.
        reason: String,
    },
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::TooLarge { what, size, max } => {
                write!(f, "{what}: {size} is more than the {max} taken")
            }
            RequestError::Invalid { reason } => f.write_str(reason),
        }
    }
}

impl std::error::Error for RequestError {}

/// Decides requests against the rules in force.
pub struct Engine {
    config: Arc<Config>,
}

impl Engine {
    /// An engine deciding by `config`, its state in this process.
    pub fn new(config: Config) -> Engine {
        Engine {
            config: Arc::new(config),
        }
    }

    /// The rules in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config)
    }

    /// Decides `request`: one status per descriptor, the overall code, the
    /// headers.
    ///
    /// # Errors
    /// [`RequestError`] for a request too large or malformed.
    pub fn decide(&self, request: &Request) -> Result<Response, RequestError> {
        // Filled in by the engine's work: every descriptor OK for now.
        let statuses = request
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: 0,
                duration_until_reset: None,
            })
            .collect();
        Ok(Response {
            overall_code: Code::Ok,
            statuses,
            headers: Vec::new(),
        })
    }
}
