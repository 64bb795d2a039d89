//! Both eras over Streamable HTTP, through the standalone process and through the four
//! services as separate processes.

use e2e::{Client, Stack};
use serde_json::{Value, json};

fn tool_names(result: &Value) -> Vec<&str> {
    result["tools"].as_array().expect("tools array").iter().filter_map(|t| t["name"].as_str()).collect()
}

/// initialize at 2025-06-18 → initialized → tools/list → tools/call, and the other methods.
async fn legacy_session(c: &Client) {
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}});
    let r = c.post(&init, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let result = r.result();
    assert_eq!(result["protocolVersion"], "2025-06-18");
    assert!(result["capabilities"]["tools"].is_object());
    assert!(result["serverInfo"]["name"].is_string());
    assert!(result.get("resultType").is_none(), "legacy results carry no resultType");

    let r = c
        .post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}), &[("mcp-protocol-version", "2025-06-18")])
        .await;
    assert_eq!(r.status, 202);
    assert!(r.text.is_empty());

    let r = c.legacy("2025-06-18", 2, "tools/list", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(tool_names(r.result()), ["echo", "add", "count"]);
    assert!(r.result().get("ttlMs").is_none());

    let r = c.legacy("2025-06-18", 3, "tools/call", json!({"name":"echo","arguments":{"message":"héllo"}})).await;
    assert_eq!(r.json["id"], 3);
    assert_eq!(r.result()["content"][0], json!({"type":"text","text":"héllo"}));
    assert_eq!(r.result()["isError"], false);

    let r = c.legacy("2025-06-18", 4, "tools/call", json!({"name":"add","arguments":{"a":2,"b":3}})).await;
    assert_eq!(r.result()["structuredContent"], json!({"sum":5}));

    let r = c.legacy("2025-06-18", 5, "ping", json!({})).await;
    assert_eq!(r.result(), &json!({}));

    let r = c.legacy("2025-06-18", 6, "resources/list", json!({})).await;
    assert_eq!(r.result()["resources"][0]["uri"], "about://server");
    let r = c.legacy("2025-06-18", 7, "resources/read", json!({"uri":"about://server"})).await;
    assert_eq!(r.result()["contents"][0]["mimeType"], "text/markdown");
    assert!(r.result()["contents"][0]["text"].as_str().is_some_and(|t| t.contains("2026-07-28")));

    let r = c.legacy("2025-06-18", 8, "prompts/get", json!({"name":"summarize","arguments":{"topic":"sales"}})).await;
    assert_eq!(r.result()["messages"][0]["role"], "user");
    assert!(r.result()["messages"][0]["content"]["text"].as_str().is_some_and(|t| t.contains("sales")));

    let r = c
        .legacy(
            "2025-06-18",
            9,
            "completion/complete",
            json!({"ref":{"type":"ref/prompt","name":"summarize"},"argument":{"name":"topic","value":"s"}}),
        )
        .await;
    assert_eq!(r.result()["completion"]["values"], json!(["sales", "support", "security"]));

    // Legacy resource-not-found is -32002 with the URI.
    let r = c.legacy("2025-06-18", 10, "resources/read", json!({"uri":"about://missing"})).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.error_code(), Some(-32002));
    assert_eq!(r.json["error"]["data"]["uri"], "about://missing");

    let r = c.legacy("2025-06-18", 11, "tools/call", json!({"name":"nope"})).await;
    assert_eq!(r.error_code(), Some(-32602));

    // Unknown methods are -32601 with HTTP 200 in the legacy era.
    let r = c.legacy("2025-06-18", 12, "no/such", json!({})).await;
    assert_eq!((r.status, r.error_code()), (200, Some(-32601)));
}

/// server/discover → tools/list → tools/call, each with `_meta` and routing headers.
async fn modern_sequence(c: &Client) {
    let r = c.modern(1, "server/discover", json!({})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let d = r.result();
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
    assert!(d["capabilities"]["tools"].is_object());
    assert!(d["ttlMs"].as_u64().is_some());
    assert_eq!(d["cacheScope"], "public");
    assert!(d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string());
    assert!(d.get("serverInfo").is_none(), "identity only in _meta");

    let r = c.modern(2, "tools/list", json!({})).await;
    let l = r.result();
    assert_eq!(tool_names(l), ["echo", "add", "count"]);
    assert_eq!(l["resultType"], "complete");
    assert!(l["ttlMs"].as_u64().is_some());
    assert!(["public", "private"].contains(&l["cacheScope"].as_str().unwrap_or_default()));

    let r = c.modern(3, "tools/call", json!({"name":"add","arguments":{"a":1.5,"b":2}})).await;
    let call = r.result();
    assert_eq!(call["resultType"], "complete");
    assert_eq!(call["structuredContent"], json!({"sum":3.5}));
    assert!(call.get("ttlMs").is_none(), "tools/call is not cacheable");
    assert!(call["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());

    for (id, method) in [(4, "resources/list"), (5, "resources/templates/list"), (6, "prompts/list")] {
        let r = c.modern(id, method, json!({})).await;
        assert_eq!(r.status, 200, "{method}: {}", r.text);
        assert!(r.result()["ttlMs"].is_u64() && r.result()["cacheScope"].is_string(), "{method}");
    }
    let r = c.modern(7, "resources/read", json!({"uri":"about://server"})).await;
    assert!(r.result()["ttlMs"].is_u64());
    assert_eq!(r.result()["contents"][0]["uri"], "about://server");

    // Modern resource-not-found is -32602 with the URI.
    let r = c.modern(8, "resources/read", json!({"uri":"test://nonexistent"})).await;
    assert_eq!(r.error_code(), Some(-32602));
    assert_eq!(r.json["error"]["data"]["uri"], "test://nonexistent");
    assert_eq!(r.json["id"], 8);

    let r = c
        .modern(9, "prompts/get", json!({"name":"summarize","arguments":{"topic":"roadmap","style":"detailed"}}))
        .await;
    assert_eq!(r.result()["resultType"], "complete");
    assert!(r.result()["messages"][0]["content"]["text"].as_str().is_some_and(|t| t.contains("detailed")));

    // Methods the stateless revision removed are 404 + -32601, same id.
    for (id, method) in
        [(10, "initialize"), (11, "ping"), (12, "logging/setLevel"), (13, "resources/subscribe"), (14, "no/such")]
    {
        let r = c.modern(id, method, json!({})).await;
        assert_eq!((r.status, r.error_code()), (404, Some(-32601)), "{method}: {}", r.text);
        assert_eq!(r.json["id"], id);
    }
}

/// A tool that reports progress answers with an SSE stream: notifications, then the reply.
async fn progress_streams(c: &Client) {
    let r = c
        .legacy(
            "2025-11-25",
            20,
            "tools/call",
            json!({"name":"count","arguments":{"to":3,"interval_ms":10},"_meta":{"progressToken":"p1"}}),
        )
        .await;
    assert_eq!(r.status, 200);
    assert!(r.content_type().starts_with("text/event-stream"), "{}", r.content_type());
    let progress: Vec<&Value> = r.events.iter().filter(|e| e["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3);
    assert_eq!(progress[2]["params"], json!({"progressToken":"p1","progress":3,"total":3,"message":"step 3 of 3"}));
    assert_eq!(r.json["id"], 20);
    assert_eq!(r.json["result"]["content"][0]["text"], "counted to 3");

    // A client that accepts only JSON gets the reply alone.
    let body = json!({"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"count","arguments":{"to":2,"interval_ms":1},"_meta":{"progressToken":1}}});
    let r = c.post(&body, &[("accept", "application/json"), ("mcp-protocol-version", "2025-11-25")]).await;
    assert!(r.content_type().starts_with("application/json"));
    assert_eq!(r.json["result"]["content"][0]["text"], "counted to 2");

    // Modern: log notifications only when the request opts in with logLevel.
    let r = c.modern(22, "tools/call", json!({"name":"count","arguments":{"to":2,"interval_ms":1}})).await;
    assert!(r.events.is_empty() || r.events.iter().all(|e| e.get("method").is_none()), "{}", r.text);
    let mut body = e2e::modern_request(23, "tools/call", json!({"name":"count","arguments":{"to":2,"interval_ms":1}}));
    body["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info");
    let r = c
        .post(&body, &[("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", "count")])
        .await;
    let logs = r.events.iter().filter(|e| e["method"] == "notifications/message").count();
    assert_eq!(logs, 2, "{}", r.text);
    assert_eq!(r.json["result"]["resultType"], "complete");
}

/// A legacy session, the modern sequence and progress streams through `stack`.
async fn serves_both_eras(stack: Stack) {
    let c = stack.client();
    legacy_session(&c).await;
    modern_sequence(&c).await;
    progress_streams(&c).await;
}

#[tokio::test]
async fn standalone_serves_both_eras() {
    serves_both_eras(Stack::standalone().await).await;
}

#[tokio::test]
async fn microservices_serve_both_eras() {
    serves_both_eras(Stack::microservices().await).await;
}

/// With one CPU each service runs on a single-threaded runtime (`mcp_proto::runtime::serve`).
#[tokio::test]
async fn microservices_on_one_thread_serve_both_eras() {
    serves_both_eras(Stack::microservices_on_one_thread().await).await;
}

#[tokio::test]
async fn legacy_negotiation_follows_the_seed_rule() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let cases = [
        (json!("2024-11-05"), "2024-11-05"),
        (json!("2025-03-26"), "2025-03-26"),
        (json!("2025-06-18"), "2025-06-18"),
        (json!("2025-11-25"), "2025-11-25"),
        (json!("2025-09-01"), "2025-06-18"),
        (json!("2026-07-28"), "2025-11-25"),
        (json!("2030-01-01"), "2025-11-25"),
        (json!("2023-01-01"), "2024-11-05"),
    ];
    for (i, (requested, expected)) in cases.into_iter().enumerate() {
        let body = json!({"jsonrpc":"2.0","id":i,"method":"initialize","params":{"protocolVersion":requested,"capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}});
        let r = c.post(&body, &[]).await;
        assert_eq!(r.result()["protocolVersion"], expected, "requested {requested}");
    }
    // The built-in demo catalog never changes: no list-changed or subscriptions advertised.
    let r = c.post(&json!({"jsonrpc":"2.0","id":98,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}), &[]).await;
    assert_eq!(r.result()["capabilities"]["tools"]["listChanged"], false);
    assert_eq!(r.result()["capabilities"]["resources"]["subscribe"], false);
    let d = c.modern(97, "server/discover", json!({})).await;
    assert_eq!(d.result()["capabilities"]["prompts"]["listChanged"], false);
    // No protocolVersion at all: the newest legacy revision.
    let r = c.post(&json!({"jsonrpc":"2.0","id":99,"method":"initialize","params":{"capabilities":{}}}), &[]).await;
    assert_eq!(r.result()["protocolVersion"], "2025-11-25");
    // 2024-11-05 has no completions capability and no titles.
    let body = json!({"jsonrpc":"2.0","id":100,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{}}});
    let r = c.post(&body, &[]).await;
    assert!(r.result()["capabilities"].get("completions").is_none());
    assert!(r.result()["serverInfo"].get("title").is_none());
}

#[tokio::test]
async fn health_and_oauth_metadata_through_the_gateway() {
    let stack = Stack::microservices().await;
    let http = e2e::http();
    for path in ["/healthz", "/readyz"] {
        let r = http.get(format!("{}{path}", stack.base)).send().await.expect("GET");
        assert_eq!(r.status(), 200, "{path}");
    }
    let r = http.get(format!("{}/.well-known/oauth-authorization-server", stack.base)).send().await.expect("GET");
    assert_eq!(r.status(), 200);
    let doc: Value = r.json().await.expect("JSON");
    assert_eq!(doc["issuer"], "http://127.0.0.1:8080");
    assert_eq!(doc["code_challenge_methods_supported"], json!(["S256"]));
    // The oauth-service's own health endpoints.
    let oauth = &stack.procs[2];
    for path in ["/healthz", "/readyz"] {
        let r = http.get(format!("{}{path}", oauth.url())).send().await.expect("GET");
        assert_eq!(r.status(), 200, "oauth {path}");
    }
}

#[tokio::test]
async fn lists_paginate_with_opaque_cursors() {
    let defs = e2e::example("conformance.yaml");
    let gw = e2e::Proc::start_with_env(
        "gateway",
        &["--standalone", "--listen", "127.0.0.1:0", "--definitions", &defs],
        &[("MCP_SERVICE_PAGE_SIZE", "4")],
        "gateway",
    )
    .await;
    let c = Client::new(&format!("{}/mcp", gw.url()));
    for modern in [false, true] {
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let params = cursor.as_ref().map_or(json!({}), |c| json!({"cursor": c}));
            let r = if modern {
                c.modern(pages, "tools/list", params).await
            } else {
                c.legacy("2025-11-25", pages, "tools/list", params).await
            };
            let page = r.result();
            let tools = page["tools"].as_array().expect("tools");
            assert!(tools.len() <= 4);
            names.extend(tools.iter().filter_map(|t| t["name"].as_str().map(str::to_owned)));
            pages += 1;
            if modern {
                assert_eq!(page["cacheScope"], "public", "every page has the same scope");
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        assert!(pages > 3, "{pages} pages");
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "no tool twice");
        assert!(
            names.contains(&"test_simple_text".to_owned()) && names.contains(&"json_schema_2020_12_tool".to_owned())
        );
    }
    let r = c.legacy("2025-11-25", 99, "tools/list", json!({"cursor": "bogus"})).await;
    assert_eq!(r.error_code(), Some(-32602));
    let r = c.modern(99, "prompts/list", json!({"cursor": 7})).await;
    assert_eq!(r.error_code(), Some(-32602));
}

#[tokio::test]
async fn structured_output_and_titles_follow_each_revision() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let tool = |r: &e2e::Reply, name: &str| {
        r.result()["tools"].as_array().expect("tools").iter().find(|t| t["name"] == name).cloned().expect("tool")
    };
    // 2024-11-05 predates titles, annotations and structured output.
    let old = c.legacy("2024-11-05", 1, "tools/list", json!({})).await;
    let add = tool(&old, "add");
    assert!(add.get("title").is_none() && add.get("outputSchema").is_none() && add.get("annotations").is_none());
    let r = c.legacy("2024-11-05", 2, "tools/call", json!({"name":"add","arguments":{"a":1,"b":2}})).await;
    assert!(r.result().get("structuredContent").is_none());
    assert_eq!(r.result()["content"][0]["text"], "{\"sum\":3}", "the text mirror stays");
    // 2025-03-26 has annotations, 2025-06-18 titles and structured output.
    let mid = c.legacy("2025-03-26", 3, "tools/list", json!({})).await;
    assert!(tool(&mid, "add").get("annotations").is_some() && tool(&mid, "add").get("title").is_none());
    let new = c.legacy("2025-06-18", 4, "tools/list", json!({})).await;
    assert_eq!(tool(&new, "add")["title"], "Add two numbers");
    assert_eq!(tool(&new, "add")["outputSchema"]["type"], "object");
    let r = c.legacy("2025-06-18", 5, "tools/call", json!({"name":"add","arguments":{"a":1,"b":2}})).await;
    assert_eq!(r.result()["structuredContent"], json!({"sum":3}));
    // tools/call without `arguments` is `{}`.
    let r = c.legacy("2025-06-18", 6, "tools/call", json!({"name":"count"})).await;
    assert_eq!(r.json["result"]["content"][0]["text"], "counted to 3");
}

#[tokio::test]
async fn icons_from_2025_11_25_on() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let echo_icons = |r: &e2e::Reply| {
        r.result()["tools"].as_array().expect("tools").iter().find(|t| t["name"] == "echo").expect("echo")["icons"]
            .clone()
    };
    let r = c.legacy("2025-11-25", 1, "tools/list", json!({})).await;
    assert_eq!(echo_icons(&r)[0]["mimeType"], "image/svg+xml");
    assert!(echo_icons(&r)[0]["src"].as_str().is_some_and(|s| s.starts_with("data:image/svg+xml;base64,")));
    let r = c.legacy("2025-06-18", 2, "tools/list", json!({})).await;
    assert!(echo_icons(&r).is_null());
    let r = c.modern(3, "tools/list", json!({})).await;
    assert!(echo_icons(&r).is_array());
    // The server's own icons: in initialize from 2025-11-25, in discover's `_meta`.
    let init = |v: &str| json!({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersion":v,"capabilities":{}}});
    assert!(c.post(&init("2025-11-25"), &[]).await.result()["serverInfo"]["icons"].is_array());
    assert!(c.post(&init("2025-06-18"), &[]).await.result()["serverInfo"].get("icons").is_none());
    let d = c.modern(5, "server/discover", json!({})).await;
    assert!(d.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["icons"].is_array());
}

/// Thousands of calls through the microservices: each gRPC call's stream is read to its end,
/// so the gateway's HTTP/2 connection to mcp-service never piles up reset streams (past 1 024
/// of them the HTTP/2 layer closes the connection, failing every call on it).
#[tokio::test]
async fn thousands_of_calls_keep_the_engine_connection_healthy() {
    let stack = Stack::microservices().await;
    let tasks: Vec<_> = (0..4)
        .map(|task| {
            let c = stack.client();
            tokio::spawn(async move {
                let mut failures = Vec::new();
                for i in 0..400 {
                    let r = c.modern(i, "tools/call", json!({"name": "add", "arguments": {"a": task, "b": i}})).await;
                    if r.status != 200 || r.json.get("result").is_none() {
                        failures.push(format!("{}: {}", r.status, r.text));
                    }
                }
                failures
            })
        })
        .collect();
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.expect("task"));
    }
    assert!(failures.is_empty(), "{} of 1600 calls failed, first: {:?}", failures.len(), failures.first());
    let logs = stack.gateway().log_text();
    assert!(!logs.contains("reset streams"), "{logs}");
}

/// Browser clients: CORS preflights and answers for allowed origins only, with the MCP headers
/// allowed and exposed; every route, and requests that match none, carry a request id.
#[tokio::test]
async fn browsers_get_cors_and_every_answer_a_request_id() {
    let stack = Stack::standalone().await;
    let c = stack.client();
    let origin = "http://localhost:5173";
    let header = |r: &reqwest::Response, name: &str| {
        r.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_ascii_lowercase).unwrap_or_default()
    };

    let preflight = |from: &'static str| {
        c.http
            .request(reqwest::Method::OPTIONS, &c.url)
            .header("origin", from)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type, mcp-protocol-version, mcp-session-id")
            .send()
    };
    let r = preflight(origin).await.expect("preflight");
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(header(&r, "access-control-allow-origin"), origin);
    assert!(header(&r, "access-control-allow-methods").contains("post"));
    for name in ["content-type", "mcp-protocol-version", "mcp-session-id", "mcp-method", "authorization"] {
        assert!(header(&r, "access-control-allow-headers").contains(name), "{name} allowed");
    }
    assert_eq!(header(&r, "access-control-max-age"), "3600");
    assert!(!header(&r, "x-request-id").is_empty(), "a preflight gets a request id too");

    // An origin the DNS-rebinding check refuses gets no CORS grant.
    let r = preflight("https://evil.example").await.expect("preflight");
    assert_eq!(header(&r, "access-control-allow-origin"), "");

    // A request from an allowed origin: the grant, the exposed session header, its own id back.
    let body = e2e::modern_request(1, "server/discover", json!({}));
    let r = c
        .http
        .post(&c.url)
        .header("origin", origin)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-protocol-version", e2e::MODERN)
        .header("mcp-method", "server/discover")
        .header("x-request-id", "req-cors-1")
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "access-control-allow-origin"), origin);
    assert!(header(&r, "access-control-expose-headers").contains("mcp-session-id"));
    assert_eq!(header(&r, "x-request-id"), "req-cors-1");

    // A path no route serves: 404, still with a request id (one is made when none is sent).
    let base = c.url.trim_end_matches("/mcp");
    let r = c.http.get(format!("{base}/no-such-path")).send().await.expect("GET");
    assert_eq!(r.status(), 404);
    assert_eq!(header(&r, "x-request-id").len(), 36, "a UUID");
}
