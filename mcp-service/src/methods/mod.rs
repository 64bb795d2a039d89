//! Method handlers, one module per feature area.

pub mod input;
pub mod lifecycle;
pub mod prompts;
pub mod resources;
pub mod subscriptions;
pub mod tools;

use serde_json::{Value, json};

use crate::catalog::{CatalogView, Item};
use crate::dispatch::Method;
use crate::error::Error;
use crate::paging;
use crate::request::Request;

/// One page of the items the caller may see, each shaped for the request's revision.
pub(crate) fn list_page(
    req: &Request<'_>,
    items: &[Item],
    page_size: usize,
    key: &str,
    shape: impl Fn(&Value) -> Value,
) -> Result<Value, Error> {
    let cursor = req.cursor()?;
    let visible: Vec<&Item> = if req.ctx.principal.is_none() {
        items.iter().collect()
    } else {
        items.iter().filter(|i| req.permits(&i.scopes)).collect()
    };
    let (page, next) = paging::page(&visible, cursor, page_size)?;
    let mut result = json!({ key: page.iter().map(|i| shape(&i.def)).collect::<Vec<_>>() });
    if let Some(next) = next {
        result["nextCursor"] = json!(next);
    }
    Ok(result)
}

/// A legacy list's page as the serialized `result`, written from the items the catalog keeps
/// serialized for the request's revision (the same JSON `list_page` would give, without
/// building and serializing a tree per request); `None` when `req` is not a list.
pub(crate) fn legacy_list(
    req: &Request<'_>,
    catalog: &CatalogView,
    page_size: usize,
) -> Option<Result<Vec<u8>, Error>> {
    let lists = || catalog.legacy_lists(req.revision);
    let (items, json, key) = match req.method {
        Method::ToolsList => (&catalog.tools, &lists().tools, "tools"),
        Method::ResourcesList => (&catalog.resources, &lists().resources, "resources"),
        Method::ResourceTemplatesList => (&catalog.templates, &lists().templates, "resourceTemplates"),
        Method::PromptsList => (&catalog.prompts, &lists().prompts, "prompts"),
        _ => return None,
    };
    let page = || {
        let cursor = req.cursor()?;
        let visible: Vec<&str> =
            items.iter().zip(json).filter(|(i, _)| req.permits(&i.scopes)).map(|(_, j)| &**j).collect();
        let (page, next) = paging::page(&visible, cursor, page_size)?;
        let mut out = Vec::with_capacity(page.iter().map(|j| j.len() + 1).sum::<usize>() + key.len() + 64);
        out.extend_from_slice(b"{\"");
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(b"\":[");
        for (n, item) in page.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(item.as_bytes());
        }
        out.push(b']');
        if let Some(next) = next {
            out.extend_from_slice(b",\"nextCursor\":");
            // Writing a string into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, &next);
        }
        out.push(b'}');
        Ok(out)
    };
    Some(page())
}

#[cfg(test)]
mod tests {
    use mcp_proto::mcp::Principal;
    use mcp_proto::registry as pb;
    use mcp_proto::vocab::{self, Era};

    use super::*;
    use crate::context::Context;
    use crate::shape;

    fn catalog() -> CatalogView {
        let tool = |n: usize| {
            let def = json!({
                "name": format!("t{n}"), "title": "T", "description": "say \"hi\"\n", "icons": [{"src": "data:,x"}],
                "annotations": {"readOnlyHint": true}, "execution": {"taskSupport": "forbidden"},
                "inputSchema": {"type": "object"}, "outputSchema": {"type": "object"}, "_meta": {"k": n}
            });
            let scopes = if n.is_multiple_of(3) { vec!["admin".to_owned()] } else { vec![] };
            pb::Tool { name: format!("t{n}"), json: def.to_string().into_bytes(), scopes, text_template: None }
        };
        let item = |n: usize| {
            json!({"name": format!("p{n}"), "title": "P", "icons": [], "arguments": [{"name": "a", "title": "A"}]})
                .to_string()
                .into_bytes()
        };
        CatalogView::from_proto(pb::Catalog {
            tools: (0..7).map(tool).collect(),
            prompts: (0..3).map(|n| pb::Prompt { name: format!("p{n}"), json: item(n), scopes: vec![] }).collect(),
            resources: (0..2)
                .map(|n| pb::Resource { uri: format!("r:{n}"), json: item(n), scopes: vec!["admin".into()] })
                .collect(),
            resource_templates: (0..2)
                .map(|n| pb::ResourceTemplate { uri_template: format!("r:{n}/{{x}}"), json: item(n), scopes: vec![] })
                .collect(),
            ..Default::default()
        })
    }

    /// The serialized legacy pages read the same as pages built and shaped per request, for
    /// every revision, list, caller and page.
    #[tokio::test]
    async fn serialized_legacy_pages_match_the_shaped_items() {
        let catalog = catalog();
        let (sink, _rx) = tokio::sync::mpsc::channel(1);
        let lists = [
            (Method::ToolsList, "tools"),
            (Method::PromptsList, "prompts"),
            (Method::ResourcesList, "resources"),
            (Method::ResourceTemplatesList, "resourceTemplates"),
        ];
        let callers = [None, Some(vec!["mcp".to_owned()]), Some(vec!["mcp".to_owned(), "admin".to_owned()])];
        for revision in vocab::LEGACY_REVISIONS {
            for (method, key) in lists {
                for scopes in &callers {
                    let principal = scopes.clone().map(|scopes| Principal { scopes, ..Default::default() });
                    let ctx = Context { principal, ..Default::default() };
                    let mut cursor: Option<String> = None;
                    let mut seen = 0;
                    loop {
                        let params = cursor.as_ref().map_or(json!({}), |c| json!({ "cursor": c }));
                        let req =
                            Request { era: Era::Legacy, revision, method, id: None, params, ctx: &ctx, sink: &sink };
                        let items = match method {
                            Method::ToolsList => &catalog.tools,
                            Method::PromptsList => &catalog.prompts,
                            Method::ResourcesList => &catalog.resources,
                            _ => &catalog.templates,
                        };
                        let shape = if method == Method::ToolsList { shape::tool } else { shape::item };
                        let built = list_page(&req, items, 2, key, |def| shape(def, revision, false)).expect("built");
                        let written = legacy_list(&req, &catalog, 2).expect("a list").expect("written");
                        let written: Value = serde_json::from_slice(&written).expect("JSON");
                        assert_eq!(written, built, "{revision} {key} {scopes:?}");
                        seen += built[key].as_array().expect("items").len();
                        match built.get("nextCursor").and_then(Value::as_str) {
                            Some(next) => cursor = Some(next.to_owned()),
                            None => break,
                        }
                    }
                    let expected = match (key, scopes) {
                        ("tools", Some(s)) if s.len() == 1 => 4,
                        ("tools", _) => 7,
                        ("resources", Some(s)) if s.len() == 1 => 0,
                        ("prompts", _) => 3,
                        _ => 2,
                    };
                    assert_eq!(seen, expected, "{revision} {key} {scopes:?}");
                }
            }
        }
        // Fields a revision lacks are gone from what is written for it.
        let old = &catalog.legacy_lists("2024-11-05").tools[1];
        assert!(!old.contains("\"title\"") && !old.contains("annotations") && !old.contains("icons"), "{old}");
        let new = &catalog.legacy_lists("2025-11-25").tools[1];
        assert!(new.contains("\"title\"") && new.contains("icons") && new.contains("execution"), "{new}");
        // A bad cursor is the same error.
        let ctx = Context::default();
        let req = Request {
            era: Era::Legacy,
            revision: "2025-06-18",
            method: Method::ToolsList,
            id: None,
            params: json!({ "cursor": "bogus" }),
            ctx: &ctx,
            sink: &sink,
        };
        assert!(matches!(legacy_list(&req, &catalog, 2), Some(Err(Error::InvalidCursor))));
        // Another method is not a list, and does not make the serialized lists.
        let fresh = self::catalog();
        let req = Request { method: Method::ToolsCall, ..req };
        assert!(legacy_list(&req, &fresh, 2).is_none(), "not a list");
        assert!(fresh.legacy_lists.iter().all(|l| l.get().is_none()), "a call does not make the lists");
    }
}
