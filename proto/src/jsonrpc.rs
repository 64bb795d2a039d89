//! Building JSON-RPC replies around a raw (already validated) id.

use serde_json::{Value, json};

use crate::vocab::ErrorCode;

/// Serialize a success reply. `id` is raw JSON text (`None` becomes `null`).
pub fn result(id: Option<&str>, result: &Value) -> Vec<u8> {
    let mut out = result_head(id, 64);
    // Writing a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut out, result);
    out.push(b'}');
    out
}

/// A success reply around a result that is already serialized JSON.
pub fn result_serialized(id: Option<&str>, result: &[u8]) -> Vec<u8> {
    let mut out = result_head(id, result.len() + 1);
    out.extend_from_slice(result);
    out.push(b'}');
    out
}

/// A success reply whose result is the members of `head` (an object; anything else counts as
/// empty) and one more, `member`, whose value is already serialized JSON, written as it is.
pub fn result_spliced(id: Option<&str>, head: &Value, member: &str, json: &[u8]) -> Vec<u8> {
    let mut out = result_head(id, json.len() + member.len() + 512);
    out.push(b'{');
    // Writing strings and `Value`s into a Vec cannot fail.
    for (key, value) in head.as_object().into_iter().flatten().filter(|(k, _)| *k != member) {
        let _ = serde_json::to_writer(&mut out, key);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, value);
        out.push(b',');
    }
    let _ = serde_json::to_writer(&mut out, member);
    out.push(b':');
    out.extend_from_slice(json);
    out.extend_from_slice(b"}}");
    out
}

/// What a success reply to `id` starts with, up to its result, with room for `rest` bytes more.
pub fn result_head(id: Option<&str>, rest: usize) -> Vec<u8> {
    const OPEN: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
    const RESULT: &[u8] = br#","result":"#;
    let id = id.unwrap_or("null");
    let mut out = Vec::with_capacity(OPEN.len() + id.len() + RESULT.len() + rest);
    out.extend_from_slice(OPEN);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(RESULT);
    out
}

/// Serialize an error reply. `id` is raw JSON text (`None` becomes `null`).
pub fn error(id: Option<&str>, code: ErrorCode, message: &str, data: Option<&Value>) -> Vec<u8> {
    let mut err = json!({ "code": code.0, "message": message });
    if let Some(data) = data {
        err["data"] = data.clone();
    }
    let mut out = Vec::with_capacity(96);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.unwrap_or("null").as_bytes());
    out.extend_from_slice(br#","error":"#);
    let _ = serde_json::to_writer(&mut out, &err);
    out.push(b'}');
    out
}

/// Serialize a notification.
pub fn notification(method: &str, params: &Value) -> Vec<u8> {
    let msg = json!({ "jsonrpc": "2.0", "method": method, "params": params });
    serde_json::to_vec(&msg).unwrap_or_default()
}

/// A JSON number that prints as an integer when it is one (`3`, not `3.0`).
pub fn number(n: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if n.fract() == 0.0 && n.abs() < EXACT {
        Value::from(n as i64)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let r: Value = serde_json::from_slice(&result(Some("\"a\""), &json!({"x":1}))).expect("json");
        assert_eq!(r, json!({"jsonrpc":"2.0","id":"a","result":{"x":1}}));
        let e: Value = serde_json::from_slice(&error(None, ErrorCode::PARSE_ERROR, "Parse error", None)).expect("json");
        assert_eq!(e, json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}));
    }

    #[test]
    fn spliced_member_is_written_as_it_is() {
        let contents = br#"[{"uri":"file:///a","text":"a \"quoted\" line"}]"#;
        let head = json!({"ttlMs": 5, "_meta": {"k": "v"}});
        let r: Value = serde_json::from_slice(&result_spliced(Some("7"), &head, "contents", contents)).expect("json");
        let expected =
            json!({"ttlMs": 5, "_meta": {"k": "v"}, "contents": [{"uri": "file:///a", "text": "a \"quoted\" line"}]});
        assert_eq!(r, json!({"jsonrpc": "2.0", "id": 7, "result": expected}));
        // An empty head, or one that is not an object, gives the member alone; a member of the
        // same name in the head gives way to the spliced one.
        for head in [json!({}), json!(null), json!({"contents": "stale"})] {
            let r: Value = serde_json::from_slice(&result_spliced(None, &head, "contents", b"[1]")).expect("json");
            assert_eq!(r, json!({"jsonrpc": "2.0", "id": null, "result": {"contents": [1]}}), "{head}");
        }
    }
}
