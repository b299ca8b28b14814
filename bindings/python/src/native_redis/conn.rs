//! The native connection's calls on the wire: what became of one
//! (`RunResult`), a connection ready for commands (`Conn`: `EVALSHA`, then
//! `EVAL` on `NOSCRIPT`), a failure's text, and the plain-RESP probe of a
//! `rediss://` target.

use std::time::Duration;

use ratebound_redis::script::Script;
use ratebound_redis::{Call, CallOutcome};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

/// What became of one call.
#[derive(Debug)]
pub(crate) enum RunResult {
    /// The script's reply (a list of integers).
    Reply(Vec<i64>),
    /// A batch reply of the wrong length: no call of it was answered.
    Malformed,
    /// No reply within the deadline.
    Timeout,
    /// A connection or server error.
    Failed(String),
    /// Never sent: the call still waited in its group's queue at its
    /// deadline (the runs ahead of it took the whole deadline).
    Unsent,
}

impl RunResult {
    /// As the engine reads it.
    pub(crate) fn outcome(&self) -> CallOutcome<'_> {
        match self {
            RunResult::Reply(r) => CallOutcome::Reply(r),
            RunResult::Malformed => CallOutcome::Malformed,
            RunResult::Timeout => CallOutcome::Timeout,
            RunResult::Failed(e) => CallOutcome::Failed(e),
            RunResult::Unsent => CallOutcome::Unsent,
        }
    }
}

/// A connection ready for commands.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Conn {
    pub(super) async fn ints(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<Vec<i64>> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => cmd.query_async(c).await,
        }
    }

    pub(super) async fn unit(&mut self, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
        match self {
            Conn::Single(c) => cmd.query_async(c).await,
            Conn::Cluster(c) => cmd.query_async(c).await,
        }
    }

    /// `EVALSHA`, and `EVAL` once if the server has not got the script
    /// (a restart, a failover, `SCRIPT FLUSH`, another cluster node).
    /// `commands` makes both; the `EVALSHA` alone is made for the first
    /// attempt (the `EVAL` carries the script's text, 6 kB).
    pub(super) async fn script(
        &mut self,
        script: &Script,
        keys: &[&[u8]],
        args: &[String],
        commands: impl FnOnce() -> (redis::Cmd, redis::Cmd),
    ) -> redis::RedisResult<Vec<i64>> {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha.arg(script.sha()).arg(keys.len());
        for k in keys {
            evalsha.arg(*k);
        }
        evalsha.arg(args);
        match self.ints(&evalsha).await {
            Err(e) if Call::is_noscript(&e) => self.ints(&commands().1).await,
            other => other,
        }
    }
}

/// The text of a failed call, for the engine and for
/// `ratebound_redis::misconfiguration`: the `redis` crate's own words, and
/// for a refused `AUTH` (whose server reply the crate drops: "Password
/// authentication failed") the server's code for it, `WRONGPASS`, so that
/// a wrong password or user is told from an outage.
pub(super) fn failure_text(e: &redis::RedisError) -> String {
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return format!("WRONGPASS {e}");
    }
    e.to_string()
}

/// Whether the server at `host:port` answers plain RESP (a `PING` written
/// in the clear gets `+PONG` or an error reply), asked within `timeout`:
/// for a `rediss://` target, whose TLS handshake with such a server can
/// only time out (the server reads the ClientHello as an unfinished inline
/// command and waits), which the fail policy would answer forever.
pub(crate) async fn speaks_plain(host: String, port: u16, timeout: Duration) -> bool {
    let attempt = async {
        let s = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .ok()?;
        s.writable().await.ok()?;
        s.try_write(b"PING\r\n").ok()?;
        let mut b = [0u8; 16];
        loop {
            s.readable().await.ok()?;
            match s.try_read(&mut b) {
                Ok(0) => return Some(false),
                Ok(_) => return Some(b[0] == b'+' || b[0] == b'-'),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return None,
            }
        }
    };
    matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(true)))
}
