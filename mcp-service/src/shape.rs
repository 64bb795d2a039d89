//! Per-revision result shapes: what a legacy client of a given revision may see.
//!
//! Modern (2026-07-28) results pass through unchanged; legacy results lose the fields their
//! revision does not define, and structured output keeps to the object-only legacy rules.

use serde_json::{Map, Value};

/// Whether revision `rev` is `min` or newer (revisions are ISO dates).
pub fn at_least(rev: &str, min: &str) -> bool {
    rev >= min
}

fn remove(obj: &mut Map<String, Value>, keys: &[&str]) {
    for k in keys {
        obj.remove(*k);
    }
}

fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// Fields every listed item (tool, resource, template, prompt) gained over the revisions.
fn common(obj: &mut Map<String, Value>, rev: &str) {
    if !at_least(rev, "2025-06-18") {
        remove(obj, &["title", "_meta"]);
    }
    if !at_least(rev, "2025-11-25") {
        remove(obj, &["icons"]);
    }
}

/// A `Tool` definition for a client of revision `rev`.
pub fn tool(def: &Value, rev: &str, modern: bool) -> Value {
    if modern {
        return def.clone();
    }
    let mut def = def.clone();
    if let Some(obj) = def.as_object_mut() {
        common(obj, rev);
        if !at_least(rev, "2025-03-26") {
            remove(obj, &["annotations"]);
        }
        if !at_least(rev, "2025-06-18") || obj.get("outputSchema").is_some_and(|s| !is_object_schema(s)) {
            remove(obj, &["outputSchema"]);
        }
        if !at_least(rev, "2025-11-25") {
            remove(obj, &["execution"]);
        }
    }
    def
}

/// A resource, resource template or prompt definition for a client of revision `rev`.
pub fn item(def: &Value, rev: &str, modern: bool) -> Value {
    if modern {
        return def.clone();
    }
    let mut def = def.clone();
    if let Some(obj) = def.as_object_mut() {
        common(obj, rev);
        if let Some(Value::Array(args)) = obj.get_mut("arguments") {
            for a in args.iter_mut().filter_map(Value::as_object_mut) {
                common(a, rev);
            }
        }
    }
    def
}

/// A `CallToolResult` for a client of revision `rev`. (A `text` tool's result is written
/// directly, by `methods::tools::text_result`, in a shape every revision accepts.)
pub fn call_result(mut result: Value, rev: &str, modern: bool) -> Value {
    if modern {
        return result;
    }
    if let Some(obj) = result.as_object_mut() {
        let keep_structured = at_least(rev, "2025-06-18") && obj.get("structuredContent").is_some_and(Value::is_object);
        if !keep_structured {
            obj.remove("structuredContent");
        }
    }
    result
}

/// The server's `Implementation` for a client of revision `rev`.
pub fn server_info(info: &Value, rev: &str, modern: bool) -> Value {
    if modern {
        return info.clone();
    }
    let mut info = info.clone();
    if let Some(obj) = info.as_object_mut() {
        if !at_least(rev, "2025-06-18") {
            remove(obj, &["title"]);
        }
        if !at_least(rev, "2025-11-25") {
            remove(obj, &["icons", "websiteUrl", "description"]);
        }
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn legacy_tools_lose_newer_fields() {
        let def = json!({"name":"t","title":"T","icons":[],"annotations":{},"inputSchema":{"type":"object"},
                         "outputSchema":{"type":"object"}});
        assert_eq!(tool(&def, "2024-11-05", false), json!({"name":"t","inputSchema":{"type":"object"}}));
        let v = tool(&def, "2025-06-18", false);
        assert!(v.get("outputSchema").is_some() && v.get("title").is_some() && v.get("icons").is_none());
        assert_eq!(tool(&def, "2026-07-28", true), def);
    }

    #[test]
    fn non_object_output_is_modern_only() {
        let def = json!({"name":"t","inputSchema":{"type":"object"},"outputSchema":{"type":"array"}});
        assert!(tool(&def, "2025-11-25", false).get("outputSchema").is_none());
        let r = json!({"content":[],"structuredContent":[1,2]});
        assert!(call_result(r.clone(), "2025-11-25", false).get("structuredContent").is_none());
        assert!(call_result(r, "2026-07-28", true).get("structuredContent").is_some());
    }
}
