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
///
/// A read anyone may be given is named when the registry names its contents ([`result_tag`]).
/// When the gateway already holds the result under that name and sends it back, the registry
/// is asked whether its contents still have it: if so, neither the registry nor this service
/// sends them again, and the answer is [`Payload::Unchanged`]. The request itself is checked
/// as any other (a legacy one's session included), and so is the caller's access by the
/// registry. Identical such questions in flight together are asked once ([`crate::confirm`]).
pub(crate) async fn read(engine: &Engine, req: &Request<'_>, catalog: &CatalogView) -> Result<Payload, Error> {
    let uri = req.required_str("uri")?;
    let capabilities = serde_json::to_vec(&req.client_capabilities()).unwrap_or_default();
    let not_found = || Error::ResourceNotFound(uri.to_owned());
    let nameable = crate::dispatch::public_answer(req.ctx, catalog, req.method);
    // A legacy result has no `ttlMs` (nor any other modern field).
    let form =
        if req.modern() { Form::Modern { ttl_ms: engine.settings.read_ttl_ms } } else { Form::Legacy(req.revision) };
    let name = |contents_tag: &str| result_tag(catalog.fingerprint, form, contents_tag);
    // The contents' tag within the gateway's, when the gateway's still fits this catalog and
    // these settings.
    let held = nameable
        .then(|| {
            let held = req.ctx.if_tag.as_deref()?;
            held.strip_prefix(name("").as_str()).filter(|t| !t.is_empty()).map(str::to_owned)
        })
        .flatten();
    let ran = input::run(engine, req, uri, &Value::Null, |round| {
        let read = pb::ReadResourceRequest {
            uri: uri.to_owned(),
            caller: req.caller(),
            input_responses_json: round.responses_json(),
            state_json: round.state_json(),
            client_capabilities_json: capabilities.clone(),
            if_tag: held.clone().unwrap_or_default(),
        };
        let mut registry = engine.registry.clone();
        let held = held.clone();
        async move {
            let ask = |read| async move {
                registry.read_resource(mcp_proto::trust::outgoing(read)).await.map(tonic::Response::into_inner)
            };
            // A held read's question is asked together with the same ones in flight; the
            // others (a first read, a template's) each carry their own contents.
            let answer =
                if read.if_tag.is_empty() { ask(read).await } else { engine.confirmations.ask(read, ask).await };
            let result = answer.map_err(|s| from_registry(s, not_found))?;
            let (contents, tag) = (result.contents_json, result.tag);
            if result.unchanged {
                // Only ever an answer to the tag sent.
                return if held.as_deref() == Some(tag.as_str()) {
                    Ok(Handled::Complete(Read::Unchanged(tag)))
                } else {
                    Err(Error::Internal("registry answered `unchanged` to a read it was not asked to compare".into()))
                };
            }
            Handled::from_wire(result.input_required, || {
                // Never answer a read with empty contents.
                if !non_empty_array(&contents) {
                    return Err(not_found());
                }
                serde_json::from_slice::<serde::de::IgnoredAny>(&contents)
                    .map_err(|e| Error::Internal(format!("registry sent malformed JSON: {e}")))?;
                Ok(Read::Contents(contents, tag))
            })
        }
    })
    .await?;
    Ok(match ran {
        Ran::Complete(Read::Contents(contents, tag)) => Payload::Spliced {
            head: json!({}),
            member: "contents",
            json: contents,
            tag: (nameable && !tag.is_empty()).then(|| name(&tag)),
        },
        Ran::Complete(Read::Unchanged(tag)) => Payload::Unchanged { tag: name(&tag) },
        Ran::InputRequired(result) => Payload::Tree(result),
    })
}

/// What the registry answered to a read.
enum Read {
    /// The `contents` array as JSON, and its tag (empty when unnamed).
    Contents(bytes::Bytes, String),
    /// The contents still have this tag.
    Unchanged(String),
}

/// How a read's result is written around its contents.
#[derive(Clone, Copy)]
enum Form {
    /// 2026-07-28, with the `ttlMs` in force here.
    Modern { ttl_ms: u64 },
    /// A legacy revision's.
    Legacy(&'static str),
}

/// Bumped whenever this service writes a read's result differently, so that a gateway holding
/// results of an older version of it stops having them confirmed.
const RESULT_FORMAT: u32 = 1;

/// The name of a read's whole result: the registry's tag of its contents, with the rest the
/// result is made of (the catalog's server identity, how the result is written).
fn result_tag(catalog_fingerprint: u64, form: Form, contents_tag: &str) -> String {
    match form {
        Form::Modern { ttl_ms } => format!("{catalog_fingerprint:x}.{RESULT_FORMAT}.{ttl_ms}.{contents_tag}"),
        Form::Legacy(revision) => format!("{catalog_fingerprint:x}.{RESULT_FORMAT}.{revision}.{contents_tag}"),
    }
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
