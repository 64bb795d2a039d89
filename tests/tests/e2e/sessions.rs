//! Legacy sessions over HTTP: the session id, the GET stream, list-changed notifications,
//! server-to-client requests answered by the client, and DELETE.

use std::time::Duration;

use e2e::{Client, Stack};
use serde_json::{Value, json};

/// initialize over HTTP; returns the session id.
async fn initialize(c: &Client, version: &str, capabilities: Value) -> String {
    let body = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion":version,"capabilities":capabilities,"clientInfo":{"name":"e2e","version":"1"}}});
    let r = c.post(&body, &[]).await;
    assert_eq!(r.result()["protocolVersion"], version);
    // The conformance catalog changes while served, so changes are advertised.
    assert_eq!(r.result()["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(r.result()["capabilities"]["resources"]["subscribe"], true);
    let id = r.headers.get("mcp-session-id").expect("a session id").to_str().expect("visible ASCII").to_owned();
    assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)));
    let r = c
        .post(
            &json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
            &[("mcp-session-id", &id), ("mcp-protocol-version", version)],
        )
        .await;
    assert_eq!(r.status, 202);
    id
}

fn call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":arguments}})
}

#[tokio::test]
async fn session_lifecycle_and_get_stream() {
    let stack = Stack::conformance().await;
    let c = stack.client();
    let sid = initialize(&c, "2025-11-25", json!({})).await;
    let h = [("mcp-session-id", sid.as_str()), ("mcp-protocol-version", "2025-11-25")];

    // The GET stream carries list changes caused by anyone.
    let mut stream = c.get_stream(&h).await;
    assert_eq!(stream.status, 200);
    let r = c.post(&call(1, "test_trigger_tool_change", json!({})), &h).await;
    assert_eq!(r.result()["content"][0]["text"], "Tool list changed");
    let note = stream.next().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    let r = c.post(&json!({"jsonrpc":"2.0","id":2,"method":"tools/list"}), &h).await;
    let names: Vec<&str> =
        r.result()["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(names.contains(&"test_dynamic_tool"), "the new tool is listed: {names:?}");
    let r = c.post(&call(3, "test_trigger_prompt_change", json!({})), &h).await;
    assert!(r.result()["isError"].is_null() || r.result()["isError"] == false);
    assert_eq!(stream.next().await["method"], "notifications/prompts/list_changed");

    // Subscriptions are acknowledged with an empty result.
    for (i, method) in ["resources/subscribe", "resources/unsubscribe"].iter().enumerate() {
        let body = json!({"jsonrpc":"2.0","id":10 + i,"method":method,"params":{"uri":"test://watched-resource"}});
        assert_eq!(c.post(&body, &h).await.result(), &json!({}));
    }
    // logging/setLevel filters this session's log notifications.
    let set = json!({"jsonrpc":"2.0","id":20,"method":"logging/setLevel","params":{"level":"error"}});
    assert_eq!(c.post(&set, &h).await.result(), &json!({}));
    let r = c.post(&call(21, "test_tool_with_logging", json!({})), &h).await;
    assert!(r.events.iter().all(|e| e["method"] != "notifications/message"), "no info logs above error: {}", r.text);

    // DELETE ends it; the id is then unknown (404), and a bad id is too.
    let http = e2e::http();
    let r = http.delete(&c.url).header("mcp-session-id", &sid).send().await.expect("DELETE");
    assert_eq!(r.status(), 204);
    let r = c.post(&json!({"jsonrpc":"2.0","id":30,"method":"ping"}), &h).await;
    assert_eq!(r.status, 404, "{}", r.text);
    let r = http.delete(&c.url).header("mcp-session-id", &sid).send().await.expect("DELETE");
    assert_eq!(r.status(), 404);
    let r = c.post(&json!({"jsonrpc":"2.0","id":31,"method":"ping"}), &[("mcp-session-id", "forged.value")]).await;
    assert_eq!(r.status, 404);
    let get = c.get_stream(&[("mcp-session-id", "forged.value")]).await;
    assert_eq!(get.status, 404);
    // A new handshake starts over.
    initialize(&c, "2025-06-18", json!({})).await;
}

#[tokio::test]
async fn legacy_server_to_client_requests_over_http() {
    let stack = Stack::conformance().await;
    let c = stack.client();
    let sid = initialize(&c, "2025-11-25", json!({"elicitation":{},"sampling":{}})).await;
    let h = [("mcp-session-id", sid.as_str()), ("mcp-protocol-version", "2025-11-25")];

    // The tool's question arrives as a real request on the response stream ...
    let mut stream = c.stream(&call(1, "test_elicitation", json!({"message":"Who are you?"})), &h).await;
    let ask = stream.next().await;
    assert_eq!(ask["method"], "elicitation/create");
    assert_eq!(ask["params"]["message"], "Who are you?");
    assert_eq!(ask["params"]["requestedSchema"]["required"], json!(["username", "email"]));
    // ... the client answers with a POST of its response (202) ...
    let answer = json!({"jsonrpc":"2.0","id":ask["id"],"result":{"action":"accept","content":{"username":"ada","email":"ada@example.com"}}});
    let r = c.post(&answer, &h).await;
    assert_eq!(r.status, 202);
    // ... and the call resumes and finishes.
    let reply = stream.next().await;
    assert_eq!(reply["id"], 1);
    let text = reply["result"]["content"][0]["text"].as_str().expect("text");
    assert!(text.starts_with("User response: action=accept") && text.contains("ada@example.com"), "{text}");

    // Sampling the same way.
    let mut stream = c.stream(&call(2, "test_sampling", json!({"prompt":"2+2?"})), &h).await;
    let ask = stream.next().await;
    assert_eq!(ask["method"], "sampling/createMessage");
    assert_eq!(ask["params"]["maxTokens"], 100);
    let answer = json!({"jsonrpc":"2.0","id":ask["id"],"result":{"role":"assistant","content":{"type":"text","text":"4"},"model":"m"}});
    assert_eq!(c.post(&answer, &h).await.status, 202);
    assert_eq!(stream.next().await["result"]["content"][0]["text"], "LLM response: 4");

    // A session that did not declare the capability is never asked.
    let sid2 = initialize(&c, "2025-11-25", json!({})).await;
    let r = c.post(&call(3, "test_sampling", json!({"prompt":"x"})), &[("mcp-session-id", &sid2)]).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.text);
    assert!(r.events.iter().all(|e| e.get("method").is_none()), "no request was sent: {}", r.text);
}

#[tokio::test]
async fn modern_multi_round_trip_requests() {
    let stack = Stack::conformance().await;
    let c = stack.client();
    let caps = json!({"elicitation":{}});
    let with_caps = |mut body: Value| {
        body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = caps.clone();
        body
    };
    let headers = [
        ("mcp-protocol-version", e2e::MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "test_input_required_result_multi_round"),
    ];
    let first = with_caps(e2e::modern_request(
        1,
        "tools/call",
        json!({"name":"test_input_required_result_multi_round","arguments":{}}),
    ));
    let r = c.post(&first, &headers).await;
    let round1 = r.result().clone();
    assert_eq!(round1["resultType"], "input_required");
    assert!(round1.get("ttlMs").is_none(), "never cacheable");
    assert_eq!(round1["inputRequests"]["step1"]["method"], "elicitation/create");
    let state1 = round1["requestState"].as_str().expect("a request state").to_owned();

    let mut retry = first.clone();
    retry["id"] = json!(2);
    retry["params"]["inputResponses"] = json!({"step1":{"action":"accept","content":{"name":"Ada"}}});
    retry["params"]["requestState"] = json!(state1);
    let round2 = c.post(&retry, &headers).await.result().clone();
    assert_eq!(round2["inputRequests"]["step2"]["params"]["message"], "Step 2: What is your favorite color?");
    let state2 = round2["requestState"].as_str().expect("state").to_owned();
    assert_ne!(state1, state2);

    let mut last = first.clone();
    last["id"] = json!(3);
    last["params"]["inputResponses"] = json!({"step2":{"action":"accept","content":{"color":"green"}}});
    last["params"]["requestState"] = json!(state2);
    let done = c.post(&last, &headers).await;
    assert_eq!(done.result()["resultType"], "complete");
    assert_eq!(done.result()["content"][0]["text"], "Ada's favorite color is green");

    // A tampered state, or one replayed on another tool or other arguments, is refused.
    let mut tampered = last.clone();
    let mut chars: Vec<char> = state2.chars().collect();
    chars[3] = if chars[3] == 'A' { 'B' } else { 'A' };
    tampered["params"]["requestState"] = json!(chars.into_iter().collect::<String>());
    let r = c.post(&tampered, &headers).await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.text);
    let mut moved = with_caps(e2e::modern_request(
        4,
        "tools/call",
        json!({"name":"test_input_required_result_elicitation","arguments":{}}),
    ));
    moved["params"]["requestState"] = json!(state2);
    moved["params"]["inputResponses"] = json!({"user_name":{"action":"accept","content":{"name":"x"}}});
    let r = c
        .post(
            &moved,
            &[
                ("mcp-protocol-version", e2e::MODERN),
                ("mcp-method", "tools/call"),
                ("mcp-name", "test_input_required_result_elicitation"),
            ],
        )
        .await;
    assert_eq!(r.error_code(), Some(-32602), "{}", r.text);

    // A capability the request did not declare is never asked for: -32021, HTTP 400.
    let r = c.modern(5, "tools/call", json!({"name":"test_missing_capability","arguments":{}})).await;
    assert_eq!((r.status, r.error_code()), (400, Some(-32021)));
    assert_eq!(r.json["error"]["data"]["requiredCapabilities"], json!({"sampling":{}}));
    // Malformed input responses are a protocol error.
    let mut bad = first.clone();
    bad["params"]["inputResponses"] = json!({"step1": 12345});
    assert_eq!(c.post(&bad, &headers).await.error_code(), Some(-32602));
}

#[tokio::test]
async fn modern_listen_streams_follow_their_filter() {
    let stack = Stack::conformance().await;
    let c = stack.client();
    let listen = |id: i64, filter: Value| {
        let body = e2e::modern_request(id, "subscriptions/listen", json!({"notifications": filter}));
        let c = c.clone();
        async move {
            c.stream(&body, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "subscriptions/listen")]).await
        }
    };
    let mut tools = listen(100, json!({"toolsListChanged": true, "bogus": true})).await;
    let mut prompts = listen(200, json!({"promptsListChanged": true})).await;
    let ack = tools.next().await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 100);
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true}), "only what is honoured");
    assert_eq!(prompts.next().await["params"]["notifications"], json!({"promptsListChanged": true}));

    let r = c.modern(1, "tools/call", json!({"name":"test_trigger_tool_change","arguments":{}})).await;
    assert_eq!(r.result()["resultType"], "complete");
    let note = tools.next().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    assert_eq!(note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 100);
    assert!(prompts.next_within(Duration::from_millis(500)).await.is_none(), "not asked for tool changes");
    c.modern(2, "tools/call", json!({"name":"test_trigger_prompt_change","arguments":{}})).await;
    let note = prompts.next().await;
    assert_eq!(note["method"], "notifications/prompts/list_changed");
    assert_eq!(note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 200);
}

#[tokio::test]
async fn resource_updates_reach_subscribers_only() {
    let stack = Stack::conformance().await;
    let c = stack.client();
    let watched = "test://watched-resource";
    // Legacy: one session subscribes, another does not; both hold a GET stream.
    let subscriber = initialize(&c, "2025-11-25", json!({})).await;
    let bystander = initialize(&c, "2025-11-25", json!({})).await;
    let sub_h = [("mcp-session-id", subscriber.as_str())];
    let mut sub_stream = c.get_stream(&sub_h).await;
    let mut other_stream = c.get_stream(&[("mcp-session-id", bystander.as_str())]).await;
    let body = json!({"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":watched}});
    assert_eq!(c.post(&body, &sub_h).await.result(), &json!({}));
    // Modern: a listen stream that names the resource.
    let listen =
        e2e::modern_request(50, "subscriptions/listen", json!({"notifications":{"resourceSubscriptions":[watched]}}));
    let mut modern =
        c.stream(&listen, &[("mcp-protocol-version", e2e::MODERN), ("mcp-method", "subscriptions/listen")]).await;
    assert_eq!(modern.next().await["params"]["notifications"], json!({"resourceSubscriptions":[watched]}));

    c.post(&call(2, "test_trigger_resource_update", json!({})), &sub_h).await;
    let note = sub_stream.next().await;
    assert_eq!(
        (note["method"].as_str(), note["params"]["uri"].as_str()),
        (Some("notifications/resources/updated"), Some(watched))
    );
    let note = modern.next().await;
    assert_eq!(note["params"]["uri"], watched);
    assert_eq!(note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 50);
    assert!(other_stream.next_within(Duration::from_millis(400)).await.is_none(), "not subscribed");

    // After unsubscribing, nothing more.
    let body = json!({"jsonrpc":"2.0","id":3,"method":"resources/unsubscribe","params":{"uri":watched}});
    c.post(&body, &sub_h).await;
    c.post(&call(4, "test_trigger_resource_update", json!({})), &sub_h).await;
    assert!(sub_stream.next_within(Duration::from_millis(400)).await.is_none(), "unsubscribed");
}

#[tokio::test]
async fn capabilities_an_http_session_id_cannot_carry_are_refused() {
    let stack = Stack::microservices().await;
    let c = stack.client();
    let init = |capabilities: Value| {
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-06-18","capabilities":capabilities,"clientInfo":{"name":"e2e","version":"1"}}})
    };
    // Capabilities of `size` bytes as JSON.
    let sized = |size: usize| {
        let shell = json!({"experimental":{"blob":""}}).to_string().len();
        json!({"experimental":{"blob":"x".repeat(size - shell)}})
    };
    // At the limit: a session whose id comes back and names it.
    let at_limit = sized(4 * 1024);
    assert_eq!(at_limit.to_string().len(), 4 * 1024);
    let r = c.post(&init(at_limit), &[]).await;
    assert_eq!(r.result()["protocolVersion"], "2025-06-18", "{}", r.text);
    let sid = r.headers.get("mcp-session-id").expect("a session id").to_str().expect("ASCII").to_owned();
    assert!(sid.len() < 6 * 1024, "an id of {} bytes", sid.len());
    let h = [("mcp-session-id", sid.as_str()), ("mcp-protocol-version", "2025-06-18")];
    let r = c.post(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}), &h).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let r = c.post(&json!({"jsonrpc":"2.0","id":1,"method":"ping"}), &h).await;
    assert_eq!(r.result(), &json!({}), "{}", r.text);
    // One byte more, or not an object: -32602 and no session.
    for (capabilities, says) in [(sized(4 * 1024 + 1), "4097 bytes"), (json!("all"), "must be an object")] {
        let r = c.post(&init(capabilities), &[]).await;
        assert_eq!(r.error_code(), Some(-32602), "{}", r.text);
        assert!(r.json["error"]["message"].as_str().is_some_and(|m| m.contains(says)), "{}", r.text);
        assert!(r.headers.get("mcp-session-id").is_none());
    }
    // None at all (null) is no capability: a session.
    let r = c.post(&init(Value::Null), &[]).await;
    assert_eq!(r.result()["protocolVersion"], "2025-06-18", "{}", r.text);
    assert!(r.headers.get("mcp-session-id").is_some());
    // Over stdio no id carries them: taken whole.
    let mut stdio = e2e::StdioClient::start(&[]).await;
    let (_, reply) = stdio.request(&init(json!(["all"]))).await;
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
    let (_, reply) = stdio.request(&init(sized(64 * 1024))).await;
    assert_eq!(reply["result"]["protocolVersion"], "2025-06-18", "{reply}");
    assert!(stdio.close().await.success());
}
