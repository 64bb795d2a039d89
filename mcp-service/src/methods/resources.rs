//! `resources/list`, `resources/templates/list` and `resources/read`.

use mcp_proto::registry as pb;
use serde_json::{Value, json};

use super::input::{self, Handled};
use crate::catalog::CatalogView;
use crate::dispatch::Engine;
use crate::error::{Error, from_registry};
use crate::request::Request;
use crate::shape;

pub fn list(req: &Request<'_>, catalog: &CatalogView, page_size: usize) -> Result<Value, Error> {
    super::list_page(req, &catalog.resources, page_size, "resources", |def| {
        shape::item(def, req.revision, req.modern())
    })
}

pub fn list_templates(req: &Request<'_>, catalog: &CatalogView, page_size: usize) -> Result<Value, Error> {
    super::list_page(req, &catalog.templates, page_size, "resourceTemplates", |def| {
        shape::item(def, req.revision, req.modern())
    })
}

pub async fn read(engine: &Engine, req: &Request<'_>) -> Result<Value, Error> {
    let uri = req.required_str("uri")?;
    let capabilities = serde_json::to_vec(&req.client_capabilities()).unwrap_or_default();
    let not_found = || Error::ResourceNotFound(uri.to_owned());
    input::run(engine, req, uri, &Value::Null, |round| {
        let read = pb::ReadResourceRequest {
            uri: uri.to_owned(),
            caller: req.caller(),
            input_responses_json: round.responses_json(),
            state_json: round.state_json(),
            client_capabilities_json: capabilities.clone(),
        };
        let mut registry = engine.registry.clone();
        async move {
            let result = registry
                .read_resource(mcp_proto::trust::outgoing(read))
                .await
                .map_err(|s| from_registry(s, not_found))?
                .into_inner();
            Handled::from_wire(result.input_required, || {
                let contents = input::parse(&result.contents_json)?;
                // Never answer a read with empty contents.
                if contents.as_array().is_none_or(Vec::is_empty) {
                    return Err(not_found());
                }
                Ok(json!({ "contents": contents }))
            })
        }
    })
    .await
}
