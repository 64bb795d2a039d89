//! `tools/list` and `tools/call`.

use mcp_proto::registry as pb;
use serde_json::{Value, json};

use super::input::{self, Handled};
use crate::catalog::CatalogView;
use crate::dispatch::{Engine, Payload};
use crate::error::{Error, from_registry};
use crate::request::Request;
use crate::shape;

pub fn list(req: &Request<'_>, catalog: &CatalogView, page_size: usize) -> Result<Value, Error> {
    super::list_page(req, &catalog.tools, page_size, "tools", |def| shape::tool(def, req.revision, req.modern()))
}

pub(crate) async fn call(engine: &Engine, req: &Request<'_>, catalog: &CatalogView) -> Result<Payload, Error> {
    let name = req.required_str("name")?;
    mcp_proto::request_log::record([("mcp.tool", Some(name.to_owned().into()))]);
    // Clients may leave `arguments` out; that is `{}`.
    let no_arguments = Value::Object(serde_json::Map::new());
    let arguments = match req.params.get("arguments") {
        None | Some(Value::Null) => &no_arguments,
        Some(v @ Value::Object(_)) => v,
        Some(_) => return Err(Error::InvalidParams("`arguments` must be an object".into())),
    };
    let Some(tool) = catalog.tool(name) else {
        return Err(Error::UnknownTool(name.to_owned()));
    };
    let item = tool.item();
    // A tool the token does not reach: 403 with the scopes to ask for (step-up).
    if !req.permits(&item.scopes) {
        return Err(Error::InsufficientScope(item.scopes.clone()));
    }
    if req.modern() && req.ctx.transport == mcp_proto::mcp::Transport::StreamableHttp {
        check_param_headers(&item.def, arguments, &req.ctx.param_headers)?;
    }
    // Room for what a modern answer adds to the result (`dispatch::with_members`: a comma and
    // the members in place of nothing).
    let room = if req.modern() { catalog.modern_members().len() + 1 } else { 0 };
    // Arguments that do not fit the schema are the model's to correct: a tool execution error.
    if let Some(problems) = tool.argument_errors(arguments) {
        return Ok(text_result(&format!("Invalid arguments for tool {name}: {problems}"), true, room));
    }
    // A `text` tool is a template over the arguments: rendered from the snapshot, no hop.
    if let Some(rendered) = tool.render_text(arguments) {
        return Ok(match rendered {
            Ok(text) => text_result(&text, false, room),
            Err(e) => {
                tracing::warn!(error = %e, "tool failed");
                text_result("The tool failed to run.", true, room)
            }
        });
    }
    let progress_token = req.progress_token();
    let capabilities = serde_json::to_vec(&req.client_capabilities()).unwrap_or_default();
    let log_level = req.log_level().unwrap_or_default();
    // Boxed: the registry call's state would make every call's work (a `text` tool's too) as
    // large (`Engine::invoke`).
    let result = Box::pin(input::run(engine, req, name, arguments, |round| {
        let call = pb::CallToolRequest {
            name: name.to_owned(),
            arguments_json: serde_json::to_vec(arguments).unwrap_or_default(),
            caller: req.caller(),
            wants_progress: progress_token.is_some(),
            log_level: log_level.clone(),
            input_responses_json: round.responses_json(),
            state_json: round.state_json(),
            client_capabilities_json: capabilities.clone(),
        };
        one_round(engine, req, name, call, progress_token.as_ref())
    }))
    .await?
    .into_value();
    Ok(Payload::Tree(shape::call_result(result, req.revision, req.modern())))
}

/// A result of one text item, serialized as it is made (no tree, and not through
/// `shape::call_result`): the same in every revision.
/// `room`: bytes to leave free after it.
fn text_result(text: &str, is_error: bool, room: usize) -> Payload {
    // The members around the text, and its escapes mostly.
    let mut json = Vec::with_capacity(text.len() + 64 + room);
    json.extend_from_slice(br#"{"content":[{"type":"text","text":"#);
    // Writing a string into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut json, text);
    json.extend_from_slice(if is_error { br#"}],"isError":true}"# } else { br#"}],"isError":false}"# });
    Payload::Call { json, is_error }
}

/// Read a call's stream to its end (the registry ends it right after the last event): dropping
/// it unread resets the HTTP/2 stream, and too many resets close the connection with every call
/// on it.
async fn finish(mut events: tonic::Streaming<pb::ToolEvent>) {
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
        while let Ok(Some(_)) = events.message().await {}
    })
    .await;
}

/// One call to the registry: relay progress and log events, return what the tool produced.
async fn one_round(
    engine: &Engine,
    req: &Request<'_>,
    name: &str,
    call: pb::CallToolRequest,
    progress_token: Option<&Value>,
) -> Result<Handled, Error> {
    let unknown = || Error::UnknownTool(name.to_owned());
    let mut events = engine
        .registry
        .clone()
        .call_tool(mcp_proto::trust::outgoing(call))
        .await
        .map_err(|s| from_registry(s, unknown))?
        .into_inner();
    loop {
        // A client that went away cancelled the call: stop, which tells the tool too.
        let event = tokio::select! {
            _ = req.sink.closed() => return Err(Error::Cancelled),
            event = events.message() => event.map_err(|s| from_registry(s, unknown))?,
        };
        let Some(event) = event else { break };
        use pb::tool_event::Event;
        match event.event {
            Some(Event::Progress(p)) => {
                let Some(token) = progress_token else { continue };
                let mut params = json!({ "progressToken": token, "progress": mcp_proto::jsonrpc::number(p.progress) });
                if let Some(total) = p.total {
                    params["total"] = mcp_proto::jsonrpc::number(total);
                }
                if !p.message.is_empty() && shape::at_least(req.revision, "2025-03-26") {
                    params["message"] = json!(p.message);
                }
                req.notify("notifications/progress", params).await;
            }
            Some(Event::Log(l)) => {
                let data: Value = serde_json::from_slice(&l.data_json).unwrap_or(Value::Null);
                let mut params = json!({ "level": l.level, "data": data });
                if !l.logger.is_empty() {
                    params["logger"] = json!(l.logger);
                }
                req.notify("notifications/message", params).await;
            }
            Some(Event::ResultJson(bytes)) => {
                finish(events).await;
                return Ok(Handled::Complete(input::parse(&bytes)?));
            }
            Some(Event::InputRequired(i)) => {
                finish(events).await;
                return Ok(Handled::InputRequired {
                    requests: input::parse(&i.input_requests_json)?,
                    state: input::parse(&i.state_json)?,
                });
            }
            Some(Event::MissingCapabilitiesJson(caps)) => {
                finish(events).await;
                return Ok(Handled::MissingCapabilities(input::parse(&caps)?));
            }
            None => {}
        }
    }
    Err(Error::Internal(format!("tool `{name}` ended without a result")))
}

/// 2026-07-28 `x-mcp-header`: each argument the tool marks must arrive as an `Mcp-Param-{Name}`
/// header equal to the body value (after Base64-sentinel decoding; integers compared as
/// numbers, booleans as `true`/`false`). An argument that is absent or null needs no header.
pub fn check_param_headers(
    def: &Value,
    arguments: &Value,
    headers: &std::collections::HashMap<String, String>,
) -> Result<(), Error> {
    let Some(properties) = def.get("inputSchema").and_then(|s| s.get("properties")).and_then(Value::as_object) else {
        return Ok(());
    };
    for (param, schema) in properties {
        let Some(header) = schema.get("x-mcp-header").and_then(Value::as_str) else { continue };
        let value = match arguments.get(param) {
            None | Some(Value::Null) => continue,
            Some(v) => v,
        };
        let name = format!("Mcp-Param-{header}");
        let raw = headers
            .get(&header.to_ascii_lowercase())
            .ok_or_else(|| Error::HeaderMismatch(format!("missing {name} header for argument `{param}`")))?;
        let decoded = mcp_proto::header_codec::decode(raw.as_bytes())
            .map_err(|e| Error::HeaderMismatch(format!("{name} {e}")))?;
        let matches = match value {
            Value::String(s) => decoded == *s,
            Value::Bool(b) => decoded == b.to_string(),
            Value::Number(n) => match (n.as_i64(), decoded.parse::<i64>()) {
                (Some(body), Ok(h)) => body == h,
                _ => decoded == n.to_string(),
            },
            _ => false,
        };
        if !matches {
            return Err(Error::HeaderMismatch(format!(
                "{name} header value '{decoded}' does not match body value '{value}' (params.arguments.{param})"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_text_result_is_written_as_its_tree_would_be() {
        for (text, is_error) in [("hi", false), ("a \"quoted\" line\nand <b>more</b> \u{1F600} \\", true), ("", false)]
        {
            let Payload::Call { json, is_error: flagged } = text_result(text, is_error, 0) else {
                panic!("a text result is a call's serialized result");
            };
            let tree = json!({ "content": [{ "type": "text", "text": text }], "isError": is_error });
            assert_eq!(serde_json::from_slice::<Value>(&json).expect("json"), tree);
            assert_eq!(flagged, is_error);
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn param_headers() {
        let def = json!({"inputSchema": {"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "count": {"type": "integer", "x-mcp-header": "Count"},
            "flag": {"type": "boolean", "x-mcp-header": "Flag"},
            "plain": {"type": "string"}
        }}});
        let args = json!({"region": "Hello", "count": 42, "flag": true, "plain": "x"});
        let ok = headers(&[("region", "=?base64?SGVsbG8=?="), ("count", "42"), ("flag", "true")]);
        assert!(check_param_headers(&def, &args, &ok).is_ok());
        for bad in [
            headers(&[("count", "42"), ("flag", "true")]),
            headers(&[("region", "=?base64?SGVsbG8?="), ("count", "42"), ("flag", "true")]),
            headers(&[("region", "=?base64?SGVs!!!bG8=?="), ("count", "42"), ("flag", "true")]),
            headers(&[("region", "Hello"), ("count", "41"), ("flag", "true")]),
            headers(&[("region", "Hello"), ("count", "42"), ("flag", "True")]),
        ] {
            assert!(matches!(check_param_headers(&def, &args, &bad), Err(Error::HeaderMismatch(_))), "{bad:?}");
        }
        // Null or absent arguments need no header; a literal that only looks like a sentinel is literal.
        assert!(check_param_headers(&def, &json!({"region": null}), &headers(&[])).is_ok());
        let literal = json!({"region": "=?base64?SGVsbG8="});
        assert!(check_param_headers(&def, &literal, &headers(&[("region", "=?base64?SGVsbG8=")])).is_ok());
    }
}
