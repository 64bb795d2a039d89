//! Hostile input, case by case, in both eras over HTTP and over stdio where it applies: abused
//! headers (oversize, repeated, non-ASCII, CR/LF injection, bad Base64 sentinels), abused bodies
//! (invalid UTF-8, a BOM, duplicate keys, deep nesting, huge numbers and strings, ids and
//! parameters of every wrong type), too many concurrent streams from one client, and a flood
//! of `/oauth/token` requests. Each case asserts the exact status and code, that nothing
//! panicked or logged a secret, and that the next request is served.

use e2e::oauth::OAuth;
use e2e::{Client, MODERN, Proc, Reply, Stack, StdioClient, modern_request, raw_exchange};
use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Value, json};

use crate::oauth::secured;

const LEGACY: &str = "2025-06-18";

/// Nothing panicked, and no secret reached the logs.
fn healthy(proc: &Proc, secrets: &[&str]) {
    let logs = proc.log_text();
    assert!(!logs.contains("panicked"), "{} panicked:\n{logs}", proc.name);
    for s in secrets {
        assert!(!logs.contains(s), "{} logged a secret ({s})", proc.name);
    }
}

/// The server still answers a plain request in both eras.
async fn still_serving(c: &Client, sid: &str) {
    let r = c.modern(9000, "tools/list", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = c.post(&ping(9001), &legacy_headers(sid)).await;
    assert_eq!((r.status, r.json["result"].clone()), (200, json!({})), "{}", r.text);
}

fn ping(id: i64) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"ping"})
}

fn legacy_headers(sid: &str) -> [(&str, &str); 2] {
    [("mcp-session-id", sid), ("mcp-protocol-version", LEGACY)]
}

fn modern_headers<'a>(method: &'a str, name: Option<&'a str>) -> Vec<(&'a str, &'a str)> {
    let mut h = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
    if let Some(n) = name {
        h.push(("mcp-name", n));
    }
    h
}

/// A legacy session (initialize + initialized at 2025-06-18); its id.
async fn session(c: &Client) -> String {
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":LEGACY,"capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}});
    let r = c.post(&init, &[]).await;
    assert_eq!(r.result()["protocolVersion"], LEGACY);
    let sid = r.headers["mcp-session-id"].to_str().expect("ASCII").to_owned();
    let r = c.post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}), &legacy_headers(&sid)).await;
    assert_eq!(r.status, 202);
    sid
}

/// POST with header values given as raw bytes (anything `http` lets through: obs-text too).
async fn post_bytes(c: &Client, body: &Value, headers: &[(&str, &[u8])]) -> Reply {
    let mut req = c
        .http
        .post(&c.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (k, v) in headers {
        req = req.header(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_bytes(v).expect("a value http accepts"),
        );
    }
    let resp = req.send().await.expect("HTTP request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply { status, headers, text, json, events: Vec::new() }
}

/// The status line of a raw HTTP/1.1 exchange.
async fn raw_status(stack: &Stack, request: &str) -> String {
    let answer = raw_exchange(stack.gateway().addr(), request).await;
    answer.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn abused_headers_are_refused_cleanly() {
    let stack = Stack::conformance().await;
    let c = stack.client();
    let sid = session(&c).await;
    let call = json!({"name":"test_custom_headers","arguments":{"region":"eu"}});
    let modern_call = modern_request(1, "tools/call", call.clone());
    let legacy_call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":call});

    // Oversize: one 64 KiB header, and many small ones: 431 before anything else runs.
    let big = "x".repeat(64 * 1024);
    for headers in [vec![("x-padding", big.as_str())], vec![("mcp-session-id", big.as_str())]] {
        let r = c.post(&ping(1), &headers).await;
        assert_eq!((r.status, r.error_code()), (431, Some(-32600)), "{}", r.text);
        // A refusal at the edge still gets a request id to quote in a support ticket.
        let id = r.headers.get("x-request-id").and_then(|v| v.to_str().ok()).unwrap_or_default();
        assert_eq!(id.len(), 36, "a generated request id: {:?}", r.headers);
    }
    let many: Vec<(String, String)> = (0..200).map(|i| (format!("x-h{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let r = c.post(&ping(2), &many).await;
    assert_eq!(r.status, 431, "{}", r.text);
    still_serving(&c, &sid).await;

    // Repeated routing headers (two values): -32020 with 400, in the modern era; a repeated
    // version header in the legacy era too; a repeated session id or Authorization: -32600.
    let mut h = modern_headers("tools/call", Some("test_custom_headers"));
    h.push(("mcp-param-region", "eu"));
    for (name, value) in [("mcp-method", "tools/call"), ("mcp-name", "test_custom_headers")] {
        let mut twice = h.clone();
        twice.push((name, value));
        let r = c.post(&modern_call, &twice).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{name}: {}", r.text);
        assert_eq!(r.json["id"], 1);
    }
    let mut lh = legacy_headers(&sid).to_vec();
    lh.push(("mcp-protocol-version", LEGACY));
    let r = c.post(&legacy_call, &lh).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{}", r.text);
    for (name, value) in [("mcp-session-id", "another"), ("authorization", "Bearer a"), ("authorization", "Bearer b")] {
        let mut twice = legacy_headers(&sid).to_vec();
        twice.push((name, value));
        if name == "authorization" {
            twice.push((name, "Bearer c"));
        }
        let r = c.post(&legacy_call, &twice).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{name}: {}", r.text);
    }
    still_serving(&c, &sid).await;

    // Non-ASCII bytes in ASCII-only headers.
    let latin1: &[u8] = b"caf\xe9";
    let modern_bytes = |name: &'static str| {
        let mut v: Vec<(&str, &[u8])> = vec![
            ("mcp-protocol-version", MODERN.as_bytes()),
            ("mcp-method", b"tools/call"),
            ("mcp-name", b"test_custom_headers"),
            ("mcp-param-region", b"eu"),
        ];
        v.retain(|(k, _)| *k != name);
        v.push((name, latin1));
        v
    };
    for name in ["mcp-protocol-version", "mcp-method", "mcp-name", "mcp-param-region"] {
        let r = post_bytes(&c, &modern_call, &modern_bytes(name)).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "modern {name}: {}", r.text);
    }
    let legacy_bytes = |name: &'static str| {
        let mut v: Vec<(&str, &[u8])> =
            vec![("mcp-session-id", sid.as_bytes()), ("mcp-protocol-version", LEGACY.as_bytes())];
        v.retain(|(k, _)| *k != name);
        v.push((name, latin1));
        v
    };
    let r = post_bytes(&c, &legacy_call, &legacy_bytes("mcp-protocol-version")).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{}", r.text);
    let r = post_bytes(&c, &legacy_call, &legacy_bytes("mcp-session-id")).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{}", r.text);
    let mut auth = legacy_bytes("authorization");
    auth.pop();
    auth.push(("authorization", b"Bearer \xff\xfe"));
    let r = post_bytes(&c, &legacy_call, &auth).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{}", r.text);
    still_serving(&c, &sid).await;

    // Invalid Base64 sentinels in Mcp-Name and Mcp-Param-*: -32020, never a 500.
    for bad in ["=?base64?#?=", "=?base64?ZWNobw?=", "=?base64?/w==?=", "=?base64??="] {
        let mut h = modern_headers("tools/call", Some(bad));
        h.push(("mcp-param-region", "eu"));
        let r = c.post(&modern_call, &h).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "Mcp-Name {bad}: {}", r.text);
        let mut h = modern_headers("tools/call", Some("test_custom_headers"));
        h.push(("mcp-param-region", bad));
        let r = c.post(&modern_call, &h).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "Mcp-Param-Region {bad}: {}", r.text);
    }
    let mut h = modern_headers("tools/call", Some("test_custom_headers"));
    h.push(("mcp-param-region", "=?base64?ZXU=?="));
    let r = c.post(&modern_call, &h).await;
    assert_eq!(r.result()["content"][0]["text"], "region=eu", "a valid sentinel is decoded");

    // CR/LF injection and other malformed header lines on a raw socket: hyper answers 400.
    let addr = stack.gateway().addr();
    let body = modern_call.to_string();
    for injected in [
        "Mcp-Name: test_custom_headers\rX-Injected: 1\r\n",
        "Mcp-Name: test_custom_headers\r\n X-Folded: 1\r\n",
        "Mcp-Name: a\0b\r\n",
        "Mcp Name: a\r\n",
        "Mcp-Session-Id: a\rb\r\n",
    ] {
        let request = format!(
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nAccept: application/json\r\n\
             MCP-Protocol-Version: {MODERN}\r\nMcp-Method: tools/call\r\n{injected}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        let status = raw_status(&stack, &request).await;
        assert!(status.starts_with("HTTP/1.1 400"), "{injected:?}: {status}");
    }
    still_serving(&c, &sid).await;
    healthy(stack.gateway(), &[]);
}

/// `depth` nested arrays around a number.
fn deep(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

#[tokio::test]
async fn abused_bodies_get_spec_shaped_errors_over_http() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let sid = session(&c).await;
    let lh = legacy_headers(&sid);
    let mh = modern_headers("tools/call", Some("echo"));
    let meta = e2e::modern_meta().to_string();

    // Invalid UTF-8 anywhere in the body: -32700, 400, a null id.
    let bad_utf8 = |modern: bool| {
        let m = if modern { format!(",\"_meta\":{meta}") } else { String::new() };
        let mut b = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"X"}}{m}}}}}"#).into_bytes();
        let x = b.iter().position(|&c| c == b'X').expect("marker");
        b.splice(x..=x, [0xc3, 0x28]);
        b
    };
    for (modern, h) in [(false, lh.to_vec()), (true, mh.clone())] {
        let r = c.post_raw(bad_utf8(modern), &h).await;
        assert_eq!((r.status, r.error_code(), r.json["id"].clone()), (400, Some(-32700), Value::Null), "{}", r.text);
    }

    // A UTF-8 byte order mark before the JSON is ignored (RFC 8259 §8.1 allows it).
    let bom =
        format!("\u{feff}{}", modern_request(2, "tools/call", json!({"name":"echo","arguments":{"message":"bom"}})));
    let r = c.post_raw(bom, &mh).await;
    assert_eq!(r.result()["content"][0]["text"], "bom", "{}", r.text);
    let r = c.post_raw(format!("\u{feff}{}", ping(3)), &lh).await;
    assert_eq!(r.result(), &json!({}));

    // Duplicate keys in the envelope, in params and in _meta: -32600, 400. In tool arguments
    // the last value wins (serde_json's rule), the same value the Mcp-Param-* check sees.
    let dup_cases = [
        r#"{"jsonrpc":"2.0","id":4,"method":"ping","method":"tools/list"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"id":5,"method":"ping"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","id":4,"method":"ping"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","name":"add","arguments":{"message":"x"}}}"#.to_owned(),
    ];
    for body in &dup_cases {
        let r = c.post_raw(body.clone(), &lh).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{body}: {}", r.text);
    }
    let modern_dups = [
        format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"echo","name":"add","arguments":{{"message":"x"}},"_meta":{meta}}}}}"#
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"x"}},"_meta":{meta},"_meta":{meta}}}}}"#
        ),
        format!(
            r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"x"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/protocolVersion":"{MODERN}","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
        ),
    ];
    for body in &modern_dups {
        let r = c.post_raw(body.clone(), &mh).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{body}: {}", r.text);
        assert_eq!(r.json["id"], 4);
    }
    let last_wins = format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"first","message":"last"}},"_meta":{meta}}}}}"#
    );
    let r = c.post_raw(last_wins, &mh).await;
    assert_eq!(r.result()["content"][0]["text"], "last", "{}", r.text);

    // 10 000-deep nesting, in params, in the id, in arguments: -32700, 400, no stack overflow.
    for (modern, h) in [(false, lh.to_vec()), (true, mh.clone())] {
        let m = if modern { format!(",\"_meta\":{meta}") } else { String::new() };
        for body in [
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":{}}}{m}}}}}"#,
                deep(10_000)
            ),
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo","x":{}{m}}}}}"#,
                deep(10_000)
            ),
            format!(r#"{{"jsonrpc":"2.0","id":{},"method":"ping"}}"#, deep(10_000)),
            format!("{}{{}}{}", "{\"a\":".repeat(10_000), "}".repeat(10_000)),
        ] {
            let r = c.post_raw(body, &h).await;
            assert_eq!((r.status, r.error_code()), (400, Some(-32700)), "modern {modern}: {}", r.text);
            assert!(r.json["error"]["message"].as_str().is_some_and(|m| m.contains("recursion limit")), "{}", r.text);
        }
    }
    // Nesting within the limit is fine.
    let r = c.modern(8, "tools/call", json!({"name":"echo","arguments":{"message":"ok","x":serde_json::from_str::<Value>(&deep(100)).expect("JSON")}})).await;
    assert_eq!(r.result()["isError"], true, "additional properties are a tool error: {}", r.text);

    // Huge numbers: beyond f64 (1e400) anywhere is a parse error (-32700, nothing after the
    // parse could represent it); a 25-digit integer id is legal and echoed verbatim; 20-digit
    // integers in arguments are numbers.
    for (modern, h) in [(false, lh.to_vec()), (true, modern_headers("tools/call", Some("add")))] {
        let m = if modern { format!(",\"_meta\":{meta}") } else { String::new() };
        for body in [
            r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#.to_owned(),
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"add","arguments":{{"a":-1e400,"b":1}}{m}}}}}"#
            ),
        ] {
            let r = c.post_raw(body, &h).await;
            assert_eq!((r.status, r.error_code()), (400, Some(-32700)), "{}", r.text);
            assert!(r.text.contains("number out of range"), "{}", r.text);
        }
    }
    let r = c.post_raw(r#"{"jsonrpc":"2.0","id":1234567890123456789012345,"method":"ping"}"#, &lh).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains(r#""id":1234567890123456789012345"#), "{}", r.text);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":98765432109876543210,"method":"tools/call","params":{{"name":"add","arguments":{{"a":1,"b":2}},"_meta":{meta}}}}}"#
    );
    let r = c.post_raw(body, &modern_headers("tools/call", Some("add"))).await;
    assert_eq!(r.result()["structuredContent"], json!({"sum":3}), "{}", r.text);
    assert!(r.text.contains(r#""id":98765432109876543210"#), "{}", r.text);
    let body = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"add","arguments":{"a":12345678901234567890,"b":-12345678901234567890}}}"#;
    let r = c.post_raw(body, &lh).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json.get("result").is_some(), "20-digit integers are numbers: {}", r.text);

    // A huge string within the body limit comes back whole.
    let long = "é".repeat(1024 * 1024);
    let r = c.modern(10, "tools/call", json!({"name":"echo","arguments":{"message":long}})).await;
    assert_eq!(r.result()["content"][0]["text"].as_str().map(str::len), Some(long.len()));

    // ids: strings and integers are echoed; null, objects, arrays, floats and booleans are
    // -32600 with a null id.
    for (id, raw) in [(json!("abc"), r#""abc""#), (json!(-42), "-42"), (json!(""), r#""""#), (json!(0), "0")] {
        let r = c.post(&json!({"jsonrpc":"2.0","id":id,"method":"ping"}), &lh).await;
        assert_eq!(r.json["id"], id, "{raw}: {}", r.text);
        let mut body = modern_request(0, "tools/list", json!({}));
        body["id"] = id.clone();
        let r = c.post(&body, &modern_headers("tools/list", None)).await;
        assert_eq!((r.status, r.json["id"].clone()), (200, id), "{}", r.text);
    }
    for id in [json!(null), json!({"a":1}), json!([1]), json!(1.5), json!(true), json!(1e3)] {
        let r = c.post(&json!({"jsonrpc":"2.0","id":id,"method":"ping"}), &lh).await;
        assert_eq!((r.status, r.error_code(), r.json["id"].clone()), (400, Some(-32600), Value::Null), "{id}");
        let mut body = modern_request(0, "tools/list", json!({}));
        body["id"] = id.clone();
        let r = c.post(&body, &modern_headers("tools/list", None)).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "modern {id}: {}", r.text);
    }

    // Parameters of the wrong type, method by method: -32602 with a message, the id echoed.
    let wrong: [(&str, Value); 9] = [
        ("tools/call", json!({"name": 7})),
        ("tools/call", json!({"name": "echo", "arguments": [1]})),
        ("tools/call", json!({"name": "echo", "arguments": "x"})),
        ("tools/list", json!({"cursor": 5})),
        ("resources/list", json!({"cursor": {"a": 1}})),
        ("resources/read", json!({"uri": {"a": 1}})),
        ("prompts/get", json!({"name": "summarize", "arguments": {"name": 5}})),
        ("prompts/get", json!({"name": ["summarize"]})),
        ("completion/complete", json!({"ref": "x", "argument": 1})),
    ];
    for (i, (method, params)) in wrong.iter().enumerate() {
        let id = 100 + i64::try_from(i).expect("small");
        let r = c.legacy(LEGACY, id, method, params.clone()).await;
        let r2 = c.post(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}), &lh).await;
        let m = c.modern(id, method, params.clone()).await;
        for (era, r) in [("legacy", &r), ("session", &r2), ("modern", &m)] {
            assert_eq!((r.status, r.error_code()), (200, Some(-32602)), "{era} {method} {params}: {}", r.text);
            assert_eq!(r.json["id"], id);
            assert!(r.json["error"]["message"].as_str().is_some_and(|m| m.len() > 10), "{}", r.text);
        }
    }
    let r = c.post(&json!({"jsonrpc":"2.0","id":120,"method":"logging/setLevel","params":{"level":"loud"}}), &lh).await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32602)), "{}", r.text);
    let r = c.post(&json!({"jsonrpc":"2.0","id":121,"method":"logging/setLevel","params":{"level":7}}), &lh).await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32602)), "{}", r.text);
    let mut loud = modern_request(122, "tools/list", json!({}));
    loud["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!(["debug"]);
    let r = c.post(&loud, &modern_headers("tools/list", None)).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32602)), "{}", r.text);

    still_serving(&c, &sid).await;
    healthy(stack.gateway(), &[]);
}

/// The same bodies on one stdio connection: the same codes, and the connection goes on.
#[tokio::test]
async fn abused_bodies_over_stdio() {
    let mut client = StdioClient::start(&[]).await;
    let (_, r) = client
        .request(&json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":LEGACY,"capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}))
        .await;
    assert_eq!(r["result"]["protocolVersion"], LEGACY);
    client.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    let meta = e2e::modern_meta().to_string();

    // Invalid UTF-8 in a line: -32700.
    let mut line = br#"{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"X"}}"#.to_vec();
    let x = line.iter().position(|&c| c == b'X').expect("marker");
    line.splice(x..=x, [0xff]);
    client.send_bytes(&line).await;
    let r = client.recv().await;
    assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32700), Value::Null), "{r}");

    // A BOM is ignored.
    client.send_line(&format!("\u{feff}{}", ping(2))).await;
    assert_eq!(client.recv().await["result"], json!({}));

    // Duplicate keys: -32600.
    for line in [
        r#"{"jsonrpc":"2.0","id":3,"id":4,"method":"ping"}"#.to_owned(),
        format!(
            r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","name":"add","_meta":{meta}}}}}"#
        ),
    ] {
        client.send_line(&line).await;
        assert_eq!(client.recv().await["error"]["code"], -32600, "{line}");
    }

    // Deep nesting, legacy and modern: -32700, and the process is still there.
    for m in [String::new(), format!(",\"_meta\":{meta}")] {
        client
            .send_line(&format!(
                r#"{{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":{}}}{m}}}}}"#,
                deep(10_000)
            ))
            .await;
        let r = client.recv().await;
        assert_eq!(r["error"]["code"], -32700, "{r}");
    }
    // Huge numbers.
    client.send_line(r#"{"jsonrpc":"2.0","id":1e400,"method":"ping"}"#).await;
    assert_eq!(client.recv().await["error"]["code"], -32700);
    client
        .send_line(
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"add","arguments":{"a":1e400,"b":1}}}"#,
        )
        .await;
    assert_eq!(client.recv().await["error"]["code"], -32700);
    let (_, r) = client.request(&json!({"jsonrpc":"2.0","id":12345678901234567890_u64,"method":"ping"})).await;
    assert_eq!(r["result"], json!({}));
    // Illegal ids.
    for id in ["null", "{}", "[1]", "1.5", "true"] {
        client.send_line(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)).await;
        let r = client.recv().await;
        assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32600), Value::Null), "{id}");
    }
    // Wrong parameter types in both eras.
    for (i, (method, params)) in [
        ("tools/call", json!({"name": 7})),
        ("tools/call", json!({"name": "echo", "arguments": [1]})),
        ("tools/list", json!({"cursor": 5})),
        ("resources/read", json!({"uri": {"a": 1}})),
        ("prompts/get", json!({"name": "summarize", "arguments": {"name": 5}})),
        ("logging/setLevel", json!({"level": "loud"})),
    ]
    .into_iter()
    .enumerate()
    {
        let id = 10 + i64::try_from(i).expect("small");
        let (_, r) = client.request(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})).await;
        assert_eq!(r["error"]["code"], -32602, "legacy {method} {params}: {r}");
        if method != "logging/setLevel" {
            let (_, r) = client.request(&modern_request(id, method, params.clone())).await;
            assert_eq!(r["error"]["code"], -32602, "modern {method} {params}: {r}");
        }
    }
    let (_, r) = client.request(&ping(99)).await;
    assert_eq!(r["result"], json!({}));
    let logs = client.logs.lock().expect("logs").join("\n");
    assert!(!logs.contains("panicked"), "{logs}");
    assert!(client.close().await.success());
}

/// Legacy GET streams and long POST SSE streams from one client, past the cap: 429 with
/// `Retry-After` and a JSON-RPC error; a closed stream makes room again.
#[tokio::test]
async fn too_many_streams_from_one_client_get_429() {
    let gw = Proc::start_with_env(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0", "--definitions", &e2e::example("conformance.yaml")],
        &[("GATEWAY_MAX_STREAMS_PER_CLIENT", "3")],
        "gateway",
    )
    .await;
    let c = Client::new(&format!("{}/mcp", gw.url()));
    let sid = session(&c).await;
    let h = [("mcp-session-id", sid.as_str()), ("mcp-protocol-version", "2025-11-25")];
    let mut streams = Vec::new();
    for _ in 0..2 {
        let s = c.get_stream(&h).await;
        assert_eq!(s.status, 200);
        streams.push(s);
    }
    // A long POST stream: progress first, so it is an open SSE stream.
    let slow = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_tool_with_progress","arguments":{},"_meta":{"progressToken":"p"}}});
    let mut post_stream = c.stream(&slow, &h).await;
    assert_eq!(post_stream.status, 200);
    assert_eq!(post_stream.headers["content-type"], "text/event-stream");
    // The fourth, of either kind: refused.
    let refused = c.get_stream(&h).await;
    assert_eq!(refused.status, 429);
    assert!(refused.headers["retry-after"].to_str().expect("ASCII").parse::<u64>().is_ok_and(|s| s >= 1));
    let r = c.post(&ping(2), &h).await;
    assert_eq!((r.status, r.error_code()), (429, Some(-32600)), "{}", r.text);
    assert!(r.headers.contains_key("retry-after"));
    let r = c.modern(3, "tools/list", json!({})).await;
    assert_eq!(r.status, 429, "the cap counts the client, not the era");
    // Health checks are not counted.
    let health = e2e::http().get(format!("{}/healthz", gw.url())).send().await.expect("GET");
    assert_eq!(health.status().as_u16(), 200);
    // Finish the POST stream and close a GET stream: there is room again.
    while post_stream.next_within(std::time::Duration::from_secs(20)).await.is_some_and(|m| m.get("id").is_none()) {}
    drop(post_stream);
    drop(streams.pop());
    let mut served = None;
    for _ in 0..100 {
        let r = c.post(&ping(4), &h).await;
        if r.status != 429 {
            served = Some(r);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let served = served.expect("room again once streams closed");
    assert_eq!(served.json["result"], json!({}), "{}", served.text);
    healthy(&gw, &[]);
}

/// `/oauth/token` is rate limited per client address like registration: 429, `Retry-After`,
/// an RFC 6749-shaped error, `no-store`; what was sent is not logged.
#[tokio::test]
async fn token_endpoint_is_rate_limited_per_client_address() {
    let dir = tempfile::tempdir().expect("tempdir");
    let stack = secured(&dir, &[("OAUTH_TOKEN_PER_MINUTE", "3")]).await;
    let oauth = OAuth::new(&stack.base);
    let secret = "hunter2-not-a-real-secret";
    let form = [("grant_type", "client_credentials"), ("client_id", "nobody"), ("client_secret", secret)];
    for _ in 0..3 {
        let r = oauth.token(&form).await;
        assert_eq!((r.status, r.json["error"].as_str()), (401, Some("invalid_client")), "{}", r.text);
    }
    let limited = oauth.token(&form).await;
    assert_eq!(limited.status, 429, "{}", limited.text);
    assert_eq!(limited.json["error"], "slow_down");
    assert!(limited.json["error_description"].is_string());
    assert_eq!(limited.header("cache-control"), "no-store");
    assert!(limited.header("retry-after").parse::<u64>().is_ok_and(|s| s >= 1));
    // Other endpoints are not affected by it.
    let meta = oauth.get("/.well-known/oauth-authorization-server").await;
    assert_eq!(meta.status, 200);
    assert_eq!(stack.client().modern(1, "tools/list", json!({})).await.status, 401);
    healthy(stack.gateway(), &[secret]);
}
