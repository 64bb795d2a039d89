//! The references the platform is measured against, each run as its own process: a bare hyper
//! server that parses the JSON-RPC body and answers a canned `tools/list` (the physical limit of
//! one process), and the official Rust SDK (`rmcp`) serving the same five tools statelessly.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};

/// The five tools every server under test offers.
pub fn five_tools() -> Vec<Value> {
    (0..5)
        .map(|i| {
            json!({
                "name": format!("tool_{i}"),
                "description": format!("Echoes its message back (tool {i} of the benchmark catalog)"),
                "inputSchema": { "type": "object", "properties": { "message": { "type": "string" } }, "required": ["message"] }
            })
        })
        .collect()
}

async fn serve_with<F, Fut>(listen: SocketAddr, handle: F) -> anyhow::Result<()>
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| handle.clone()(req));
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The bare hyper reference: parse, answer a canned `tools/list`.
pub async fn bare_hyper(listen: SocketAddr) -> anyhow::Result<()> {
    let list = Arc::new(json!({ "tools": five_tools() }));
    serve_with(listen, move |req: Request<Incoming>| {
        let list = list.clone();
        async move {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let parsed: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let reply = json!({ "jsonrpc": "2.0", "id": parsed["id"], "result": *list });
            let bytes = serde_json::to_vec(&reply).unwrap_or_default();
            Ok(Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(bytes)))
                .unwrap_or_default())
        }
    })
    .await
}

/// The rmcp reference: the SDK's Streamable HTTP server, stateless, JSON responses.
pub async fn rmcp_server(listen: SocketAddr) -> anyhow::Result<()> {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let config = StreamableHttpServerConfig::default().with_legacy_session_mode(false).with_json_response(true);
    let service = StreamableHttpService::new(|| Ok(Reference), Arc::new(LocalSessionManager::default()), config);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("listening {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let service = hyper_util::service::TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[derive(Clone)]
struct Reference;

impl rmcp::ServerHandler for Reference {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(rmcp::model::ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let tools = five_tools()
            .into_iter()
            .map(|t| {
                let schema = t["inputSchema"].as_object().cloned().unwrap_or_default();
                rmcp::model::Tool::new(
                    t["name"].as_str().unwrap_or_default().to_owned(),
                    t["description"].as_str().unwrap_or_default().to_owned(),
                    Arc::new(schema),
                )
            })
            .collect();
        Ok(rmcp::model::ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        let message =
            request.arguments.as_ref().and_then(|a| a.get("message")).and_then(Value::as_str).unwrap_or_default();
        Ok(rmcp::model::CallToolResponse::Complete(rmcp::model::CallToolResult::success(vec![
            rmcp::model::ContentBlock::text(message.to_owned()),
        ])))
    }
}
