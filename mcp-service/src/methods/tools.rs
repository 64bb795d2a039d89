//! `tools/list` and `tools/call`.

use mcp_proto::registry as pb;
use serde_json::{Value, json};

use super::input::{self, Handled};
use crate::catalog::CatalogView;
use crate::dispatch::Engine;
use crate::error::{Error, from_registry};
use crate::request::Request;
use crate::shape;

pub fn list(req: &Request<'_>, catalog: &CatalogView, page_size: usize) -> Result<Value, Error> {
    super::list_page(req, &catalog.tools, page_size, "tools", |def| shape::tool(def, req.revision, req.modern()))
}

pub async fn call(engine: &Engine, req: &Request<'_>, catalog: &CatalogView) -> Result<Value, Error> {
    let name = req.required_str("name")?;
    // Clients may leave `arguments` out; that is `{}`.
    let arguments = match req.params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(Error::InvalidParams("`arguments` must be an object".into())),
    };
    // A tool the caller may not see is answered exactly like one that does not exist.
    if !catalog.tool(name).is_some_and(|t| req.permits(&t.scopes)) {
        return Err(Error::UnknownTool(name.to_owned()));
    }
    let progress_token = req.progress_token();
    let capabilities = serde_json::to_vec(&req.client_capabilities()).unwrap_or_default();
    let log_level = req.log_level().unwrap_or_default();
    let result = input::run(engine, req, name, &arguments, |round| {
        let call = pb::CallToolRequest {
            name: name.to_owned(),
            arguments_json: serde_json::to_vec(&arguments).unwrap_or_default(),
            caller: req.caller(),
            wants_progress: progress_token.is_some(),
            log_level: log_level.clone(),
            input_responses_json: round.responses_json(),
            state_json: round.state_json(),
            client_capabilities_json: capabilities.clone(),
        };
        one_round(engine, req, name, call, progress_token.as_ref())
    })
    .await?;
    Ok(shape::call_result(result, req.revision, req.modern()))
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
    let mut events = engine.registry.clone().call_tool(call).await.map_err(|s| from_registry(s, unknown))?.into_inner();
    while let Some(event) = events.message().await.map_err(|s| from_registry(s, unknown))? {
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
            Some(Event::ResultJson(bytes)) => return Ok(Handled::Complete(input::parse(&bytes)?)),
            Some(Event::InputRequired(i)) => {
                return Ok(Handled::InputRequired {
                    requests: input::parse(&i.input_requests_json)?,
                    state: input::parse(&i.state_json)?,
                });
            }
            Some(Event::MissingCapabilitiesJson(caps)) => {
                return Ok(Handled::MissingCapabilities(input::parse(&caps)?));
            }
            None => {}
        }
    }
    Err(Error::Internal(format!("tool `{name}` ended without a result")))
}
