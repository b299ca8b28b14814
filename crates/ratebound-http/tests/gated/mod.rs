//! A response body that sends one frame once its gate opens (the sender is
//! dropped or sent to), for the tests that hold a streaming response open:
//! shared by http.rs and remote.rs.

use bytes::Bytes;

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
