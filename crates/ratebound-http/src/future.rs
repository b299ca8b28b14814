//! The response future and body that hold a request's concurrency place
//! until the response body is done (or dropped).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Response, StatusCode};
use ratebound::any::Place;

use crate::layer::{QuotaFields, insert_taken};

pin_project_lite::pin_project! {
    /// The response future of [`RateLimit`]: a refusal made at once, or the
    /// inner service's response with the quota fields added (the
    /// concurrency place passes to its body, or is given back if the future
    /// is dropped or fails). Not boxed.
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F> {
        Ready { response: Option<Response<Bytes>> },
        Inner {
            #[pin]
            future: F,
            place: Option<Place>,
            quota: QuotaFields,
        },
    }
}

impl<F> ResponseFuture<F> {
    fn new(state: State<F>) -> Self {
        ResponseFuture { state }
    }

    pub(crate) fn ready(response: Response<Bytes>) -> Self {
        ResponseFuture::new(State::Ready {
            response: Some(response),
        })
    }

    pub(crate) fn inner(future: F, place: Option<Place>, quota: QuotaFields) -> Self {
        ResponseFuture::new(State::Inner {
            future,
            place,
            quota,
        })
    }
}

/// An empty 500, for a future polled again after it completed.
fn spent() -> Response<Bytes> {
    let mut r = Response::new(Bytes::new());
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            // Polled again after completion: an empty 500 rather than a panic.
            StateProj::Ready { response } => {
                let response = response.take().unwrap_or_else(spent);
                Poll::Ready(Ok(response.map(ResponseBody::refusal)))
            }
            StateProj::Inner {
                future,
                place,
                quota,
            } => {
                let result = std::task::ready!(future.poll(cx));
                // The place goes with the body: a request is in flight until
                // its response has been sent (an error gives it back now).
                let place = place.take();
                Poll::Ready(result.map(|mut response| {
                    insert_taken(response.headers_mut(), quota);
                    response.map(|body| ResponseBody::inner(body, place))
                }))
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// The body of a [`RateLimit`] response: the inner service's body, or
    /// the layer's own refusal (empty for a gRPC refusal, which is all
    /// headers). Works with any inner body whose data is [`Bytes`] — axum's,
    /// hyper's, tonic's. Under a [concurrency
    /// limit](Builder::concurrency_limit) it holds the request's place until
    /// its last frame has been read, or it is dropped: a streaming response
    /// is in flight until it ends.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B, place: Option<Place> },
        Refusal { data: Option<Bytes> },
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B, place: Option<Place>) -> Self {
        ResponseBody {
            kind: Kind::Inner { body, place },
        }
    }

    pub(crate) fn refusal(data: Bytes) -> Self {
        ResponseBody {
            kind: Kind::Refusal {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

impl<B: http_body::Body<Data = Bytes>> http_body::Body for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body, place } => {
                let frame = std::task::ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The end, or an error: the response is over.
                    drop(place.take());
                }
                Poll::Ready(frame)
            }
            KindProj::Refusal { data } => {
                Poll::Ready(data.take().map(|d| Ok(http_body::Frame::data(d))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Refusal { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Refusal { data } => {
                http_body::SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}
