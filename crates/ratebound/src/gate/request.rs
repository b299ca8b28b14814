//! What a request brings to a [`Gate`] (`Request`) and where the text of
//! its key goes while it is resolved (`Sink`).

use std::net::IpAddr;

use crate::Decision;
use crate::any::Key;

#[cfg(doc)] // the docs' links
use super::{Gate, KeySource};

/// What a request carries that a [`Gate`] may key on.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a, H: ?Sized> {
    /// The application's key with [`KeySource::Given`] (ignored otherwise).
    pub key: Option<Key<'a>>,
    /// The peer's address, if known.
    pub peer: Option<IpAddr>,
    /// The request's header lines.
    pub headers: &'a H,
}

/// Where the text of a request's key goes while the gate resolves it: the
/// hot path writes nowhere (`()`), [`Gate::identity`] into a buffer.
pub(super) trait Sink {
    fn key(&mut self, bytes: &[u8]);
    fn ip(&mut self, ip: IpAddr);
    fn anonymous(&mut self);
    fn clear(&mut self);
}

impl Sink for () {
    #[inline(always)]
    fn key(&mut self, _: &[u8]) {}
    #[inline(always)]
    fn ip(&mut self, _: IpAddr) {}
    #[inline(always)]
    fn anonymous(&mut self) {}
    #[inline(always)]
    fn clear(&mut self) {}
}

impl Sink for Vec<u8> {
    fn key(&mut self, bytes: &[u8]) {
        self.clear();
        self.extend_from_slice(b"key:");
        self.extend_from_slice(bytes);
    }
    fn ip(&mut self, ip: IpAddr) {
        self.clear();
        self.extend_from_slice(format!("ip:{ip}").as_bytes());
    }
    fn anonymous(&mut self) {
        self.clear();
        self.extend_from_slice(b"anonymous");
    }
    fn clear(&mut self) {
        Vec::clear(self);
    }
}

/// Every policy's decision by index: on the stack for up to four policies.
#[derive(Clone, Debug, Default)]
pub struct Decisions {
    inline: [Option<Decision>; 4],
    spill: Vec<Option<Decision>>,
}

impl Decisions {
    #[inline]
    pub(super) fn set(&mut self, i: usize, decision: Decision) {
        match self.inline.get_mut(i) {
            Some(slot) => *slot = Some(decision),
            None => {
                let j = i - self.inline.len();
                if self.spill.len() <= j {
                    self.spill.resize(j + 1, None);
                }
                self.spill[j] = Some(decision);
            }
        }
    }

    /// The decisions, in policy order.
    pub fn iter(&self) -> impl Iterator<Item = Decision> + Clone + '_ {
        self.inline
            .iter()
            .chain(self.spill.iter())
            .map_while(|d| *d)
    }
}
