//! A request's header lines as the Python servers hand them over (ASGI
//! pairs, a WSGI environ), read by the core.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use ratebound::http::Headers;

// ------------------------------------------------------------- headers

/// The header lines of a request as the Python servers hand them over: an
/// ASGI `scope["headers"]` list of `(name, value)` bytes pairs, or a WSGI
/// environ (`HTTP_X_API_KEY`; the server has already joined repeated lines
/// with commas).
pub(crate) enum PyHeaders<'a, 'py> {
    Asgi(&'a Bound<'py, PyAny>),
    Environ(&'a Bound<'py, PyDict>, &'a [(String, Py<PyString>)]),
    None,
}

/// The bytes of a WSGI environ string, losslessly. PEP 3333's "native
/// strings" carry the request's bytes one per character (latin-1): those
/// bytes, exactly. A server that hands over characters above U+00FF has
/// decoded the bytes itself (as UTF-8): their UTF-8 bytes again — the bytes
/// the request carried — so no two different values share a key (`user€`
/// and `user?` once did).
pub(crate) fn wsgi_bytes(s: &str) -> Vec<u8> {
    let narrow: Option<Vec<u8>> = s.chars().map(|c| u8::try_from(u32::from(c)).ok()).collect();
    narrow.unwrap_or_else(|| s.as_bytes().to_vec())
}

impl Headers for PyHeaders<'_, '_> {
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, mut f: F) {
        match self {
            PyHeaders::None => {}
            PyHeaders::Asgi(list) => {
                let Ok(iter) = list.try_iter() else { return };
                for item in iter.flatten() {
                    let (Ok(n), Ok(v)) = (item.get_item(0), item.get_item(1)) else {
                        continue;
                    };
                    let (Ok(n), Ok(v)) = (n.cast::<PyBytes>(), v.cast::<PyBytes>()) else {
                        continue;
                    };
                    if n.as_bytes().eq_ignore_ascii_case(name.as_bytes()) {
                        f(v.as_bytes());
                    }
                }
            }
            PyHeaders::Environ(environ, keys) => {
                let Some((_, key)) = keys.iter().find(|(n, _)| n == name) else {
                    return;
                };
                let Ok(Some(value)) = environ.get_item(key.bind(environ.py())) else {
                    return;
                };
                if let Ok(s) = value.cast::<PyString>() {
                    if let Ok(text) = s.to_cow() {
                        if text.is_ascii() {
                            f(text.as_bytes()); // the same bytes, without a copy
                        } else {
                            f(&wsgi_bytes(&text));
                        }
                    } else if let Ok(raw) = s
                        .call_method1("encode", ("utf-8", "surrogateescape"))
                        .and_then(|b| b.extract::<Vec<u8>>())
                    {
                        // Lone surrogates: a server's undecodable bytes kept
                        // with surrogateescape — those bytes.
                        f(&raw);
                    }
                } else if let Ok(b) = value.cast::<PyBytes>() {
                    f(b.as_bytes());
                }
            }
        }
    }
}
