//! Legacy sessions and server-to-client requests.
//!
//! A legacy HTTP session id is a sealed token carrying the negotiated revision, the client's
//! capabilities and an expiry, so any replica can serve a plain request of any session. What
//! must live somewhere — the log level set with `logging/setLevel`, resource subscriptions,
//! the open GET streams, answers awaited from the client — lives in this replica's memory,
//! keyed by the id's payload; a load balancer keeps a session on one replica by hashing
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

/// The most an HTTP client's capabilities may take as JSON: its session's id carries them
/// (sealed, in base64) in a header on every request, and names the session in the replica's
/// map. At this size the id stays under 6 KiB: within the gateway's header limit, and within
/// the 8 KiB a header line may take in common proxies' defaults (nginx's among them).
pub const MAX_CLIENT_CAPABILITIES: usize = 4 * 1024;

/// Live state of one legacy session.
#[derive(Debug, Default)]
pub struct Session {
    /// What names an HTTP session in this replica's map: its id's payload (the sealed claims),
    /// one allocation shared with the map's key; empty on stdio.
    key: Arc<str>,
    /// The rest of its id: the seal that was verified when this replica met the id.
    tag: Box<str>,
    /// The nonce its id's claims carry (refused until expiry once the session ends).
    nonce: Option<u128>,
    pub negotiated: Mutex<Option<&'static str>>,
    pub client_capabilities: Mutex<Value>,
    pub log_level: Mutex<Option<String>>,
    pub subscriptions: Mutex<HashSet<String>>,
    /// Where server-initiated messages go: the GET streams of an HTTP session, or stdout.
    pub outbound: Mutex<Vec<mpsc::Sender<Frame>>>,
    pub ended: AtomicBool,
    expires: u64,
    /// When a request last named it (Unix seconds).
    last_used: AtomicU64,
}

impl Session {
    /// The session of an HTTP id: `payload` names it in the map, `tag` is the seal verified
    /// with it; last used at `t`.
    fn http(
        payload: &str,
        tag: &str,
        nonce: Option<u128>,
        revision: &'static str,
        capabilities: Value,
        expires: u64,
        t: u64,
    ) -> Arc<Self> {
        Arc::new(Self {
            key: payload.into(),
            tag: tag.into(),
            nonce,
            negotiated: Mutex::new(Some(revision)),
            client_capabilities: Mutex::new(capabilities),
            expires,
            last_used: AtomicU64::new(t),
            ..Self::default()
        })
    }

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

    /// When its id expires (Unix seconds).
    pub fn expires(&self) -> u64 {
        self.expires
    }

    pub fn log_level(&self) -> Option<String> {
        self.log_level.lock().ok().and_then(|l| l.clone())
    }

    /// Idle for [`IDLE_SECS`], held by no call or stream, and with nothing of its own that its
    /// id's claims could not give back: such a session is rebuilt when it is next used.
    fn forgettable(self: &Arc<Self>, t: u64) -> bool {
        !self.key.is_empty()
            && Arc::strong_count(self) == 1
            && t.saturating_sub(self.last_used.load(Ordering::Relaxed)) >= IDLE_SECS
            && self.log_level.lock().is_ok_and(|l| l.is_none())
            && self.subscriptions.lock().is_ok_and(|s| s.is_empty())
            && self.outbound.lock().is_ok_and(|mut o| {
                o.retain(|tx| !tx.is_closed());
                o.is_empty()
            })
    }

    /// Add a GET stream for server-initiated messages; `false` (and the stream is dropped)
    /// if the session has ended.
    pub fn open_stream(&self, tx: mpsc::Sender<Frame>) -> bool {
        let Ok(mut outbound) = self.outbound.lock() else { return false };
        if self.ended.load(Ordering::SeqCst) {
            return false;
        }
        outbound.push(tx);
        true
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
    /// A random nonce: what an ended session is remembered by, and what makes each id unique.
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

/// How often expired sessions and ids are swept out (on the first lookup after the interval).
const SWEEP_EVERY_SECS: u64 = 60;
/// A session idle this long with no state of its own is forgotten; its id still works (it is
/// taken up again from its claims, as another replica would).
const IDLE_SECS: u64 = 600;
/// At most this many ended sessions' nonces are remembered (about 35 bytes each with the map's
/// slack); past it, the ones that expire first are forgotten, and their ids, still validly
/// sealed, are taken up again like any other session's (counted in
/// `mcp_ended_sessions_forgotten_total`).
const MAX_ENDED: usize = 200_000;

/// Every legacy HTTP session this replica knows.
pub struct Sessions {
    sealer: Sealer,
    ttl: Duration,
    live: Mutex<Live>,
    max_ended: usize,
}

#[derive(Default)]
struct Live {
    /// By their ids' payloads (HTTP; [`Session::key`]) or by [`Sessions::attach`]'s keys.
    /// Hashed with foldhash (seeded at random), not std's SipHash (about 400 instructions per
    /// request for an id's payload): a key is entered only for an id whose seal was verified
    /// (its payload holds a random nonce) or one made here.
    sessions: HashMap<Arc<str>, Arc<Session>, foldhash::fast::RandomState>,
    /// Nonces of sessions ended here, with their ids' expiry: refused until then.
    ended: HashMap<u128, u64>,
    next_sweep: u64,
}

impl Live {
    /// Drop expired sessions and ids, and idle sessions that hold nothing, once a minute.
    fn sweep_if_due(&mut self, t: u64) {
        if t < self.next_sweep {
            return;
        }
        self.next_sweep = t + SWEEP_EVERY_SECS;
        self.sessions.retain(|_, s| s.expires > t && !s.forgettable(t));
        self.ended.retain(|_, expires| *expires > t);
    }
}

impl Sessions {
    pub fn new(sealer: Sealer, ttl: Duration) -> Self {
        Self { sealer, ttl, live: Mutex::default(), max_ended: MAX_ENDED }
    }

    /// Start a session after a successful `initialize`; returns its id.
    pub fn create(&self, revision: &'static str, capabilities: Value) -> (String, Arc<Session>) {
        let nonce = random_key();
        let t = now();
        let expires = t.saturating_add(self.ttl.as_secs());
        let claims = Claims { r: revision.to_owned(), c: capabilities.clone(), e: expires, n: nonce.clone() };
        let token = self.sealer.seal(PURPOSE, &claims);
        let (payload, tag) = mcp_proto::vocab::session_id_parts(&token).unwrap_or_default();
        let session = Session::http(payload, tag, nonce_value(&nonce), revision, capabilities, expires, t);
        if let Ok(mut live) = self.live.lock() {
            live.sweep_if_due(t);
            live.sessions.insert(session.key.clone(), session.clone());
        }
        (token, session)
    }

    /// The live session named by `token`. A valid token this replica has not seen (issued by
    /// another replica, before a restart, or forgotten while idle) is taken up from its claims.
    pub fn resolve(&self, token: &str) -> Result<Arc<Session>, SessionError> {
        self.resolve_at(token, now())
    }

    fn resolve_at(&self, token: &str, t: u64) -> Result<Arc<Session>, SessionError> {
        let token = token.trim();
        // The tag is the short end (neither part holds a dot: a token with more is refused by
        // the seal's check in `take_up`, its payload being unknown here).
        let (payload, tag) =
            mcp_proto::vocab::session_id_parts(token).ok_or(SessionError::Invalid(SealError::Malformed))?;
        // An id met before is known by its payload and the seal verified then (compared in
        // constant time): its MAC and claims need not be worked out again on every request.
        let known = {
            let mut live = self.live.lock().map_err(|_| SessionError::Ended)?;
            live.sweep_if_due(t);
            live.sessions
                .get(payload)
                .filter(|s| !s.tag.is_empty() && mcp_proto::trust::same_bytes(s.tag.as_bytes(), tag.as_bytes()))
                .cloned()
        };
        let session = match known {
            Some(session) => session,
            None => self.take_up(token, payload, tag, t)?,
        };
        if session.expires <= t {
            return Err(SessionError::Expired);
        }
        session.last_used.store(t, Ordering::Relaxed);
        if session.ended.load(Ordering::SeqCst) {
            return Err(SessionError::Ended);
        }
        Ok(session)
    }

    /// The session of an id this replica does not hold (issued by another replica, before a
    /// restart, or forgotten while idle), from its verified claims.
    fn take_up(&self, token: &str, payload: &str, tag: &str, t: u64) -> Result<Arc<Session>, SessionError> {
        let claims: Claims = self.sealer.open(PURPOSE, token)?;
        if claims.e <= t {
            return Err(SessionError::Expired);
        }
        let revision = mcp_proto::vocab::LEGACY_REVISIONS
            .into_iter()
            .find(|r| *r == claims.r)
            .ok_or(SessionError::Invalid(SealError::Malformed))?;
        let nonce = nonce_value(&claims.n);
        let mut live = self.live.lock().map_err(|_| SessionError::Ended)?;
        if nonce.is_some_and(|n| live.ended.contains_key(&n)) {
            return Err(SessionError::Ended);
        }
        // Another request of it may have taken it up meanwhile.
        if let Some(session) = live.sessions.get(payload) {
            return Ok(session.clone());
        }
        let session = Session::http(payload, tag, nonce, revision, claims.c, claims.e, t);
        live.sessions.insert(session.key.clone(), session.clone());
        Ok(session)
    }

    /// End the session named by `token` (HTTP DELETE); `false` if there was none. Only its
    /// nonce is kept, so that the id stays refused until it expires.
    pub fn end(&self, token: &str) -> bool {
        let Ok(session) = self.resolve(token) else { return false };
        // Under the streams' lock, so that a GET stream opening now either sees the end or is
        // closed here (`Session::open_stream`).
        let streams = session.outbound.lock();
        session.ended.store(true, Ordering::SeqCst);
        if let Ok(mut o) = streams {
            o.clear();
        }
        if let Ok(mut live) = self.live.lock() {
            live.sessions.remove(&session.key);
            if let Some(nonce) = session.nonce {
                if live.ended.len() >= self.max_ended {
                    let t = now();
                    live.ended.retain(|_, expires| *expires > t);
                    let forgotten = forget_soonest_expiring(&mut live.ended, self.max_ended - self.max_ended / 10);
                    metrics::counter!("mcp_ended_sessions_forgotten_total").increment(forgotten as u64);
                }
                live.ended.insert(nonce, session.expires);
            }
        }
        true
    }

    /// Register a session that has no token (a stdio connection); returns its key.
    pub fn attach(&self, session: Arc<Session>) -> String {
        let key = random_key();
        if let Ok(mut live) = self.live.lock() {
            live.sessions.insert(key.as_str().into(), session);
        }
        key
    }

    pub fn detach(&self, key: &str) {
        if let Ok(mut live) = self.live.lock() {
            live.sessions.remove(key);
        }
    }

    /// Every live, unended session.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.live
            .lock()
            .map(|l| l.sessions.values().filter(|s| !s.ended.load(Ordering::SeqCst)).cloned().collect())
            .unwrap_or_default()
    }
}

/// 16 random bytes in hex: a session's nonce, or a stdio connection's key.
fn random_key() -> String {
    let mut bytes = [0u8; 16];
    rand::fill(&mut bytes);
    format!("{:032x}", u128::from_be_bytes(bytes))
}

/// The 16 random bytes a nonce spells in hex ([`random_key`]'s form).
fn nonce_value(nonce: &str) -> Option<u128> {
    (nonce.len() == 32).then(|| u128::from_str_radix(nonce, 16).ok()).flatten()
}

/// Forget the ended ids that expire first until at most `keep` are left (the caller trims a
/// tenth below its cap, so that a full set is not walked on every `DELETE`); returns how many
/// were forgotten.
fn forget_soonest_expiring(ended: &mut HashMap<u128, u64>, keep: usize) -> usize {
    if ended.len() <= keep {
        return 0;
    }
    let drop = ended.len() - keep;
    let mut expiries: Vec<u64> = ended.values().copied().collect();
    let (_, &mut threshold, _) = expiries.select_nth_unstable(drop - 1);
    // Every id expiring before the threshold goes, and as many at it as make up `drop`.
    let mut at_threshold = drop - expiries.iter().filter(|e| **e < threshold).count();
    ended.retain(|_, expires| match (*expires).cmp(&threshold) {
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal if at_threshold > 0 => {
            at_threshold -= 1;
            false
        }
        _ => true,
    });
    drop
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
    fn a_known_id_is_matched_by_its_whole_seal() {
        let sessions = Sessions::new(Sealer::random(), Duration::from_secs(60));
        let (token, s) = sessions.create("2025-06-18", json!({}));
        let (payload, tag) = token.split_once('.').expect("two parts");
        assert!(Arc::ptr_eq(&sessions.resolve(&format!(" {token}\t")).expect("trimmed"), &s));
        // The payload of a held session with another seal, a shorter one or none is refused.
        let mut other = tag.to_owned().into_bytes();
        other[0] = if other[0] == b'A' { b'B' } else { b'A' };
        let other = String::from_utf8(other).expect("ascii");
        let mut last = tag.to_owned().into_bytes();
        let end = last.len() - 1;
        last[end] = if last[end] == b'A' { b'B' } else { b'A' };
        let last = String::from_utf8(last).expect("ascii");
        for forged in [
            format!("{payload}.{other}"),
            format!("{payload}.{last}"),
            format!("{payload}.{}", &tag[1..]),
            format!("{payload}."),
            format!("{payload}.{tag}.{tag}"),
            format!("{payload}.{tag}."),
            format!("{payload}..{tag}"),
        ] {
            assert!(matches!(sessions.resolve(&forged), Err(SessionError::Invalid(_))), "{forged}");
        }
        // A stdio connection's key names no HTTP session, with or without a seal.
        let (tx, _rx) = mpsc::channel(1);
        let stdio_key = sessions.attach(Arc::new(Session::stdio(tx)));
        for forged in [format!("{stdio_key}."), format!("{stdio_key}.{tag}"), stdio_key.clone()] {
            assert!(matches!(sessions.resolve(&forged), Err(SessionError::Invalid(_))), "{forged}");
        }
        // A held session's id expires as its claims say, found by its seal (no sweep in
        // between to take it out of the map first).
        sessions.live.lock().expect("lock").next_sweep = u64::MAX;
        assert_eq!(sessions.resolve_at(&token, s.expires()).err(), Some(SessionError::Expired));
        let again = sessions.resolve_at(&token, s.expires() - 1).expect("still live");
        assert!(Arc::ptr_eq(&again, &s), "the held session, not one taken up again");
    }

    #[test]
    fn ended_sessions_leave_only_their_nonce_and_stay_refused() {
        let sessions = Sessions::new(Sealer::random(), Duration::from_secs(60));
        let tokens: Vec<String> = (0..5).map(|_| sessions.create("2025-03-26", json!({})).0).collect();
        for token in &tokens[..3] {
            assert!(sessions.end(token));
        }
        {
            let live = sessions.live.lock().expect("lock");
            assert_eq!((live.sessions.len(), live.ended.len()), (2, 3));
        }
        for token in &tokens[..3] {
            assert_eq!(sessions.resolve(token).err(), Some(SessionError::Ended), "still refused");
        }
        assert_eq!(sessions.live.lock().expect("lock").sessions.len(), 2, "a refused id is not taken up");
        assert!(sessions.resolve(&tokens[3]).is_ok());
    }

    #[test]
    fn idle_sessions_without_state_are_forgotten_and_taken_up_again() {
        let sessions = Sessions::new(Sealer::random(), Duration::from_secs(86_400));
        let (plain, _) = sessions.create("2025-06-18", json!({"roots":{}}));
        let (with_level, s) = sessions.create("2025-06-18", json!({}));
        *s.log_level.lock().expect("lock") = Some("debug".into());
        drop(s);
        let (in_use, held) = sessions.create("2025-06-18", json!({}));
        let (subscribed, s) = sessions.create("2025-06-18", json!({}));
        s.subscriptions.lock().expect("lock").insert("file:///a".into());
        drop(s);
        let (streaming, s) = sessions.create("2025-06-18", json!({}));
        let (tx, _rx) = mpsc::channel(1);
        assert!(s.open_stream(tx));
        drop(s);
        let (stdout, _out) = mpsc::channel(1);
        let stdio_key = sessions.attach(Arc::new(Session::stdio(stdout)));
        let t = now();
        // Before the idle time, a sweep keeps everything.
        sessions.live.lock().expect("lock").next_sweep = 0;
        sessions.resolve_at(&in_use, t + 1).expect("resolves");
        assert_eq!(sessions.live.lock().expect("lock").sessions.len(), 6);
        // After it, only the plain session is forgotten.
        sessions.live.lock().expect("lock").next_sweep = 0;
        let again = sessions.resolve_at(&with_level, t + IDLE_SECS + 5).expect("resolves");
        assert_eq!(again.log_level().as_deref(), Some("debug"), "kept, with its level");
        {
            let live = sessions.live.lock().expect("lock");
            assert_eq!(live.sessions.len(), 5);
            assert!(live.sessions.values().any(|s| Arc::ptr_eq(s, &held)), "a session in use stays");
            assert!(live.sessions.values().any(|s| s.is_subscribed("file:///a")), "a subscription stays");
            assert!(live.sessions.contains_key(stdio_key.as_str()), "a stdio connection stays");
            let open = |s: &Arc<Session>| s.outbound.lock().is_ok_and(|o| !o.is_empty());
            assert_eq!(live.sessions.values().filter(|s| open(s)).count(), 2, "the open GET stream stays");
        }
        drop(_rx);
        // Once its stream closed, the streaming session is forgotten at the next sweep.
        sessions.live.lock().expect("lock").next_sweep = 0;
        sessions.resolve_at(&in_use, t + 2 * IDLE_SECS).expect("resolves");
        assert_eq!(sessions.live.lock().expect("lock").sessions.len(), 4);
        assert!(sessions.resolve(&streaming).is_ok(), "and taken up again");
        // The forgotten one comes back from its id, with its revision and capabilities.
        let back = sessions.resolve(&plain).expect("taken up again");
        assert_eq!((back.revision(), back.capabilities()), (Some("2025-06-18"), json!({"roots":{}})));
        assert!(sessions.resolve(&subscribed).is_ok());
    }

    #[test]
    fn no_stream_opens_on_an_ended_session() {
        let sessions = Sessions::new(Sealer::random(), Duration::from_secs(60));
        let (token, s) = sessions.create("2025-06-18", json!({}));
        let (before, _rx) = mpsc::channel(1);
        assert!(s.open_stream(before));
        assert!(sessions.end(&token));
        assert!(s.outbound.lock().expect("lock").is_empty(), "ending closes the open streams");
        let (after, _rx) = mpsc::channel(1);
        assert!(!s.open_stream(after), "a stream opening after the end is refused");
        assert!(s.outbound.lock().expect("lock").is_empty());
    }

    #[test]
    fn at_the_cap_the_ended_ids_expiring_first_are_forgotten() {
        let mut sessions = Sessions::new(Sealer::random(), Duration::from_secs(60));
        sessions.max_ended = 20;
        let mut tokens = Vec::new();
        for i in 0..30 {
            sessions.ttl = Duration::from_secs(1_000 + i);
            tokens.push(sessions.create("2025-06-18", json!({})).0);
        }
        for token in &tokens {
            assert!(sessions.end(token));
            assert!(sessions.live.lock().expect("lock").ended.len() <= 20);
        }
        // The latest expiring are still refused as ended; the earliest were forgotten and,
        // their ids still valid, are taken up again.
        assert_eq!(sessions.resolve(&tokens[29]).err(), Some(SessionError::Ended));
        assert_eq!(sessions.resolve(&tokens[20]).err(), Some(SessionError::Ended));
        assert!(sessions.resolve(&tokens[0]).is_ok());
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
