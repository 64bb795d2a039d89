//! `resources/list`, `resources/templates/list` and `resources/read`.

use mcp_proto::registry as pb;
use serde_json::{Value, json};

use super::input::{self, Handled, Ran};
use crate::catalog::CatalogView;
use crate::dispatch::{Engine, Payload};
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

/// `resources/read`. The registry's `contents` go out as it wrote them: checked to be JSON and
/// a non-empty array, but not parsed into a tree and written again (a large resource would be
/// copied and escaped twice more).
pub(crate) async fn read(engine: &Engine, req: &Request<'_>) -> Result<Payload, Error> {
    let uri = req.required_str("uri")?;
    let capabilities = serde_json::to_vec(&req.client_capabilities()).unwrap_or_default();
    let not_found = || Error::ResourceNotFound(uri.to_owned());
    let ran = input::run(engine, req, uri, &Value::Null, |round| {
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
            let contents = result.contents_json;
            Handled::from_wire(result.input_required, || {
                // Never answer a read with empty contents.
                if !non_empty_array(&contents) {
                    return Err(not_found());
                }
                serde_json::from_slice::<serde::de::IgnoredAny>(&contents)
                    .map_err(|e| Error::Internal(format!("registry sent malformed JSON: {e}")))?;
                Ok(contents)
            })
        }
    })
    .await?;
    Ok(match ran {
        Ran::Complete(contents) => Payload::Spliced { head: json!({}), member: "contents", json: contents },
        Ran::InputRequired(result) => Payload::Tree(result),
    })
}

/// Whether `json` opens an array with something in it (its validity is checked apart).
fn non_empty_array(json: &[u8]) -> bool {
    json.trim_ascii_start().strip_prefix(b"[").is_some_and(|rest| !rest.trim_ascii_start().starts_with(b"]"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_non_empty_array_is_contents() {
        for yes in [&b"[{}]"[..], b" [ 1 ]", b"[\n{\"uri\":\"x\"}]"] {
            assert!(non_empty_array(yes), "{}", String::from_utf8_lossy(yes));
        }
        for no in [&b""[..], b"[]", b"[ \n ]", b"{}", b"null", b"\"[1]\""] {
            assert!(!non_empty_array(no), "{}", String::from_utf8_lossy(no));
        }
    }
}
