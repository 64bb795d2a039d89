//! The references the platform is measured against, each run as its own process (this binary
//! re-executed with a hidden subcommand) so that its CPU and memory are measured apart:
//!
//! - [`bare_hyper`]: hyper 1 parsing the JSON-RPC body with serde_json and answering a canned
//!   `tools/list` of the five tools — about the least work an HTTP JSON-RPC server can do;
//! - [`sdk`]: the official Rust SDK (`rmcp`), Streamable HTTP, stateless, JSON responses,
//!   serving the same five tools (text tools that echo) and the same 1 MiB resource.
//!
//! Both print the platform's JSON `listening` line on stderr.

pub mod bare_hyper;
pub mod sdk;

use std::convert::Infallible;
use std::net::SocketAddr;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::procs;

/// Accept connections on 127.0.0.1, port 0, forever; each served by hyper (HTTP/1.1 or 2).
async fn serve<S, B>(service_name: &str, service: S) -> anyhow::Result<()>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    eprintln!("{}", procs::listening_line(service_name, listener.local_addr()?));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                // Out of file descriptors and the like: wait a little, keep serving.
                eprintln!("{}", serde_json::json!({ "level": "WARN", "message": format!("accept: {e}") }));
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
