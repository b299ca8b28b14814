//! Telling a configuration mistake from an outage ([`misconfiguration`]):
//! a wrong password is an error at once, a refused connection is the fail
//! policy's.

use ratebound::Error;

/// What a client's error text says, if it is a configuration mistake —
/// one no retry can cure — rather than an unreachable or slow server:
/// [`Error::StoreMisconfigured`] naming the cause, with any credentials in
/// the text hidden. `None` for anything else (a refused connection, a
/// timeout, a reset, a server loading its data set): those stay the fail
/// policy's to answer.
///
/// Recognised: a wrong password or user (`WRONGPASS`), a password needed
/// (`NOAUTH`) or given to a server without one, a command or key the user
/// may not use (`NOPERM`), a database index that does not exist, a TLS
/// handshake with a server that speaks none (or a certificate refused), a
/// Unix socket that is not there, a host name that does not resolve, a
/// server that does not know the script commands (`ERR unknown command
/// 'EVALSHA'`: not Redis, or a proxy without scripting).
///
/// # Examples
/// ```
/// use ratebound_redis::misconfiguration;
/// let e = misconfiguration("WRONGPASS invalid username-password pair or user is disabled.").unwrap();
/// assert_eq!(e.code(), "store_misconfigured");
/// assert!(e.to_string().contains("authentication failed"));
/// assert!(misconfiguration("Connection refused (os error 111)").is_none());
/// let hidden = misconfiguration("ERR DB index is out of range (redis://app:s3cret@127.0.0.1/99)").unwrap();
/// assert!(!hidden.to_string().contains("s3cret"));
/// ```
pub fn misconfiguration(text: &str) -> Option<Error> {
    let lower = text.to_ascii_lowercase();
    let has = |needle: &str| lower.contains(needle);
    let what = if has("wrongpass")
        || has("invalid username-password")
        || has("invalid password")
        || has("password authentication failed")
    {
        "authentication failed: a wrong password or user"
    } else if has("noauth") || has("authentication required") {
        "authentication required: the server needs a password and none was given"
    } else if has("without any password configured") || has("no password is set") {
        "a password was given to a server that has none"
    } else if has("noperm") || has("no permissions") {
        "permission denied: the user may not run the limiter's scripts or use its keys"
    } else if has("db index is out of range")
        || has("invalid db index")
        || has("invalid database")
        || (has("select") && has("out of range"))
    {
        "no such database"
    } else if has("wrong version number")
        || has("tls handshake")
        || has("ssl handshake")
        || has("certificate verify failed")
        || has("invalidcertificate")
        || has("ssl:")
        || has("eproto")
    {
        "the TLS handshake failed: TLS to a server without it, or a certificate refused"
    } else if (has("no such file or directory") || has("enoent")) && !has("script") {
        "no Unix socket at that path"
    } else if has("name or service not known")
        || has("nodename nor servname")
        || has("failed to lookup address")
        || has("enotfound")
        || has("no address associated")
        || has("host not found")
    {
        "the host name does not resolve"
    } else if has("unknown command") && (has("evalsha") || has("eval")) {
        "the server does not run scripts (EVALSHA/EVAL unknown): not Redis, or a proxy without scripting"
    } else {
        return None;
    };
    Some(Error::StoreMisconfigured {
        cause: format!("{what} ({})", hide_credentials(text.trim())),
    })
}

/// `text` with the user and password of any URL in it (`scheme://user:pass@`)
/// replaced by `***`.
fn hide_credentials(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c.is_whitespace() || c == '/' || c == ')')
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(at) => {
                out.push_str("***");
                rest = &tail[at..];
            }
            None => rest = tail,
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_mistakes_are_told_from_outages() {
        for (text, cause) in [
            (
                "WRONGPASS invalid username-password pair or user is disabled.",
                "authentication failed",
            ),
            ("NOAUTH Authentication required.", "authentication required"),
            // The `redis` crate's words for a refused AUTH (it drops the
            // server's reply).
            (
                "Password authentication failed- AuthenticationFailed",
                "authentication failed",
            ),
            (
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                "a password was given",
            ),
            (
                "NOPERM User app has no permissions to run the 'evalsha' command",
                "permission denied",
            ),
            ("ERR DB index is out of range", "no such database"),
            ("ERR invalid DB index", "no such database"),
            (
                "[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)",
                "TLS handshake failed",
            ),
            (
                "Error 2 connecting to unix:///tmp/nothing.sock. No such file or directory.",
                "no Unix socket",
            ),
            ("connect ENOENT /tmp/nothing.sock", "no Unix socket"),
            (
                "Error -2 connecting to nowhere.invalid:6379. Name or service not known.",
                "does not resolve",
            ),
            ("getaddrinfo ENOTFOUND nowhere.invalid", "does not resolve"),
            (
                "ResponseError: ERR unknown command 'EVALSHA', with args beginning with: 'abc' '1'",
                "does not run scripts",
            ),
            (
                "ERR unknown command `eval`, with args beginning with:",
                "does not run scripts",
            ),
        ] {
            let e = misconfiguration(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(e.code(), "store_misconfigured");
            assert!(e.to_string().contains(cause), "{text}: {e}");
        }
        for text in [
            "Connection refused (os error 111)",
            "Error 111 connecting to 127.0.0.1:1. Connection refused.",
            "connect ECONNREFUSED 127.0.0.1:1",
            "Timeout reading from socket",
            "Connection reset by peer",
            "LOADING Redis is loading the dataset in memory",
            "NOSCRIPT No matching script. Please use EVAL.",
            "Temporary failure in name resolution",
        ] {
            assert!(misconfiguration(text).is_none(), "{text}");
        }
    }

    #[test]
    fn credentials_never_reach_the_message() {
        let e = misconfiguration(
            "WRONGPASS for redis://app:hunter2@db.example:6379/0 and rediss://:pw2@x/1",
        )
        .unwrap()
        .to_string();
        assert!(!e.contains("hunter2") && !e.contains("pw2"), "{e}");
        assert!(e.contains("redis://***@db.example:6379/0"), "{e}");
        assert_eq!(hide_credentials("no url here"), "no url here");
    }
}
