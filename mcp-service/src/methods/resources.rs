//! `resources/list`, `resources/templates/list` and `resources/read`.

use mcp_proto::registry as pb;
use serde_json::{Value, json};

use crate::catalog::CatalogView;
use crate::dispatch::{Engine, Request};
use crate::error::{Error, from_registry};
use crate::shape;

pub fn list(req: &Request<'_>, catalog: &CatalogView, page_size: usize) -> Result<Value, Error> {
    super::list_page(req, &catalog.resources, page_size, "resources", |def| {
        shape::item(def, req.revision, req.modern())
    })
}

pub fn list_templates(
    req: &Request<'_>,
    catalog: &CatalogView,
    page_size: usize,
) -> Result<Value, Error> {
    super::list_page(
        req,
        &catalog.templates,
        page_size,
        "resourceTemplates",
        |def| shape::item(def, req.revision, req.modern()),
    )
}

pub async fn read(engine: &Engine, req: &Request<'_>) -> Result<Value, Error> {
    let uri = req.required_str("uri")?;
    let read = pb::ReadResourceRequest {
        uri: uri.to_owned(),
        caller: req.caller(),
    };
    let result = engine
        .registry
        .clone()
        .read_resource(read)
        .await
        .map_err(|s| from_registry(s, || Error::ResourceNotFound(uri.to_owned())))?
        .into_inner();
    let contents: Value = serde_json::from_slice(&result.contents_json)
        .map_err(|e| Error::Internal(format!("registry sent malformed contents: {e}")))?;
    if contents.as_array().is_none_or(Vec::is_empty) {
        // Never answer a read with empty contents.
        return Err(Error::ResourceNotFound(uri.to_owned()));
    }
    Ok(json!({ "contents": contents }))
}
