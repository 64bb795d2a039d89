//! Every request's first stop: its request id, and CORS.
//!
//! The request id (`X-Request-Id`) is kept when the client sent one and made (a UUID)
//! otherwise; the request carries it on, and the answer echoes it unless it has one of its own.
//! A made id travels as an extension of the request ([`MadeRequestId`]; either is read with
//! [`request_id`]), not in its headers: hyper fills the request's header map to the capacity
//! of the map it reuses (the last answer's), so one header more made it grow (a rehash and a
//! reallocation, about 1 100 instructions a request); the extensions' map has room.
//!
//! CORS is tower-http's layer. As [`crate::app::cors`] sets it up (origins by a predicate, no
//! credentials, no private-network access), what it adds to the answer of a request that is
//! neither a preflight (`OPTIONS`) nor sent by a browser (no `Origin`) does not depend on the
//! request (`Vary`, and the exposed headers), so it is learnt from the layer once, by answering
//! such a request through it at start, and added to those answers directly: the layer's
//! per-request work (a header map built in five steps, then merged into the answer) is spent
//! only on the requests it can grant something to. (Private-network access would add a header
//! to some requests without `Origin`: the tests send that request too, so such a setting would
//! fail them rather than go unnoticed.)
//!
//! `Front` answers ready without asking the service it wraps, and calls a clone of it (or of the
//! CORS layer around it): the service must be always ready and keep no state between calls,
//! as the gateway's `Edge` is and does.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::response::Response;
use futures_util::FutureExt as _;
use http::{HeaderMap, HeaderValue, Method, header};
use tower::{Layer as _, Service, ServiceExt as _};
use tower_http::cors::{Cors, CorsLayer};

use crate::app::REQUEST_ID;

/// The service every request enters, around `S` (the rest of the stack).
#[derive(Clone)]
pub struct Front<S> {
    inner: S,
    cors: Cors<S>,
    /// What CORS adds to a request without `Origin` that is not a preflight (`None`: it could
    /// not be learnt, and every request goes through the layer).
    plain_cors: Option<Arc<HeaderMap>>,
}

impl<S: Clone> Front<S> {
    pub fn new(cors: CorsLayer, inner: S) -> Self {
        Self { plain_cors: plain_cors(&cors).map(Arc::new), cors: cors.layer(inner.clone()), inner }
    }
}

/// What `cors` adds to the answer of a `GET` without `Origin`: what it adds to every request
/// that is neither a preflight nor from a browser.
fn plain_cors(cors: &CorsLayer) -> Option<HeaderMap> {
    let bare = tower::service_fn(|_: Request| {
        std::future::ready(Ok::<_, Infallible>(Response::new(axum::body::Body::empty())))
    });
    let probe = Request::get("/").body(axum::body::Body::empty()).ok()?;
    let answer = cors.layer(bare).oneshot(probe).now_or_never()?.ok()?;
    Some(answer.into_parts().0.headers)
}

/// The id made for a request that came without one (see the module's introduction).
#[derive(Clone, Debug)]
pub struct MadeRequestId(pub HeaderValue);

/// A request's id: the client's `X-Request-Id`, else the one made for it (`made`, from the
/// request's extensions).
pub fn request_id<'a>(headers: &'a HeaderMap, made: Option<&'a MadeRequestId>) -> Option<&'a HeaderValue> {
    headers.get(&REQUEST_ID).or(made.map(|made| &made.0))
}

/// A new request id: a random (version 4) UUID.
fn new_request_id() -> Option<HeaderValue> {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    HeaderValue::from_bytes(uuid::Uuid::new_v4().hyphenated().encode_lower(&mut text).as_bytes()).ok()
}

impl<S> Service<Request> for Front<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone,
    S::Future: Unpin,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answer<S::Future>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // The service wrapped is always ready (the module's rule; the router answers every
        // call).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let request_id = match req.headers().get(&REQUEST_ID) {
            Some(id) => Some(id.clone()),
            None => {
                let id = new_request_id();
                if let Some(id) = &id {
                    req.extensions_mut().insert(MadeRequestId(id.clone()));
                }
                id
            }
        };
        let plain = (req.method() != Method::OPTIONS && !req.headers().contains_key(header::ORIGIN))
            .then(|| self.plain_cors.clone())
            .flatten();
        let kind = match plain {
            Some(added) => Kind::Plain(self.inner.call(req), added),
            None => Kind::Cors(self.cors.call(req)),
        };
        Answer { kind, request_id }
    }
}

/// The answer to come from [`Front`].
pub struct Answer<F> {
    kind: Kind<F>,
    /// The request's id, for an answer without one of its own.
    request_id: Option<HeaderValue>,
}

enum Kind<F> {
    /// Past the CORS layer, with what it would have added.
    Plain(F, Arc<HeaderMap>),
    Cors(tower_http::cors::ResponseFuture<F>),
}

impl<F: Future<Output = Result<Response, Infallible>> + Unpin> Future for Answer<F> {
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Ok(mut resp) = std::task::ready!(match &mut self.kind {
            Kind::Plain(inner, _) => Pin::new(inner).poll(cx),
            Kind::Cors(inner) => Pin::new(inner).poll(cx),
        });
        if let Kind::Plain(_, added) = &self.kind {
            let headers = resp.headers_mut();
            for (name, value) in added.iter() {
                // As the layer does: `Vary` joins the answer's own, the others replace theirs.
                if name == header::VARY {
                    headers.append(name, value.clone());
                } else {
                    headers.insert(name, value.clone());
                }
            }
        }
        if let Some(id) = self.request_id.take()
            && !resp.headers().contains_key(&REQUEST_ID)
        {
            resp.headers_mut().insert(REQUEST_ID, id);
        }
        Poll::Ready(Ok(resp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: http::HeaderName = REQUEST_ID;

    /// An answer with a `Vary` and an exposed-headers list of its own, echoing the request's id
    /// in `seen-id`.
    fn inner() -> impl Service<Request, Response = Response, Error = Infallible, Future: Unpin> + Clone {
        tower::service_fn(|req: Request| {
            let mut resp = Response::new(axum::body::Body::empty());
            resp.headers_mut().insert(header::VARY, HeaderValue::from_static("accept-encoding"));
            resp.headers_mut().insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static("x-own"));
            if let Some(id) = request_id(req.headers(), req.extensions().get()) {
                resp.headers_mut().insert("seen-id", id.clone());
            }
            // A made id travels beside the headers, not among them.
            if req.headers().contains_key(&ID) {
                resp.headers_mut().insert("id-in-headers", HeaderValue::from_static("yes"));
            }
            std::future::ready(Ok(resp))
        })
    }

    fn cors() -> CorsLayer {
        crate::app::cors(crate::headers::OriginPolicy { loopback_only: true, ..Default::default() })
    }

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut req = Request::builder().method(method).uri("/mcp");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        req.body(axum::body::Body::empty()).expect("request")
    }

    async fn answer(svc: impl Service<Request, Response = Response, Error = Infallible>, req: Request) -> Response {
        let Ok(resp) = svc.oneshot(req).await;
        resp
    }

    /// Every header of `resp` in order, values as text.
    fn all(resp: &Response) -> Vec<(String, String)> {
        resp.headers().iter().map(|(n, v)| (n.to_string(), v.to_str().expect("text").to_owned())).collect()
    }

    #[tokio::test]
    async fn a_request_without_origin_gets_what_the_cors_layer_gives_it() {
        assert!(plain_cors(&cors()).is_some_and(|h| h.contains_key(header::VARY)), "learnt at start");
        for method in [Method::GET, Method::POST, Method::DELETE, Method::PUT] {
            let front = Front::new(cors(), inner());
            let through_layer = cors().layer(inner());
            // A private-network request is one the layer would answer differently if it were
            // set up to allow such access.
            let asks = ("access-control-request-private-network", "true");
            let ours = answer(front, request(method.clone(), &[("x-request-id", "r-1"), asks])).await;
            let theirs = answer(through_layer, request(method.clone(), &[asks])).await;
            let mut ours = all(&ours);
            // The request id's echo is ours alone; the rest is the layer's answer.
            assert_eq!(ours.iter().filter(|(n, v)| n == "seen-id" && v == "r-1").count(), 1, "{method}");
            ours.retain(|(n, _)| !["seen-id", "id-in-headers", "x-request-id"].contains(&n.as_str()));
            assert_eq!(ours, all(&theirs), "{method}");
        }
        // With an origin, and a preflight, the layer answers (its grant, its preflight).
        let origin = ("origin", "http://localhost:3000");
        let front = Front::new(cors(), inner());
        let granted = answer(front.clone(), request(Method::POST, &[origin])).await;
        assert_eq!(granted.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN], "http://localhost:3000");
        let preflight =
            answer(front, request(Method::OPTIONS, &[origin, ("access-control-request-method", "POST")])).await;
        assert_eq!(preflight.headers()[header::ACCESS_CONTROL_MAX_AGE], "3600");
        assert!(preflight.headers().get("seen-id").is_none(), "the layer answered it");
        // A preflight without an origin is the layer's too (its answer, without a grant).
        let front = Front::new(cors(), inner());
        let bare = answer(front, request(Method::OPTIONS, &[("access-control-request-method", "POST")])).await;
        assert!(bare.headers().get("seen-id").is_none(), "the layer answered it");
        assert_eq!(bare.headers()[header::ACCESS_CONTROL_MAX_AGE], "3600");
        assert!(bare.headers().get(header::ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
        assert!(bare.headers().contains_key(&ID), "with its request id");
    }

    #[tokio::test]
    async fn the_request_id_is_kept_or_made_and_echoed() {
        let front = Front::new(cors(), inner());
        let kept = answer(front.clone(), request(Method::POST, &[("x-request-id", "mine")])).await;
        assert_eq!(kept.headers()["seen-id"], "mine");
        assert_eq!(kept.headers()[&ID], "mine");
        let made = answer(front.clone(), request(Method::POST, &[])).await;
        let id = made.headers()[&ID].to_str().expect("text");
        assert_eq!(made.headers()["seen-id"], id, "the request carries the id it is answered with");
        assert!(made.headers().get("id-in-headers").is_none(), "a made id is not put among the headers");
        assert!(kept.headers().get("id-in-headers").is_some(), "the client's is there");
        assert!(uuid::Uuid::parse_str(id).is_ok_and(|u| u.get_version_num() == 4), "{id}");
        let again = answer(front.clone(), request(Method::POST, &[])).await;
        assert_ne!(again.headers()[&ID], id, "a new id per request");
        // An answer that names its own id keeps it.
        let own = tower::service_fn(|_: Request| {
            let mut resp = Response::new(axum::body::Body::empty());
            resp.headers_mut().insert(ID, HeaderValue::from_static("the-answer's"));
            std::future::ready(Ok::<_, Infallible>(resp))
        });
        let resp = answer(Front::new(cors(), own), request(Method::GET, &[("x-request-id", "mine")])).await;
        assert_eq!(resp.headers().get_all(&ID).iter().collect::<Vec<_>>(), ["the-answer's"]);
    }
}
