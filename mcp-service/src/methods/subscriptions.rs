//! Change notifications for both eras.
//!
//! - Legacy: `resources/subscribe`/`unsubscribe` record interest on the session; list
//!   changes go to every session's open stream (GET stream on HTTP, stdout on stdio), and
//!   `notifications/resources/updated` to the sessions subscribed to that URI.
//! - 2026-07-28: `subscriptions/listen` opens a stream that first acknowledges the filter the
//!   server honours, then carries only the requested notifications, each tagged with the
//!   subscription id; it ends with a result when the server shuts down.

use std::sync::Arc;

use mcp_proto::vocab::meta;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::catalog::{CatalogEvent, CatalogView};
use crate::dispatch::Engine;
use crate::error::Error;
use crate::request::Request;

pub fn subscribe(req: &Request<'_>, on: bool) -> Result<Value, Error> {
    let uri = req.required_str("uri")?;
    if let Some(session) = &req.ctx.session
        && let Ok(mut subs) = session.subscriptions.lock()
    {
        if on {
            subs.insert(uri.to_owned());
        } else {
            subs.remove(uri);
        }
    }
    Ok(json!({}))
}

/// The notifications one catalog event becomes, as (method, params, resource URI if any).
fn notifications(event: &CatalogEvent) -> Vec<(&'static str, Value, Option<&str>)> {
    match event {
        CatalogEvent::ListsChanged { tools, resources, prompts } => {
            let mut out = Vec::new();
            if *tools {
                out.push(("notifications/tools/list_changed", json!({}), None));
            }
            if *resources {
                out.push(("notifications/resources/list_changed", json!({}), None));
            }
            if *prompts {
                out.push(("notifications/prompts/list_changed", json!({}), None));
            }
            out
        }
        CatalogEvent::ResourceUpdated(uri) => {
            vec![("notifications/resources/updated", json!({ "uri": uri }), Some(uri.as_str()))]
        }
    }
}

/// Legacy fan-out: every catalog event to every session that can receive it.
pub async fn notify_sessions(engine: Arc<Engine>) {
    let mut events = engine.catalog.events();
    loop {
        let event = tokio::select! {
            _ = engine.shutdown.cancelled() => return,
            e = events.recv() => match e {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        for (method, params, uri) in notifications(&event) {
            let json = mcp_proto::jsonrpc::notification(method, &params);
            for session in engine.sessions.all() {
                if uri.is_none_or(|u| session.is_subscribed(u)) {
                    session.send(json.clone());
                }
            }
        }
    }
}

/// Which notifications a listen request asked for, keeping only those we serve.
fn honoured(requested: Option<&Value>) -> Result<Map<String, Value>, Error> {
    let requested = match requested {
        None | Some(Value::Null) => return Ok(Map::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err(Error::InvalidParams("`notifications` must be an object".into())),
    };
    let mut out = Map::new();
    for key in ["toolsListChanged", "promptsListChanged", "resourcesListChanged"] {
        match requested.get(key) {
            None | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => {
                out.insert(key.into(), json!(true));
            }
            Some(_) => return Err(Error::InvalidParams(format!("`notifications.{key}` must be a boolean"))),
        }
    }
    match requested.get("resourceSubscriptions") {
        None | Some(Value::Null) => {}
        Some(Value::Array(uris)) if uris.iter().all(Value::is_string) => {
            if !uris.is_empty() {
                out.insert("resourceSubscriptions".into(), Value::Array(uris.clone()));
            }
        }
        Some(_) => {
            return Err(Error::InvalidParams("`notifications.resourceSubscriptions` must be an array of URIs".into()));
        }
    }
    Ok(out)
}

fn wanted(filter: &Map<String, Value>, method: &str, uri: Option<&str>) -> bool {
    let flag = |k: &str| filter.get(k) == Some(&Value::Bool(true));
    match method {
        "notifications/tools/list_changed" => flag("toolsListChanged"),
        "notifications/prompts/list_changed" => flag("promptsListChanged"),
        "notifications/resources/list_changed" => flag("resourcesListChanged"),
        "notifications/resources/updated" => filter
            .get("resourceSubscriptions")
            .and_then(Value::as_array)
            .is_some_and(|subs| uri.is_some_and(|u| subs.iter().any(|s| s.as_str() == Some(u)))),
        _ => false,
    }
}

/// `subscriptions/listen`: acknowledge, then stream the requested notifications until the
/// client leaves (the stream closes) or the server shuts down (a final result).
pub async fn listen(engine: &Engine, req: &Request<'_>, _catalog: &CatalogView) -> Result<Value, Error> {
    let filter = honoured(req.params.get("notifications"))?;
    let subscription_id: Value = req.id.and_then(|id| serde_json::from_str(id).ok()).unwrap_or(Value::Null);
    let tag = |mut params: Value| {
        if let Some(p) = params.as_object_mut() {
            let meta = p.entry("_meta").or_insert_with(|| json!({}));
            meta[meta::SUBSCRIPTION_ID] = subscription_id.clone();
        }
        params
    };
    // Subscribe before acknowledging, so nothing that happens after the acknowledgement is missed.
    let mut events = engine.catalog.events();
    req.notify(
        "notifications/subscriptions/acknowledged",
        tag(json!({ "notifications": Value::Object(filter.clone()) })),
    )
    .await;
    loop {
        let event = tokio::select! {
            _ = engine.shutdown.cancelled() => break,
            _ = req.sink.closed() => return Err(Error::Cancelled),
            e = events.recv() => match e {
                Ok(e) => e,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break,
            },
        };
        for (method, params, uri) in notifications(&event) {
            if wanted(&filter, method, uri) {
                req.notify(method, tag(params)).await;
            }
        }
    }
    Ok(json!({ "_meta": { meta::SUBSCRIPTION_ID: subscription_id } }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_keeps_what_was_asked() {
        let f = honoured(Some(&json!({"toolsListChanged": true, "promptsListChanged": false,
                                      "resourceSubscriptions": ["a://1"], "unknownThing": true})))
        .expect("valid");
        assert!(wanted(&f, "notifications/tools/list_changed", None));
        assert!(!wanted(&f, "notifications/prompts/list_changed", None));
        assert!(wanted(&f, "notifications/resources/updated", Some("a://1")));
        assert!(!wanted(&f, "notifications/resources/updated", Some("a://2")));
        assert!(honoured(Some(&json!({"toolsListChanged": "yes"}))).is_err());
    }
}
