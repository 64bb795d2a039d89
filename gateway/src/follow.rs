//! gateway-edge's knowledge of legacy sessions, so that a live session's lists are answered
//! without a hop (see [`crate::cache`]).
//!
//! mcp-service's reply to a session's list names the revision the session negotiated and when
//! its id expires; the gateway remembers that of the id. It follows the session ends of every
//! replica of mcp-service (`FollowSessions`: one stream each) and forgets a session as soon as
//! its end arrives; a replica answers a `DELETE` only once each follower has applied the end,
//! or has gone a lease without a ping echoed. The gateway trusts what it knows only while it
//! holds a lease from every replica listed (until a lease after sending the last ping each
//! echoed); a replica's stream that breaks, or a replica that comes, makes it forget everything
//! (what that replica ended meanwhile never reached it). A session the gateway does not know,
//! or while it trusts nothing, is asked of mcp-service as before.
//!
//! This is as strong as the replicas themselves: a replica refuses the sessions it ended, and
//! every gateway hears of each end before the `DELETE` is answered.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use mcp_proto::balance::Replicas;
use mcp_proto::mcp::{self as pb, mcp_service_client::McpServiceClient, session_news::Kind};
use mcp_proto::transport::GrpcChannel;
use tokio_util::sync::CancellationToken;

/// The most sessions remembered (about 100 bytes each); past it, all are forgotten and learnt
/// again as their lists cross.
const MOST_KNOWN: usize = 50_000;

/// What the gateway knows of legacy sessions, and the leases it holds.
pub struct SessionFollower {
    /// Per replica listed: until when its lease runs (`None`: not following it yet).
    leases: Mutex<HashMap<String, Option<Instant>>>,
    /// The earliest lease of all, or `None` while any replica is not followed.
    trusted_until: RwLock<Option<Instant>>,
    /// Live sessions by their id's seal.
    known: RwLock<HashMap<Box<str>, Known>>,
    /// Ends applied and knowledge dropped so far: a reply that crossed while this changed
    /// teaches nothing (the session may have ended meanwhile).
    forgotten: AtomicU64,
    /// Keyed at random per process: the whole id is compared by this hash.
    hasher: std::hash::RandomState,
}

struct Known {
    /// Of the whole id (the seal alone names it; the rest must match too).
    id_hash: u64,
    revision: &'static str,
    /// Unix seconds.
    expires: u64,
}

fn seal(session_id: &str) -> Option<&str> {
    session_id.trim().rsplit_once('.').map(|(_, seal)| seal).filter(|s| !s.is_empty())
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Default for SessionFollower {
    fn default() -> Self {
        Self {
            leases: Mutex::default(),
            trusted_until: RwLock::new(None),
            known: RwLock::default(),
            forgotten: AtomicU64::new(0),
            hasher: std::hash::RandomState::new(),
        }
    }
}

impl SessionFollower {
    fn trusted(&self) -> bool {
        self.trusted_until.read().ok().and_then(|t| *t).is_some_and(|t| t > Instant::now())
    }

    /// Recompute the earliest lease (under the leases' lock).
    fn settle(&self, leases: &HashMap<String, Option<Instant>>) {
        let earliest = if leases.is_empty() {
            None
        } else {
            leases.values().try_fold(None::<Instant>, |min, l| l.map(|l| Some(min.map_or(l, |m| m.min(l))))).flatten()
        };
        if let Ok(mut t) = self.trusted_until.write() {
            *t = earliest;
        }
    }

    /// Forget every session (a replica's stream broke, or a replica came).
    fn forget_all(&self) {
        self.forgotten.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut known) = self.known.write() {
            known.clear();
        }
    }

    /// The replicas listed now; a new one is not trusted until followed, and makes the gateway
    /// forget (it may have ended sessions before this gateway heard of it).
    fn listed(&self, keys: &[String]) {
        let Ok(mut leases) = self.leases.lock() else { return };
        leases.retain(|k, _| keys.contains(k));
        let mut came = false;
        for key in keys {
            leases.entry(key.clone()).or_insert_with(|| {
                came = true;
                None
            });
        }
        if came {
            self.forget_all();
        }
        self.settle(&leases);
    }

    /// Replica `key`'s lease runs until `until`.
    fn leased(&self, key: &str, until: Instant) {
        let Ok(mut leases) = self.leases.lock() else { return };
        if let Some(lease) = leases.get_mut(key) {
            *lease = Some(lease.map_or(until, |l| l.max(until)));
        }
        self.settle(&leases);
    }

    /// Replica `key`'s stream ended: nothing it might have ended meanwhile is known.
    fn lost(&self, key: &str) {
        if let Ok(mut leases) = self.leases.lock() {
            if let Some(lease) = leases.get_mut(key) {
                *lease = None;
            }
            self.settle(&leases);
        }
        self.forget_all();
    }

    /// The session sealed `seal` ended.
    fn ended(&self, seal: &str) {
        self.forgotten.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut known) = self.known.write() {
            known.remove(seal);
        }
    }

    /// The revision of live session `session_id`, if it is known and every replica's lease
    /// holds.
    pub fn live_revision(&self, session_id: &str) -> Option<&'static str> {
        if !self.trusted() {
            return None;
        }
        let seal = seal(session_id)?;
        let known = self.known.read().ok()?;
        let session = known.get(seal)?;
        (session.id_hash == self.hasher.hash_one(session_id.trim()) && session.expires > unix_now())
            .then_some(session.revision)
    }

    /// A mark taken before a session's request crosses, for [`SessionFollower::learn`].
    pub fn mark(&self) -> u64 {
        self.forgotten.load(Ordering::Acquire)
    }

    /// mcp-service answered a list of session `session_id` as live, of `revision`, its id
    /// expiring at `expires`; `mark` was taken before the request crossed.
    pub fn learn(&self, session_id: &str, revision: &str, expires: u64, mark: u64) {
        let Some(revision) = mcp_proto::vocab::LEGACY_REVISIONS.into_iter().find(|r| *r == revision) else { return };
        let Some(seal) = seal(session_id) else { return };
        if !self.trusted() {
            return;
        }
        let id_hash = self.hasher.hash_one(session_id.trim());
        let Ok(mut known) = self.known.write() else { return };
        // Under the lock, as `ended` and `forget_all` take it: an end applied since the mark
        // is seen here.
        if self.forgotten.load(Ordering::Acquire) != mark {
            return;
        }
        if known.len() >= MOST_KNOWN {
            known.clear();
        }
        known.insert(seal.into(), Known { id_hash, revision, expires });
    }

    /// Follow every replica in `replicas` until `shutdown`.
    pub async fn follow(self: Arc<Self>, mut replicas: Replicas, shutdown: CancellationToken) {
        let mut running: HashMap<String, CancellationToken> = HashMap::new();
        loop {
            let current = replicas.current();
            let keys: Vec<String> = current.iter().map(|(k, _)| k.clone()).collect();
            self.listed(&keys);
            running.retain(|key, stop| {
                let kept = keys.contains(key);
                if !kept {
                    stop.cancel();
                }
                kept
            });
            for (key, channel) in current {
                if running.contains_key(&key) {
                    continue;
                }
                let stop = shutdown.child_token();
                running.insert(key.clone(), stop.clone());
                tokio::spawn(self.clone().follow_one(key, channel, stop));
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                more = replicas.changed() => if !more {
                    shutdown.cancelled().await;
                    return;
                }
            }
        }
    }

    /// Follow one replica, reconnecting with a growing pause, until `stop`.
    async fn follow_one(self: Arc<Self>, key: String, channel: GrpcChannel, stop: CancellationToken) {
        let mut pause = Duration::from_millis(100);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.stream(&key, channel.clone()) => {
                    if let Err(status) = outcome {
                        tracing::debug!(replica = %key, code = ?status.code(), error = %status.message(), "session ends: stream ended");
                    }
                    if outcome_was_followed(&self, &key) {
                        pause = Duration::from_millis(100);
                    }
                }
            }
            self.lost(&key);
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// One stream from replica `key`: the ends it sends, and the echoes of the pings sent to it.
    async fn stream(&self, key: &str, channel: GrpcChannel) -> Result<(), tonic::Status> {
        use pb::session_follower_message::Kind as Says;
        let mut client = McpServiceClient::new(channel);
        let request = mcp_proto::trust::outgoing(pb::FollowSessionsRequest {});
        let mut news = client.follow_sessions(request).await?.into_inner();
        let Some(Kind::Joined(joined)) = news.message().await?.and_then(|n| n.kind) else {
            return Err(tonic::Status::internal("the stream did not start with `joined`"));
        };
        let lease = Duration::from_millis(joined.lease_ms);
        let says = |kind| {
            let message = pb::SessionFollowerMessage { follower: joined.follower, kind: Some(kind) };
            let mut client = client.clone();
            async move {
                let answer = client.follower(mcp_proto::trust::outgoing(message)).await?.into_inner();
                if answer.following { Ok(()) } else { Err(tonic::Status::not_found("no longer followed")) }
            }
        };
        // Pings sent and not yet echoed, oldest first, with when they were sent.
        let mut pings: VecDeque<(u64, Instant)> = VecDeque::new();
        let mut next = 0u64;
        let mut tick = tokio::time::interval(lease / 4);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                message = news.message() => {
                    let Some(message) = message? else { return Ok(()) };
                    match message.kind {
                        Some(Kind::Echo(n)) => {
                            while let Some(&(sent_n, sent_at)) = pings.front() {
                                if sent_n > n {
                                    break;
                                }
                                pings.pop_front();
                                if sent_n == n {
                                    self.leased(key, sent_at + lease);
                                }
                            }
                        }
                        Some(Kind::Ended(end)) => {
                            self.ended(&end.seal);
                            says(Says::Applied(end.seq)).await?;
                        }
                        Some(Kind::Joined(_)) | None => {}
                    }
                }
                _ = tick.tick() => {
                    next += 1;
                    pings.push_back((next, Instant::now()));
                    if pings.len() > 64 {
                        pings.pop_front();
                    }
                    says(Says::Ping(next)).await?;
                }
            }
        }
    }
}

/// Whether replica `key` was followed (its lease held) before its stream ended: then the next
/// attempt starts without a long pause.
fn outcome_was_followed(follower: &SessionFollower, key: &str) -> bool {
    follower.leases.lock().ok().and_then(|l| l.get(key).copied().flatten()).is_some()
}

impl crate::app::LegacySessions for SessionFollower {
    fn live_revision(&self, session_id: &str) -> Option<&'static str> {
        SessionFollower::live_revision(self, session_id)
    }

    fn mark(&self) -> u64 {
        SessionFollower::mark(self)
    }

    fn learn(&self, session_id: &str, revision: &str, expires: u64, mark: u64) {
        SessionFollower::learn(self, session_id, revision, expires, mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "eyJyIjoiMjAyNS0wNi0xOCJ9.c2VhbA";

    #[test]
    fn sessions_are_trusted_only_under_every_lease_and_forgotten_on_an_end() {
        let f = SessionFollower::default();
        let later = u64::MAX;
        // Nothing listed: nothing is trusted, nothing learnt.
        f.learn(ID, "2025-06-18", later, f.mark());
        assert_eq!(f.live_revision(ID), None);
        f.listed(&["a".into(), "b".into()]);
        let soon = Instant::now() + Duration::from_secs(60);
        f.leased("a", soon);
        f.learn(ID, "2025-06-18", later, f.mark());
        assert_eq!(f.live_revision(ID), None, "b is not followed yet");
        f.leased("b", soon);
        f.learn(ID, "2025-06-18", later, f.mark());
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        // The same seal under another payload is not that session.
        assert_eq!(f.live_revision("eyJyIjoiMjAyNC0xMS0wNSJ9.c2VhbA"), None);
        // An end applied while a reply crossed: what the reply said is not learnt.
        let mark = f.mark();
        f.ended("c2VhbA");
        assert_eq!(f.live_revision(ID), None);
        f.learn(ID, "2025-06-18", later, mark);
        assert_eq!(f.live_revision(ID), None);
        // Expired ids are not live.
        f.learn(ID, "2025-06-18", unix_now() - 1, f.mark());
        assert_eq!(f.live_revision(ID), None);
        // A broken stream forgets everything, and trusts nothing until that replica is
        // followed again.
        f.learn(ID, "2025-06-18", later, f.mark());
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        f.lost("b");
        assert_eq!(f.live_revision(ID), None);
        f.leased("b", soon);
        assert_eq!(f.live_revision(ID), None, "forgotten");
        f.learn(ID, "2025-06-18", later, f.mark());
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        // A replica that comes makes it forget too; one that goes is no longer waited for.
        f.listed(&["a".into(), "b".into(), "c".into()]);
        assert_eq!(f.live_revision(ID), None);
        f.listed(&["a".into(), "b".into()]);
        f.learn(ID, "2025-06-18", later, f.mark());
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        // A lease that ran out: nothing is trusted.
        f.listed(&["a".into()]);
        let f2 = SessionFollower::default();
        f2.listed(&["a".into()]);
        f2.leased("a", Instant::now());
        f2.learn(ID, "2025-06-18", later, f2.mark());
        assert_eq!(f2.live_revision(ID), None);
        // Not a revision: nothing learnt.
        f.learn(ID, "2099-01-01", later, f.mark());
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
    }
}
