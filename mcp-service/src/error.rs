//! The one mapping from protocol failures to JSON-RPC codes and delivery dispositions.

use mcp_proto::mcp::Disposition;
use mcp_proto::vocab::{Era, ErrorCode, MODERN_REVISIONS};
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Parse error: {0}")]
    Parse(String),
    #[error("Invalid request: {0}")]
    InvalidRequest(String),
    /// A modern request without the `_meta` fields every request must carry.
    #[error("Invalid params: {0}")]
    MissingMeta(String),
    #[error("Unsupported protocol version: {requested}")]
    UnsupportedVersion { requested: String },
    #[error("Invalid params: {0}")]
    InvalidLogLevel(String),
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    #[error("Invalid params: {0}")]
    InvalidParams(String),
    #[error("Unknown tool: {0}")]
    UnknownTool(String),
    #[error("Unknown prompt: {0}")]
    UnknownPrompt(String),
    #[error("Resource not found: {0}")]
    ResourceNotFound(String),
    #[error("Invalid cursor")]
    InvalidCursor,
    /// The request needs client capabilities it did not declare (`ClientCapabilities`).
    #[error("Missing required client capability")]
    MissingCapability(Value),
    #[error("Invalid params: {0}")]
    InvalidRequestState(String),
    /// The client answered a server-to-client request with an error.
    #[error("The client declined: {0}")]
    ClientDeclined(String),
    #[error("Session not found")]
    SessionNotFound,
    /// The caller's token lacks the scopes this needs (step-up authorisation).
    #[error("Insufficient scope: this needs {}", .0.join(" "))]
    InsufficientScope(Vec<String>),
    /// An `Mcp-Param-*` header is missing, malformed or disagrees with the arguments.
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    #[error("Internal error")]
    Internal(String),
    /// registry-service cannot be reached (down, restarting, overloaded): worth retrying.
    #[error("Temporarily unavailable")]
    Unavailable(String),
    /// The client went away (closed the stream) or cancelled the request.
    #[error("Request cancelled")]
    Cancelled,
}

impl Error {
    pub fn code(&self, era: Era) -> ErrorCode {
        match self {
            Self::Parse(_) => ErrorCode::PARSE_ERROR,
            Self::InvalidRequest(_) => ErrorCode::INVALID_REQUEST,
            Self::MissingMeta(_)
            | Self::InvalidLogLevel(_)
            | Self::InvalidParams(_)
            | Self::UnknownTool(_)
            | Self::UnknownPrompt(_)
            | Self::InvalidCursor
            | Self::InvalidRequestState(_) => ErrorCode::INVALID_PARAMS,
            Self::MissingCapability(_) if era == Era::Modern => ErrorCode::MISSING_CLIENT_CAPABILITY,
            Self::MissingCapability(_) => ErrorCode::INVALID_PARAMS,
            Self::ClientDeclined(_) => ErrorCode::INTERNAL_ERROR,
            Self::SessionNotFound => ErrorCode(-32001),
            Self::InsufficientScope(_) => ErrorCode(-32003),
            Self::HeaderMismatch(_) => ErrorCode::HEADER_MISMATCH,
            Self::UnsupportedVersion { .. } => ErrorCode::UNSUPPORTED_PROTOCOL_VERSION,
            Self::MethodNotFound(_) => ErrorCode::METHOD_NOT_FOUND,
            Self::ResourceNotFound(_) => ErrorCode::resource_not_found(era),
            Self::Internal(_) | Self::Unavailable(_) | Self::Cancelled => ErrorCode::INTERNAL_ERROR,
        }
    }

    /// How the edge delivers the error: validation failures before the handler are
    /// rejections (HTTP 400); a modern unknown method is a 404; the rest are replies.
    pub fn disposition(&self, era: Era) -> Disposition {
        match self {
            Self::Parse(_)
            | Self::InvalidRequest(_)
            | Self::MissingMeta(_)
            | Self::UnsupportedVersion { .. }
            | Self::InvalidLogLevel(_)
            | Self::HeaderMismatch(_) => Disposition::Rejected,
            Self::MethodNotFound(_) if era == Era::Modern => Disposition::UnknownMethod,
            Self::MissingCapability(_) if era == Era::Modern => Disposition::Rejected,
            Self::SessionNotFound => Disposition::SessionNotFound,
            Self::InsufficientScope(_) => Disposition::InsufficientScope,
            _ => Disposition::Reply,
        }
    }

    pub fn data(&self) -> Option<Value> {
        match self {
            Self::UnsupportedVersion { requested } => {
                Some(json!({ "supported": MODERN_REVISIONS, "requested": requested }))
            }
            Self::ResourceNotFound(uri) => Some(json!({ "uri": uri })),
            Self::MissingCapability(caps) => Some(json!({ "requiredCapabilities": caps })),
            Self::InsufficientScope(scopes) => Some(json!({ "requiredScopes": scopes })),
            _ => None,
        }
    }

    /// The message sent to the client: short, never the internal detail.
    pub fn message(&self) -> String {
        match self {
            Self::Internal(_) => "Internal error".to_owned(),
            Self::Unavailable(_) => "Temporarily unavailable: the tool service cannot be reached; try again".to_owned(),
            Self::MissingCapability(caps) => {
                let names: Vec<&str> =
                    caps.as_object().map(|m| m.keys().map(String::as_str).collect()).unwrap_or_default();
                format!("Server requires the {} capability for this request", names.join(", "))
            }
            other => other.to_string(),
        }
    }

    /// The JSON-RPC error reply for a request with raw id `id`.
    pub fn to_json(&self, id: Option<&str>, era: Era) -> Vec<u8> {
        match self {
            Self::Internal(detail) => tracing::error!(error = %detail, "internal error"),
            Self::Unavailable(detail) => tracing::warn!(error = %detail, "registry unavailable"),
            _ => {}
        }
        mcp_proto::jsonrpc::error(id, self.code(era), &self.message(), self.data().as_ref())
    }
}

/// Map a registry failure for an item lookup.
pub fn from_registry(status: tonic::Status, not_found: impl FnOnce() -> Error) -> Error {
    match status.code() {
        tonic::Code::NotFound => not_found(),
        tonic::Code::InvalidArgument => Error::InvalidParams(status.message().to_owned()),
        tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::ResourceExhausted => {
            Error::Unavailable(format!("registry: {status}"))
        }
        _ => Error::Internal(format!("registry: {status}")),
    }
}
