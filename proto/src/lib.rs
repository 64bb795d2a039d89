//! # Contracts and shared MCP vocabulary
//!
//! No I/O lives here: only what more than one service must agree on.
//!
//! - [`mcp`], [`registry`]: generated gRPC contracts (`mcp.v1`, `registry.v1`).
//! - [`vocab`]: protocol revisions, `_meta` keys, JSON-RPC error codes, the era enum.
//! - [`envelope`]: a borrowing parse of a JSON-RPC body and its era classification,
//!   shared by the HTTP edge and the stdio transport.
//! - [`jsonrpc`]: reply and notification builders around a raw id.
//! - [`body`]: request bodies read whole within a limit and a time (gateway, oauth-service).
//! - [`request_log`]: the request being served, for its log lines (and its span when traces
//!   are exported).
//! - [`runtime`]: logging, configuration loading and shutdown signals shared by the binaries.
//! - [`transport`]: one type for a gRPC connection over the network or in process.
//! - [`balance`]: targets of one or several replicas, and calls spread over them.
//! - [`link`]: one replica's HTTP/2 connection for gRPC calls.
//! - [`call`]: the caller's side of `McpService/Handle`, without tonic's generated client.
//! - [`pipe`]: `Handle` calls, many on one HTTP/2 stream (`McpService/Pipe`).
//! - [`socket`]: sockets between the services, written in batches.
//! - [`header_codec`]: the `=?base64?…?=` sentinel used by `Mcp-Name` and `Mcp-Param-*`.

pub mod balance;
pub mod body;
pub mod call;
pub mod envelope;
pub mod header_codec;
pub mod jsonrpc;
pub mod link;
pub mod log_fields;
pub mod mimalloc;
pub mod outbound;
pub mod pipe;
pub mod request_log;
pub mod resident;
pub mod runtime;
pub mod scheduling;
pub mod socket;
pub mod telemetry;
pub mod templates;
pub mod transport;
pub mod trust;
pub mod vocab;

/// The largest message any of the services' gRPC clients and servers take (tonic's default is
/// 4 MiB): a resource's contents, a call's arguments and a JSON-RPC body travel as one message,
/// and the gateway forwards bodies up to its `max_body_bytes` (4 MiB by default) with the call's
/// other fields around them. Set on the generated clients and servers that carry such messages,
/// and used by mcp-service's own `Handle` server, which refuses a longer message from its
/// prefix, before reading the rest, and reads nothing from a caller without the service token
/// (when one is configured), and by the gateway's side of `Handle` ([`call`]), which refuses a
/// longer frame from its prefix too.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// gateway → mcp-service.
pub mod mcp {
    #![allow(clippy::all)]
    tonic::include_proto!("mcp.v1");
}

/// mcp-service → registry-service.
pub mod registry {
    #![allow(clippy::all)]
    tonic::include_proto!("registry.v1");
}
