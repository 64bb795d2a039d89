//! Server-to-client input, one mechanism for both eras.
//!
//! A handler that needs something from the client (an elicitation, a sampling call, the
//! client's roots) answers with input requests and the state to resume from.
//! - 2026-07-28: the result goes out as `resultType: "input_required"` with `inputRequests`
//!   and a `requestState` sealed here (HMAC, expiry, bound to the method, target, arguments
//!   and caller); the client retries with `inputResponses` and that state.
//! - Legacy: each input request becomes a real JSON-RPC request to the client on the
//!   response stream (or stdout); the answers resume the handler, round after round, and the
//!   client sees the legacy exchange it expects.

use std::future::Future;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::dispatch::Engine;
use crate::error::Error;
use crate::request::Request;
use crate::seal::{self, now};

const PURPOSE: &str = "mcp-request-state";

/// What one round of a handler produced: its result (a tree, or JSON passed through as the
/// registry wrote it), or what it needs first.
#[derive(Debug)]
pub enum Handled<T = Value> {
    Complete(T),
    InputRequired { requests: Value, state: Value },
    MissingCapabilities(Value),
}

/// How a request with input ended: its result, or (2026-07-28) the `input_required` result
/// that asks the client.
#[derive(Debug)]
pub enum Ran<T = Value> {
    Complete(T),
    InputRequired(Value),
}

impl Ran {
    /// The result, whichever it is.
    pub fn into_value(self) -> Value {
        match self {
            Ran::Complete(v) | Ran::InputRequired(v) => v,
        }
    }
}

impl<T> Handled<T> {
    /// From the registry's wire form.
    pub fn from_wire(
        input: Option<mcp_proto::registry::InputRequired>,
        complete: impl FnOnce() -> Result<T, Error>,
    ) -> Result<Self, Error> {
        match input {
            Some(i) => {
                Ok(Self::InputRequired { requests: parse(&i.input_requests_json)?, state: parse(&i.state_json)? })
            }
            None => complete().map(Self::Complete),
        }
    }
}

pub fn parse(bytes: &[u8]) -> Result<Value, Error> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_slice(bytes).map_err(|e| Error::Internal(format!("registry sent malformed JSON: {e}")))
}

/// The inputs of one round, as sent to the registry.
#[derive(Debug, Default)]
pub struct Round {
    pub responses: Value,
    pub state: Value,
}

impl Round {
    pub fn responses_json(&self) -> Vec<u8> {
        if self.responses.is_null() { Vec::new() } else { serde_json::to_vec(&self.responses).unwrap_or_default() }
    }

    pub fn state_json(&self) -> Vec<u8> {
        if self.state.is_null() { Vec::new() } else { serde_json::to_vec(&self.state).unwrap_or_default() }
    }
}

#[derive(Serialize, Deserialize)]
struct Sealed {
    /// Method, target (tool or prompt name, resource URI), digest of the other parameters.
    m: String,
    t: String,
    a: String,
    /// Caller subject ("" when authentication is off).
    p: String,
    /// Expiry, Unix seconds.
    e: u64,
    /// The handler's state.
    s: Value,
}

/// Run a handler that may ask for client input. `bound` holds the parameters the request
/// state is bound to (arguments); `call` performs one round against the registry.
pub async fn run<T, F, Fut>(
    engine: &Engine,
    req: &Request<'_>,
    target: &str,
    bound: &Value,
    mut call: F,
) -> Result<Ran<T>, Error>
where
    F: FnMut(Round) -> Fut,
    Fut: Future<Output = Result<Handled<T>, Error>>,
{
    let method = format!("{:?}", req.method);
    let subject = req.ctx.principal.as_ref().map(|p| p.subject.clone()).unwrap_or_default();
    if req.modern() {
        let round = modern_round(engine, req, &method, target, bound, &subject)?;
        return match call(round).await? {
            Handled::Complete(v) => Ok(Ran::Complete(v)),
            Handled::MissingCapabilities(caps) => Err(Error::MissingCapability(caps)),
            Handled::InputRequired { requests, state } => {
                let sealed = Sealed {
                    m: method,
                    t: target.to_owned(),
                    a: seal::digest(bound),
                    p: subject,
                    e: now().saturating_add(engine.settings.request_state_ttl.as_secs()),
                    s: state,
                };
                Ok(Ran::InputRequired(json!({
                    "resultType": "input_required",
                    "inputRequests": requests,
                    "requestState": engine.sealer.seal(PURPOSE, &sealed),
                })))
            }
        };
    }
    let mut round = Round::default();
    for _ in 0..engine.settings.max_input_rounds {
        match call(round).await? {
            Handled::Complete(v) => return Ok(Ran::Complete(v)),
            Handled::MissingCapabilities(caps) => return Err(Error::MissingCapability(caps)),
            Handled::InputRequired { requests, state } => {
                let responses = ask_client(engine, req, &requests).await?;
                round = Round { responses, state };
            }
        }
    }
    Err(Error::Internal(format!("{target}: more than {} input rounds", engine.settings.max_input_rounds)))
}

/// The first round of a modern request: its `inputResponses`, and the state inside its
/// `requestState` once verified. A state that fails verification is refused (-32602).
fn modern_round(
    engine: &Engine,
    req: &Request<'_>,
    method: &str,
    target: &str,
    bound: &Value,
    subject: &str,
) -> Result<Round, Error> {
    let responses = match req.params.get("inputResponses") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::Object(map)) => {
            if let Some((key, _)) = map.iter().find(|(_, v)| !v.is_object()) {
                return Err(Error::InvalidParams(format!("inputResponses.{key} must be an object")));
            }
            Value::Object(map.clone())
        }
        Some(_) => return Err(Error::InvalidParams("`inputResponses` must be an object".into())),
    };
    let state = match req.params.get("requestState") {
        None | Some(Value::Null) => Value::Null,
        Some(Value::String(token)) => {
            let sealed: Sealed =
                engine.sealer.open(PURPOSE, token).map_err(|e| Error::InvalidRequestState(e.to_string()))?;
            if sealed.e <= now() {
                return Err(Error::InvalidRequestState("requestState expired".into()));
            }
            if sealed.m != method || sealed.t != target || sealed.a != seal::digest(bound) || sealed.p != subject {
                return Err(Error::InvalidRequestState("requestState belongs to another request".into()));
            }
            sealed.s
        }
        Some(_) => return Err(Error::InvalidParams("`requestState` must be a string".into())),
    };
    Ok(Round { responses, state })
}

/// The client capability a server-to-client request needs.
fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// Legacy: ask the client each input request as a real JSON-RPC request and collect the
/// results under the same keys.
async fn ask_client(engine: &Engine, req: &Request<'_>, requests: &Value) -> Result<Value, Error> {
    let requests = requests.as_object().ok_or_else(|| Error::Internal("inputRequests is not an object".into()))?;
    let capabilities = req.client_capabilities();
    let mut responses = Map::new();
    for (key, request) in requests {
        let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
        let cap = capability_for(method)
            .ok_or_else(|| Error::Internal(format!("unknown input request method `{method}`")))?;
        if capabilities.get(cap).is_none_or(Value::is_null) || !req.ctx.accepts_stream {
            return Err(Error::MissingCapability(json!({ cap: {} })));
        }
        let mut params = request.get("params").cloned().unwrap_or_else(|| json!({}));
        if method == "elicitation/create" && !crate::shape::at_least(req.revision, "2025-11-25") {
            // Form mode is implicit before 2025-11-25, which introduced `mode`.
            if let Some(p) = params.as_object_mut() {
                p.remove("mode");
            }
        }
        let (id, answer) = engine.pending.register();
        let message = json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
        if !req.send(serde_json::to_vec(&message).unwrap_or_default()).await {
            engine.pending.forget(&id);
            return Err(Error::Internal("the client's stream closed".into()));
        }
        let answer = match tokio::time::timeout(engine.settings.client_answer_timeout, answer).await {
            Ok(Ok(a)) => a,
            _ => {
                engine.pending.forget(&id);
                return Err(Error::Internal(format!("no answer from the client to {method}")));
            }
        };
        match answer.get("result") {
            Some(result) => {
                responses.insert(key.clone(), result.clone());
            }
            None => {
                let message = answer.pointer("/error/message").and_then(Value::as_str).unwrap_or("no result");
                return Err(Error::ClientDeclined(format!("{method}: {message}")));
            }
        }
    }
    Ok(Value::Object(responses))
}
