//! Tools backed by an upstream HTTP API: a real upstream on port 0, called by the real server.

use std::time::Duration;

use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};

use serde_json::{Value, json};

/// An upstream API on a loopback port.
async fn upstream() -> std::net::SocketAddr {
    let app = Router::new()
        .route(
            "/forecast",
            get(|Query(q): Query<std::collections::HashMap<String, String>>, headers: HeaderMap| async move {
                if headers.get("x-api-key").and_then(|v| v.to_str().ok()) != Some("s3cret") {
                    return (StatusCode::UNAUTHORIZED, Json(json!({"error": "bad key"})));
                }
                (StatusCode::OK, Json(json!({"city": q.get("q"), "units": q.get("units"), "temp": 21})))
            }),
        )
        .route("/fail", get(|| async { (StatusCode::SERVICE_UNAVAILABLE, "down for maintenance") }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route("/big", get(|| async { "x".repeat(100_000) }))
        .route("/echo", post(|Json(body): Json<Value>| async move { Json(json!({"received": body})) }))
        .route(
            "/users/{*rest}",
            get(|uri: axum::http::Uri| async move { Json(json!({"path": uri.path(), "query": uri.query()})) }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("upstream") });
    addr
}

fn definitions(addr: std::net::SocketAddr, allow_private: bool) -> String {
    format!(
        r#"
server: {{ name: http-tools }}
allow_private_networks: {allow_private}
tools:
  - name: forecast
    input_schema: {{ type: object, properties: {{ city: {{ type: string }}, units: {{ type: string }} }}, required: [city] }}
    output_schema: {{ type: object }}
    http:
      url: "http://{addr}/forecast"
      query: {{ q: "{{{{ city }}}}", units: "{{{{ units | default('metric') }}}}" }}
      headers: {{ x-api-key: "${{UPSTREAM_KEY}}" }}
  - name: failing
    http: {{ url: "http://{addr}/fail" }}
  - name: slow
    http: {{ url: "http://{addr}/slow", timeout_ms: 300 }}
  - name: big
    http: {{ url: "http://{addr}/big", max_response_bytes: 1000 }}
  - name: post
    input_schema: {{ type: object, properties: {{ note: {{ type: string }} }} }}
    http: {{ method: POST, url: "http://{addr}/echo", body: '{{"note": {{{{ note | tojson }}}}}}' }}
  - name: by_name
    http: {{ url: "http://localhost:{port}/forecast" }}
  - name: user
    input_schema: {{ type: object, properties: {{ id: {{ type: string }} }}, required: [id] }}
    http: {{ url: "http://{addr}/users/{{{{ id }}}}/profile" }}
  - name: greet
    input_schema: {{ type: object, properties: {{ name: {{ type: string }} }}, required: [name] }}
    text: "Hello {{{{ name }}}}"
"#,
        port = addr.port()
    )
}

fn text(r: &e2e::Reply) -> String {
    r.result()["content"][0]["text"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn http_tools_call_their_upstream() {
    let addr = upstream().await;
    let served = e2e::Served::definitions(&definitions(addr, true), &[("UPSTREAM_KEY", "s3cret")]).await;
    let (gw, c) = (&served.gateway, &served.client);
    let r = c.modern(1, "tools/call", json!({"name":"forecast","arguments":{"city":"Paris & Co"}})).await;
    assert_eq!(r.result()["isError"], false, "{}", r.text);
    assert_eq!(r.result()["structuredContent"], json!({"city":"Paris & Co","units":"metric","temp":21}));
    assert_eq!(serde_json::from_str::<Value>(&text(&r)).expect("a JSON text mirror")["temp"], 21);

    let r = c.modern(2, "tools/call", json!({"name":"failing","arguments":{}})).await;
    assert_eq!(r.result()["isError"], true);
    assert!(text(&r).contains("503") && text(&r).contains("down for maintenance"), "{}", text(&r));

    let r = c.modern(3, "tools/call", json!({"name":"slow","arguments":{}})).await;
    assert_eq!(r.result()["isError"], true);
    assert!(text(&r).contains("did not answer in time"), "{}", text(&r));

    let r = c.modern(4, "tools/call", json!({"name":"big","arguments":{}})).await;
    assert!(text(&r).contains("larger than 1000 bytes"), "{}", text(&r));

    let r = c.modern(5, "tools/call", json!({"name":"post","arguments":{"note":"a \"quoted\" note"}})).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text(&r)).expect("JSON")["received"],
        json!({"note":"a \"quoted\" note"})
    );

    // The secret is never logged.
    assert!(!gw.log_text().contains("s3cret"));
}

#[tokio::test]
async fn the_ssrf_guard_refuses_private_addresses() {
    let addr = upstream().await;
    let served = e2e::Served::definitions(&definitions(addr, false), &[("UPSTREAM_KEY", "s3cret")]).await;
    let c = &served.client;
    let r = c.modern(1, "tools/call", json!({"name":"forecast","arguments":{"city":"x"}})).await;
    assert_eq!(r.result()["isError"], true);
    assert!(text(&r).contains("127.0.0.1 is not public"), "{}", text(&r));
    let r = c.modern(2, "tools/call", json!({"name":"by_name","arguments":{}})).await;
    assert_eq!(r.result()["isError"], true);
    assert!(text(&r).contains("private or local"), "{}", text(&r));
}

#[tokio::test]
async fn http_definitions_are_checked_at_start() {
    let (ok, err) = e2e::validate_definitions(
        "tools:\n  - name: t\n    http: { url: 'https://api.example/{{ citty }}', method: FETCH, headers: { 'x-key': '${NOT_SET_ANYWHERE}' } }\n",
    );
    assert!(!ok);
    for expected in ["defs.yaml:2:5", "citty", "FETCH", "NOT_SET_ANYWHERE"] {
        assert!(err.contains(expected), "{expected}: {err}");
    }
}

/// Arguments are values, never structure: placed in a URL they are percent-encoded (no path
/// traversal, no injected query, fragment or host on the upstream), and no template ever
/// evaluates what an argument says.
#[tokio::test]
async fn arguments_cannot_inject_into_urls_or_templates() {
    let addr = upstream().await;
    let served = e2e::Served::definitions(&definitions(addr, true), &[("UPSTREAM_KEY", "s3cret")]).await;
    let c = &served.client;
    let call = |id: &str| c.modern(1, "tools/call", json!({"name": "user", "arguments": {"id": id}}));
    let received = |r: &e2e::Reply| -> Value { serde_json::from_str(&text(r)).expect("upstream JSON") };

    let r = call("42").await;
    assert_eq!(received(&r), json!({"path": "/users/42/profile", "query": null}), "{}", r.text);
    for (id, path) in [
        ("../../admin", "/users/..%2F..%2Fadmin/profile"),
        ("1?role=root#top", "/users/1%3Frole%3Droot%23top/profile"),
        ("x@evil.example:1/", "/users/x%40evil.example%3A1%2F/profile"),
        ("a b%2F", "/users/a%20b%252F/profile"),
    ] {
        let r = call(id).await;
        assert_eq!(received(&r), json!({"path": path, "query": null}), "{id}: {}", r.text);
    }
    let r = c.modern(2, "tools/call", json!({"name": "greet", "arguments": {"name": "{{ 7*7 }}{% raw %}"}})).await;
    assert_eq!(text(&r), "Hello {{ 7*7 }}{% raw %}");
}
