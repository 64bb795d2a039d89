//! Bad input gets a spec-shaped error, and the server keeps serving.

use e2e::{MODERN, Stack, modern_request};
use serde_json::{Value, json};

#[tokio::test]
async fn envelope_errors() {
    let stack = Stack::standalone().await;
    let c = stack.client();

    let r = c.post_raw("{\"jsonrpc\":", &[]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32700)), "{}", r.text);
    assert_eq!(r.json["id"], Value::Null);

    let r = c.post_raw(vec![0xff, 0xfe, b'{'], &[]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32700)));

    for body in [
        "42",
        "\"text\"",
        "null",
        "{}",
        r#"{"jsonrpc":"2.0","id":1}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#,
        r#"{"id":1,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":["x"]}"#,
    ] {
        let r = c.post_raw(body, &[]).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{body}: {}", r.text);
    }
    // The id is echoed when it could be read.
    let r = c.post_raw(r#"{"jsonrpc":"1.0","id":"abc","method":"ping"}"#, &[]).await;
    assert_eq!(r.json["id"], "abc");

    // Wrong parameter types are -32602, with the request id.
    let r = c.legacy("2025-11-25", 5, "tools/call", json!({"name": 7})).await;
    assert_eq!((r.error_code(), r.json["id"].clone()), (Some(-32602), json!(5)));
    let r = c.legacy("2025-11-25", 6, "tools/call", json!({"name": "echo", "arguments": [1]})).await;
    assert_eq!(r.error_code(), Some(-32602));
    let r = c.post(&json!({"jsonrpc":"2.0","id":7,"method":"tools/list","params":"x"}), &[]).await;
    assert_eq!(r.error_code(), Some(-32600));
    let r = c.legacy("2025-11-25", 8, "tools/list", json!({"cursor": "not-ours"})).await;
    assert_eq!(r.error_code(), Some(-32602));
    // Arguments the tool rejects are a tool execution error the model can correct.
    let r = c.legacy("2025-11-25", 9, "tools/call", json!({"name": "add", "arguments": {"a": "x", "b": 1}})).await;
    assert_eq!(r.result()["isError"], true);
    let text = r.result()["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("Invalid arguments for tool add") && text.contains("/a"), "{text}");
    let r = c.modern(11, "tools/call", json!({"name": "echo", "arguments": {"message": "x", "extra": 1}})).await;
    assert_eq!(r.result()["isError"], true, "additionalProperties: false is enforced");
    let r = c.modern(12, "tools/call", json!({"name": "echo"})).await;
    assert!(r.result()["content"][0]["text"].as_str().is_some_and(|t| t.contains("message")), "{}", r.text);

    // Still serving.
    let r = c.legacy("2025-11-25", 10, "ping", json!({})).await;
    assert_eq!(r.result(), &json!({}));
}

#[tokio::test]
async fn modern_validation_order() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let headers = [("mcp-protocol-version", MODERN), ("mcp-method", "server/discover")];

    // A modern header with a body that lacks `_meta` or parts of it: -32602, 400.
    for params in [
        json!({}),
        json!({"_meta":{}}),
        json!({"_meta":{"io.modelcontextprotocol/protocolVersion":MODERN}}),
        json!({"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}),
    ] {
        let body = json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":params});
        let r = c.post(&body, &headers).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32602)), "{params}: {}", r.text);
        assert_eq!(r.json["id"], 1);
    }
    // Body modern, header missing or different: -32020.
    let body = modern_request(2, "server/discover", json!({}));
    let r = c.post(&body, &[("mcp-method", "server/discover")]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)), "{}", r.text);
    let r = c.post(&body, &[("mcp-protocol-version", "2025-11-25"), ("mcp-method", "server/discover")]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));
    // Body v999 with header 2026-07-28: the mismatch is reported before the version.
    let mut v999 = body.clone();
    v999["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("v999");
    let r = c.post(&v999, &headers).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));
    // Both v999: unsupported version, with what we support and what was asked.
    let r = c.post(&v999, &[("mcp-protocol-version", "v999"), ("mcp-method", "server/discover")]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32022)), "{}", r.text);
    assert_eq!(r.json["error"]["data"], json!({"supported":["2026-07-28"],"requested":"v999"}));
    // Mcp-Method and Mcp-Name must match the body, case-sensitively.
    let r = c.post(&body, &[("mcp-protocol-version", MODERN), ("mcp-method", "SERVER/DISCOVER")]).await;
    assert_eq!(r.error_code(), Some(-32020));
    let r = c.post(&body, &[("mcp-protocol-version", MODERN)]).await;
    assert_eq!(r.error_code(), Some(-32020));
    let call = modern_request(3, "tools/call", json!({"name":"echo","arguments":{"message":"x"}}));
    let r = c.post(&call, &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/call")]).await;
    assert_eq!(r.error_code(), Some(-32020));
    let r = c
        .post(&call, &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", "=?base64?#?=")])
        .await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32020)));
    let r = c
        .post(
            &call,
            &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", "=?base64?ZWNobw==?=")],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A URI with non-ASCII characters travels Base64-encoded.
    let read = modern_request(4, "resources/read", json!({"uri":"about://ünïcode"}));
    let r = c
        .post(
            &read,
            &[
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "resources/read"),
                ("mcp-name", "=?base64?YWJvdXQ6Ly/DvG7Dr2NvZGU=?="),
            ],
        )
        .await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32602)), "{}", r.text);
    // An unknown log level is refused.
    let mut bad_level = modern_request(5, "tools/list", json!({}));
    bad_level["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("loud");
    let r = c.post(&bad_level, &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/list")]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32602)));
    // `clientInfo` is optional.
    let mut no_info = modern_request(6, "tools/list", json!({}));
    no_info["params"]["_meta"].as_object_mut().expect("meta").remove("io.modelcontextprotocol/clientInfo");
    let r = c.post(&no_info, &[("mcp-protocol-version", MODERN), ("mcp-method", "tools/list")]).await;
    assert_eq!(r.status, 200);
    // A modern notification is accepted with 202.
    let note =
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"_meta":e2e::modern_meta()}});
    let r = c.post(&note, &[("mcp-protocol-version", MODERN), ("mcp-method", "notifications/cancelled")]).await;
    assert_eq!(r.status, 202);
    // `server/discover` without any `_meta` or header is answered too (an era probe).
    let r = c.post(&json!({"jsonrpc":"2.0","id":7,"method":"server/discover"}), &[]).await;
    assert_eq!(r.result()["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(r.result()["resultType"], "complete");
}

#[tokio::test]
async fn http_edge_refusals() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"});

    // DNS rebinding: a foreign Host or Origin is refused, loopback ones are served.
    let r = c.post(&ping, &[("host", "evil.example.com")]).await;
    assert_eq!(r.status, 403);
    let r = c.post(&ping, &[("origin", "http://evil.example.com")]).await;
    assert_eq!(r.status, 403);
    let port = stack.gateway().addr().port();
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let origin = format!("http://{host}");
        let r = c.post(&ping, &[("host", host.as_str()), ("origin", origin.as_str())]).await;
        assert_eq!(r.status, 200, "{host}");
    }
    // Content type and Accept.
    let r = c.post(&ping, &[("content-type", "text/plain")]).await;
    assert_eq!(r.status, 415);
    let r = c.post(&ping, &[("accept", "text/html")]).await;
    assert_eq!(r.status, 406);
    let r = c.post(&ping, &[("accept", "application/json")]).await;
    assert_eq!(r.status, 200, "a lenient client that only takes JSON still gets its answer");
    // Oversize body: 413 as soon as the headers announce it, before any of it is sent.
    let head = e2e::raw_exchange(
        stack.gateway().addr(),
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 5242880\r\n\r\n",
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    assert!(head.contains("application/json") && head.contains("\"code\":-32600"), "a JSON-RPC error: {head}");
    // Without a legacy session there is no GET stream (405) and nothing to DELETE (400).
    let http = e2e::http();
    let r = http.get(&c.url).header("accept", "text/event-stream").send().await.expect("GET");
    assert_eq!(r.status(), 405);
    let r = http.delete(&c.url).send().await.expect("DELETE");
    assert_eq!(r.status(), 400);
    // Still serving.
    assert_eq!(c.post(&ping, &[]).await.status, 200);
}

#[tokio::test]
async fn batches_only_for_2025_03_26() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let batch = json!([
        {"jsonrpc":"2.0","id":1,"method":"ping"},
        {"jsonrpc":"2.0","method":"notifications/initialized"},
        {"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"message":"b"}}},
        {"jsonrpc":"2.0","id":3,"method":"initialize","params":{}},
        42
    ]);
    // No version header after the handshake means 2025-03-26, which has batches.
    let r = c.post(&batch, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let replies = r.json.as_array().expect("a batch reply");
    assert_eq!(replies.len(), 4, "one reply per request, none for the notification: {}", r.text);
    assert_eq!(replies[0]["result"], json!({}));
    assert_eq!(replies[1]["result"]["content"][0]["text"], "b");
    assert_eq!(replies[2]["error"]["code"], -32600, "initialize cannot be batched");
    assert_eq!(replies[3]["error"]["code"], -32600);
    let r = c.post(&batch, &[("mcp-protocol-version", "2025-03-26")]).await;
    assert!(r.json.is_array());
    // Only notifications: 202.
    let r = c.post(&json!([{"jsonrpc":"2.0","method":"notifications/initialized"}]), &[]).await;
    assert_eq!(r.status, 202);
    // Empty batch, and later revisions: -32600 with 400.
    let r = c.post(&json!([]), &[]).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32600)));
    for v in ["2025-06-18", "2025-11-25", MODERN] {
        let r = c.post(&batch, &[("mcp-protocol-version", v)]).await;
        assert_eq!((r.status, r.error_code()), (400, Some(-32600)), "{v}: {}", r.text);
    }
}
