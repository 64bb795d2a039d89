//! Modern results anyone may be given, answered again without a hop.
//!
//! mcp-service marks a 2026-07-28 reply as reusable when its result is `cacheScope: public`
//! with a `ttlMs` above zero, and names the catalog it was made from. The gateway keeps such a
//! result for its `ttlMs`, keyed by everything the answer depends on (method, the
//! `MCP-Protocol-Version` header, and `params` byte for byte, `_meta` included), and only while
//! mcp-service still serves that catalog: a stream from mcp-service (`WatchCatalog`) says when
//! it changes, and every entry from an older catalog is dropped. Without that stream (not yet
//! connected, or broken) nothing is reused. Errors are never kept, and the caller is
//! authenticated, rate limited and its headers checked before the cache is asked.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mcp_proto::mcp::{WatchCatalogRequest, mcp_service_client::McpServiceClient};
use mcp_proto::transport::GrpcChannel;
use tokio_util::sync::CancellationToken;

/// Methods whose modern results carry cache hints.
const CACHEABLE: [&str; 6] =
    ["server/discover", "tools/list", "resources/list", "resources/templates/list", "resources/read", "prompts/list"];

/// The reusable reply mcp-service sent, attached to the response by `forward`.
#[derive(Clone, Debug)]
pub struct Reusable {
    pub ttl_ms: u64,
    pub fingerprint: u64,
    pub json: Bytes,
}

struct Entry {
    fingerprint: u64,
    expires: Instant,
    /// The `result` value, serialized: a copy of its own, so that keeping it does not keep
    /// the whole gRPC buffer the reply arrived in.
    result: Box<[u8]>,
}

/// What an entry costs beyond its key and result: the map's slot, the entry, and the two
/// allocations' headers (counted so that many small results stay within the budget too).
const ENTRY_OVERHEAD: usize = 128;

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
}

impl ResultCache {
    pub fn new(budget: usize) -> Self {
        Self { fingerprint: AtomicU64::new(0), entries: RwLock::default(), budget }
    }

    /// The key of a request whose answer may be reused, if it is one.
    pub fn key(&self, method: &str, header_version: Option<&str>, params: Option<&str>) -> Option<Box<[u8]>> {
        if self.budget == 0 || !CACHEABLE.contains(&method) {
            return None;
        }
        let (version, params) = (header_version.unwrap_or_default(), params.unwrap_or_default());
        let mut key = Vec::with_capacity(method.len() + version.len() + params.len() + 2);
        key.extend_from_slice(method.as_bytes());
        key.push(0);
        key.extend_from_slice(version.as_bytes());
        key.push(0);
        key.extend_from_slice(params.as_bytes());
        Some(key.into_boxed_slice())
    }

    /// The reply to request `id` (raw JSON) from a kept result, if there is a fresh one from
    /// the current catalog.
    pub fn reply(&self, key: &[u8], id: &str) -> Option<Vec<u8>> {
        let current = self.fingerprint.load(Ordering::Acquire);
        if current == 0 {
            return None;
        }
        let entries = self.entries.read().ok()?;
        let entry = entries.map.get(key).filter(|e| e.fingerprint == current && e.expires > Instant::now())?;
        let mut out = Vec::with_capacity(entry.result.len() + id.len() + 32);
        out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(br#","result":"#);
        out.extend_from_slice(&entry.result);
        out.push(b'}');
        Some(out)
    }

    /// Keep the result of `reply` (the whole JSON-RPC reply to request `id`).
    pub fn keep(&self, key: Box<[u8]>, id: &str, reply: &Reusable) {
        if reply.fingerprint == 0 || reply.fingerprint != self.fingerprint.load(Ordering::Acquire) {
            return;
        }
        let Some(result) = result_of(&reply.json, id) else { return };
        // No single result may take more than an eighth of the budget.
        if result.len() > self.budget / 8 {
            return;
        }
        let key_len = key.len();
        let size = key_len + result.len() + ENTRY_OVERHEAD;
        // Copied before the lock: hits wait for the write lock.
        let result: Box<[u8]> = Box::from(result);
        let Ok(mut entries) = self.entries.write() else { return };
        if entries.bytes + size > self.budget {
            // Full: start over (entries are cheap to make again, and this keeps no order).
            entries.map.clear();
            entries.bytes = 0;
        }
        let entry = Entry {
            fingerprint: reply.fingerprint,
            expires: Instant::now() + Duration::from_millis(reply.ttl_ms),
            result,
        };
        entries.bytes += size;
        if let Some(old) = entries.map.insert(key, entry) {
            entries.bytes -= key_len + old.result.len() + ENTRY_OVERHEAD;
        }
    }

    /// mcp-service serves catalog `fingerprint` now (0: unknown).
    fn serving(&self, fingerprint: u64) {
        if self.fingerprint.swap(fingerprint, Ordering::AcqRel) != fingerprint
            && let Ok(mut entries) = self.entries.write()
        {
            entries.map.clear();
            entries.bytes = 0;
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

/// The `result` member of a reply serialized as `mcp_proto::jsonrpc::result` writes it.
fn result_of<'a>(reply: &'a [u8], id: &str) -> Option<&'a [u8]> {
    let prefix_len = br#"{"jsonrpc":"2.0","id":"#.len() + id.len() + br#","result":"#.len();
    let ok = reply.len() > prefix_len
        && reply.starts_with(br#"{"jsonrpc":"2.0","id":"#)
        && reply[br#"{"jsonrpc":"2.0","id":"#.len()..].starts_with(id.as_bytes())
        && reply[prefix_len - br#","result":"#.len()..].starts_with(br#","result":"#)
        && reply.ends_with(b"}");
    ok.then(|| &reply[prefix_len..reply.len() - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reusable(json: &str, fingerprint: u64) -> Reusable {
        Reusable { ttl_ms: 60_000, fingerprint, json: Bytes::copy_from_slice(json.as_bytes()) }
    }

    #[test]
    fn a_kept_result_answers_another_id_until_the_catalog_changes() {
        let cache = ResultCache::new(1 << 20);
        cache.serving(7);
        let key = cache.key("tools/list", Some("2026-07-28"), Some(r#"{"_meta":{}}"#)).expect("a key");
        cache.keep(key.clone(), "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#, 7));
        assert_eq!(
            cache.reply(&key, r#""x""#).expect("a kept reply"),
            br#"{"jsonrpc":"2.0","id":"x","result":{"tools":[]}}"#.to_vec()
        );
        cache.serving(8);
        assert!(cache.reply(&key, "2").is_none());
    }

    #[test]
    fn results_from_another_catalog_or_unknown_state_are_not_kept() {
        let cache = ResultCache::new(1 << 20);
        let key = cache.key("tools/list", None, None).expect("a key");
        cache.keep(key.clone(), "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 7));
        assert!(cache.reply(&key, "1").is_none(), "no catalog known yet");
        cache.serving(7);
        cache.keep(key.clone(), "1", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 6));
        assert!(cache.reply(&key, "1").is_none(), "made from an older catalog");
        cache.keep(key.clone(), "2", &reusable(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 7));
        assert!(cache.reply(&key, "1").is_none(), "the reply is to another id");
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
        assert!(cache.reply(&key, "1").is_none(), "larger than an eighth of the budget");
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
        let kept = entries.map.get(&key).expect("kept").result.as_ptr_range();
        let buffer = reply.json.as_ptr_range();
        assert!(kept.end <= buffer.start || kept.start >= buffer.end, "the result is a copy");
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
