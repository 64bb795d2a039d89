//! Both eras over stdio, with the registry in-process and as its own process.

use e2e::{Proc, StdioClient, modern_request};
use serde_json::{Value, json};

async fn walk(client: &mut StdioClient) {
    // An era probe before any handshake is answered.
    let (_, r) = client.request(&json!({"jsonrpc":"2.0","id":"probe","method":"server/discover"})).await;
    assert_eq!(r["result"]["supportedVersions"], json!(["2026-07-28"]));

    // Legacy: initialize → initialized → tools/list → tools/call.
    let (_, r) = client
        .request(&json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}))
        .await;
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
    client.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
    let (_, r) = client.request(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list"})).await;
    assert_eq!(r["result"]["tools"].as_array().map(Vec::len), Some(3));
    assert!(r["result"].get("resultType").is_none());
    let (_, r) = client.request(&json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"stdio"}}})).await;
    assert_eq!(r["result"]["content"][0]["text"], "stdio");
    let (notes, r) = client
        .request(&json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"count","arguments":{"to":2,"interval_ms":1},"_meta":{"progressToken":"t"}}}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "counted to 2");
    assert_eq!(notes.iter().filter(|n| n["method"] == "notifications/progress").count(), 2);
    let (_, r) =
        client.request(&json!({"jsonrpc":"2.0","id":5,"method":"resources/read","params":{"uri":"nope://x"}})).await;
    assert_eq!(r["error"]["code"], -32002);

    // Modern, on the same connection: discover → tools/list → tools/call.
    let (_, r) = client.request(&modern_request(10, "server/discover", json!({}))).await;
    assert_eq!(r["result"]["resultType"], "complete");
    assert!(r["result"]["ttlMs"].is_u64());
    let (_, r) = client.request(&modern_request(11, "tools/list", json!({}))).await;
    assert_eq!(r["result"]["cacheScope"], "public");
    let (_, r) =
        client.request(&modern_request(12, "tools/call", json!({"name":"add","arguments":{"a":20,"b":22}}))).await;
    assert_eq!(r["result"]["structuredContent"], json!({"sum":42}));
    assert!(r["result"]["_meta"]["io.modelcontextprotocol/serverInfo"].is_object());
    let (_, r) = client.request(&modern_request(13, "resources/read", json!({"uri":"nope://x"}))).await;
    assert_eq!(r["error"]["code"], -32602);
    let (_, r) = client.request(&modern_request(14, "ping", json!({}))).await;
    assert_eq!(r["error"]["code"], -32601);
    let mut v = modern_request(15, "tools/list", json!({}));
    v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let (_, r) = client.request(&v).await;
    assert_eq!(r["error"]["code"], -32022);
    assert_eq!(r["error"]["data"]["requested"], "2099-01-01");

    // Garbage gets -32700 with a null id, and the connection keeps working.
    client.send_line("{not json").await;
    let r = client.recv().await;
    assert_eq!((r["error"]["code"].clone(), r["id"].clone()), (json!(-32700), Value::Null));
    client.send_line("[]").await;
    let r = client.recv().await;
    assert_eq!(r["error"]["code"], -32600, "no batches after 2025-03-26");
    let (_, r) = client.request(&json!({"jsonrpc":"2.0","id":"last","method":"ping"})).await;
    assert_eq!(r["result"], json!({}));
}

#[tokio::test]
async fn stdio_with_in_process_registry() {
    let mut client = StdioClient::start(&[]).await;
    walk(&mut client).await;
    let status = client.close().await;
    assert!(status.success(), "exit status {status}");
}

#[tokio::test]
async fn stdio_with_registry_service() {
    let registry = Proc::start("registry-service", &["--listen", "127.0.0.1:0"], "registry-service").await;
    let url = registry.url();
    let mut client = StdioClient::start(&["--registry", &url]).await;
    walk(&mut client).await;
    assert!(client.close().await.success());
    assert!(registry.terminate().await.success());
}

#[tokio::test]
async fn stdio_cancellation_stops_a_request() {
    let mut client = StdioClient::start(&[]).await;
    client
        .send(&json!({"jsonrpc":"2.0","id":"slow","method":"tools/call","params":{"name":"count","arguments":{"to":100,"interval_ms":100},"_meta":{"progressToken":1}}}))
        .await;
    // Wait until it is running, then cancel it.
    loop {
        let m = client.recv().await;
        assert!(m.get("id").is_none(), "no reply yet: {m}");
        if m["method"] == "notifications/progress" {
            break;
        }
    }
    client
        .send(
            &json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow","reason":"test"}}),
        )
        .await;
    let (notes, r) = client.request(&json!({"jsonrpc":"2.0","id":"after","method":"ping"})).await;
    assert_eq!(r["result"], json!({}));
    // At most a progress message already in flight; never a reply to the cancelled request.
    assert!(notes.iter().all(|n| n.get("id").is_none()), "{notes:?}");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (notes, _) = client.request(&json!({"jsonrpc":"2.0","id":"later","method":"ping"})).await;
    assert!(notes.is_empty(), "nothing more for a cancelled request: {notes:?}");
    assert!(client.close().await.success());
}

async fn legacy_handshake(client: &mut StdioClient, version: &str, capabilities: Value) {
    let (_, r) = client
        .request(&json!({"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":version,"capabilities":capabilities,"clientInfo":{"name":"e2e","version":"1"}}}))
        .await;
    assert_eq!(r["result"]["protocolVersion"], version);
    client.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await;
}

#[tokio::test]
async fn stdio_server_to_client_requests_and_list_changes() {
    let mut client = StdioClient::start(&["--definitions", &e2e::example("conformance.yaml")]).await;
    legacy_handshake(&mut client, "2025-11-25", json!({"elicitation":{},"roots":{}})).await;
    client
        .send(&json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"test_input_required_result_list_roots","arguments":{}}}))
        .await;
    // The server asks for the roots with a request of its own on stdout.
    let ask = client.recv().await;
    assert_eq!(ask["method"], "roots/list");
    assert!(ask["id"].is_string());
    // Meanwhile an unrelated request is answered.
    let (_, pong) = client.request(&json!({"jsonrpc":"2.0","id":2,"method":"ping"})).await;
    assert_eq!(pong["result"], json!({}));
    client
        .send(&json!({"jsonrpc":"2.0","id":ask["id"],"result":{"roots":[{"uri":"file:///work","name":"work"}]}}))
        .await;
    let (before, r) = client.request(&json!({"jsonrpc":"2.0","id":3,"method":"ping"})).await;
    assert_eq!(r["result"], json!({}));
    // The call's reply may come before or after that ping's; find it.
    let reply = match before.into_iter().find(|m| m["id"] == 1) {
        Some(m) => m,
        None => loop {
            let m = client.recv().await;
            if m["id"] == 1 {
                break m;
            }
        },
    };
    assert_eq!(reply["result"]["content"][0]["text"], "Client roots: file:///work");

    // A change to the catalog reaches the stdio session as a notification.
    let (notes, r) = client
        .request(&json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"test_trigger_tool_change"}}))
        .await;
    assert_eq!(r["result"]["content"][0]["text"], "Tool list changed");
    let changed = if notes.iter().any(|n| n["method"] == "notifications/tools/list_changed") {
        true
    } else {
        client.recv().await["method"] == "notifications/tools/list_changed"
    };
    assert!(changed);
    assert!(client.close().await.success());
}

#[tokio::test]
async fn stdio_batches_for_2025_03_26() {
    let mut client = StdioClient::start(&[]).await;
    legacy_handshake(&mut client, "2025-03-26", json!({})).await;
    client
        .send(&json!([
            {"jsonrpc":"2.0","id":"a","method":"ping"},
            {"jsonrpc":"2.0","method":"notifications/roots/list_changed"},
            {"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"echo","arguments":{"message":"batched"}}}
        ]))
        .await;
    let replies = client.recv().await;
    let replies = replies.as_array().expect("a batch reply");
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0]["id"], "a");
    assert_eq!(replies[1]["result"]["content"][0]["text"], "batched");
    // Only notifications: nothing comes back; the next request is answered normally.
    client.send(&json!([{"jsonrpc":"2.0","method":"notifications/initialized"}])).await;
    let (notes, r) = client.request(&json!({"jsonrpc":"2.0","id":"c","method":"ping"})).await;
    assert!(notes.is_empty(), "{notes:?}");
    assert_eq!(r["result"], json!({}));
    assert!(client.close().await.success());
}

#[tokio::test]
async fn stdio_refuses_oversize_lines() {
    let mut client = StdioClient::start(&[]).await;
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(17 * 1024 * 1024)
    );
    client.send_line(&huge).await;
    let r = client.recv().await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let (_, r) = client.request(&json!({"jsonrpc":"2.0","id":2,"method":"ping"})).await;
    assert_eq!(r["result"], json!({}));
    assert!(client.close().await.success());
}
