//! `text` tools are rendered by mcp-service from its catalog snapshot: no call to the registry.

use std::time::Duration;

use e2e::{Client, Proc};
use serde_json::json;

const V1: &str = r#"server: { name: texts }
allow_private_networks: true
tools:
  - name: greet
    input_schema: { type: object, properties: { who: { type: string } }, required: [who] }
    text: "Hello, {{ who }}!"
  - name: url
    input_schema: { type: object, properties: { path: { type: string } } }
    text: "path {{ path }}"
  - name: fetch
    input_schema: { type: object, properties: {} }
    http: { url: "http://127.0.0.1:9/never" }
"#;

fn text_of(r: &e2e::Reply) -> String {
    r.result()["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

/// The registry killed after the catalog arrived: text tools keep answering exactly as before
/// (schema errors included), other backends fail with the usual clear error; a reload that
/// changes a template changes the answers, and the registry no longer counts text calls.
#[tokio::test]
async fn text_tools_are_rendered_without_the_registry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let defs = dir.path().join("defs.yaml");
    std::fs::write(&defs, V1).expect("write");
    let defs_arg = defs.to_str().expect("utf-8");
    let registry_port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let listen = format!("127.0.0.1:{registry_port}");
    let registry_metrics_port =
        std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let registry_metrics_at = format!("127.0.0.1:{registry_metrics_port}");
    let start_registry = async || {
        Proc::start_with_env(
            "registry-service",
            &["--listen", &listen, "--definitions", defs_arg],
            &[("REGISTRY_METRICS_LISTEN", &registry_metrics_at)],
            "registry-service",
        )
        .await
    };
    let registry = start_registry().await;
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let mcp = Proc::start_with_env(
        "mcp-service",
        &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
        &[("MCP_SERVICE_METRICS_LISTEN", &format!("127.0.0.1:{metrics_port}"))],
        "mcp-service",
    )
    .await;
    let oauth = Proc::start("oauth-service", &["--listen", "127.0.0.1:0"], "oauth-service").await;
    let gateway = Proc::start(
        "gateway",
        &["--listen", "127.0.0.1:0", "--mcp-service", &mcp.url(), "--oauth-service", &oauth.url()],
        "gateway",
    )
    .await;
    let client = Client::new(&format!("{}/mcp", gateway.url()));
    let call = |id: i64, name: &'static str, arguments: serde_json::Value| {
        client.modern(id, "tools/call", json!({ "name": name, "arguments": arguments }))
    };

    let r = call(1, "greet", json!({"who": "Ada <3"})).await;
    assert_eq!(text_of(&r), "Hello, Ada <3!", "{}", r.text);
    assert_eq!(r.result()["isError"], false);
    // The whole answer (written without a tree): a modern one carries `resultType` and the
    // server's identity, each once.
    assert_eq!(r.result()["resultType"], "complete", "{}", r.text);
    assert_eq!(r.result()["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "texts", "{}", r.text);
    assert_eq!(r.result().as_object().map(|o| o.len()), Some(4), "{}", r.text);
    for key in [r#""resultType""#, r#""_meta""#, r#""io.modelcontextprotocol/serverInfo""#, r#""content""#] {
        assert_eq!(r.text.matches(key).count(), 1, "{key} once: {}", r.text);
    }
    // A tool named like the URL templates is not URL-encoded.
    assert_eq!(text_of(&call(2, "url", json!({"path": "a/b?c"})).await), "path a/b?c");
    let registry_metrics = e2e::metrics(&format!("http://{registry_metrics_at}")).await;
    assert!(!registry_metrics.contains("registry_tool_calls_total{tool=\"greet\""), "{registry_metrics}");
    let counted = e2e::metrics(&format!("http://127.0.0.1:{metrics_port}")).await;
    assert!(counted.contains("mcp_text_tool_calls_total{tool=\"greet\",outcome=\"ok\"} 1"), "{counted}");
    // mcp-service read each envelope from the gateway's outline, parsing none of the bodies.
    assert!(counted.contains("mcp_envelopes_total{from=\"outline\"} 2"), "{counted}");
    assert!(!counted.contains("mcp_envelopes_total{from=\"body\"}"), "{counted}");
    // A legacy answer has no `resultType` and no `_meta` (and the quote in its text is escaped).
    let legacy =
        client.legacy("2025-06-18", 6, "tools/call", json!({"name": "greet", "arguments": {"who": "\"Ada\""}})).await;
    let expected = json!({"content": [{"type": "text", "text": "Hello, \"Ada\"!"}], "isError": false});
    assert_eq!(legacy.result(), &expected, "{}", legacy.text);

    // The registry goes away: text tools and their schema errors are unchanged, an http tool
    // fails at once with the usual error.
    drop(registry);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = call(3, "greet", json!({"who": "Grace"})).await;
    assert_eq!(text_of(&r), "Hello, Grace!", "{}", r.text);
    let r = call(4, "greet", json!({"who": 7})).await;
    assert_eq!(r.result()["isError"], true, "{}", r.text);
    assert!(text_of(&r).starts_with("Invalid arguments for tool greet"), "{}", r.text);
    assert_eq!(r.result()["resultType"], "complete", "{}", r.text);
    let counted = e2e::metrics(&format!("http://127.0.0.1:{metrics_port}")).await;
    let tool_errors = counted
        .lines()
        .filter(|l| l.starts_with("mcp_requests_total{") && l.contains("outcome=\"tool_error\""))
        .collect::<Vec<_>>();
    assert_eq!(tool_errors.len(), 1, "the failed call is counted as a tool error: {counted}");
    assert!(tool_errors[0].contains("era=\"modern\"") && tool_errors[0].ends_with(" 1"), "{counted}");
    let r = call(5, "fetch", json!({})).await;
    assert_eq!(r.error_code(), Some(-32603), "{}", r.text);

    // Back, with a changed template: the new catalog's template answers.
    std::fs::write(&defs, V1.replace("Hello, {{ who }}!", "Goodbye, {{ who }}.")).expect("write");
    let _registry = start_registry().await;
    let mut changed = false;
    for i in 0..50 {
        if text_of(&call(10 + i, "greet", json!({"who": "Linus"})).await) == "Goodbye, Linus." {
            changed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(changed, "the reloaded template answers");
}
