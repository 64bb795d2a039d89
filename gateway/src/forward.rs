//! Forward a JSON-RPC body to mcp-service over gRPC and turn its frames into an HTTP reply:
//! one JSON body when the first frame is final, an SSE stream when interim messages (progress,
//! logs) come first and the client accepts one.

use std::convert::Infallible;

use axum::body::Body;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use http::{HeaderValue, StatusCode, header};
use mcp_proto::mcp::{self as pb, Disposition, mcp_service_client::McpServiceClient};
use mcp_proto::transport::GrpcChannel;
use mcp_proto::vocab::ErrorCode;

use crate::headers::Accepts;

/// The HTTP status of a final frame.
pub fn status_of(d: Disposition) -> StatusCode {
    match d {
        Disposition::Rejected => StatusCode::BAD_REQUEST,
        Disposition::UnknownMethod | Disposition::SessionNotFound => StatusCode::NOT_FOUND,
        Disposition::InsufficientScope => StatusCode::FORBIDDEN,
        Disposition::Accepted => StatusCode::ACCEPTED,
        Disposition::Reply | Disposition::Interim | Disposition::Unspecified => StatusCode::OK,
    }
}

pub use mcp_proto::trust::outgoing as traced;

/// Room for this many headers in an answer's header map. hyper empties an answer's map once
/// it has written it and parses the connection's next request into it, making its table and
/// entries again (two allocations, two frees) when that request has more headers than the map
/// has room for: one made for the answer's few headers has room for six, fewer than a
/// signed-in client, or an SDK's, sends (about 300 instructions a request). Answers made
/// elsewhere (event streams, the edge's refusals) keep the default.
pub const ANSWER_HEADERS: usize = 12;

/// An answer with `body`, its header map made with room for [`ANSWER_HEADERS`].
pub fn answer(body: Body) -> Response {
    let mut resp = Response::new(body);
    *resp.headers_mut() = http::HeaderMap::with_capacity(ANSWER_HEADERS);
    resp
}

/// A JSON-RPC error produced at the edge.
pub fn rpc_error(status: StatusCode, id: Option<&str>, code: ErrorCode, message: &str) -> Response {
    json_response(status, mcp_proto::jsonrpc::error(id, code, message, None))
}

pub fn json_response(status: StatusCode, json: impl Into<Body>) -> Response {
    let mut resp = answer(json.into());
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

fn final_response(frame: pb::McpFrame) -> Response {
    let disposition = frame.disposition();
    let mut resp = if disposition == Disposition::Accepted {
        let mut r = answer(Body::empty());
        *r.status_mut() = StatusCode::ACCEPTED;
        r
    } else {
        let scopes = (disposition == Disposition::InsufficientScope).then(|| required_scopes(&frame.json));
        let mut r = json_response(status_of(disposition), frame.json.clone());
        if let Some(scopes) = scopes {
            r.extensions_mut().insert(RequiredScopes(scopes));
        }
        if let Some(hint) = frame.cache.filter(|_| disposition == Disposition::Reply) {
            r.extensions_mut().insert(crate::cache::Reusable {
                ttl_ms: hint.ttl_ms,
                fingerprint: hint.catalog_fingerprint,
                tag: hint.tag,
                unchanged: hint.unchanged,
                session_revision: hint.session_revision,
                session_expires: hint.session_expires,
                json: frame.json,
            });
        }
        r
    };
    if let Ok(v) = HeaderValue::from_str(&frame.session_id)
        && !frame.session_id.is_empty()
    {
        resp.headers_mut().insert(crate::headers::SESSION_ID, v);
    }
    resp
}

/// On a 403 reply: the scopes the request needed, for the `insufficient_scope` challenge.
#[derive(Clone, Debug)]
pub struct RequiredScopes(pub Vec<String>);

fn required_scopes(json: &[u8]) -> Vec<String> {
    serde_json::from_slice::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.pointer("/error/data/requiredScopes").cloned())
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

fn sse_event(json: &[u8]) -> Result<Event, Infallible> {
    Ok(Event::default().event("message").data(String::from_utf8_lossy(json)))
}

/// The final event of a stream. An `unchanged` reply carries no JSON of its own; mcp-service
/// sends none after interim messages (only reads of named contents are `unchanged`, and they
/// send nothing before their reply), but if one came it would end the stream with an error.
fn final_event(frame: &pb::McpFrame, error_id: Option<&str>) -> Result<Event, Infallible> {
    if frame.cache.as_ref().is_some_and(|c| c.unchanged) {
        tracing::warn!("mcp-service answered `unchanged` after interim messages");
        let json = mcp_proto::jsonrpc::error(
            error_id,
            ErrorCode::INTERNAL_ERROR,
            "Internal error: upstream answered without a result",
            None,
        );
        return sse_event(&json);
    }
    sse_event(&frame.json)
}

/// Send `request` to mcp-service and build the reply. `id` is echoed in edge-made errors.
pub async fn forward(channel: GrpcChannel, request: pb::McpRequest, accepts: Accepts, id: Option<String>) -> Response {
    let unavailable = |status: tonic::Status| {
        tracing::warn!(code = ?status.code(), error = %status.message(), "mcp-service call failed");
        rpc_error(
            StatusCode::BAD_GATEWAY,
            id.as_deref(),
            ErrorCode::INTERNAL_ERROR,
            "Internal error: upstream unavailable",
        )
    };
    let session = request.session_id.clone();
    let mut request = traced(request);
    if !session.is_empty() {
        // A legacy session's requests go to one mcp-service replica (its streams and the
        // answers it awaits live there).
        mcp_proto::balance::set_affinity(&mut request, session);
    }
    let mut frames = match mcp_proto::call::handle(channel, request).await {
        Ok(frames) => frames,
        Err(status) => return unavailable(status),
    };
    let first = match frames.message().await {
        Ok(Some(f)) => f,
        Ok(None) => return unavailable(tonic::Status::internal("no reply")),
        Err(status) => return unavailable(status),
    };
    let streaming = first.disposition() == Disposition::Interim;
    if !streaming
        && (accepts.json || matches!(first.disposition(), Disposition::Accepted | Disposition::InsufficientScope))
    {
        frames.finish().await;
        return final_response(first);
    }
    if !accepts.stream {
        // The client takes only JSON: drop interim messages and answer with the final one.
        let mut last = first;
        while last.disposition() == Disposition::Interim {
            last = match frames.message().await {
                Ok(Some(f)) => f,
                Ok(None) => return unavailable(tonic::Status::internal("stream ended early")),
                Err(status) => return unavailable(status),
            };
        }
        frames.finish().await;
        return final_response(last);
    }
    // SSE: the interim messages, then the reply; the stream ends after the reply.
    let error_id = id.clone();
    let events = stream::unfold((Some(first), Some(frames)), move |(pending, frames)| {
        let error_id = error_id.clone();
        async move {
            if let Some(frame) = pending {
                if frame.disposition() != Disposition::Interim {
                    if let Some(frames) = frames {
                        frames.finish().await;
                    }
                    return Some((final_event(&frame, error_id.as_deref()), (None, None)));
                }
                return Some((sse_event(&frame.json), (None, frames)));
            }
            let mut frames = frames?;
            match frames.message().await {
                Ok(Some(frame)) => {
                    if frame.disposition() == Disposition::Interim {
                        return Some((sse_event(&frame.json), (None, Some(frames))));
                    }
                    frames.finish().await;
                    Some((final_event(&frame, error_id.as_deref()), (None, None)))
                }
                Ok(None) => None,
                Err(status) => {
                    tracing::warn!(error = %status.message(), "mcp-service stream failed");
                    let json = mcp_proto::jsonrpc::error(
                        error_id.as_deref(),
                        ErrorCode::INTERNAL_ERROR,
                        "Internal error: upstream stream failed",
                        None,
                    );
                    Some((sse_event(&json), (None, None)))
                }
            }
        }
    });
    let mut resp = Sse::new(events).keep_alive(KeepAlive::default()).into_response();
    resp.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A legacy session's standalone stream as SSE, until either side leaves.
pub async fn listen(mut client: McpServiceClient<GrpcChannel>, request: pb::ListenRequest) -> Response {
    let session = request.session_id.clone();
    let mut request = traced(request);
    mcp_proto::balance::set_affinity(&mut request, session);
    let frames = match client.listen(request).await {
        Ok(r) => r.into_inner(),
        Err(status) if status.code() == tonic::Code::NotFound => {
            return rpc_error(StatusCode::NOT_FOUND, None, ErrorCode(-32001), "Session not found");
        }
        Err(status) => {
            tracing::warn!(error = %status.message(), "mcp-service listen failed");
            return rpc_error(
                StatusCode::BAD_GATEWAY,
                None,
                ErrorCode::INTERNAL_ERROR,
                "Internal error: upstream unavailable",
            );
        }
    };
    let events = stream::unfold(frames, |mut frames| async move {
        match frames.message().await {
            Ok(Some(frame)) => Some((sse_event(&frame.json), frames)),
            _ => None,
        }
    });
    let mut resp = Sse::new(events).keep_alive(KeepAlive::default()).into_response();
    resp.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What hyper does with an answer's header map once written: empties it and parses the
    /// next request's headers into it. Whether the map had to grow for `headers` of them.
    fn grows_for(mut map: http::HeaderMap, headers: usize) -> bool {
        map.clear();
        let room = map.capacity();
        map.reserve(headers);
        for i in 0..headers {
            map.append(
                http::HeaderName::try_from(format!("x-header-{i}")).expect("a name"),
                HeaderValue::from_static("v"),
            );
        }
        map.capacity() != room
    }

    #[test]
    fn an_answers_header_map_has_room_for_a_signed_in_clients_request() {
        for resp in
            [json_response(StatusCode::OK, "{}"), rpc_error(StatusCode::BAD_REQUEST, None, ErrorCode::PARSE_ERROR, "x")]
        {
            assert!(resp.headers().capacity() >= ANSWER_HEADERS);
            assert!(!grows_for(resp.into_parts().0.headers, ANSWER_HEADERS));
        }
        // A map made as it comes (the answer's one header) grows for a seventh.
        let plain = || {
            let mut map = http::HeaderMap::new();
            map.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            map
        };
        assert!(!grows_for(plain(), 6));
        assert!(grows_for(plain(), 7));
    }
}
