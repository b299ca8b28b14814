//! A request's key: the client's address under the trusted-proxy rules,
//! a header, or the key the front door gave — as a fingerprint for the
//! limiters, or as text (`Gate::identity`).

use super::request::Sink;
use super::{Gate, KeySource, MissingKey, Request};
use crate::any::Key;
use crate::fingerprint::Fingerprint;
use crate::http::{Headers, client_ip, ip_key};

impl Gate {
    pub(super) fn ip<H: Headers + ?Sized, S: Sink>(
        &self,
        request: &Request<'_, H>,
        sink: &mut S,
    ) -> Option<Fingerprint> {
        let peer = request.peer?;
        let ip = client_ip(
            peer,
            request.headers,
            &self.forwarding,
            &self.options.trusted,
        );
        let ip = ip_key(ip, self.options.ipv6_prefix);
        sink.ip(ip);
        Some(self.fingerprints.ip(ip))
    }

    /// The key header's fingerprint, when the request has exactly one line
    /// of it holding a usable key (see [`KeySource::Header`]).
    #[inline]
    pub(super) fn header_key<H: Headers + ?Sized, S: Sink>(
        &self,
        headers: &H,
        name: &str,
        sink: &mut S,
    ) -> Option<Fingerprint> {
        let mut lines = 0u32;
        let mut found = None;
        headers.for_each_line(name, |value| {
            lines += 1;
            if lines == 1 {
                let value = value.trim_ascii();
                if !value.is_empty() && !value.contains(&b',') {
                    sink.key(value);
                    // As `Key::Bytes(value)`.
                    found = Some(self.fingerprints.of(1, value));
                }
            }
        });
        if lines == 1 {
            found
        } else {
            sink.clear();
            None
        }
    }

    /// The request's key under every rule (key source, missing key), its
    /// text written to `sink` as well.
    #[inline]
    pub(super) fn resolve<H: Headers + ?Sized, S: Sink>(
        &self,
        request: &Request<'_, H>,
        sink: &mut S,
    ) -> Result<Fingerprint, u16> {
        let found = match &self.options.key {
            KeySource::ClientIp => self.ip(request, sink),
            KeySource::Header(name) => self.header_key(request.headers, name, sink),
            KeySource::Given => match request.key {
                None | Some(Key::Text("")) | Some(Key::Bytes([])) => None,
                Some(key) => {
                    match key {
                        Key::Text(t) => sink.key(t.as_bytes()),
                        Key::Bytes(b) => sink.key(b),
                        Key::Int(i) => sink.key(i.to_string().as_bytes()),
                    }
                    Some(self.fingerprints.key(key))
                }
            },
        };
        if let Some(key) = found {
            return Ok(key);
        }
        let anonymous = |sink: &mut S| {
            sink.anonymous();
            self.fingerprints.of(4, b"")
        };
        match self.options.missing {
            MissingKey::FallBackToIp => match self.ip(request, sink) {
                Some(ip) => Ok(ip),
                None => Ok(anonymous(sink)),
            },
            MissingKey::SharedAnonymous => Ok(anonymous(sink)),
            MissingKey::Reject(status) => Err(status),
        }
    }

    #[inline]
    pub(super) fn key<H: Headers + ?Sized>(
        &self,
        request: &Request<'_, H>,
    ) -> Result<Fingerprint, u16> {
        self.resolve(request, &mut ())
    }

    /// The request's key as text that every instance derives alike — for a
    /// limit kept outside this process, such as a global limit in Redis:
    /// `key:<the key>` (a key header's trimmed value, or the application's
    /// key), `ip:<address>` (IPv6 cut to its prefix) or `anonymous`, by the
    /// same rules [`decide`](Self::decide) keys on. `Err(status)` when a
    /// keyless request is refused ([`MissingKey::Reject`]).
    ///
    /// # Errors
    /// The [`MissingKey::Reject`] status.
    ///
    /// # Examples
    /// ```
    /// use ratebound::any::AnyClock;
    /// use ratebound::gate::{Gate, GateOptions, Request};
    /// use ratebound::{KeyedAlgorithm, Quota};
    /// let policy = ("p".to_string(), KeyedAlgorithm::TokenBucket(Quota::parse("1/s")?));
    /// let gate = Gate::new(vec![policy], GateOptions::default(), AnyClock::default())?;
    /// let lines: [(&str, &str); 0] = [];
    /// let r = Request { key: None, peer: Some("2001:db8::7".parse().unwrap()), headers: &lines[..] };
    /// assert_eq!(gate.identity(&r), Ok(b"ip:2001:db8::".to_vec()));
    /// # Ok::<(), ratebound::Error>(())
    /// ```
    pub fn identity<H: Headers + ?Sized>(&self, request: &Request<'_, H>) -> Result<Vec<u8>, u16> {
        let mut text = Vec::new();
        self.resolve(request, &mut text)?;
        Ok(text)
    }
}
