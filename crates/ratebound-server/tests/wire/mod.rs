//! What the wire tests share: a server on 127.0.0.1 with free ports, and a
//! minimal HTTP/1.1 client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ratebound_server::engine::Engine;
use ratebound_server::model::{Config, Domain, Place};
use ratebound_server::serve::{ServeOptions, bind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A running server: its addresses, its shutdown trigger, its task.
pub struct Running {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    pub stop: Option<oneshot::Sender<()>>,
    pub task: JoinHandle<Result<(), ratebound_server::serve::ServeError>>,
}

impl Running {
    /// Triggers the shutdown.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    /// Triggers the shutdown and waits (at most 5 s) for the runner to end.
    pub async fn finish(mut self) {
        self.stop();
        let result = tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the server stops within 5 s")
            .expect("the server's task does not panic");
        assert!(result.is_ok(), "{result:?}");
    }
}

/// A configuration naming the domains (no rules: the engine's decisions
/// are not what these tests check).
pub fn config(domains: &[&str]) -> Config {
    let mut config = Config::default();
    for name in domains {
        config.domains.insert(
            name.to_string(),
            Domain {
                name: name.to_string(),
                descriptors: Vec::new(),
                place: Place::default(),
            },
        );
    }
    config
}

/// Starts a server on 127.0.0.1:0 (both) with `options`' other settings.
pub async fn start(config: Config, options: ServeOptions) -> Running {
    let options = ServeOptions {
        grpc: "127.0.0.1:0".parse().unwrap(),
        http: "127.0.0.1:0".parse().unwrap(),
        ..options
    };
    let bound = bind(
        Arc::new(Engine::new(config).expect("rules the engine takes")),
        options,
    )
    .await
    .expect("binds 127.0.0.1:0");
    let (grpc, http) = (bound.grpc_addr(), bound.http_addr());
    assert_ne!(grpc.port(), 0);
    assert_ne!(http.port(), 0);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    Running {
        grpc,
        http,
        stop: Some(stop),
        task,
    }
}

/// An HTTP answer: status, headers (lowercased names), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads an HTTP/1.1 answer to the end of the connection.
pub async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut raw))
        .await
        .expect("an answer within 5 s")
        .expect("reads the answer");
    let text = String::from_utf8(raw).expect("a UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .map(|l| {
            let (n, v) = l.split_once(':').unwrap();
            (n.to_ascii_lowercase(), v.trim().to_string())
        })
        .collect();
    Answer {
        status,
        headers,
        body: body.to_string(),
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`).
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    read_answer(&mut stream).await
}

/// The value of the Prometheus sample `line` (its name and labels as
/// written) in `metrics`.
pub fn sample(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
        .parse()
        .unwrap()
}
