//! `prompts/list`, `prompts/get` and `completion/complete`.

use std::collections::HashMap;

use mcp_proto::registry as pb;
use serde_json::{Value, json};

use super::input::{self, Handled};
use crate::catalog::CatalogView;
use crate::dispatch::Engine;
use crate::error::{Error, from_registry};
use crate::request::Request;
use crate::shape;

pub fn list(req: &Request<'_>, catalog: &CatalogView, page_size: usize) -> Result<Value, Error> {
    super::list_page(req, &catalog.prompts, page_size, "prompts", |def| shape::item(def, req.revision, req.modern()))
}

/// A `{string: string}` object (prompt arguments, completion context); absent is empty.
fn string_map(value: Option<&Value>, what: &str) -> Result<HashMap<String, String>, Error> {
    match value {
        None | Some(Value::Null) => Ok(HashMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(Error::InvalidParams(format!("`{what}.{k}` must be a string"))),
            })
            .collect(),
        Some(_) => Err(Error::InvalidParams(format!("`{what}` must be an object"))),
    }
}

pub async fn get(engine: &Engine, req: &Request<'_>) -> Result<Value, Error> {
    let name = req.required_str("name")?;
    let arguments = string_map(req.params.get("arguments"), "arguments")?;
    let bound = serde_json::to_value(&arguments).unwrap_or(Value::Null);
    let capabilities = serde_json::to_vec(&req.client_capabilities()).unwrap_or_default();
    let unknown = || Error::UnknownPrompt(name.to_owned());
    input::run(engine, req, name, &bound, |round| {
        let get = pb::GetPromptRequest {
            name: name.to_owned(),
            arguments: arguments.clone(),
            caller: req.caller(),
            input_responses_json: round.responses_json(),
            state_json: round.state_json(),
            client_capabilities_json: capabilities.clone(),
        };
        let mut registry = engine.registry.clone();
        async move {
            let result = registry
                .get_prompt(mcp_proto::trust::outgoing(get))
                .await
                .map_err(|s| from_registry(s, unknown))?
                .into_inner();
            Handled::from_wire(result.input_required, || input::parse(&result.json))
        }
    })
    .await
    .map(input::Ran::into_value)
}

pub async fn complete(engine: &Engine, req: &Request<'_>) -> Result<Value, Error> {
    let reference = req.params.get("ref").ok_or_else(|| Error::InvalidParams("missing `ref`".into()))?;
    let ref_type = reference.get("type").and_then(Value::as_str).unwrap_or_default();
    let ref_name = match ref_type {
        "ref/prompt" => reference.get("name"),
        "ref/resource" => reference.get("uri"),
        _ => {
            return Err(Error::InvalidParams("`ref.type` must be ref/prompt or ref/resource".into()));
        }
    }
    .and_then(Value::as_str)
    .ok_or_else(|| Error::InvalidParams("`ref` must name a prompt or a resource".into()))?;
    let argument = req.params.get("argument").ok_or_else(|| Error::InvalidParams("missing `argument`".into()))?;
    let (Some(arg_name), Some(arg_value)) =
        (argument.get("name").and_then(Value::as_str), argument.get("value").and_then(Value::as_str))
    else {
        return Err(Error::InvalidParams("`argument` needs string `name` and `value`".into()));
    };
    let context = string_map(req.params.get("context").and_then(|c| c.get("arguments")), "context.arguments")?;
    let complete = pb::CompleteRequest {
        ref_type: ref_type.to_owned(),
        ref_name: ref_name.to_owned(),
        argument_name: arg_name.to_owned(),
        argument_value: arg_value.to_owned(),
        context_arguments: context,
        caller: req.caller(),
    };
    let result = engine
        .registry
        .clone()
        .complete(mcp_proto::trust::outgoing(complete))
        .await
        .map_err(|s| {
            from_registry(s, || {
                if ref_type == "ref/prompt" {
                    Error::UnknownPrompt(ref_name.to_owned())
                } else {
                    Error::ResourceNotFound(ref_name.to_owned())
                }
            })
        })?
        .into_inner();
    let mut completion = json!({ "values": result.values, "hasMore": result.has_more });
    if let Some(total) = result.total {
        completion["total"] = json!(total);
    }
    Ok(json!({ "completion": completion }))
}
