//! A validated request on its way to a method handler, with the accessors handlers share.

use mcp_proto::vocab::{Era, meta};
use serde_json::{Map, Value};

use crate::context::{Context, Frame, Sink};
use crate::dispatch::Method;
use crate::error::Error;

pub struct Request<'a> {
    pub era: Era,
    /// The revision the reply is shaped for.
    pub revision: &'static str,
    pub method: Method,
    /// The raw JSON-RPC id (for subscription ids).
    pub id: Option<&'a str>,
    pub params: Value,
    pub ctx: &'a Context,
    pub sink: &'a Sink,
}

impl Request<'_> {
    pub fn modern(&self) -> bool {
        self.era == Era::Modern
    }

    pub fn meta(&self) -> Option<&Map<String, Value>> {
        self.params.get("_meta").and_then(Value::as_object)
    }

    /// `_meta.progressToken`, when it is a string or an integer.
    pub fn progress_token(&self) -> Option<Value> {
        self.meta()?.get(meta::PROGRESS_TOKEN).filter(|t| t.is_string() || t.is_i64() || t.is_u64()).cloned()
    }

    /// The client capabilities in force: this request's `_meta` (modern) or the session's
    /// (legacy). Without a session, a legacy client has declared nothing.
    pub fn client_capabilities(&self) -> Value {
        match self.era {
            Era::Modern => self.meta().and_then(|m| m.get(meta::CLIENT_CAPABILITIES)).cloned().unwrap_or(Value::Null),
            Era::Legacy => self.ctx.session.as_ref().map(|s| s.capabilities()).unwrap_or(Value::Null),
        }
    }

    /// The minimum level of log notifications for this request, if any are wanted.
    /// Modern: only when the request opts in with `logLevel`. Legacy: the level set with
    /// `logging/setLevel` in this session, else every level.
    pub fn log_level(&self) -> Option<String> {
        match self.era {
            Era::Modern => self.meta()?.get(meta::LOG_LEVEL)?.as_str().map(str::to_owned),
            Era::Legacy => {
                Some(self.ctx.session.as_ref().and_then(|s| s.log_level()).unwrap_or_else(|| "debug".to_owned()))
            }
        }
    }

    /// A string parameter that must be present.
    pub fn required_str(&self, name: &str) -> Result<&str, Error> {
        self.params
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| Error::InvalidParams(format!("`{name}` must be a string")))
    }

    /// An optional `cursor` parameter.
    pub fn cursor(&self) -> Result<Option<&str>, Error> {
        match self.params.get("cursor") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(Error::InvalidCursor),
        }
    }

    /// Send a message on this request's stream (notification or server-to-client request).
    pub async fn send(&self, json: Vec<u8>) -> bool {
        self.sink.send(Frame::interim(json)).await.is_ok()
    }

    /// Send a notification on this request's stream (progress, log).
    pub async fn notify(&self, method: &str, params: Value) {
        self.send(mcp_proto::jsonrpc::notification(method, &params)).await;
    }

    pub fn caller(&self) -> Option<mcp_proto::registry::Caller> {
        self.ctx
            .principal
            .as_ref()
            .map(|p| mcp_proto::registry::Caller { subject: p.subject.clone(), scopes: p.scopes.clone() })
    }

    /// Whether the caller may see an item with these scopes (everything when auth is off).
    pub fn permits(&self, scopes: &[String]) -> bool {
        match &self.ctx.principal {
            None => true,
            Some(p) => scopes.iter().all(|s| p.scopes.contains(s)),
        }
    }
}
