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
//! when it answers a `DELETE`, every gateway has applied the end or no longer trusts what it
//! knew.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use mcp_proto::balance::Replicas;
use mcp_proto::mcp::{self as pb, mcp_service_client::McpServiceClient, session_news::Kind};
use mcp_proto::transport::GrpcChannel;
use mcp_proto::vocab::session_seal as seal;
use mcp_service::seal::now as unix_now;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

/// The most sessions remembered (about 100 bytes each); past it, all are forgotten and learnt
/// again as their lists cross.
const MOST_KNOWN: usize = 50_000;

/// What the gateway knows of legacy sessions, and the leases it holds.
pub struct SessionFollower {
    /// Per replica listed: the generation of its stream and until when its lease runs (`None`:
    /// not followed yet).
    leases: Mutex<HashMap<String, Lease>>,
    /// The earliest lease of all, or `None` while any replica is not followed.
    trusted_until: RwLock<Option<Instant>>,
    /// Live sessions by their id's seal (a MAC made by mcp-service: keys enter only for sessions
    /// it answered as live), hashed with foldhash rather than SipHash.
    known: RwLock<HashMap<Box<str>, Known, foldhash::fast::RandomState>>,
    /// Ends applied, streams started or lost, knowledge dropped so far: a reply that crossed
    /// while this changed teaches nothing (the session may have ended meanwhile).
    forgotten: AtomicU64,
    /// The whole id is compared by this hash. foldhash, not SipHash (about 500 instructions a
    /// request for an id of some 150 characters), and nothing here rests on its seed being
    /// unpredictable: the seal, mcp-service's MAC over the rest, is matched exactly, as the
    /// map's key; the rest is compared so that only the very id mcp-service answered is
    /// answered here, but an id of another payload and the same seal would only be taken for
    /// that session, whose seal its bearer holds already (the revision and expiry used are the
    /// ones learnt, not the id's).
    hasher: foldhash::fast::RandomState,
    /// The replicas as the balanced channel lists them (set by [`SessionFollower::follow`]):
    /// a session is learnt only while every one of them is followed.
    replicas: Mutex<Option<Replicas>>,
    next_generation: AtomicU64,
}

#[derive(Clone, Copy)]
struct Lease {
    generation: u64,
    until: Option<Instant>,
}

struct Known {
    /// Of the whole id (the seal alone names it; the rest must match too).
    id_hash: u64,
    revision: &'static str,
    /// Unix seconds.
    expires: u64,
}

/// A session is taken for expired this long before its id says (the gateway's clock and
/// mcp-service's may differ a little).
const EXPIRY_MARGIN_SECS: u64 = 5;

impl Default for SessionFollower {
    fn default() -> Self {
        Self {
            leases: Mutex::default(),
            trusted_until: RwLock::new(None),
            known: RwLock::default(),
            forgotten: AtomicU64::new(0),
            hasher: foldhash::fast::RandomState::default(),
            replicas: Mutex::new(None),
            next_generation: AtomicU64::new(1),
        }
    }
}

impl SessionFollower {
    fn trusted(&self) -> bool {
        self.trusted_until.read().ok().and_then(|t| *t).is_some_and(|t| t > Instant::now())
    }

    /// Recompute the earliest lease (under the leases' lock): `None` when nothing is listed or
    /// a replica is not followed (`None` orders before any time).
    fn settle(&self, leases: &HashMap<String, Lease>) {
        let earliest = leases.values().map(|l| l.until).min().flatten();
        if let Ok(mut t) = self.trusted_until.write() {
            *t = earliest;
        }
        report(leases);
    }

    /// Forget every session.
    fn forget_all(&self) {
        self.forgotten.fetch_add(1, Ordering::AcqRel);
        if let Ok(mut known) = self.known.write() {
            known.clear();
        }
    }

    /// The replicas listed now; each new one is given a generation (returned, for its stream),
    /// is not trusted until followed, and makes the gateway forget (it may have ended sessions
    /// before this gateway heard of it); so does one that goes (its ends are no longer heard,
    /// while gateways that still list it may send it a `DELETE`).
    fn listed(&self, keys: &[String]) -> HashMap<String, u64> {
        let mut new = HashMap::new();
        let Ok(mut leases) = self.leases.lock() else { return new };
        let before = leases.len();
        leases.retain(|k, _| keys.contains(k));
        let went = leases.len() != before;
        for key in keys {
            leases.entry(key.clone()).or_insert_with(|| {
                let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
                new.insert(key.clone(), generation);
                Lease { generation, until: None }
            });
        }
        if went || !new.is_empty() {
            self.forget_all();
        }
        self.settle(&leases);
        new
    }

    /// Replica `key`'s stream of `generation` joined: what was learnt before it is not trusted.
    fn joined(&self, key: &str, generation: u64) -> bool {
        let current = self.leases.lock().is_ok_and(|l| l.get(key).is_some_and(|l| l.generation == generation));
        if current {
            self.forget_all();
        }
        current
    }

    /// Replica `key`'s lease (its stream of `generation`) runs until `until`.
    fn leased(&self, key: &str, generation: u64, until: Instant) {
        let Ok(mut leases) = self.leases.lock() else { return };
        if let Some(lease) = leases.get_mut(key).filter(|l| l.generation == generation) {
            lease.until = Some(lease.until.map_or(until, |l| l.max(until)));
        }
        self.settle(&leases);
    }

    /// Replica `key`'s stream of `generation` ended: nothing it might have ended meanwhile is
    /// known. The next stream's generation, and whether this one was followed under a lease;
    /// `None` when the replica is listed anew or no longer (another task follows it, or none).
    fn lost(&self, key: &str, generation: u64) -> Option<(u64, bool)> {
        let next = self.leases.lock().ok().and_then(|mut leases| {
            let lease = leases.get_mut(key).filter(|l| l.generation == generation)?;
            let next = self.next_generation.fetch_add(1, Ordering::Relaxed);
            let was_followed = lease.until.is_some();
            *lease = Lease { generation: next, until: None };
            self.settle(&leases);
            Some((next, was_followed))
        });
        self.forget_all();
        next
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
        (session.id_hash == self.hasher.hash_one(session_id.trim())
            && session.expires > unix_now() + EXPIRY_MARGIN_SECS)
            .then_some(session.revision)
    }

    /// A mark taken before a session's request crosses, for [`SessionFollower::learn`]; `None`
    /// while nothing is trusted (what crosses then is not learnt).
    pub fn mark(&self) -> Option<u64> {
        let mark = self.forgotten.load(Ordering::Acquire);
        self.trusted().then_some(mark)
    }

    /// mcp-service answered a list of session `session_id` as live, of `revision`, its id
    /// expiring at `expires`; `mark` was taken before the request crossed.
    pub fn learn(&self, session_id: &str, revision: &str, expires: u64, mark: Option<u64>) {
        let Some(mark) = mark else { return };
        let Some(revision) = mcp_proto::vocab::LEGACY_REVISIONS.into_iter().find(|r| *r == revision) else { return };
        let Some(seal) = seal(session_id) else { return };
        if !self.trusted() || !self.follows_every_replica() {
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

    /// Whether every replica the balanced channel lists now is one this follows (a replica it
    /// has just listed may have answered before the follower heard of it).
    fn follows_every_replica(&self) -> bool {
        let Ok(replicas) = self.replicas.lock() else { return false };
        let Some(replicas) = replicas.as_ref() else { return true };
        let Ok(leases) = self.leases.lock() else { return false };
        let keys = replicas.keys();
        keys.len() == leases.len() && keys.iter().all(|k| leases.contains_key(k))
    }

    /// Follow every replica in `replicas` until `shutdown`.
    pub async fn follow(self: Arc<Self>, mut replicas: Replicas, shutdown: CancellationToken) {
        if let Ok(mut listed) = self.replicas.lock() {
            *listed = Some(replicas.clone());
        }
        let mut running: HashMap<String, CancellationToken> = HashMap::new();
        loop {
            let current = replicas.current();
            let keys: Vec<String> = current.iter().map(|(k, _)| k.clone()).collect();
            let new = self.listed(&keys);
            running.retain(|key, stop| {
                let kept = keys.contains(key);
                if !kept {
                    stop.cancel();
                }
                kept
            });
            for (key, channel) in current {
                let Some(&generation) = new.get(&key) else { continue };
                if let Some(old) = running.remove(&key) {
                    old.cancel();
                }
                let stop = shutdown.child_token();
                running.insert(key.clone(), stop.clone());
                tokio::spawn(self.clone().follow_one(key, generation, channel, stop));
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
    async fn follow_one(
        self: Arc<Self>,
        key: String,
        mut generation: u64,
        channel: GrpcChannel,
        stop: CancellationToken,
    ) {
        let mut pause = Duration::from_millis(100);
        loop {
            let outcome = tokio::select! {
                () = stop.cancelled() => return,
                outcome = self.stream(&key, generation, channel.clone()) => outcome,
            };
            let Some((next, was_followed)) = self.lost(&key, generation) else { return };
            generation = next;
            if was_followed {
                pause = Duration::from_millis(100);
                let error = outcome.err().map(|s| s.message().to_owned()).unwrap_or_default();
                tracing::info!(
                    replica = %key,
                    error,
                    "no longer following this mcp-service replica's session ends: legacy sessions' lists cross until it is followed again"
                );
            } else if let Err(status) = outcome {
                tracing::debug!(replica = %key, code = ?status.code(), error = %status.message(), "cannot follow session ends");
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(Duration::from_secs(5));
        }
    }

    /// One stream from replica `key`: the ends it sends, and the echoes of the pings sent to it.
    async fn stream(&self, key: &str, generation: u64, channel: GrpcChannel) -> Result<(), tonic::Status> {
        use futures_util::FutureExt as _;
        use pb::session_follower_message::Kind as Says;
        let mut client = McpServiceClient::new(channel);
        let request = mcp_proto::trust::outgoing(pb::FollowSessionsRequest {});
        let mut news = client.follow_sessions(request).await?.into_inner();
        let Some(Kind::Joined(joined)) = news.message().await?.and_then(|n| n.kind) else {
            return Err(tonic::Status::internal("the stream did not start with `joined`"));
        };
        if !self.joined(key, generation) {
            return Ok(());
        }
        let lease = Duration::from_millis(joined.lease_ms.max(100));
        // Trusted a tenth less than the replica waits: its clock and this one may run apart.
        let trusted_for = lease * 9 / 10;
        let says = move |kind| {
            let message = pb::SessionFollowerMessage { follower: joined.follower, kind: Some(kind) };
            let mut client = client.clone();
            async move {
                let call = client.follower(mcp_proto::trust::outgoing(message));
                match tokio::time::timeout(lease, call).await {
                    Ok(Ok(answer)) if answer.get_ref().following => Ok(()),
                    Ok(Ok(_)) => Err(tonic::Status::not_found("the replica no longer knows this follower")),
                    Ok(Err(status)) => Err(status),
                    Err(_) => Err(tonic::Status::deadline_exceeded("the replica did not answer within a lease")),
                }
            }
        };
        // Pings sent and not yet echoed, oldest first, with when they were sent; pinged from a
        // task of its own so that reading the stream never waits for a call.
        let pings: Arc<Mutex<VecDeque<(u64, Instant)>>> = Arc::default();
        let (failed_tx, mut failed) = tokio::sync::mpsc::channel::<tonic::Status>(1);
        let _pinger = {
            let (pings, says, failed_tx) = (pings.clone(), says.clone(), failed_tx.clone());
            AbortOnDropHandle::new(tokio::spawn(async move {
                let mut tick = tokio::time::interval(lease / 4);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                for n in 1.. {
                    tick.tick().await;
                    if let Ok(mut pings) = pings.lock() {
                        pings.push_back((n, Instant::now()));
                        if pings.len() > 64 {
                            pings.pop_front();
                        }
                    }
                    if let Err(status) = says(Says::Ping(n)).await {
                        let _ = failed_tx.try_send(status);
                        return;
                    }
                }
            }))
        };
        let mut last_echo = Instant::now();
        let mut watchdog = tokio::time::interval(lease);
        loop {
            let message = tokio::select! {
                message = news.message() => message?,
                status = failed.recv() => return Err(status.unwrap_or_else(|| tonic::Status::cancelled("pings stopped"))),
                _ = watchdog.tick() => {
                    if let Ok(leases) = self.leases.lock() {
                        report(&leases);
                    }
                    if last_echo.elapsed() > lease * 2 {
                        return Err(tonic::Status::deadline_exceeded("no echo for two leases"));
                    }
                    continue;
                }
            };
            let Some(message) = message else { return Ok(()) };
            // This message and every other already arrived: the ends among them are
            // acknowledged together.
            let mut applied = None;
            let mut next = Some(message);
            while let Some(message) = next.take() {
                match message.kind {
                    Some(Kind::Echo(n)) => {
                        last_echo = Instant::now();
                        let sent = pings.lock().ok().and_then(|mut pings| {
                            let mut sent = None;
                            while let Some(&(sent_n, sent_at)) = pings.front() {
                                if sent_n > n {
                                    break;
                                }
                                pings.pop_front();
                                if sent_n == n {
                                    sent = Some(sent_at);
                                }
                            }
                            sent
                        });
                        if let Some(sent_at) = sent {
                            self.leased(key, generation, sent_at + trusted_for);
                        }
                    }
                    Some(Kind::Ended(end)) => {
                        self.ended(&end.seal);
                        applied = Some(applied.unwrap_or(0).max(end.seq));
                    }
                    Some(Kind::Joined(_)) | None => {}
                }
                next = match news.message().now_or_never() {
                    Some(Ok(Some(message))) => Some(message),
                    Some(Ok(None)) | None => None,
                    Some(Err(status)) => return Err(status),
                };
            }
            if let Some(seq) = applied {
                let says = says.clone();
                let failed_tx = failed_tx.clone();
                tokio::spawn(async move {
                    if let Err(status) = says(Says::Applied(seq)).await {
                        let _ = failed_tx.try_send(status);
                    }
                });
            }
        }
    }
}

/// `gateway_session_ends_replicas`: the replicas listed, and of them those whose session ends
/// this gateway follows under a lease now (legacy sessions' lists are reused only while the two
/// are equal).
fn report(leases: &HashMap<String, Lease>) {
    let now = Instant::now();
    let followed = leases.values().filter(|l| l.until.is_some_and(|u| u > now)).count();
    metrics::gauge!("gateway_session_ends_replicas", "state" => "listed").set(leases.len() as f64);
    metrics::gauge!("gateway_session_ends_replicas", "state" => "followed").set(followed as f64);
}

impl crate::app::LegacySessions for SessionFollower {
    fn live_revision(&self, session_id: &str) -> Option<&'static str> {
        SessionFollower::live_revision(self, session_id)
    }

    fn mark(&self) -> Option<u64> {
        SessionFollower::mark(self)
    }

    fn learn(&self, session_id: &str, revision: &str, expires: u64, mark: Option<u64>) {
        SessionFollower::learn(self, session_id, revision, expires, mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "eyJyIjoiMjAyNS0wNi0xOCJ9.c2VhbA";
    const LATER: u64 = u64::MAX;

    /// `f` learns `ID` as a 2025-06-18 session, with a mark taken now.
    fn learn(f: &SessionFollower) {
        f.learn(ID, "2025-06-18", LATER, f.mark());
    }

    #[test]
    fn sessions_are_trusted_only_under_every_lease_and_forgotten_on_an_end() {
        let f = SessionFollower::default();
        // Nothing listed: nothing is trusted, nothing learnt.
        assert_eq!(f.mark(), None);
        learn(&f);
        assert_eq!(f.live_revision(ID), None);
        let generations = f.listed(&["a".into(), "b".into()]);
        let (a, b) = (generations["a"], generations["b"]);
        let soon = Instant::now() + Duration::from_secs(60);
        assert!(f.joined("a", a));
        f.leased("a", a, soon);
        learn(&f);
        assert_eq!(f.live_revision(ID), None, "b is not followed yet");
        assert!(f.joined("b", b));
        f.leased("b", b, soon);
        learn(&f);
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        // The same seal under another payload is not that session.
        assert_eq!(f.live_revision("eyJyIjoiMjAyNC0xMS0wNSJ9.c2VhbA"), None);
        // An end applied while a reply crossed: what the reply said is not learnt.
        let mark = f.mark();
        f.ended("c2VhbA");
        assert_eq!(f.live_revision(ID), None);
        f.learn(ID, "2025-06-18", LATER, mark);
        assert_eq!(f.live_revision(ID), None);
        // Ids about to expire are not live.
        f.learn(ID, "2025-06-18", unix_now() + 2, f.mark());
        assert_eq!(f.live_revision(ID), None);
        // A broken stream forgets everything, and trusts nothing until that replica is
        // followed again, by a stream of a new generation; a reply that crossed meanwhile
        // teaches nothing.
        learn(&f);
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        let mark = f.mark();
        let (b2, was_followed) = f.lost("b", b).expect("a new generation");
        assert!(was_followed);
        assert_eq!(f.live_revision(ID), None);
        assert_eq!(f.mark(), None, "nothing is trusted");
        f.leased("b", b, soon);
        assert_eq!(f.mark(), None, "the old stream's echoes count no more");
        assert!(!f.joined("b", b));
        assert!(f.joined("b", b2));
        f.leased("b", b2, soon);
        f.learn(ID, "2025-06-18", LATER, mark);
        assert_eq!(f.live_revision(ID), None, "learnt across the gap");
        learn(&f);
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        // A replica that comes makes it forget, and so does one that goes.
        let c = f.listed(&["a".into(), "b".into(), "c".into()])["c"];
        assert_eq!(f.live_revision(ID), None);
        f.leased("c", c, soon);
        learn(&f);
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        assert!(f.listed(&["a".into(), "b".into()]).is_empty());
        assert_eq!(f.live_revision(ID), None);
        learn(&f);
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        // Not a revision: nothing learnt.
        f.learn(ID, "2099-01-01", LATER, f.mark());
        assert_eq!(f.live_revision(ID), Some("2025-06-18"));
        // A lease that ran out: nothing is trusted.
        let g = SessionFollower::default();
        let a = g.listed(&["a".into()])["a"];
        g.leased("a", a, Instant::now());
        assert_eq!(g.mark(), None);
    }
}
