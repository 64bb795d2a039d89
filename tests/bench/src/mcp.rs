//! The MCP requests of the scenarios, in both eras, and the checks of their answers.
//!
//! Modern (2026-07-28): no handshake; `params._meta` carries the version and the client
//! capabilities, and the headers `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` repeat
//! them. Legacy (2025-06-18): `initialize` once per connection, then `MCP-Protocol-Version`
//! and the `Mcp-Session-Id` the server gave (added by the connection, see `client.rs`).

use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::catalog;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Era {
    Modern,
    Legacy,
}

impl Era {
    pub const ALL: [Era; 2] = [Era::Modern, Era::Legacy];

    pub fn version(self) -> &'static str {
        match self {
            Era::Modern => "2026-07-28",
            Era::Legacy => "2025-06-18",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// `tools/list`, every page of the catalog in turn.
    List,
    /// `tools/call` of a text tool that echoes its message.
    Call,
    /// `resources/read` of the 1 MiB resource.
    Read,
    /// `server/discover` (modern only).
    Discover,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::List, Op::Call, Op::Read, Op::Discover];

    /// Every scenario: each operation in each era it has, in the report's order.
    pub fn scenarios() -> impl Iterator<Item = (Op, Era)> {
        Op::ALL.into_iter().flat_map(|op| op.eras().iter().map(move |&era| (op, era)))
    }

    pub fn label(self) -> &'static str {
        match self {
            Op::List => "tools/list",
            Op::Call => "tools/call text",
            Op::Read => "resources/read 1 MiB",
            Op::Discover => "server/discover",
        }
    }

    pub fn eras(self) -> &'static [Era] {
        match self {
            Op::Discover => &[Era::Modern],
            _ => &Era::ALL,
        }
    }
}

/// One request, and what a correct answer looks like.
#[derive(Clone, Debug)]
pub struct Call {
    pub headers: HeaderMap,
    pub body: Bytes,
    pub id: Option<u64>,
    pub expect: Expect,
}

#[derive(Clone, Debug)]
pub enum Expect {
    /// A page of `tools/list`: `count` tools, the first named `first`, `nextCursor` iff `more`.
    Page { count: usize, first: String, more: bool },
    /// Any well-formed page of `tools/list` (while the pages are being found).
    AnyPage,
    /// A text tool result whose only content is this text.
    Echo(String),
    /// The 1 MiB resource, its text exactly.
    Resource,
    /// A discovery result that lists the modern version.
    Discover,
    /// An `initialize` result that agreed on the legacy version.
    Initialize,
    /// A notification: any 2xx.
    Accepted,
}

fn header(name: &'static str, value: &str) -> Option<(HeaderName, HeaderValue)> {
    Some((HeaderName::from_static(name), HeaderValue::from_str(value).ok()?))
}

/// A request of `era` (`id: None` is a notification); `name` is the `Mcp-Name` of modern calls.
fn request(era: Era, method: &str, name: Option<&str>, mut params: Value, id: Option<u64>, expect: Expect) -> Call {
    let mut headers = HeaderMap::new();
    let mut add = |h: Option<(HeaderName, HeaderValue)>| {
        if let Some((k, v)) = h {
            headers.append(k, v);
        }
    };
    add(header("content-type", "application/json"));
    add(header("accept", "application/json, text/event-stream"));
    match era {
        Era::Modern => {
            params["_meta"] = json!({
                "io.modelcontextprotocol/protocolVersion": era.version(),
                "io.modelcontextprotocol/clientCapabilities": {}
            });
            add(header("mcp-protocol-version", era.version()));
            add(header("mcp-method", method));
            if let Some(name) = name {
                add(header("mcp-name", name));
            }
        }
        Era::Legacy if method != "initialize" => add(header("mcp-protocol-version", era.version())),
        Era::Legacy => {}
    }
    let mut body = json!({ "jsonrpc": "2.0", "method": method, "params": params });
    if let Some(id) = id {
        body["id"] = id.into();
    }
    Call { headers, body: Bytes::from(body.to_string()), id, expect }
}

/// `tools/list` from `cursor` (the first page without one).
pub fn list(era: Era, cursor: Option<&str>, id: u64, expect: Expect) -> Call {
    let params = match cursor {
        Some(c) => json!({ "cursor": c }),
        None => json!({}),
    };
    request(era, "tools/list", None, params, Some(id), expect)
}

/// `tools/call` of `tool` with `message`.
pub fn echo(era: Era, tool: &str, message: &str, id: u64) -> Call {
    let params = json!({ "name": tool, "arguments": { "message": message } });
    request(era, "tools/call", Some(tool), params, Some(id), Expect::Echo(message.to_owned()))
}

pub fn read(era: Era, id: u64) -> Call {
    let params = json!({ "uri": catalog::RESOURCE_URI });
    request(era, "resources/read", Some(catalog::RESOURCE_URI), params, Some(id), Expect::Resource)
}

pub fn discover(id: u64) -> Call {
    request(Era::Modern, "server/discover", None, json!({}), Some(id), Expect::Discover)
}

pub fn initialize() -> Call {
    let params = json!({
        "protocolVersion": Era::Legacy.version(),
        "capabilities": {},
        "clientInfo": { "name": "mcp-bench", "version": "1.0.0" }
    });
    request(Era::Legacy, "initialize", None, params, Some(0), Expect::Initialize)
}

pub fn initialized() -> Call {
    request(Era::Legacy, "notifications/initialized", None, json!({}), None, Expect::Accepted)
}

/// What came back for one request.
pub struct Answer {
    pub status: hyper::StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// Check an answer against its request; `Ok` with the JSON-RPC `result` (`Null` for
/// notifications, and for reads: a read's megabyte is checked without making a tree of it).
pub fn check(call: &Call, answer: &Answer) -> Result<Value, String> {
    if let Expect::Accepted = call.expect {
        return if answer.status.is_success() { Ok(Value::Null) } else { Err(describe(answer, "status")) };
    }
    if answer.status != hyper::StatusCode::OK {
        return Err(describe(answer, "status"));
    }
    let content_type = content_type(answer);
    if !content_type.starts_with("application/json") {
        return Err(describe(answer, &format!("content-type {content_type:?}")));
    }
    if let Expect::Resource = call.expect {
        return check_read(call, answer).map(|()| Value::Null);
    }
    let mut reply: Value = serde_json::from_slice(&answer.body).map_err(|e| describe(answer, &e.to_string()))?;
    if reply["jsonrpc"] != "2.0" || reply["id"].as_u64() != call.id {
        return Err(describe(answer, "not the JSON-RPC reply to this request"));
    }
    if reply.get("error").is_some() {
        return Err(describe(answer, "JSON-RPC error"));
    }
    let result = reply.get_mut("result").map(Value::take).ok_or_else(|| describe(answer, "no result"))?;
    check_result(&call.expect, &result).map_err(|why| describe(answer, why))?;
    Ok(result)
}

/// Checks the answers to a workload's calls, each call again and again, on every connection. A
/// 200 JSON answer whose body is, byte for byte, one that passed for this call passes: the same
/// bytes are the same answer. Otherwise an answer whose `result` is, byte for byte, one that
/// [`check`] passed in full for this call passes with its status, content type and envelope
/// (version, id, no `error`) checked alone. Any other answer is checked in full. Building each
/// reply's tree of `Value`s took about a third of the load generator's core on small answers,
/// and scanning a 1 MiB read's text about 0.7 ms: both capped what it could measure of the
/// fastest servers. What passed is shared by the connections (the calls are the same on each).
/// Until 2026-12-06 it was kept per connection: each of 64 connections checked each of 100 pages
/// of 10 000 tools in full once and kept its own 2 MiB of bodies to compare with.
pub struct Checker {
    passed: Box<[Mutex<Passed>]>,
}

/// What passed for one call.
#[derive(Clone, Default)]
struct Passed {
    /// The last body that passed.
    body: Option<Bytes>,
    /// The `result` that passed in full, as it came (not kept for reads: a read's body is
    /// compared whole).
    result: Option<Bytes>,
}

impl Checker {
    pub fn new(calls: usize) -> Self {
        Checker { passed: (0..calls).map(|_| Mutex::default()).collect() }
    }

    /// What passed for `calls[index]` so far (the lock held only to copy two handles).
    fn passed(&self, index: usize) -> Passed {
        self.passed[index].lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The last body that passed for `calls[index]`, to read the next answer like.
    pub fn last_body(&self, index: usize) -> Option<Bytes> {
        self.passed(index).body
    }

    /// Check `answer` to `calls[index]`.
    pub fn check(&self, index: usize, call: &Call, answer: &Answer) -> Result<(), String> {
        if let Expect::Accepted = call.expect {
            return check(call, answer).map(drop);
        }
        let mut passed = self.passed(index);
        // The body that passed itself (read like it: `Conn::send_like`), or the same bytes.
        let same = |body: &Bytes| {
            (body.as_ptr() == answer.body.as_ptr() && body.len() == answer.body.len()) || *body == answer.body
        };
        if is_json_ok(answer) && passed.body.as_ref().is_some_and(same) {
            return Ok(());
        }
        let result = match call.expect {
            Expect::Resource => None,
            _ => result_as_sent(call, answer),
        };
        if result.is_none() || result != passed.result.as_deref() {
            check(call, answer)?;
            passed.result = result.map(Bytes::copy_from_slice);
        }
        passed.body = Some(answer.body.clone());
        *self.passed[index].lock().unwrap_or_else(PoisonError::into_inner) = passed;
        Ok(())
    }
}

/// The answer's `Content-Type`, empty when absent or not text.
fn content_type(answer: &Answer) -> &str {
    answer.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default()
}

/// A 200 answer with a JSON content type.
fn is_json_ok(answer: &Answer) -> bool {
    answer.status == hyper::StatusCode::OK && content_type(answer).starts_with("application/json")
}

/// Whether a member is there at all, whatever its value (`"error": null` included).
#[derive(Default)]
struct Present(bool);

impl<'de> serde::Deserialize<'de> for Present {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d).map(|_| Present(true))
    }
}

/// Whether `json` is UTF-8 and starts (after blanks) as a JSON object. A borrowing parse skips
/// the members it does not name without checking their text, and takes a struct from an array
/// as readily as from an object; these two checks make up for that.
fn is_object_text(json: &[u8]) -> bool {
    json.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') && std::str::from_utf8(json).is_ok()
}

/// A JSON-RPC reply, borrowed: its four members and no other (a borrowing parse would skip
/// any other without checking it).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Envelope<'a> {
    jsonrpc: &'a str,
    id: Option<u64>,
    #[serde(borrow)]
    result: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    error: Present,
}

/// The `result` of a reply to `call` as its bytes came, when the answer is a 200 JSON reply
/// with that id, no `error` (present, even `null`) and no other member; `None` for anything
/// else, which only [`check`] judges.
fn result_as_sent<'a>(call: &Call, answer: &'a Answer) -> Option<&'a [u8]> {
    if !is_json_ok(answer) || !is_object_text(&answer.body) {
        return None;
    }
    let reply: Envelope<'_> = serde_json::from_slice(&answer.body).ok()?;
    (reply.jsonrpc == "2.0" && reply.id == call.id && !reply.error.0)
        .then_some(reply.result)
        .flatten()
        .map(|r| r.get().as_bytes())
}

/// A read's reply, its text exactly, without making a tree of a megabyte: the text is borrowed
/// as the JSON it came in and compared with the expected text as JSON, or (a server that
/// escapes differently) unescaped and compared. Parsing the reply into a `Value` took the load
/// generator's one core about a millisecond per read, more than some servers spent.
fn check_read(call: &Call, answer: &Answer) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct ReadResult<'a> {
        #[serde(borrow)]
        contents: Vec<Item<'a>>,
    }
    #[derive(serde::Deserialize)]
    struct Item<'a> {
        #[serde(borrow)]
        uri: std::borrow::Cow<'a, str>,
        #[serde(borrow)]
        text: Option<&'a serde_json::value::RawValue>,
    }
    static EXPECTED: std::sync::LazyLock<(String, String)> = std::sync::LazyLock::new(|| {
        let text = catalog::resource_text();
        let json = serde_json::to_string(&text).unwrap_or_default();
        (text, json)
    });
    if !is_object_text(&answer.body) {
        return Err(describe(answer, "not a JSON object in UTF-8"));
    }
    let reply: Envelope<'_> = serde_json::from_slice(&answer.body).map_err(|e| describe(answer, &e.to_string()))?;
    if reply.jsonrpc != "2.0" || reply.id != call.id {
        return Err(describe(answer, "not the JSON-RPC reply to this request"));
    }
    if reply.error.0 {
        return Err(describe(answer, "JSON-RPC error"));
    }
    let result = reply.result.ok_or_else(|| describe(answer, "no result"))?;
    if !is_object_text(result.get().as_bytes()) {
        return Err(describe(answer, "the result is not an object"));
    }
    let result: ReadResult<'_> = serde_json::from_str(result.get()).map_err(|e| describe(answer, &e.to_string()))?;
    let [item] = result.contents.as_slice() else { return Err(describe(answer, "not one content")) };
    if item.uri != catalog::RESOURCE_URI {
        return Err(describe(answer, "not the resource"));
    }
    let raw = item.text.ok_or_else(|| describe(answer, "no text"))?.get();
    let (text, json) = &*EXPECTED;
    if raw != json && serde_json::from_str::<String>(raw).ok().as_ref() != Some(text) {
        return Err(describe(answer, "wrong contents"));
    }
    Ok(())
}

fn check_result(expect: &Expect, result: &Value) -> Result<(), &'static str> {
    let ok = |good: bool, why: &'static str| if good { Ok(()) } else { Err(why) };
    match expect {
        Expect::Page { count, first, more } => {
            let tools = result["tools"].as_array().ok_or("no tools array")?;
            ok(tools.len() == *count, "wrong number of tools on the page")?;
            ok(tools.first().and_then(|t| t["name"].as_str()) == Some(first.as_str()), "wrong first tool")?;
            ok(tools.iter().all(|t| t["name"].is_string() && t["inputSchema"].is_object()), "malformed tool")?;
            ok(result["nextCursor"].is_string() == *more, "nextCursor present or absent wrongly")
        }
        Expect::AnyPage => {
            let tools = result["tools"].as_array().ok_or("no tools array")?;
            ok(tools.iter().all(|t| t["name"].is_string() && t["inputSchema"].is_object()), "malformed tool")?;
            ok(result.get("nextCursor").is_none_or(Value::is_string), "nextCursor is not a string")
        }
        Expect::Echo(text) => {
            ok(result["isError"] != true, "tool error")?;
            let content = result["content"].as_array().ok_or("no content")?;
            ok(content.len() == 1 && content[0]["type"] == "text", "not one text content")?;
            ok(content[0]["text"].as_str() == Some(text.as_str()), "text is not the message echoed")
        }
        // Checked apart (`check_read`).
        Expect::Resource => Ok(()),
        Expect::Discover => ok(
            result["supportedVersions"].as_array().is_some_and(|v| v.iter().any(|v| v == Era::Modern.version())),
            "supportedVersions lacks 2026-07-28",
        ),
        Expect::Initialize => ok(result["protocolVersion"] == Era::Legacy.version(), "another protocol version"),
        Expect::Accepted => Ok(()),
    }
}

/// An error text: the reason, the status and the start of the body.
fn describe(answer: &Answer, why: &str) -> String {
    let head = String::from_utf8_lossy(&answer.body[..answer.body.len().min(200)]).into_owned();
    format!("{why}: HTTP {} {head}", answer.status.as_u16())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: Value) -> Answer {
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        Answer { status: hyper::StatusCode::OK, headers, body: Bytes::from(body.to_string()) }
    }

    #[test]
    fn modern_requests_carry_meta_and_headers() {
        let call = echo(Era::Modern, "tool_1", "hi", 7);
        let body: Value = serde_json::from_slice(&call.body).expect("json");
        assert_eq!(body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
        assert_eq!(call.headers["mcp-method"], "tools/call");
        assert_eq!(call.headers["mcp-name"], "tool_1");
        let legacy = echo(Era::Legacy, "tool_1", "hi", 7);
        assert!(legacy.headers.get("mcp-name").is_none());
        assert_eq!(legacy.headers["mcp-protocol-version"], "2025-06-18");
    }

    #[test]
    fn checks_echoes() {
        let call = echo(Era::Modern, "tool_0", "hi", 3);
        let good = json!({"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hi"}]}});
        assert!(check(&call, &answer(good)).is_ok());
        let wrong_id = json!({"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"hi"}]}});
        assert!(check(&call, &answer(wrong_id)).is_err());
        let error = json!({"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"hi"}});
        assert!(check(&call, &answer(error)).is_err());
        let tool_error =
            json!({"jsonrpc":"2.0","id":3,"result":{"isError":true,"content":[{"type":"text","text":"hi"}]}});
        assert!(check(&call, &answer(tool_error)).is_err());
    }

    #[test]
    fn checks_again_what_passed_and_in_full_what_differs() {
        let call = echo(Era::Modern, "tool_0", "hi", 3);
        let reply = |v: Value| answer(v);
        let good = json!({"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hi"}]}});
        let checker = Checker::new(1);
        // A wrong answer never passes, before or after a good one.
        let wrong = json!({"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"ho"}]}});
        assert!(checker.check(0, &call, &reply(wrong.clone())).is_err());
        assert!(checker.check(0, &call, &reply(good.clone())).is_ok());
        assert!(checker.check(0, &call, &reply(good.clone())).is_ok());
        assert!(checker.check(0, &call, &reply(wrong)).is_err());
        // The same result with a wrong envelope or status is refused.
        let wrong_id = json!({"jsonrpc":"2.0","id":4,"result":{"content":[{"type":"text","text":"hi"}]}});
        assert!(checker.check(0, &call, &reply(wrong_id)).is_err());
        let with_error =
            json!({"jsonrpc":"2.0","id":3,"error":null,"result":{"content":[{"type":"text","text":"hi"}]}});
        assert!(checker.check(0, &call, &reply(with_error)).is_err());
        let mut failed = reply(good.clone());
        failed.status = hyper::StatusCode::BAD_GATEWAY;
        assert!(checker.check(0, &call, &failed).is_err());
        let mut not_json = reply(good);
        not_json.headers.insert("content-type", HeaderValue::from_static("text/plain"));
        assert!(checker.check(0, &call, &not_json).is_err());
        // Another good result (keys in another order) passes in full, and is then the one kept.
        let reordered = || Answer {
            body: Bytes::from_static(br#"{"id":3,"jsonrpc":"2.0","result":{"content":[{"text":"hi","type":"text"}]}}"#),
            ..reply(json!(null))
        };
        let reordered_body = reordered().body;
        assert!(checker.check(0, &call, &reordered()).is_ok());
        assert_eq!(checker.passed(0).result.as_deref(), Some(&br#"{"content":[{"text":"hi","type":"text"}]}"#[..]));
        assert_eq!(checker.passed(0).body.as_ref(), Some(&reordered_body));
        // The body that passed, once more with another status or content type: refused.
        let mut same_body_failed = reordered();
        same_body_failed.status = hyper::StatusCode::INTERNAL_SERVER_ERROR;
        assert!(checker.check(0, &call, &same_body_failed).is_err());
        let mut same_body_as_text = reordered();
        same_body_as_text.headers.insert("content-type", HeaderValue::from_static("text/plain"));
        assert!(checker.check(0, &call, &same_body_as_text).is_err());
        // The envelope in another form, or with a member the check does not know: checked in
        // full, and refused.
        let as_array = || Answer {
            body: Bytes::from_static(br#"["2.0",3,{"content":[{"text":"hi","type":"text"}]}]"#),
            ..reply(json!(null))
        };
        assert!(checker.check(0, &call, &as_array()).is_err());
        let not_utf8 = || {
            Answer {
            body: Bytes::from_static(
                b"{\"id\":3,\"jsonrpc\":\"2.0\",\"x\":\"\xff\",\"result\":{\"content\":[{\"text\":\"hi\",\"type\":\"text\"}]}}",
            ),
            ..reply(json!(null))
        }
        };
        assert!(result_as_sent(&call, &not_utf8()).is_none());
        assert!(checker.check(0, &call, &not_utf8()).is_err());
    }

    /// One checker used from several threads at once (the load generator's connections can be
    /// on either of its runtime's threads): what passes and what is refused stay the same.
    #[test]
    fn connections_share_what_passed_and_still_refuse_what_is_wrong() {
        let call = echo(Era::Legacy, "tool_0", "hi", 3);
        let good = json!({"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hi"}]}});
        let wrong = json!({"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"ho"}]}});
        let checker = std::sync::Arc::new(Checker::new(1));
        let connections: Vec<_> = (0..4)
            .map(|_| {
                let (checker, call, good, wrong) = (checker.clone(), call.clone(), good.clone(), wrong.clone());
                std::thread::spawn(move || {
                    (0..50).all(|_| {
                        checker.check(0, &call, &answer(good.clone())).is_ok()
                            && checker.check(0, &call, &answer(wrong.clone())).is_err()
                    })
                })
            })
            .collect();
        for connection in connections {
            assert!(connection.join().expect("connection"), "a good answer refused or a wrong one passed");
        }
        assert_eq!(checker.passed(0).body.as_deref(), Some(good.to_string().as_bytes()));
    }

    #[test]
    fn checks_a_read_again_by_its_whole_body() {
        let call = read(Era::Modern, 5);
        let text = catalog::resource_text();
        let reply = |text: &str| {
            let item = json!({"uri": catalog::RESOURCE_URI, "mimeType": "text/plain", "text": text});
            answer(json!({"jsonrpc":"2.0","id":5,"result":{"contents":[item],"resultType":"complete"}}))
        };
        let checker = Checker::new(1);
        let mut off = text.clone().into_bytes();
        off[text.len() / 2] = b'#';
        let off = String::from_utf8(off).expect("ascii");
        assert!(checker.check(0, &call, &reply(&off)).is_err());
        assert!(checker.check(0, &call, &reply(&text)).is_ok());
        assert!(checker.passed(0).result.is_none(), "a read is compared whole");
        assert!(checker.check(0, &call, &reply(&text)).is_ok());
        assert!(checker.check(0, &call, &reply(&off)).is_err(), "one letter off after a good read");
        assert!(checker.check(0, &call, &reply(&text[1..])).is_err());
    }

    #[test]
    fn checks_pages() {
        let expect = Expect::Page { count: 2, first: "tool_0".into(), more: true };
        let call = list(Era::Legacy, None, 1, expect);
        let tool = |n: &str| json!({"name": n, "inputSchema": {"type": "object"}});
        let page = |more: bool| {
            let mut r = json!({"tools": [tool("tool_0"), tool("tool_1")]});
            if more {
                r["nextCursor"] = "c".into();
            }
            json!({"jsonrpc":"2.0","id":1,"result": r})
        };
        assert!(check(&call, &answer(page(true))).is_ok());
        assert!(check(&call, &answer(page(false))).is_err());
    }

    #[test]
    fn checks_reads_to_the_letter() {
        let call = read(Era::Modern, 5);
        let text = catalog::resource_text();
        let reply = |id: u64, text: &str| {
            let item = json!({"uri": catalog::RESOURCE_URI, "mimeType": "text/plain", "text": text});
            json!({"jsonrpc":"2.0","id":id,"result":{"contents":[item],"resultType":"complete"}})
        };
        assert!(check(&call, &answer(reply(5, &text))).is_ok());
        // The same text escaped another way is the same text.
        let escaped_otherwise = reply(5, &text).to_string().replacen("\\n", "\\u000a", 3);
        assert_ne!(escaped_otherwise, reply(5, &text).to_string());
        let mut other = answer(Value::Null);
        other.body = Bytes::from(escaped_otherwise);
        assert!(check(&call, &other).is_ok());
        // One letter off, one byte short, another id, another resource or an error: wrong.
        let mut off = text.clone().into_bytes();
        off[text.len() / 2] = b'#';
        assert!(check(&call, &answer(reply(5, &String::from_utf8(off).expect("ascii")))).is_err());
        assert!(check(&call, &answer(reply(5, &text[1..]))).is_err());
        assert!(check(&call, &answer(reply(6, &text))).is_err());
        let mut elsewhere = reply(5, &text);
        elsewhere["result"]["contents"][0]["uri"] = "bench://other".into();
        assert!(check(&call, &answer(elsewhere)).is_err());
        let error = json!({"jsonrpc":"2.0","id":5,"error":{"code":-32002,"message":"not found"}});
        assert!(check(&call, &answer(error)).is_err());
        // An error beside the right text, or the reply as an array: wrong.
        let mut with_error = reply(5, &text);
        with_error["error"] = json!({"code": -32603, "message": "oops"});
        assert!(check(&call, &answer(with_error)).is_err());
        let mut as_array = answer(Value::Null);
        as_array.body = Bytes::from(json!(["2.0", 5, reply(5, &text)["result"]]).to_string());
        assert!(check(&call, &as_array).is_err());
    }
}
