//! Legacy sessions and server-to-client requests.
//!
//! A legacy HTTP session id is a sealed token carrying the negotiated revision, the client's
//! capabilities and an expiry, so any replica can serve a plain request of any session. What
//! must live somewhere — the log level set with `logging/setLevel`, resource subscriptions,
//! the open GET streams, answers awaited from the client — lives in this replica's memory,
//! keyed by the token's nonce; a load balancer keeps a session on one replica by hashing
//! `Mcp-Session-Id`. On stdio the connection is the session.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::dispatch::Frame;
use crate::seal::{SealError, Sealer, now};

const PURPOSE: &str = "mcp-session";

/// Live state of one legacy session.
#[derive(Debug, Default)]
pub struct Session {
    /// The nonce that names an HTTP session; empty on stdio.
    pub key: String,
    pub negotiated: Mutex<Option<&'static str>>,
    pub client_capabilities: Mutex<Value>,
    pub log_level: Mutex<Option<String>>,
    pub subscriptions: Mutex<HashSet<String>>,
    /// Where server-initiated messages go: the GET streams of an HTTP session, or stdout.
    pub outbound: Mutex<Vec<mpsc::Sender<Frame>>>,
    pub ended: AtomicBool,
    expires: u64,
}

impl Session {
    /// A session for a stdio connection, whose messages go to `outbound`.
    pub fn stdio(outbound: mpsc::Sender<Frame>) -> Self {
        Self { outbound: Mutex::new(vec![outbound]), expires: u64::MAX, ..Self::default() }
    }

    pub fn revision(&self) -> Option<&'static str> {
        self.negotiated.lock().ok().and_then(|g| *g)
    }

    pub fn capabilities(&self) -> Value {
        self.client_capabilities.lock().map(|c| c.clone()).unwrap_or(Value::Null)
    }

    pub fn log_level(&self) -> Option<String> {
        self.log_level.lock().ok().and_then(|l| l.clone())
    }

    pub fn is_subscribed(&self, uri: &str) -> bool {
        self.subscriptions.lock().is_ok_and(|s| s.contains(uri))
    }

    /// Send a server-initiated message on exactly one open stream (the newest that takes it);
    /// `false` if none did. Never waits: a stream too slow to keep up misses the message rather
    /// than holding up every other session.
    pub fn send(&self, frame_json: Vec<u8>) -> bool {
        let Ok(mut outbound) = self.outbound.lock() else { return false };
        outbound.retain(|tx| !tx.is_closed());
        for tx in outbound.iter().rev() {
            match tx.try_send(Frame::interim(frame_json.clone())) {
                Ok(()) => return true,
                Err(mpsc::error::TrySendError::Full(_)) => tracing::debug!("session stream full; message skipped"),
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        false
    }
}

#[derive(Serialize, Deserialize)]
struct Claims {
    /// Negotiated revision.
    r: String,
    /// Client capabilities from `initialize`.
    c: Value,
    /// Expiry (Unix seconds).
    e: u64,
    /// Nonce naming the live state.
    n: String,
}

/// Why a session id was refused (HTTP 404: the client must initialize again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("unknown or invalid session: {0}")]
    Invalid(#[from] SealError),
    #[error("session expired")]
    Expired,
    #[error("session ended")]
    Ended,
}

/// Every legacy HTTP session this replica knows.
pub struct Sessions {
    sealer: Sealer,
    ttl: Duration,
    live: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    pub fn new(sealer: Sealer, ttl: Duration) -> Self {
        Self { sealer, ttl, live: Mutex::default() }
    }

    /// Start a session after a successful `initialize`; returns its id.
    pub fn create(&self, revision: &'static str, capabilities: Value) -> (String, Arc<Session>) {
        let mut nonce = [0u8; 16];
        rand::fill(&mut nonce);
        let nonce: String = nonce.iter().map(|b| format!("{b:02x}")).collect();
        let expires = now().saturating_add(self.ttl.as_secs());
        let claims = Claims { r: revision.to_owned(), c: capabilities.clone(), e: expires, n: nonce.clone() };
        let token = self.sealer.seal(PURPOSE, &claims);
        let session = Arc::new(Session {
            key: nonce.clone(),
            negotiated: Mutex::new(Some(revision)),
            client_capabilities: Mutex::new(capabilities),
            expires,
            ..Session::default()
        });
        if let Ok(mut live) = self.live.lock() {
            let t = now();
            live.retain(|_, s| s.expires > t);
            live.insert(nonce, session.clone());
        }
        (token, session)
    }

    /// The live session named by `token`. A valid token this replica has not seen (issued by
    /// another replica, or before a restart) is taken up from its claims.
    pub fn resolve(&self, token: &str) -> Result<Arc<Session>, SessionError> {
        let claims: Claims = self.sealer.open(PURPOSE, token.trim())?;
        if claims.e <= now() {
            return Err(SessionError::Expired);
        }
        let revision = mcp_proto::vocab::LEGACY_REVISIONS
            .into_iter()
            .find(|r| *r == claims.r)
            .ok_or(SessionError::Invalid(SealError::Malformed))?;
        let mut live = self.live.lock().map_err(|_| SessionError::Ended)?;
        let session = live
            .entry(claims.n.clone())
            .or_insert_with(|| {
                Arc::new(Session {
                    key: claims.n.clone(),
                    negotiated: Mutex::new(Some(revision)),
                    client_capabilities: Mutex::new(claims.c.clone()),
                    expires: claims.e,
                    ..Session::default()
                })
            })
            .clone();
        if session.ended.load(Ordering::SeqCst) {
            return Err(SessionError::Ended);
        }
        Ok(session)
    }

    /// End the session named by `token` (HTTP DELETE); `false` if there was none.
    pub fn end(&self, token: &str) -> bool {
        match self.resolve(token) {
            Ok(session) => {
                session.ended.store(true, Ordering::SeqCst);
                if let Ok(mut o) = session.outbound.lock() {
                    o.clear();
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Register a session that has no token (a stdio connection); returns its key.
    pub fn attach(&self, session: Arc<Session>) -> String {
        let mut key = [0u8; 16];
        rand::fill(&mut key);
        let key: String = key.iter().map(|b| format!("{b:02x}")).collect();
        if let Ok(mut live) = self.live.lock() {
            live.insert(key.clone(), session);
        }
        key
    }

    pub fn detach(&self, key: &str) {
        if let Ok(mut live) = self.live.lock() {
            live.remove(key);
        }
    }

    /// Every live, unended session.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.live
            .lock()
            .map(|l| l.values().filter(|s| !s.ended.load(Ordering::SeqCst)).cloned().collect())
            .unwrap_or_default()
    }
}

/// Server-to-client requests awaiting the client's answer, by JSON-RPC id.
pub struct Pending {
    prefix: String,
    next: AtomicU64,
    waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
}

impl Default for Pending {
    fn default() -> Self {
        let mut p = [0u8; 4];
        rand::fill(&mut p);
        Self {
            prefix: p.iter().map(|b| format!("{b:02x}")).collect(),
            next: AtomicU64::new(1),
            waiting: Mutex::default(),
        }
    }
}

impl Pending {
    /// A fresh request id (a JSON string) and the receiver of its answer.
    pub fn register(&self) -> (Value, oneshot::Receiver<Value>) {
        let id = format!("srv-{}-{}", self.prefix, self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(Value::String(id.clone()).to_string(), tx);
        }
        (Value::String(id), rx)
    }

    /// Deliver a client's response message; `false` if nothing waits for that id.
    pub fn resolve(&self, id: &Value, message: Value) -> bool {
        let tx = self.waiting.lock().ok().and_then(|mut w| w.remove(&id.to_string()));
        tx.is_some_and(|tx| tx.send(message).is_ok())
    }

    /// Stop waiting for `id` (timed out or cancelled).
    pub fn forget(&self, id: &Value) {
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(&id.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sessions_resolve_end_and_refuse_forgeries() {
        let sessions = Sessions::new(Sealer::random(), Duration::from_secs(60));
        let (token, s) = sessions.create("2025-06-18", json!({"sampling":{}}));
        assert!(token.bytes().all(|b| (0x21..=0x7e).contains(&b)), "visible ASCII");
        let again = sessions.resolve(&token).expect("resolves");
        assert!(Arc::ptr_eq(&s, &again));
        assert_eq!(again.revision(), Some("2025-06-18"));
        assert!(matches!(sessions.resolve("forged.token"), Err(SessionError::Invalid(_))));
        assert!(sessions.end(&token));
        assert_eq!(sessions.resolve(&token).err(), Some(SessionError::Ended));
        assert!(!sessions.end(&token));
    }

    #[test]
    fn another_replica_takes_a_session_up() {
        let key = Sealer::new(b"shared secret between replicas!!");
        let a = Sessions::new(key.clone(), Duration::from_secs(60));
        let b = Sessions::new(key, Duration::from_secs(60));
        let (token, _) = a.create("2025-11-25", json!({"elicitation":{}}));
        let s = b.resolve(&token).expect("valid elsewhere");
        assert_eq!(s.capabilities(), json!({"elicitation":{}}));
    }

    #[tokio::test]
    async fn pending_answers_reach_their_waiter() {
        let p = Pending::default();
        let (id, rx) = p.register();
        assert!(p.resolve(&id, json!({"result":{}})));
        assert_eq!(rx.await.expect("answer"), json!({"result":{}}));
        assert!(!p.resolve(&id, json!({})), "only once");
    }
}
