//! The bare hyper reference: read the body, parse it as JSON-RPC, answer the canned
//! `tools/list` result with the request's id. Whatever the method: it only stands in for
//! `tools/list`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::value::RawValue;

use crate::catalog;

#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    method: &'a str,
}

#[derive(serde::Serialize)]
struct Reply<'a> {
    jsonrpc: &'static str,
    id: Option<&'a RawValue>,
    result: &'a RawValue,
}

/// The canned result: the five tools, as the platform lists them.
fn canned_list() -> anyhow::Result<Box<RawValue>> {
    let tools: Vec<serde_json::Value> = (0..catalog::REFERENCE_TOOLS)
        .map(|i| {
            serde_json::json!({
                "name": catalog::tool_name(i),
                "description": catalog::tool_description(i),
                "inputSchema": catalog::input_schema(),
            })
        })
        .collect();
    Ok(RawValue::from_string(serde_json::json!({ "tools": tools }).to_string())?)
}

pub async fn run() -> anyhow::Result<()> {
    let list: Arc<Box<RawValue>> = Arc::new(canned_list()?);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let list = list.clone();
        async move { Ok::<_, Infallible>(answer(req, &list).await) }
    });
    super::serve("bare-hyper", service).await
}

async fn answer(req: Request<Incoming>, list: &RawValue) -> Response<Full<Bytes>> {
    let Ok(body) = req.into_body().collect().await.map(|b| b.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let envelope = match serde_json::from_slice::<Envelope>(&body) {
        Ok(e) if !e.method.is_empty() => e,
        _ => return status(StatusCode::BAD_REQUEST),
    };
    let reply = Reply { jsonrpc: "2.0", id: envelope.id, result: list };
    match serde_json::to_vec(&reply) {
        Ok(bytes) => Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(bytes)))
            .unwrap_or_else(|_| status(StatusCode::INTERNAL_SERVER_ERROR)),
        Err(_) => status(StatusCode::INTERNAL_SERVER_ERROR),
    }
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = code;
    r
}
