//! Where a native connection goes: a URL (or a list of cluster nodes' URLs)
//! read into the `redis` crate's settings, every bad value a `ConfigError`
//! naming it (its password hidden).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};
use redis::cluster::ClusterClient;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};
use std::time::Duration;

use crate::convert::type_name;
use crate::error::error_class;

/// How long one attempt to connect (or to read a cluster's topology) may
/// take, whatever the calls' deadline: a call never waits for it longer
/// than its own deadline, and the attempt goes on for the next call.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Where the connection goes.
pub(crate) struct Target {
    /// The URL(s) as given, passwords hidden: for messages and `repr`.
    pub(crate) shown: String,
    /// What tells two targets apart (the URLs as given, the CA file): the
    /// limiters of one target share one connection.
    pub(crate) id: String,
    /// One server, or a cluster.
    pub(crate) kind: Kind,
}

/// One server or a cluster.
// One per target, made once: the size of a variant does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Kind {
    /// One server (`redis://`, `rediss://`, `unix://`).
    Single(redis::Client),
    /// A Redis Cluster: its client, and one client per seed node (for the
    /// pause listener, which subscribes on one node: a `PUBLISH` reaches
    /// every node of a cluster).
    Cluster {
        client: ClusterClient,
        nodes: Vec<redis::Client>,
    },
}

impl Target {
    /// The host and port of a single server reached over TLS
    /// (`rediss://`), if this is one.
    pub(crate) fn tls_address(&self) -> Option<(String, u16)> {
        match &self.kind {
            Kind::Single(c) => match c.get_connection_info().addr() {
                ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
                _ => None,
            },
            Kind::Cluster { .. } => None,
        }
    }

    /// The clients a pause listener may subscribe with (the one server, or
    /// each seed node in turn).
    pub(crate) fn pubsub_clients(&self) -> Vec<redis::Client> {
        match &self.kind {
            Kind::Single(c) => vec![c.clone()],
            Kind::Cluster { nodes, .. } => nodes.clone(),
        }
    }
}

/// Whether `obj` names a target rather than being a client: a `str`, or a
/// list or tuple of them.
pub(crate) fn is_target(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyString>()
        || ((obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>())
            && obj
                .try_iter()
                .map(|mut it| it.all(|x| x.is_ok_and(|x| x.is_instance_of::<PyString>())))
                .unwrap_or(false))
}

/// `text` with the password of its authority part hidden
/// (`redis://user:***@host`).
pub(crate) fn redacted(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info.split_once(':').map_or(user_info, |(u, _)| u);
            let hidden = if user_info.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => text.to_string(),
    }
}

fn config_error(py: Python<'_>, message: String) -> PyErr {
    match error_class(py, "ConfigError").and_then(|c| c.call1((message, "invalid_option"))) {
        Ok(e) => PyErr::from_value(e),
        Err(e) => e,
    }
}

fn bad_url(py: Python<'_>, text: &str, reason: &str) -> PyErr {
    config_error(py, format!("invalid url {:?}: {reason}", redacted(text)))
}

const SCHEMES: &str = "redis://host:port/db, rediss:// (TLS), redis+cluster://host:port, \
                       rediss+cluster:// or unix:///path";

/// One URL: its connection settings and whether it names a cluster node.
fn parse_one(py: Python<'_>, text: &str) -> PyResult<(ConnectionInfo, bool)> {
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err(bad_url(py, text, &format!("not a URL; use {SCHEMES}")));
    };
    let (url, cluster) = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "rediss" | "unix" | "redis+unix" => (text.to_string(), false),
        "redis+cluster" => (format!("redis://{rest}"), true),
        "rediss+cluster" => (format!("rediss://{rest}"), true),
        other => {
            return Err(bad_url(
                py,
                text,
                &format!("the scheme {other}:// is not Redis'; use {SCHEMES}"),
            ));
        }
    };
    if let Some(reason) = bad_authority(&url) {
        return Err(bad_url(py, text, &reason));
    }
    let info = url
        .as_str()
        .into_connection_info()
        .map_err(|e| bad_url(py, text, &e.to_string()))?;
    if cluster && matches!(info.addr(), ConnectionAddr::Unix(_)) {
        return Err(bad_url(py, text, "a cluster node is host:port"));
    }
    Ok((info, cluster))
}

/// What is wrong with a TCP URL's host and port, said plainly (the
/// `redis` crate's own message is "did not parse").
fn bad_authority(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.contains("unix") {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host_port = rest[..end]
        .rsplit_once('@')
        .map_or(&rest[..end], |(_, h)| h);
    let (host, port) = match host_port.strip_prefix('[') {
        // An IPv6 address: [::1] or [::1]:port.
        Some(v6) => match v6.split_once(']') {
            Some((h, tail)) => (h, tail.strip_prefix(':')),
            None => return Some("an IPv6 address needs its closing ]".to_string()),
        },
        None => match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return Some("no host: use redis://host:port/db".to_string());
    }
    match port {
        Some(p) if !matches!(p.parse::<u32>(), Ok(1..=65535)) => {
            Some(format!("port {p:?} is not a number from 1 to 65535"))
        }
        _ => None,
    }
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// Reads what `rb.redis` was given in place of a client: a URL, or a list
/// (tuple) of cluster nodes' URLs; `ca_file`: a PEM file of the CA(s) a
/// `rediss://` server's certificate must chain to (default: the system's
/// roots).
pub(crate) fn parse(
    py: Python<'_>,
    obj: &Bound<'_, PyAny>,
    ca_file: Option<&str>,
) -> PyResult<Target> {
    let texts: Vec<String> = if let Ok(s) = obj.cast::<PyString>() {
        vec![s.extract::<String>()?]
    } else if is_target(obj) {
        obj.try_iter()?
            .map(|x| x.and_then(|x| x.extract::<String>()))
            .collect::<PyResult<_>>()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "a Redis target must be a URL (str) or a list of cluster nodes' URLs, got {}",
            type_name(obj)
        )));
    };
    if texts.is_empty() {
        return Err(config_error(
            py,
            "invalid url []: a list of cluster nodes needs at least one URL".to_string(),
        ));
    }
    let mut infos = Vec::with_capacity(texts.len());
    // A list names a cluster's nodes, even a list of one.
    let mut cluster = !obj.is_instance_of::<PyString>();
    for t in &texts {
        let (info, c) = parse_one(py, t)?;
        cluster |= c;
        // One small command after another: no Nagle delay.
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        infos.push(info.set_tcp_settings(tcp));
    }
    let shown = if texts.len() == 1 {
        redacted(&texts[0])
    } else {
        format!(
            "[{}]",
            texts
                .iter()
                .map(|t| format!("{:?}", redacted(t)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let tls = infos.iter().any(is_tls);
    if tls && !infos.iter().all(is_tls) {
        return Err(config_error(
            py,
            format!("invalid url {shown}: every node is rediss:// or none is"),
        ));
    }
    let certs = match ca_file {
        None => None,
        Some(path) => {
            if !tls {
                return Err(config_error(
                    py,
                    format!(
                        "invalid ssl_ca_certs {path:?}: a CA file is for a rediss:// URL, got {shown}"
                    ),
                ));
            }
            let pem = std::fs::read(path)
                .map_err(|e| config_error(py, format!("invalid ssl_ca_certs {path:?}: {e}")))?;
            Some(TlsCertificates {
                client_tls: None,
                root_cert: Some(pem),
            })
        }
    };
    if tls {
        // The one crypto provider this build has (ring); installed once for
        // the process (an error: one is installed already).
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let client_of = |info: ConnectionInfo| -> PyResult<redis::Client> {
        match &certs {
            None => redis::Client::open(info),
            Some(c) => redis::Client::build_with_tls(info, c.clone()),
        }
        .map_err(|e| config_error(py, format!("invalid url {shown}: {e}")))
    };
    let id = format!("{texts:?} ca={ca_file:?}");
    let kind = if cluster {
        let mut builder = ClusterClient::builder(infos.clone())
            .connection_timeout(CONNECT_TIMEOUT)
            .tcp_settings(infos[0].tcp_settings().clone())
            .retries(2);
        if let Some(c) = &certs {
            builder = builder.certs(c.clone());
        }
        let client = builder
            .build()
            .map_err(|e| config_error(py, format!("invalid url {shown}: {e}")))?;
        let nodes = infos
            .into_iter()
            .map(client_of)
            .collect::<PyResult<Vec<_>>>()?;
        Kind::Cluster { client, nodes }
    } else {
        let info = infos.pop().expect("one URL");
        Kind::Single(client_of(info)?)
    };
    Ok(Target { shown, id, kind })
}
