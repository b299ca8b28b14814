//! A response body that sends one frame once its gate opens (the sender is
//! dropped or sent to), for the tests that hold a streaming response open:
//! shared by http.rs and remote.rs.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::get;
use bytes::Bytes;
use ratebound_http::RateLimitLayer;

/// The senders of the bodies handed out so far, the latest last.
pub type Gates = Arc<Mutex<Vec<tokio::sync::oneshot::Sender<()>>>>;

/// An app under `layer` whose `path` answers with a [`Gated`] body, its
/// sender pushed to the gates returned.
pub fn gated_app(path: &str, layer: RateLimitLayer) -> (Router, Gates) {
    let gates = Gates::default();
    let g = gates.clone();
    let app = Router::new()
        .route(
            path,
            get(move || {
                let (tx, rx) = tokio::sync::oneshot::channel();
                g.lock().unwrap().push(tx);
                async move { axum::body::Body::new(Gated(Some(rx))) }
            }),
        )
        .layer(layer);
    (app, gates)
}

pub struct Gated(pub Option<tokio::sync::oneshot::Receiver<()>>);

impl http_body::Body for Gated {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::future::Future;
        let Some(rx) = self.0.as_mut() else {
            return std::task::Poll::Ready(None);
        };
        let _ = std::task::ready!(std::pin::Pin::new(rx).poll(cx));
        self.0 = None;
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(Bytes::from_static(
            b"done",
        )))))
    }
}
