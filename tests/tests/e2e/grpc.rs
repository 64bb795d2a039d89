//! mcp-service's gRPC server as a gRPC client meets it, over HTTP/2 on its port: `Handle`
//! answers with its frames and ends with `grpc-status: 0`; a call it cannot serve ends with a
//! status alone (in the answer's head, as tonic's servers send one).

use bytes::{Buf as _, Bytes};
use e2e::{Proc, modern_request};
use mcp_proto::envelope::{Part, set_place};
use mcp_proto::mcp as pb;
use prost::Message as _;
use serde_json::{Value, json};

const TOKEN: &str = "grpc-edge-token-7";
const HANDLE: &str = "/mcp.v1.McpService/Handle";

/// What a call came back with.
struct Answer {
    /// `grpc-status` from the trailers, or from the head when nothing else came.
    status: String,
    message: String,
    /// The messages that came, each without its prefix.
    messages: Vec<Bytes>,
}

impl Answer {
    /// The messages as `Handle`'s frames.
    fn frames(&self) -> Vec<pb::McpFrame> {
        self.messages.iter().map(|m| pb::McpFrame::decode(m.clone()).expect("an McpFrame")).collect()
    }
}

/// A body of one message with gRPC's prefix (`flag` 1 says compressed).
fn framed(flag: u8, message: &[u8]) -> Bytes {
    let mut out = vec![flag];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out.into()
}

/// A request to `Handle` carrying `body` as a modern MCP message.
fn handle_request(body: &Value) -> Bytes {
    let request = pb::McpRequest {
        body: serde_json::to_vec(body).expect("json").into(),
        era: pb::Era::Modern as i32,
        header_version: e2e::MODERN.into(),
        transport: pb::Transport::StreamableHttp as i32,
        request_id: "grpc-test".into(),
        ..Default::default()
    };
    framed(0, &request.encode_to_vec())
}

/// Call `path` on `addr` with `body` sent in one DATA frame, as the gateway does.
async fn call(addr: std::net::SocketAddr, path: &str, token: Option<&str>, body: Bytes) -> Answer {
    call_ending(addr, path, token, body, true).await
}

/// [`call`], the request's stream left open after `body` unless `end`.
async fn call_ending(addr: std::net::SocketAddr, path: &str, token: Option<&str>, body: Bytes, end: bool) -> Answer {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    tokio::spawn(connection);
    let mut send = send.ready().await.expect("ready");
    let mut request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let (response, mut stream) = send.send_request(request.body(()).expect("request"), false).expect("sent");
    stream.send_data(body, end).expect("sent");
    let (head, mut body) = response.await.expect("an answer").into_parts();
    assert_eq!(head.status, 200);
    assert_eq!(head.headers.get("content-type").and_then(|v| v.to_str().ok()), Some("application/grpc"));
    let mut data = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("data");
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.expect("trailers");
    let ended_by = trailers.as_ref().unwrap_or(&head.headers);
    let text = |name: &str| ended_by.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut messages = Vec::new();
    let mut rest = Bytes::from(data);
    while !rest.is_empty() {
        assert!(rest.len() >= 5, "a message's prefix");
        assert_eq!(rest.get_u8(), 0, "not compressed");
        let length = rest.get_u32() as usize;
        messages.push(rest.split_to(length));
    }
    Answer { status: text("grpc-status"), message: text("grpc-message"), messages }
}

/// A definitions file with `yaml` in a directory of its own (kept while the directory lives),
/// and its path.
fn definitions_file(yaml: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("definitions.yaml");
    std::fs::write(&file, yaml).expect("write definitions");
    let path = file.to_str().expect("utf-8").to_owned();
    (dir, path)
}

async fn engine(definitions: &str) -> (Proc, Proc, tempfile::TempDir) {
    let (dir, file) = definitions_file(definitions);
    let registry =
        Proc::start("registry-service", &["--listen", "127.0.0.1:0", "--definitions", &file], "registry-service").await;
    let mcp = Proc::start_with_env(
        "mcp-service-remote",
        &["--listen", "127.0.0.1:0", "--registry", &registry.url()],
        &[("MCP_SERVICE_SERVICE_TOKEN", TOKEN)],
        "mcp-service",
    )
    .await;
    (registry, mcp, dir)
}

/// Calls answered: a tool's reply in one frame, a large resource's in one message (sent in
/// pieces), each ending with `grpc-status: 0`.
#[tokio::test]
async fn handle_answers_its_frames_then_ok() {
    let large = "0123456789abcdef".repeat(6 * 1024);
    let definitions = format!(
        "builtins: [demo]\nresources:\n  - uri: test://large\n    name: large\n    mime_type: text/plain\n    text: \"{large}\"\n"
    );
    let (_registry, mcp, _dir) = engine(&definitions).await;

    let body = modern_request(7, "tools/call", json!({ "name": "echo", "arguments": { "message": "over gRPC" } }));
    let answer = call(mcp.addr(), HANDLE, Some(TOKEN), handle_request(&body)).await;
    let frames = answer.frames();
    assert_eq!((answer.status.as_str(), frames.len()), ("0", 1), "{}", answer.message);
    let frame = &frames[0];
    assert_eq!(frame.disposition, pb::Disposition::Reply as i32);
    let reply: Value = serde_json::from_slice(&frame.json).expect("JSON");
    assert_eq!(reply["id"], 7);
    assert!(reply["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("over gRPC")), "{reply}");

    let body = modern_request(8, "resources/read", json!({ "uri": "test://large" }));
    let answer = call(mcp.addr(), HANDLE, Some(TOKEN), handle_request(&body)).await;
    let frames = answer.frames();
    assert_eq!((answer.status.as_str(), frames.len()), ("0", 1), "{}", answer.message);
    let reply: Value = serde_json::from_slice(&frames[0].json).expect("JSON");
    assert_eq!(reply["result"]["contents"][0]["text"], large.as_str());
    assert_eq!(frames[0].disposition, pb::Disposition::Reply as i32, "the fields after the large JSON");

    // The other methods are served too (tonic's), behind the same token.
    let answer = call(mcp.addr(), "/mcp.v1.McpService/EndSession", Some(TOKEN), framed(0, b"")).await;
    assert_eq!(answer.status, "0", "{}", answer.message);
}

/// The envelope's outline the gateway sends stands for mcp-service's own parse when it fits
/// the body, and is set aside when it does not: an outline whose `id` is another number of the
/// body is answered with that id (so the outline was read, not the body parsed again); one that
/// does not fit (a part past the end, a kind not known, an id that is not JSON) is answered as
/// the body says.
#[tokio::test]
async fn handle_reads_the_envelope_from_its_outline_when_it_fits() {
    let (_registry, mcp, _dir) = engine("builtins: [demo]\n").await;
    let body = serde_json::to_vec(&modern_request(
        1,
        "tools/call",
        json!({ "name": "echo", "arguments": { "message": "42" } }),
    ))
    .expect("JSON");
    let text = std::str::from_utf8(&body).expect("UTF-8");
    let parsed = match mcp_proto::envelope::parse_body(&body).expect("a message") {
        mcp_proto::envelope::Body::Single(env) => env,
        mcp_proto::envelope::Body::Batch(_) => panic!("one message"),
    };
    let outline = parsed.outline(&body).expect("an outline");
    let at = |part: &str| {
        let start = text.find(part).expect("in the body");
        Some(start..start + part.len())
    };
    let moved = |part: Part, to: Option<std::ops::Range<usize>>| {
        let mut moved = outline.clone();
        set_place(&mut moved, part, to);
        moved
    };
    let send = |outline: pb::Outline| {
        let request = pb::McpRequest {
            body: body.clone().into(),
            era: pb::Era::Modern as i32,
            header_version: e2e::MODERN.into(),
            transport: pb::Transport::StreamableHttp as i32,
            outline: Some(outline),
            ..Default::default()
        };
        let addr = mcp.addr();
        async move {
            let answer = call(addr, HANDLE, Some(TOKEN), framed(0, &request.encode_to_vec())).await;
            assert_eq!(answer.status, "0", "{}", answer.message);
            let reply: Value = serde_json::from_slice(&answer.frames()[0].json).expect("JSON");
            reply
        }
    };
    let reply = send(outline.clone()).await;
    assert_eq!(reply["id"], 1, "{reply}");
    let echoed = |reply: &Value| reply["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("42"));
    assert!(echoed(&reply), "{reply}");
    assert_eq!(send(moved(Part::Id, at("42"))).await["id"], 42, "the outline's id");
    for unfit in [
        moved(Part::Id, Some(0..body.len() + 1)),
        pb::Outline { kind: 0, ..moved(Part::Id, at("42")) },
        moved(Part::Id, Some(0..2)),
    ] {
        let reply = send(unfit).await;
        assert_eq!(reply["id"], 1, "parsed from the body: {reply}");
        assert!(echoed(&reply), "{reply}");
    }
}

/// Calls refused: without the service token (checked before the message is read), with a
/// compressed or malformed message, and to a method that does not exist; each with a status
/// and its reason.
#[tokio::test]
async fn handle_refuses_what_it_cannot_serve() {
    let (_registry, mcp, _dir) = engine("builtins: [demo]\n").await;
    let body = handle_request(&modern_request(1, "tools/list", json!({})));
    let cases: [(&str, Option<&str>, Bytes, &str); 7] = [
        ("no token", None, body.clone(), "16"),
        ("a wrong token", Some("grpc-edge-token-8"), body.clone(), "16"),
        ("compressed", Some(TOKEN), framed(1, &body[5..]), "13"),
        ("not protobuf", Some(TOKEN), framed(0, b"\xff\xff\xff"), "13"),
        ("shorter than its prefix says", Some(TOKEN), body.slice(..body.len() - 1), "13"),
        ("no message", Some(TOKEN), Bytes::new(), "13"),
        ("two messages", Some(TOKEN), [body.clone(), body.clone()].concat().into(), "13"),
    ];
    for (case, token, sent, status) in cases {
        let answer = call(mcp.addr(), HANDLE, token, sent).await;
        assert_eq!(answer.status, status, "{case}: {}", answer.message);
        assert!(answer.messages.is_empty(), "{case}: no frame");
        assert!(!answer.message.is_empty(), "{case}: a reason");
    }
    let answer = call(mcp.addr(), "/mcp.v1.McpService/NoSuchMethod", Some(TOKEN), body.clone()).await;
    assert_eq!(answer.status, "12", "{}", answer.message);
    // The token is checked before the message is read: refused while the request is still open.
    let open = call_ending(mcp.addr(), HANDLE, None, body.slice(..3), false);
    let answer = tokio::time::timeout(std::time::Duration::from_secs(10), open).await.expect("refused before the end");
    assert_eq!(answer.status, "16", "{}", answer.message);
    // The other methods are behind the token too; the health service is open to probes.
    let answer = call(mcp.addr(), "/mcp.v1.McpService/EndSession", None, framed(0, b"")).await;
    assert_eq!(answer.status, "16", "{}", answer.message);
    let answer = call(mcp.addr(), "/grpc.health.v1.Health/Check", None, framed(0, b"")).await;
    assert_eq!((answer.status.as_str(), answer.messages.len()), ("0", 1), "{}", answer.message);
}

/// A body as large as the gateway takes reaches the engine and is answered, through the
/// microservices and standalone: at the default limit (4 MiB) the call carrying it is a little
/// larger than tonic's default message limit, and so was the echo's reply (a 502 and an
/// internal error before); with the limit raised to 8 MiB, a built-in tool's 8 MiB arguments go
/// on to registry-service too.
#[tokio::test]
async fn a_body_at_the_gateway_s_limit_is_served() {
    let (_dir, file) = definitions_file(
        "builtins: [demo]\ntools:\n  - name: measure\n    description: The length of a message\n    input_schema:\n      type: object\n      properties: { message: { type: string } }\n      required: [message]\n    text: \"{{ message | length }}\"\n",
    );
    let definitions = ["--definitions", file.as_str()];
    let raised = [("GATEWAY_MAX_BODY_BYTES", "8388608")];
    let four = 4 * 1024 * 1024;
    let stacks = [
        ("microservices", four, e2e::Stack::microservices_with(&definitions).await),
        ("standalone", four, e2e::Stack::standalone_with(&definitions).await),
        ("microservices, 8 MiB", 2 * four, e2e::Stack::microservices_in(&definitions, &raised).await),
    ];
    for (stack_name, limit, stack) in stacks {
        // A text tool (answered by mcp-service) and a built-in one (its arguments go on to
        // registry-service in a message of their own).
        for tool in ["measure", "echo"] {
            let shape = |n: usize| {
                let params = json!({ "name": tool, "arguments": { "message": "x".repeat(n) } });
                serde_json::to_vec(&modern_request(1, "tools/call", params)).expect("JSON")
            };
            let padding = limit - shape(0).len();
            let body = shape(padding);
            assert_eq!(body.len(), limit);
            let headers = [("mcp-protocol-version", e2e::MODERN), ("mcp-method", "tools/call"), ("mcp-name", tool)];
            let r = stack.client().post_raw(body, &headers).await;
            let shown = r.text.chars().take(500).collect::<String>();
            assert_eq!(r.status, 200, "{stack_name}, {tool}: {shown}");
            let text = r.json["result"]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
            let expected = if tool == "measure" { padding.to_string() } else { "x".repeat(padding) };
            assert!(text == expected, "{stack_name}, {tool}: {shown}");
        }
    }
}

/// A resource larger than tonic's default message limit (4 MiB) and than a pipe's buffer for one
/// call (16 MiB: a frame alone may be larger) is read whole, through the microservices
/// (registry-service to mcp-service, mcp-service to the gateway on its pipe) and standalone (the
/// same generated clients and servers, in process).
#[tokio::test]
async fn a_resource_above_four_mib_is_read_whole() {
    let (dir, file) = definitions_file(
        "resources:\n  - uri: test://large\n    name: large\n    mime_type: text/plain\n    file: large.txt\n",
    );
    let text = "0123456789abcdef".repeat(20 * 1024 * 1024 / 16 + 7);
    std::fs::write(dir.path().join("large.txt"), &text).expect("write resource");
    let definitions = ["--definitions", file.as_str()];
    for stack in [e2e::Stack::microservices_with(&definitions).await, e2e::Stack::standalone_with(&definitions).await] {
        let r = stack.client().modern(1, "resources/read", json!({ "uri": "test://large" })).await;
        assert_eq!(r.status, 200, "{}", r.text.chars().take(500).collect::<String>());
        let read = r.json["result"]["contents"][0]["text"].as_str().unwrap_or_default();
        assert!(read == text, "{}", r.text.chars().take(400).collect::<String>());
    }
}

/// A resource whose contents could not travel between the services in one message is refused
/// with its reason logged, before its file is read whole (and the server goes on serving): a
/// file above 32 MiB, and a smaller one whose text grows past the limit as JSON (every byte
/// escaped). Through a template, the client is told why.
#[tokio::test]
async fn a_resource_too_large_to_carry_is_refused_with_its_reason() {
    let (dir, file) = definitions_file(concat!(
        "resources:\n",
        "  - { uri: 'test://huge', name: huge, mime_type: application/octet-stream, file: huge.bin }\n",
        "  - { uri: 'test://escaped', name: escaped, mime_type: text/plain, file: escaped.txt }\n",
        "  - { uri: 'test://small', name: small, mime_type: text/plain, file: small.txt }\n",
        "resource_templates:\n",
        "  - { uri_template: 'files://{name}', name: files, directory: files }\n",
    ));
    // Sparse files: their size is what counts, and nothing is written to disk.
    let sized = |path: std::path::PathBuf, len: u64| {
        std::fs::File::create(path).and_then(|f| f.set_len(len)).expect("sized file");
    };
    sized(dir.path().join("huge.bin"), 32 * 1024 * 1024 + 1);
    // NUL bytes are text, each escaped as six characters: 186 MiB of JSON.
    sized(dir.path().join("escaped.txt"), 31 * 1024 * 1024);
    std::fs::write(dir.path().join("small.txt"), "small").expect("write");
    std::fs::create_dir(dir.path().join("files")).expect("dir");
    sized(dir.path().join("files").join("big.bin"), 40 * 1024 * 1024);
    sized(dir.path().join("files").join("escaped.txt"), 31 * 1024 * 1024);
    let definitions = ["--definitions", file.as_str()];
    for stack in [e2e::Stack::microservices_with(&definitions).await, e2e::Stack::standalone_with(&definitions).await] {
        let client = stack.client();
        for uri in ["test://huge", "test://escaped"] {
            let r = client.modern(1, "resources/read", json!({ "uri": uri })).await;
            assert_eq!(r.error_code(), Some(-32603), "{uri}: {}", r.text);
            assert!(!r.text.contains("MiB"), "the reason is the operator's, not the client's: {}", r.text);
        }
        let r = client.modern(2, "resources/read", json!({ "uri": "files://big.bin" })).await;
        assert_eq!(r.error_code(), Some(-32602), "{}", r.text);
        let message = r.json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("files://big.bin") && message.contains("32 MiB"), "{message}");
        assert!(!message.contains(dir.path().to_str().unwrap_or("/")), "no server path: {message}");
        // Too large only as JSON: the operator's to know, as for a resource of its own.
        let r = client.modern(3, "resources/read", json!({ "uri": "files://escaped.txt" })).await;
        assert_eq!(r.error_code(), Some(-32603), "{}", r.text);
        let r = client.modern(3, "resources/read", json!({ "uri": "test://small" })).await;
        assert_eq!(r.json["result"]["contents"][0]["text"], "small", "{}", r.text);
        // The operator reads why, in the logs of the service that refused.
        let mut logged = String::new();
        for _ in 0..100 {
            logged = stack.procs.iter().map(e2e::Proc::log_text).collect();
            if logged.contains("`test://huge` is 33554433 bytes")
                && logged.contains("`test://escaped`: more than")
                && logged.contains("`files://escaped.txt`: more than")
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert!(logged.contains("`test://huge` is 33554433 bytes, above the 32 MiB"), "{logged}");
        assert!(logged.contains("`test://escaped`: more than 63 MiB as JSON"), "{logged}");
        assert!(logged.contains("`files://escaped.txt`: more than"), "{logged}");
    }
}

const PIPE: &str = "/mcp.v1.McpService/Pipe";

/// The caller's end of a `Pipe` stream, as the gateway's link uses it.
struct TestPipe {
    stream: h2::SendStream<Bytes>,
    body: h2::RecvStream,
    received: bytes::BytesMut,
}

/// Open a `Pipe` on `addr`: the stream, or the status its head ended it with.
async fn open_pipe(addr: std::net::SocketAddr, token: Option<&str>) -> Result<TestPipe, String> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    tokio::spawn(connection);
    let mut send = send.ready().await.expect("ready");
    let mut request = http::Request::post(format!("http://{addr}{PIPE}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let (response, stream) = send.send_request(request.body(()).expect("request"), false).expect("sent");
    let (head, body) = response.await.expect("an answer").into_parts();
    assert_eq!(head.status, 200);
    if let Some(status) = head.headers.get("grpc-status") {
        return Err(status.to_str().expect("text").to_owned());
    }
    Ok(TestPipe { stream, body, received: bytes::BytesMut::new() })
}

/// A `PipeCall` carrying `body` as a modern MCP message (a stream of frames accepted or not).
fn pipe_call(call: u64, body: &Value, accepts_stream: bool) -> pb::PipeCall {
    let request = pb::McpRequest {
        body: serde_json::to_vec(body).expect("json").into(),
        era: pb::Era::Modern as i32,
        header_version: e2e::MODERN.into(),
        transport: pb::Transport::StreamableHttp as i32,
        request_id: format!("pipe-test-{call}"),
        accepts_stream,
        ..Default::default()
    };
    pb::PipeCall { call, request: request.encode_to_vec().into(), ..Default::default() }
}

impl TestPipe {
    fn send(&mut self, call: &pb::PipeCall) {
        self.stream.send_data(framed(0, &call.encode_to_vec()), false).expect("sent");
    }

    fn send_raw(&mut self, data: Bytes) {
        self.stream.send_data(data, false).expect("sent");
    }

    /// No more calls.
    fn end(&mut self) {
        self.stream.send_data(Bytes::new(), true).expect("ended");
    }

    /// The next frame, or `None` when the stream's data has ended.
    async fn next(&mut self) -> Option<pb::PipeFrame> {
        loop {
            if self.received.len() >= 5 {
                let length = u32::from_be_bytes(self.received[1..5].try_into().expect("four bytes")) as usize;
                if self.received.len() >= 5 + length {
                    assert_eq!(self.received[0], 0, "not compressed");
                    let mut message = self.received.split_to(5 + length).freeze();
                    message.advance(5);
                    return Some(pb::PipeFrame::decode(message).expect("a PipeFrame"));
                }
            }
            let wait = std::time::Duration::from_secs(10);
            let chunk = tokio::time::timeout(wait, self.body.data()).await.expect("the pipe is not stuck");
            match chunk {
                Some(chunk) => {
                    let chunk = chunk.expect("data");
                    let _ = self.body.flow_control().release_capacity(chunk.len());
                    self.received.extend_from_slice(&chunk);
                }
                None => {
                    assert!(self.received.is_empty(), "the data ends between messages");
                    return None;
                }
            }
        }
    }

    /// The `grpc-status` and `grpc-message` that end the stream (after its data).
    async fn ending(&mut self) -> (String, String) {
        if let Some(frame) = self.next().await {
            panic!("no frame left before the end: {frame:?}");
        }
        let trailers = self.body.trailers().await.expect("trailers").expect("trailers present");
        let text = |name: &str| trailers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        (text("grpc-status"), text("grpc-message"))
    }
}

/// The `McpFrame` a `PipeFrame` carries (with gRPC's prefix, as `Handle` sends it).
fn inner(frame: &pb::PipeFrame) -> pb::McpFrame {
    let mut bytes = frame.frame.clone();
    assert_eq!(bytes.get_u8(), 0);
    let length = bytes.get_u32() as usize;
    assert_eq!(bytes.len(), length, "one McpFrame");
    pb::McpFrame::decode(bytes).expect("an McpFrame")
}

/// Many calls on one `Pipe`: answered as `Handle` answers them, each call's frames in order (a
/// call's progress before its reply), the calls' frames interleaved, a large answer whole, each
/// call ended once; a call cancelled is dropped (its work with it: the stream then ends at once,
/// not when the slow tool would have finished), and the stream ends with `grpc-status: 0` once
/// the caller has ended its side and every call has ended.
#[tokio::test]
async fn pipe_answers_many_calls_on_one_stream() {
    let large = "0123456789abcdef".repeat(6 * 1024);
    let definitions = format!(
        "builtins: [demo]\nresources:\n  - uri: test://large\n    name: large\n    mime_type: text/plain\n    text: \"{large}\"\n"
    );
    let (_registry, mcp, _dir) = engine(&definitions).await;
    let mut pipe = open_pipe(mcp.addr(), Some(TOKEN)).await.expect("a pipe");
    let slow = json!({ "name": "count", "arguments": { "to": 100, "interval_ms": 1000 } });
    pipe.send(&pipe_call(4, &modern_request(4, "tools/call", slow), false));
    let mut counted =
        modern_request(3, "tools/call", json!({ "name": "count", "arguments": { "to": 2, "interval_ms": 100 } }));
    counted["params"]["_meta"]["progressToken"] = json!("p");
    pipe.send(&pipe_call(3, &counted, true));
    let echo = json!({ "name": "echo", "arguments": { "message": "on a pipe" } });
    pipe.send(&pipe_call(1, &modern_request(1, "tools/call", echo), false));
    pipe.send(&pipe_call(2, &modern_request(2, "resources/read", json!({ "uri": "test://large" })), false));

    let mut frames: std::collections::BTreeMap<u64, Vec<pb::McpFrame>> = Default::default();
    let mut ended = std::collections::BTreeSet::new();
    while ended.len() < 3 {
        let frame = pipe.next().await.expect("frames until the three calls end");
        assert!(!frame.not_taken && !frame.closing, "{frame:?}");
        assert!(!ended.contains(&frame.call), "nothing after a call's end: {frame:?}");
        assert_ne!(frame.call, 4, "the slow call has sent nothing yet");
        if !frame.frame.is_empty() {
            frames.entry(frame.call).or_default().push(inner(&frame));
        }
        if frame.end {
            ended.insert(frame.call);
        }
    }
    let reply = |call: u64| -> Value {
        let last = frames[&call].last().expect("a reply");
        assert_eq!(last.disposition, pb::Disposition::Reply as i32, "call {call}");
        serde_json::from_slice(&last.json).expect("JSON")
    };
    assert!(reply(1)["result"]["content"][0]["text"].as_str().is_some_and(|t| t.contains("on a pipe")), "{}", reply(1));
    assert_eq!(reply(2)["result"]["contents"][0]["text"], large.as_str());
    assert_eq!(reply(3)["result"]["content"][0]["text"], "counted to 2", "{}", reply(3));
    let interim = frames[&3].iter().filter(|f| f.disposition == pb::Disposition::Interim as i32).count();
    assert!(interim >= 2, "the progress before the reply: {:?}", frames[&3]);
    assert_eq!(frames[&1].len(), 1);
    assert_eq!(frames[&2].len(), 1);

    // Cancelled: the slow call's work is dropped, so the stream can end at once.
    pipe.send(&pb::PipeCall { call: 4, ..Default::default() });
    pipe.end();
    let ending = tokio::time::timeout(std::time::Duration::from_secs(5), pipe.ending()).await;
    let (status, message) = ending.expect("the stream ends once the cancelled call is dropped");
    assert_eq!(status, "0", "{message}");
}

/// A `Pipe` refused, or broken off by its caller: without the service token (before anything
/// is read), or with a message that is not a `PipeCall`, a call numbered 0, a number used twice
/// while its call runs, or a request that is not an `McpRequest`: each ends the stream with a
/// status and its reason.
#[tokio::test]
async fn pipe_refuses_what_it_cannot_serve() {
    let (_registry, mcp, _dir) = engine("builtins: [demo]\n").await;
    assert_eq!(open_pipe(mcp.addr(), None).await.err().as_deref(), Some("16"), "no token");
    assert_eq!(open_pipe(mcp.addr(), Some("grpc-edge-token-8")).await.err().as_deref(), Some("16"), "a wrong token");

    let list = modern_request(1, "tools/list", json!({}));
    let slow =
        modern_request(2, "tools/call", json!({ "name": "count", "arguments": { "to": 100, "interval_ms": 1000 } }));
    let broken: [(&str, Vec<Bytes>); 5] = [
        ("not protobuf", vec![framed(0, b"\xff\xff\xff")]),
        ("compressed", vec![framed(1, &pipe_call(1, &list, false).encode_to_vec())]),
        ("numbered 0", vec![framed(0, &pipe_call(0, &list, false).encode_to_vec())]),
        (
            "a number used twice",
            vec![
                framed(0, &pipe_call(2, &slow, false).encode_to_vec()),
                framed(0, &pipe_call(2, &list, false).encode_to_vec()),
            ],
        ),
        (
            "not an McpRequest",
            vec![framed(
                0,
                &pb::PipeCall { call: 5, request: Bytes::from_static(b"\xff\xff"), ..Default::default() }
                    .encode_to_vec(),
            )],
        ),
    ];
    for (case, sent) in broken {
        let mut pipe = open_pipe(mcp.addr(), Some(TOKEN)).await.expect("a pipe");
        for data in sent {
            pipe.send_raw(data);
        }
        let (status, message) = pipe.ending().await;
        assert_eq!(status, "13", "{case}: {message}");
        assert!(!message.is_empty(), "{case}: a reason");
    }
    // The service goes on serving pipes.
    let mut pipe = open_pipe(mcp.addr(), Some(TOKEN)).await.expect("a pipe");
    pipe.send(&pipe_call(1, &list, false));
    let frame = pipe.next().await.expect("an answer");
    assert!(frame.end && frame.call == 1, "{frame:?}");
    pipe.end();
    assert_eq!(pipe.ending().await.0, "0");
}

/// A service told to stop (SIGTERM) says `closing` on its pipes, answers a call that arrives
/// after that `not_taken` without running it, finishes the call it had taken, and ends the
/// stream with `grpc-status: 0` without waiting for the caller; then it exits.
#[tokio::test]
async fn a_pipe_closes_when_its_service_stops() {
    let (_registry, mcp, _dir) = engine("builtins: [demo]\n").await;
    let mut pipe = open_pipe(mcp.addr(), Some(TOKEN)).await.expect("a pipe");
    let taken =
        modern_request(1, "tools/call", json!({ "name": "count", "arguments": { "to": 4, "interval_ms": 500 } }));
    pipe.send(&pipe_call(1, &taken, false));
    // Running before the stop.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let exited = tokio::spawn(mcp.terminate());
    let closing = pipe.next().await.expect("news of the stop");
    assert!(closing.closing && closing.call == 0 && closing.frame.is_empty(), "{closing:?}");
    let late = modern_request(2, "tools/call", json!({ "name": "echo", "arguments": { "message": "late" } }));
    pipe.send(&pipe_call(2, &late, false));
    let mut seen: std::collections::BTreeMap<u64, Vec<pb::PipeFrame>> = Default::default();
    while let Some(frame) = pipe.next().await {
        seen.entry(frame.call).or_default().push(frame);
    }
    let [not_taken] = seen[&2].as_slice() else { panic!("one answer to the late call: {:?}", seen[&2]) };
    assert!(not_taken.not_taken && not_taken.frame.is_empty() && !not_taken.end, "{not_taken:?}");
    let finished = &seen[&1];
    assert!(finished.last().is_some_and(|f| f.end), "{finished:?}");
    let replies: Vec<Value> = finished
        .iter()
        .filter(|f| !f.frame.is_empty())
        .map(|f| serde_json::from_slice(&inner(f).json).expect("JSON"))
        .collect();
    let [reply] = replies.as_slice() else { panic!("one reply: {replies:?}") };
    assert_eq!(reply["result"]["content"][0]["text"], "counted to 4", "{reply}");
    let trailers = pipe.body.trailers().await.expect("trailers").expect("present");
    assert_eq!(trailers.get("grpc-status").map(|v| v.as_bytes()), Some(&b"0"[..]));
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), exited).await.expect("exits").expect("task");
    assert!(status.success(), "{status}");
}

/// A call whose HTTP client goes away is cancelled through both hops: the gateway cancels it on
/// its pipe to mcp-service, mcp-service drops the call's work and with it the registry's call,
/// and the slow tool stops at its next step (a hundred steps of 200 ms otherwise). Before the
/// pipe, the reset of the call's own stream did this.
#[tokio::test]
async fn a_call_abandoned_by_its_client_is_cancelled_through_the_pipe() {
    use tokio::io::AsyncWriteExt as _;
    let stack = e2e::Stack::microservices().await;
    let body =
        modern_request(1, "tools/call", json!({ "name": "count", "arguments": { "to": 100, "interval_ms": 200 } }))
            .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json\r\nMcp-Protocol-Version: {}\r\nMcp-Method: tools/call\r\nMcp-Name: count\r\nContent-Length: {}\r\n\r\n{body}",
        e2e::MODERN,
        body.len()
    );
    let mut waiting = tokio::net::TcpStream::connect(stack.gateway().addr()).await.expect("connect");
    waiting.write_all(head.as_bytes()).await.expect("write");
    // The tool is running.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let logged = || stack.procs.iter().map(Proc::log_text).collect::<String>();
    assert!(!logged().contains("cancelled"), "{}", logged());
    drop(waiting);
    let mut stopped = false;
    for _ in 0..100 {
        if logged().contains("cancelled") {
            stopped = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(stopped, "the tool did not stop within 5 s: {}", logged());
}
