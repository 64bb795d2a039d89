//! Modern results anyone may be given, answered again without a hop.
//!
//! So are the legacy lists asked in a session the gateway knows without a hop to be live
//! ([`crate::app::LegacySessions`]: standalone asks mcp-service in its process, gateway-edge
//! follows every replica's session ends, [`crate::follow`]): mcp-service marks such a page as it
//! marks a public modern result, and the key carries the session's negotiated revision (the
//! page's shape) instead of anything of the session itself.
//!
//! mcp-service marks a 2026-07-28 reply as reusable when its result is `cacheScope: public`
//! with a `ttlMs` above zero, and names the catalog it was made from. The gateway keeps such a
//! result for its `ttlMs`, keyed by everything the answer depends on (method, the
//! `MCP-Protocol-Version` header, and `params` byte for byte, `_meta` included), and only while
//! mcp-service still serves that catalog: a stream from mcp-service (`WatchCatalog`) says when
//! it changes, and every entry from an older catalog is dropped. Without that stream (not yet
//! connected, or broken) nothing is reused. Errors are never kept, and the caller is
//! authenticated, rate limited and its headers checked before the cache is asked.
//!
//! A result mcp-service names (`CacheHint.tag`: a `resources/read` of contents the registry
//! names by their digest) is kept past its `ttlMs` too. The next request for it still goes to
//! mcp-service, with the name (`McpRequest.if_tag`): mcp-service checks the request as any
//! other, asks the registry whether the contents still have that name, and if so answers
//! `unchanged` without them. The gateway then answers with the result it holds. A megabyte
//! read then crosses neither hop again, and is never older than the registry's file.
//!
//! Reads of the same resource that arrive together while nothing is held for it do not all
//! carry the contents: the first goes on ([`Turn::Lead`]), the others wait for it
//! ([`Turn::Wait`]) and then send the name it was answered with, so each is still checked by
//! mcp-service and the registry but the megabyte crosses once (with a read `ttlMs` above 0,
//! as for any read within it, the gateway answers them from the result it holds). A resource
//! whose answer cannot be kept (it depends on the caller, is too large, or failed) is not
//! waited for again ([`Turn::Alone`]) until an answer of it is kept.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::hash::BuildHasher as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_proto::mcp::{WatchCatalogRequest, mcp_service_client::McpServiceClient};
use mcp_proto::transport::GrpcChannel;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Methods whose modern results carry cache hints.
const CACHEABLE: [&str; 6] =
    ["server/discover", "tools/list", "resources/list", "resources/templates/list", "resources/read", "prompts/list"];

/// The reusable reply mcp-service sent, attached to the response by `forward`.
#[derive(Clone, Debug)]
pub struct Reusable {
    pub ttl_ms: u64,
    pub fingerprint: u64,
    /// The result's name (empty: unnamed).
    pub tag: String,
    /// The result named `tag` stands; `json` is empty.
    pub unchanged: bool,
    /// A legacy session's list: the session's revision (empty otherwise) and when its id
    /// expires (Unix seconds).
    pub session_revision: String,
    pub session_expires: u64,
    pub json: Bytes,
}

/// What the cache holds for a request.
#[derive(Debug)]
pub enum Held {
    /// A result within its `ttlMs`: the answer (its [`Entry::tail`]).
    Fresh(Bytes),
    /// A named result past its `ttlMs`: the answer if mcp-service says it still stands.
    Named { tag: String, tail: Bytes },
}

struct Entry {
    fingerprint: u64,
    expires: Instant,
    /// Empty when the result has no name (it is of no use past `expires`).
    tag: String,
    /// The reply from its `result` on: the result serialized and the reply's closing brace,
    /// so that a large one goes out as the reply's head and this. With the brace a piece of its
    /// own, hyper (its buffer full from about 400 KiB) wrote the brace in a system call of its
    /// own once the rest had gone, a segment more for the client to wait for. A copy of its
    /// own, so that keeping it does not keep the whole gRPC buffer the reply arrived in.
    tail: Bytes,
}

/// What an entry costs beyond its key, tail and tag: the map's slot (key and entry) with the
/// map's slack, and the headers of its allocations (key, tail, the tail's shared count, tag):
/// counted so that many small results stay within the budget too.
const ENTRY_OVERHEAD: usize = size_of::<(Box<[u8]>, Entry)>() + 96;

impl Entry {
    /// What keeping this entry under a key of `key_len` bytes costs.
    fn cost(&self, key_len: usize) -> usize {
        key_len + self.tail.len() + self.tag.len() + ENTRY_OVERHEAD
    }
}

#[derive(Default)]
struct Entries {
    map: HashMap<Box<[u8]>, Entry>,
    bytes: usize,
}

pub struct ResultCache {
    /// The catalog mcp-service serves now; 0 while unknown (nothing is reused then).
    fingerprint: AtomicU64,
    entries: RwLock<Entries>,
    /// Most bytes of results kept (0: the cache is off).
    budget: usize,
    flights: Mutex<Flights>,
}

/// Reads under way with nothing held for them (see the module documentation).
#[derive(Default)]
struct Flights {
    /// Per key, the read that went first: a receiver of its channel, which closes when it ends.
    leading: HashMap<Box<[u8]>, watch::Receiver<()>>,
    /// Keys whose last answer was not kept, by their hash (a key may be as long as a request's
    /// body; two keys of one hash only means a read that does not wait): their reads do not
    /// wait for one another.
    alone: HashSet<u64>,
    /// Keyed at random per process, so that nobody can choose keys of one hash.
    hasher: std::hash::RandomState,
}

/// The most keys remembered as [`Flights::alone`] (forgotten all at once past it).
const ALONE_MOST: usize = 4096;

/// The longest a read waits for the one that went first before it goes on by itself.
const WAIT_MOST: Duration = Duration::from_secs(5);

/// Whether a read with nothing held goes first, waits for another, or goes alone.
pub enum Turn<'a> {
    /// This read goes first; the others wait until this is dropped (after its answer is kept).
    Lead(Lead<'a>),
    /// Another read of it is under way: [`ResultCache::wait`], then look again.
    Wait(watch::Receiver<()>),
    /// Nobody waits for this resource.
    Alone,
}

/// The read that went first; dropping it lets the others go on.
pub struct Lead<'a> {
    cache: &'a ResultCache,
    key: Box<[u8]>,
    /// The catalog it went first in: an answer from an older one says nothing of the current.
    fingerprint: u64,
    _ends: watch::Sender<()>,
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        // The entries before the flights, as `keep` and `serving` take them: a result kept
        // meanwhile is seen.
        let entries = self.cache.entries.read();
        let kept = entries.as_ref().is_ok_and(|e| e.map.contains_key(&self.key));
        let same_catalog = self.cache.fingerprint.load(Ordering::Acquire) == self.fingerprint;
        if let Ok(mut flights) = self.cache.flights.lock() {
            flights.leading.remove(&self.key);
            if !kept && same_catalog {
                if flights.alone.len() >= ALONE_MOST {
                    flights.alone.clear();
                }
                let hash = flights.hasher.hash_one(&self.key);
                flights.alone.insert(hash);
            }
        }
    }
}

impl ResultCache {
    pub fn new(budget: usize) -> Self {
        Self { fingerprint: AtomicU64::new(0), entries: RwLock::default(), budget, flights: Mutex::default() }
    }

    /// For a read of `key` with nothing held: go first, wait for the read under way, or go alone
    /// (always while the catalog is unknown: then nothing can be kept).
    pub fn turn(&self, key: &[u8]) -> Turn<'_> {
        let fingerprint = self.fingerprint.load(Ordering::Acquire);
        if fingerprint == 0 {
            return Turn::Alone;
        }
        let Ok(mut flights) = self.flights.lock() else { return Turn::Alone };
        if flights.alone.contains(&flights.hasher.hash_one(key)) {
            return Turn::Alone;
        }
        if let Some(first) = flights.leading.get(key) {
            return Turn::Wait(first.clone());
        }
        let (ends, ended) = watch::channel(());
        flights.leading.insert(key.into(), ended);
        Turn::Lead(Lead { cache: self, key: key.into(), fingerprint, _ends: ends })
    }

    /// Until the read that went first has ended (at most [`WAIT_MOST`]).
    pub async fn wait(mut first: watch::Receiver<()>) {
        // Nothing is ever sent: `changed` returns when the sender is dropped.
        let _ = tokio::time::timeout(WAIT_MOST, first.changed()).await;
    }

    /// The key of a modern request whose answer may be reused, if it is one.
    pub fn key(&self, method: &str, header_version: Option<&str>, params: Option<&str>) -> Option<Box<[u8]>> {
        if self.budget == 0 || !CACHEABLE.contains(&method) {
            return None;
        }
        Some(make_key(&[], method, header_version, params))
    }

    /// The key of a legacy request whose answer may be confirmed by name: a `resources/read`.
    /// Each is still checked by mcp-service (its session included) and the registry.
    pub fn legacy_key(&self, method: &str, header_version: Option<&str>, params: Option<&str>) -> Option<Box<[u8]>> {
        (self.budget > 0 && method == "resources/read").then(|| make_key(&[&[LEGACY]], method, header_version, params))
    }

    /// Whether `method` is a legacy list that a live session's request may be answered from
    /// (see [`ResultCache::session_list_key`]).
    pub fn session_list(&self, method: &str) -> bool {
        self.budget > 0 && SESSION_LISTS.contains(&method)
    }

    /// The key of a legacy list asked in a session known to be live, which negotiated
    /// `revision`: the page is the same for every session of that revision (mcp-service marks
    /// it reusable when it does not depend on the caller either).
    pub fn session_list_key(
        &self,
        method: &str,
        revision: &str,
        header_version: Option<&str>,
        params: Option<&str>,
    ) -> Box<[u8]> {
        make_key(&[&[LEGACY_SESSION], revision.as_bytes(), &[0]], method, header_version, params)
    }
    /// The result kept for `key` from the current catalog, if any is of use.
    pub fn held(&self, key: &[u8]) -> Option<Held> {
        let current = self.fingerprint.load(Ordering::Acquire);
        if current == 0 {
            return None;
        }
        let entries = self.entries.read().ok()?;
        let entry = entries.map.get(key).filter(|e| e.fingerprint == current)?;
        if entry.expires > Instant::now() {
            Some(Held::Fresh(entry.tail.clone()))
        } else if !entry.tag.is_empty() {
            Some(Held::Named { tag: entry.tag.clone(), tail: entry.tail.clone() })
        } else {
            None
        }
    }

    /// mcp-service said the result named `reply.tag` stands: reuse it for its `ttlMs` again.
    pub fn renew(&self, key: &[u8], reply: &Reusable) {
        if reply.ttl_ms == 0 {
            return;
        }
        if let Ok(mut entries) = self.entries.write()
            && let Some(entry) = entries.map.get_mut(key).filter(|e| e.tag == reply.tag)
        {
            entry.expires = Instant::now() + Duration::from_millis(reply.ttl_ms);
        }
    }

    /// Keep the result of `reply` (the whole JSON-RPC reply to request `id`).
    pub fn keep(&self, key: Box<[u8]>, id: &str, reply: &Reusable) {
        if reply.fingerprint == 0 || reply.fingerprint != self.fingerprint.load(Ordering::Acquire) || reply.unchanged {
            return;
        }
        let Some(tail) = tail_of(&reply.json, id) else { return };
        // No single result may take more than an eighth of the budget.
        if tail.len() > self.budget / 8 {
            return;
        }
        let key_len = key.len();
        // Copied before the lock: hits wait for the write lock.
        let entry = Entry {
            fingerprint: reply.fingerprint,
            expires: Instant::now() + Duration::from_millis(reply.ttl_ms),
            tag: reply.tag.clone(),
            tail: Bytes::copy_from_slice(tail),
        };
        let size = entry.cost(key_len);
        let Ok(mut entries) = self.entries.write() else { return };
        if entries.bytes + size > self.budget {
            // Full: drop what is of no use any more (past its `ttlMs` and unnamed); if that is
            // not enough, start over (entries are cheap to make again, and this keeps no order).
            let now = Instant::now();
            let Entries { map, bytes } = &mut *entries;
            map.retain(|key, e| {
                let useful = e.expires > now || !e.tag.is_empty();
                if !useful {
                    *bytes -= e.cost(key.len());
                }
                useful
            });
            if entries.bytes + size > self.budget {
                entries.map.clear();
                entries.bytes = 0;
            }
        }
        entries.bytes += size;
        // Kept: its reads wait for one another again.
        if let Ok(mut flights) = self.flights.lock()
            && !flights.alone.is_empty()
        {
            let hash = flights.hasher.hash_one(&key);
            flights.alone.remove(&hash);
        }
        if let Some(old) = entries.map.insert(key, entry) {
            entries.bytes -= old.cost(key_len);
        }
    }

    /// mcp-service serves catalog `fingerprint` now (0: unknown).
    fn serving(&self, fingerprint: u64) {
        if self.fingerprint.swap(fingerprint, Ordering::AcqRel) != fingerprint
            && let Ok(mut entries) = self.entries.write()
        {
            entries.map.clear();
            entries.bytes = 0;
            // A new catalog (not merely an unknown one) may make answers keepable.
            if fingerprint != 0
                && let Ok(mut flights) = self.flights.lock()
            {
                flights.alone.clear();
            }
        }
    }

    /// Follow mcp-service's catalog until `shutdown`, reconnecting with a growing pause.
    pub async fn follow(&self, mut client: McpServiceClient<GrpcChannel>, shutdown: CancellationToken) {
        if self.budget == 0 {
            return;
        }
        let mut pause = Duration::from_millis(100);
        loop {
            let attempt = async {
                let request = mcp_proto::trust::outgoing(WatchCatalogRequest {});
                let mut changes = client.watch_catalog(request).await?.into_inner();
                while let Some(change) = changes.message().await? {
                    self.serving(change.fingerprint);
                    pause = Duration::from_millis(100);
                }
                Ok::<(), tonic::Status>(())
            };
            tokio::select! {
                _ = shutdown.cancelled() => return,
                outcome = attempt => {
                    if let Err(status) = outcome {
                        tracing::debug!(code = ?status.code(), error = %status.message(), "catalog watch ended");
                    }
                }
            }
            // Until the stream is back, nothing kept can be trusted.
            self.serving(0);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }
}

/// What a legacy request's key starts with (a modern key starts with its method's name).
const LEGACY: u8 = 1;
/// What the key of a legacy session's list starts with; the session's revision follows.
const LEGACY_SESSION: u8 = 2;

/// The legacy lists whose pages depend only on the session's revision, the catalog and the
/// request's `params`.
const SESSION_LISTS: [&str; 4] = ["tools/list", "resources/list", "resources/templates/list", "prompts/list"];

/// The method, the `MCP-Protocol-Version` header and `params` byte for byte, after `prefix`.
fn make_key(prefix: &[&[u8]], method: &str, header_version: Option<&str>, params: Option<&str>) -> Box<[u8]> {
    let (version, params) = (header_version.unwrap_or_default(), params.unwrap_or_default());
    let prefix_len: usize = prefix.iter().map(|p| p.len()).sum();
    let mut key = Vec::with_capacity(prefix_len + method.len() + version.len() + params.len() + 2);
    for part in prefix {
        key.extend_from_slice(part);
    }
    key.extend_from_slice(method.as_bytes());
    key.push(0);
    key.extend_from_slice(version.as_bytes());
    key.push(0);
    key.extend_from_slice(params.as_bytes());
    key.into_boxed_slice()
}

/// Tails from this size on are sent from the kept bytes rather than copied into one reply
/// (written out with the reply's head in vectored writes). Measured (the result and its brace
/// then apart): a page of 100 tools
/// (about 20 KiB) costs the gateway 5-11 % less so; the 1.1 KiB page of 5 tools sent so cost as
/// much or up to 7 % more than copied.
const SPLICE_FROM: usize = 4 * 1024;

/// The body of the reply to request `id` (raw JSON) from a kept [`Entry::tail`].
pub fn reply_body(id: &str, tail: Bytes) -> axum::body::Body {
    if tail.len() < SPLICE_FROM {
        // A tail is its result and the closing brace (`tail_of`), which this writes again.
        let result = &tail[..tail.len().saturating_sub(1)];
        return axum::body::Body::from(mcp_proto::jsonrpc::result_serialized(Some(id), result));
    }
    axum::body::Body::new(Pieces { parts: reply_parts(id, tail), next: 0 })
}

/// The reply to request `id` in two pieces: what comes before the result, and the kept tail.
fn reply_parts(id: &str, tail: Bytes) -> [Bytes; 2] {
    [mcp_proto::jsonrpc::result_head(Some(id), 0).into(), tail]
}

/// A body sent as the pieces it is made of, its length known (a `Content-Length` reply).
struct Pieces {
    parts: [Bytes; 2],
    next: usize,
}

impl http_body::Body for Pieces {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        while let Some(part) = this.parts.get_mut(this.next) {
            this.next += 1;
            if !part.is_empty() {
                return Poll::Ready(Some(Ok(http_body::Frame::data(std::mem::take(part)))));
            }
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.parts.iter().all(Bytes::is_empty)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.parts.iter().map(|p| p.len() as u64).sum())
    }
}

/// A reply serialized as `mcp_proto::jsonrpc::result` writes it, from its `result` on (the
/// result and the closing brace).
fn tail_of<'a>(reply: &'a [u8], id: &str) -> Option<&'a [u8]> {
    let prefix_len = br#"{"jsonrpc":"2.0","id":"#.len() + id.len() + br#","result":"#.len();
    let ok = reply.len() > prefix_len
        && reply.starts_with(br#"{"jsonrpc":"2.0","id":"#)
        && reply[br#"{"jsonrpc":"2.0","id":"#.len()..].starts_with(id.as_bytes())
        && reply[prefix_len - br#","result":"#.len()..].starts_with(br#","result":"#)
        && reply.ends_with(b"}");
    ok.then(|| &reply[prefix_len..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reusable(json: &str, fingerprint: u64) -> Reusable {
        Reusable {
            ttl_ms: 60_000,
            fingerprint,
            tag: String::new(),
            unchanged: false,
            session_revision: String::new(),
            session_expires: 0,
            json: Bytes::copy_from_slice(json.as_bytes()),
        }
    }

    /// The reply to `id` from a result held fresh for `key`.
    fn fresh(cache: &ResultCache, key: &[u8], id: &str) -> Option<Vec<u8>> {
        match cache.held(key)? {
            Held::Fresh(tail) => Some(reply_parts(id, tail).concat()),
            Held::Named { .. } => None,
        }
    }

    #[tokio::test]
    async fn reads_together_wait_for_the_first_then_go_alone_if_it_was_not_kept() {
        let cache = ResultCache::new(1 << 20);
        cache.serving(7);
        let key = cache.key("resources/read", None, Some(r#"{"uri":"a"}"#)).expect("a key");
        let other = cache.key("resources/read", None, Some(r#"{"uri":"b"}"#)).expect("a key");
        let Turn::Lead(first) = cache.turn(&key) else { panic!("the first read goes first") };
        let Turn::Wait(waiting) = cache.turn(&key) else { panic!("the second waits") };
        let Turn::Lead(other_first) = cache.turn(&other) else { panic!("another resource does not wait") };
        // The first's answer is kept, then it ends: the one waiting finds it.
        let named = Reusable { ttl_ms: 0, tag: "t".into(), ..reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 7) };
        let waited = tokio::spawn(async move { ResultCache::wait(waiting).await });
        tokio::task::yield_now().await;
        assert!(!waited.is_finished(), "still waiting while the first is under way");
        cache.keep(key.clone(), "1", &named);
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waited).await.expect("woken").expect("joined");
        assert!(matches!(cache.held(&key), Some(Held::Named { .. })));

        // An answer that was not kept (too large, private, failed): its reads go alone until
        // one is kept.
        drop(other_first);
        assert!(matches!(cache.turn(&other), Turn::Alone));
        assert!(matches!(cache.turn(&other), Turn::Alone));
        cache.keep(other.clone(), "1", &named);
        assert!(matches!(cache.turn(&other), Turn::Lead(_)), "kept once: reads wait for one another again");
        cache.serving(8);
        // A first read that goes away (its client left) lets the others go at once.
        let Turn::Lead(first) = cache.turn(&key) else { panic!("nothing held in the new catalog") };
        let Turn::Wait(waiting) = cache.turn(&key) else { panic!("the second waits") };
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), ResultCache::wait(waiting)).await.expect("not held up");
        // A first read of an older catalog says nothing of the new one.
        let Turn::Lead(stale) = cache.turn(&other) else { panic!("nothing held in the new catalog") };
        cache.serving(9);
        drop(stale);
        assert!(matches!(cache.turn(&other), Turn::Lead(_)));
        // While the catalog is unknown nothing can be kept: nobody waits.
        cache.serving(0);
        let Turn::Alone = cache.turn(&key) else { panic!("no first read without a catalog") };
    }

    #[test]
    fn a_kept_result_answers_another_id_until_the_catalog_changes() {
        let cache = ResultCache::new(1 << 20);
        cache.serving(7);
        let key = cache.key("tools/list", Some("2026-07-28"), Some(r#"{"_meta":{}}"#)).expect("a key");
        cache.keep(key.clone(), "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#, 7));
        assert_eq!(
            fresh(&cache, &key, r#""x""#).expect("a kept reply"),
            br#"{"jsonrpc":"2.0","id":"x","result":{"tools":[]}}"#.to_vec()
        );
        cache.serving(8);
        assert!(fresh(&cache, &key, "2").is_none());
    }

    #[test]
    fn results_from_another_catalog_or_unknown_state_are_not_kept() {
        let cache = ResultCache::new(1 << 20);
        let key = cache.key("tools/list", None, None).expect("a key");
        cache.keep(key.clone(), "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 7));
        assert!(fresh(&cache, &key, "1").is_none(), "no catalog known yet");
        cache.serving(7);
        cache.keep(key.clone(), "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 6));
        assert!(fresh(&cache, &key, "1").is_none(), "made from an older catalog");
        cache.keep(key.clone(), "2", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 7));
        assert!(fresh(&cache, &key, "1").is_none(), "the reply is to another id");
    }

    #[test]
    fn only_cacheable_methods_and_a_budget_make_keys() {
        assert!(ResultCache::new(1 << 20).key("tools/call", None, None).is_none());
        assert!(ResultCache::new(0).key("tools/list", None, None).is_none());
        let cache = ResultCache::new(1 << 20);
        assert_ne!(cache.key("tools/list", None, Some("{}")), cache.key("prompts/list", None, Some("{}")));
        assert_ne!(cache.key("tools/list", None, Some(r#"{"cursor":"a"}"#)), cache.key("tools/list", None, Some("{}")));
    }

    #[test]
    fn the_budget_bounds_what_is_kept() {
        let cache = ResultCache::new(800);
        cache.serving(1);
        let big = format!(r#"{{"jsonrpc":"2.0","id":1,"result":"{}"}}"#, "a".repeat(200));
        let key = cache.key("tools/list", None, Some("{}")).expect("a key");
        cache.keep(key.clone(), "1", &reusable(&big, 1));
        assert!(fresh(&cache, &key, "1").is_none(), "larger than an eighth of the budget");
        for i in 0..40 {
            let key = cache.key("tools/list", None, Some(&format!(r#"{{"cursor":"{i}"}}"#))).expect("a key");
            cache.keep(key, "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#, 1));
            assert!(cache.entries.read().expect("lock").bytes <= 800);
        }
    }

    #[test]
    fn a_kept_result_does_not_hold_the_reply_it_came_in() {
        let cache = ResultCache::new(1 << 20);
        cache.serving(1);
        let key = cache.key("tools/list", None, Some("{}")).expect("a key");
        let reply = reusable(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#, 1);
        cache.keep(key.clone(), "1", &reply);
        let entries = cache.entries.read().expect("lock");
        let kept = entries.map.get(&key).expect("kept").tail.as_ptr_range();
        let buffer = reply.json.as_ptr_range();
        assert!(kept.end <= buffer.start || kept.start >= buffer.end, "the result is a copy");
    }

    #[test]
    fn a_named_result_is_held_past_its_ttl_for_confirmation() {
        let cache = ResultCache::new(1 << 20);
        cache.serving(3);
        let key = cache.key("resources/read", None, Some(r#"{"uri":"a"}"#)).expect("a key");
        let json = r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}"#;
        // Unnamed and at once stale: of no use.
        cache.keep(key.clone(), "1", &Reusable { ttl_ms: 0, ..reusable(json, 3) });
        assert!(cache.held(&key).is_none());
        // Named: held for mcp-service to confirm, under its name.
        cache.keep(key.clone(), "1", &Reusable { ttl_ms: 0, tag: "t1".into(), ..reusable(json, 3) });
        match cache.held(&key) {
            Some(Held::Named { tag, tail }) => {
                assert_eq!(tag, "t1");
                assert_eq!(&tail[..], br#"{"contents":[]}}"#);
            }
            other => panic!("expected a named result, got {other:?}"),
        }
        // Confirmed with a ttl: fresh again; a confirmation of another name changes nothing.
        let confirmed = |tag: &str| Reusable {
            ttl_ms: 60_000,
            tag: tag.into(),
            unchanged: true,
            json: Bytes::new(),
            ..reusable("", 3)
        };
        cache.renew(&key, &confirmed("t0"));
        assert!(matches!(cache.held(&key), Some(Held::Named { .. })));
        cache.renew(&key, &confirmed("t1"));
        assert!(matches!(cache.held(&key), Some(Held::Fresh(_))));
        // A confirmation is never kept as a result; a new catalog drops the named result.
        let other = cache.key("resources/read", None, Some(r#"{"uri":"b"}"#)).expect("a key");
        cache.keep(other.clone(), "1", &confirmed("t2"));
        assert!(cache.held(&other).is_none());
        cache.serving(4);
        assert!(cache.held(&key).is_none());
    }

    #[tokio::test]
    async fn a_large_result_is_sent_from_the_kept_bytes_with_its_length() {
        use http_body_util::BodyExt as _;
        let text = "x".repeat(SPLICE_FROM * 2);
        let tail = Bytes::from(format!(r#"{{"contents":[{{"text":"{text}"}}]}}}}"#));
        let body = reply_body(r#""r-1""#, tail.clone());
        let expected = format!(r#"{{"jsonrpc":"2.0","id":"r-1","result":{}"#, String::from_utf8_lossy(&tail));
        assert_eq!(http_body::Body::size_hint(&body).exact(), Some(expected.len() as u64));
        let mut body = body;
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.expect("frame").into_data().expect("data"));
        }
        // One piece after the head: hyper writes both in one vectored write.
        assert_eq!(frames.len(), 2, "head, then the result with the closing brace");
        assert_eq!(frames[1].as_ptr(), tail.as_ptr(), "the result is not copied");
        assert_eq!(frames.concat(), expected.as_bytes());
        // A small result goes out in one piece.
        let small = reply_body("7", Bytes::from_static(b"{}}"));
        assert_eq!(small.collect().await.expect("body").to_bytes(), &br#"{"jsonrpc":"2.0","id":7,"result":{}}"#[..]);
        // In pieces from the threshold on, copied just below it; the same reply either way.
        for (size, pieces) in [(SPLICE_FROM - 1, 1), (SPLICE_FROM, 2)] {
            let tail = Bytes::from(format!(r#"["{}"]}}"#, "y".repeat(size - 5)));
            assert_eq!(tail.len(), size);
            let mut body = reply_body("8", tail.clone());
            let mut frames = Vec::new();
            while let Some(frame) = body.frame().await {
                frames.push(frame.expect("frame").into_data().expect("data"));
            }
            assert_eq!(frames.len(), pieces, "size {size}");
            let expected = format!(r#"{{"jsonrpc":"2.0","id":8,"result":{}"#, String::from_utf8_lossy(&tail));
            assert_eq!(frames.concat(), expected.as_bytes(), "size {size}");
        }
    }

    #[test]
    fn a_full_cache_drops_what_is_of_no_use_first() {
        let cache = ResultCache::new(4096);
        cache.serving(1);
        let named = cache.key("resources/read", None, Some(r#"{"uri":"a"}"#)).expect("a key");
        let json = r#"{"jsonrpc":"2.0","id":1,"result":{"contents":[]}}"#;
        cache.keep(named.clone(), "1", &Reusable { ttl_ms: 0, tag: "t".into(), ..reusable(json, 1) });
        // Stale unnamed entries are dropped to make room; the named one stays.
        for i in 0..100 {
            let key = cache.key("tools/list", None, Some(&format!(r#"{{"cursor":"{i}"}}"#))).expect("a key");
            cache.keep(key, "1", &Reusable { ttl_ms: 0, ..reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 1) });
            assert!(matches!(cache.held(&named), Some(Held::Named { .. })), "after {i}");
            assert!(cache.entries.read().expect("lock").bytes <= 4096);
        }
    }

    #[test]
    fn many_small_results_stay_within_the_budget() {
        let budget = 64 * 1024;
        let cache = ResultCache::new(budget);
        cache.serving(1);
        for i in 0..10_000 {
            let key = cache.key("tools/list", None, Some(&format!(r#"{{"_meta":{{"v":{i}}}}}"#))).expect("a key");
            cache.keep(key, "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 1));
            let entries = cache.entries.read().expect("lock");
            // Each entry is counted at its key, its result and the overhead of keeping it.
            assert!(entries.map.len() * ENTRY_OVERHEAD <= budget, "{} entries", entries.map.len());
            assert!(entries.bytes <= budget);
        }
    }
}
