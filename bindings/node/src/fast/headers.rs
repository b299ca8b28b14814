//! A request's raw header lines (`req.rawHeaders`), copied out of
//! JavaScript for the core.

use std::ffi::c_char;
use std::ptr;

use napi::sys;

use super::ffi::{push_utf8, type_of};

/// A request's header lines as Node gives them (`req.rawHeaders`: a flat
/// array `[name, value, name, value, ...]`, in the order received,
/// duplicates kept), copied out for the core: only the lines of the fields
/// the gate reads
/// ([`gate::Gate::header_names`](ratebound::gate::Gate::header_names)), and
/// nothing at all when it reads none. Every JavaScript value is read before
/// the core decides, so no JavaScript (an array getter) can run while it
/// does.
pub struct Lines<'n> {
    /// The field names wanted, lower case.
    names: Vec<&'n str>,
    /// Each line: the index of its name in `names`, and its value's range
    /// in `bytes`.
    lines: Vec<(usize, std::ops::Range<usize>)>,
    bytes: Vec<u8>,
}

/// `rawHeaders` that is not a flat array of strings.
pub struct NotRawHeaders;

/// The message of [`NotRawHeaders`].
pub const RAW_HEADERS_TYPE: &str =
    "rawHeaders must be a flat array of strings [name, value, ...] (req.rawHeaders)";

impl<'n> Lines<'n> {
    /// No lines.
    pub fn none() -> Lines<'n> {
        Lines {
            names: Vec::new(),
            lines: Vec::new(),
            bytes: Vec::new(),
        }
    }

    /// The lines of the fields `names` (lower case) in the array `value`
    /// (`undefined`, `null` or a null handle: no lines). Names are compared
    /// without regard to case.
    ///
    /// # Errors
    /// [`NotRawHeaders`] when `value` is neither absent nor an array, or
    /// when a name, or the value of a wanted line, is not a string.
    ///
    /// # Safety
    /// `env` and `value` (unless null) must be the live handles of the
    /// current callback.
    pub unsafe fn read(
        env: sys::napi_env,
        value: sys::napi_value,
        names: impl IntoIterator<Item = &'n str>,
    ) -> std::result::Result<Lines<'n>, NotRawHeaders> {
        let mut out = Lines::none();
        if value.is_null() {
            return Ok(out);
        }
        // SAFETY: live handles (the caller's contract).
        unsafe {
            match type_of(env, value) {
                sys::ValueType::napi_undefined | sys::ValueType::napi_null => return Ok(out),
                sys::ValueType::napi_object => {}
                _ => return Err(NotRawHeaders),
            }
            let mut is_array = false;
            sys::napi_is_array(env, value, &mut is_array);
            if !is_array {
                return Err(NotRawHeaders);
            }
            out.names.extend(names);
            if out.names.is_empty() {
                return Ok(out);
            }
            let mut len = 0u32;
            sys::napi_get_array_length(env, value, &mut len);
            // A name longer than every wanted one by at most 3 bytes still
            // shows as longer: N-API writes whole characters (≤ 4 bytes)
            // into the room of the longest name plus 4.
            let room = out.names.iter().map(|n| n.len()).max().unwrap_or(0) + 5;
            let mut stack = [0u8; 128];
            let mut heap = Vec::new();
            let buf: &mut [u8] = if room <= stack.len() {
                &mut stack[..room]
            } else {
                heap.resize(room, 0);
                &mut heap
            };
            let mut i = 0u32;
            while i + 1 < len {
                let mut name = ptr::null_mut();
                sys::napi_get_element(env, value, i, &mut name);
                let mut written = 0usize;
                let status = sys::napi_get_value_string_utf8(
                    env,
                    name,
                    buf.as_mut_ptr().cast::<c_char>(),
                    buf.len(),
                    &mut written,
                );
                if status != sys::Status::napi_ok {
                    return Err(NotRawHeaders);
                }
                let got = &buf[..written];
                if let Some(which) = out
                    .names
                    .iter()
                    .position(|n| n.as_bytes().eq_ignore_ascii_case(got))
                {
                    let mut line = ptr::null_mut();
                    sys::napi_get_element(env, value, i + 1, &mut line);
                    let start = out.bytes.len();
                    if !push_utf8(env, line, &mut out.bytes) {
                        return Err(NotRawHeaders);
                    }
                    out.lines.push((which, start..out.bytes.len()));
                }
                i += 2;
            }
        }
        Ok(out)
    }
}

impl ratebound::http::Headers for Lines<'_> {
    fn for_each_line<F: FnMut(&[u8])>(&self, name: &str, mut f: F) {
        for (which, range) in &self.lines {
            if self.names[*which].eq_ignore_ascii_case(name) {
                f(&self.bytes[range.clone()]);
            }
        }
    }
}
