//! The gateways that follow this engine's legacy session ends (`FollowSessions`), so that they
//! may answer a live session's lists without a hop.
//!
//! A follower trusts what it knows of sessions only until a lease ([`LEASE`]) after it sent the
//! last ping this engine echoed. When a session ends here, each follower is sent its seal, and
//! the `DELETE` is answered once every follower has said it applied the end, or once a lease has
//! passed since the end was sent: a follower that has not applied it by then received no echo
//! sent after it (echoes travel behind it on the same stream), so its trust has run out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use mcp_proto::mcp::{self as pb, session_news::Kind};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// How long a follower trusts what it knows after sending a ping that was echoed; the longest a
/// `DELETE` waits for a follower that does not answer.
pub const LEASE: Duration = Duration::from_secs(2);

/// Messages queued for one follower at most; a follower that falls that far behind is let go
/// (its lease then runs out).
const QUEUE: usize = 256;

/// Every follower of this engine, and the followers that left within the last lease.
pub struct Followers {
    lease: Duration,
    list: Mutex<List>,
}

#[derive(Default)]
struct List {
    /// The number of the last end sent.
    seq: u64,
    followers: HashMap<u64, Follower>,
}

struct Follower {
    /// Its stream; `None` once it left (the stream then ends when its queue is read).
    news: Option<mpsc::Sender<pb::SessionNews>>,
    /// The highest `ended` it applied.
    applied: watch::Sender<u64>,
    /// When it left (it may trust what it knew until a lease after that).
    left: Option<Instant>,
}

impl Follower {
    fn leave_at(&mut self, t: Instant) {
        self.left.get_or_insert(t);
        self.news = None;
    }
}

fn news(kind: Kind) -> pb::SessionNews {
    pb::SessionNews { kind: Some(kind) }
}

impl Default for Followers {
    fn default() -> Self {
        Self::new(LEASE)
    }
}

impl Followers {
    pub fn new(lease: Duration) -> Self {
        Self { lease, list: Mutex::default() }
    }

    /// A new follower: its id and its stream, which starts with both and the lease.
    pub fn join(&self) -> (u64, mpsc::Receiver<pb::SessionNews>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        // Random: a follower's messages name it.
        let id = rand::random::<u64>();
        let joined = pb::Joined { follower: id, lease_ms: self.lease.as_millis() as u64 };
        let _ = tx.try_send(news(Kind::Joined(joined)));
        if let Ok(mut list) = self.list.lock() {
            self.prune(&mut list, Instant::now());
            list.followers.insert(id, Follower { news: Some(tx), applied: watch::Sender::new(0), left: None });
        }
        (id, rx)
    }

    /// Forget the followers that left more than a lease ago.
    fn prune(&self, list: &mut List, now: Instant) {
        list.followers.retain(|_, f| f.left.is_none_or(|left| left + self.lease > now));
    }

    /// Follower `id`'s stream ended: ends wait for it until a lease has passed.
    pub fn leave(&self, id: u64) {
        if let Ok(mut list) = self.list.lock() {
            let now = Instant::now();
            if let Some(f) = list.followers.get_mut(&id) {
                f.leave_at(now);
            }
            self.prune(&mut list, now);
        }
    }

    /// Every follower's stream ends (this engine is shutting down: the drain does not wait for
    /// them, and they follow the other replicas meanwhile).
    pub fn close_all(&self) {
        if let Ok(mut list) = self.list.lock() {
            let now = Instant::now();
            for f in list.followers.values_mut() {
                f.leave_at(now);
            }
        }
    }

    /// Follower `id` pinged: echo `n` on its stream, behind what was sent before. `false` when
    /// it is not following (or is too far behind: then it is let go).
    pub fn ping(&self, id: u64, n: u64) -> bool {
        let Ok(mut list) = self.list.lock() else { return false };
        let Some(f) = list.followers.get_mut(&id).filter(|f| f.left.is_none()) else { return false };
        if f.news.as_ref().is_some_and(|tx| tx.try_send(news(Kind::Echo(n))).is_ok()) {
            return true;
        }
        f.leave_at(Instant::now());
        false
    }

    /// Follower `id` applied every end up to `seq`.
    pub fn applied(&self, id: u64, seq: u64) -> bool {
        let Ok(list) = self.list.lock() else { return false };
        let Some(f) = list.followers.get(&id).filter(|f| f.left.is_none()) else { return false };
        f.applied.send_modify(|a| *a = (*a).max(seq));
        true
    }

    /// Tell every follower that the session sealed `seal` ended here; returns once each has
    /// applied it or can no longer trust what it knew.
    pub async fn ended(&self, seal: &str) {
        let mut waits = Vec::new();
        let seq;
        {
            // The number and the time under the lock: ends reach each follower in the order of
            // their numbers (its acknowledgement of one covers every earlier one), and no echo
            // sent after `sent` can pass this end in the follower's queue.
            let mut list = self.list.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            list.seq += 1;
            seq = list.seq;
            let sent = Instant::now();
            self.prune(&mut list, sent);
            for f in list.followers.values_mut() {
                let deadline = match f.left {
                    Some(left) => left + self.lease,
                    None => {
                        let end = news(Kind::Ended(pb::SessionEnded { seq, seal: seal.to_owned() }));
                        if f.news.as_ref().is_none_or(|tx| tx.try_send(end).is_err()) {
                            // Too far behind to take it: let go; its lease runs out.
                            f.leave_at(sent);
                        }
                        sent + self.lease
                    }
                };
                waits.push((f.applied.subscribe(), deadline));
            }
        }
        // Each until it applied the end or its deadline passed (one that left applies nothing:
        // its lease is waited out; it is forgotten only after its deadline).
        for (mut applied, deadline) in waits {
            let _ = tokio::time::timeout_at(deadline, applied.wait_for(|a| *a >= seq)).await;
        }
    }

    /// How many follow now.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.list.lock().map(|l| l.followers.values().filter(|f| f.left.is_none()).count()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// End `seal` while follower `id` applies the end it is sent at once: the end it was sent,
    /// and how long the end took to be answered.
    async fn end(
        followers: &Followers,
        seal: &str,
        id: u64,
        news: &mut mpsc::Receiver<pb::SessionNews>,
    ) -> (pb::SessionEnded, Duration) {
        let started = Instant::now();
        let ending = followers.ended(seal);
        tokio::pin!(ending);
        let applied = tokio::select! {
            () = &mut ending => panic!("answered before the follower applied it"),
            n = news.recv() => {
                let Some(Kind::Ended(end)) = n.and_then(|n| n.kind) else { panic!("an end") };
                assert!(followers.applied(id, end.seq));
                end
            }
        };
        ending.await;
        (applied, started.elapsed())
    }

    #[tokio::test]
    async fn an_end_waits_for_each_follower_or_its_lease() {
        let lease = Duration::from_millis(500);
        let followers = Followers::new(lease);
        let (quick, mut quick_news) = followers.join();
        let (silent, mut silent_news) = followers.join();
        for (id, news) in [(quick, &mut quick_news), (silent, &mut silent_news)] {
            let joined = pb::Joined { follower: id, lease_ms: 500 };
            assert_eq!(news.recv().await.and_then(|n| n.kind), Some(Kind::Joined(joined)));
        }
        // Pings are echoed on the follower's own stream.
        assert!(followers.ping(quick, 7));
        assert_eq!(quick_news.recv().await.and_then(|n| n.kind), Some(Kind::Echo(7)));
        // The quick follower applies the end at once; the silent one never does: the end is
        // answered once the silent one's lease has passed.
        let (applied, took) = end(&followers, "abc", quick, &mut quick_news).await;
        assert_eq!((applied.seq, applied.seal.as_str()), (1, "abc"));
        assert!(took >= lease, "{took:?}");
        assert!(matches!(silent_news.recv().await.and_then(|n| n.kind), Some(Kind::Ended(_))));

        // Once the silent follower has left, an end waits for the rest of its lease only, and
        // its pings are not echoed.
        let left = Instant::now();
        followers.leave(silent);
        drop(silent_news);
        assert!(!followers.ping(silent, 8));
        assert_eq!(end(&followers, "def", quick, &mut quick_news).await.0.seq, 2);
        assert!(left.elapsed() >= lease, "{:?}", left.elapsed());
        // Past its lease it is forgotten: an end waits for the quick follower alone.
        let (applied, took) = end(&followers, "ghi", quick, &mut quick_news).await;
        assert_eq!(applied.seq, 3);
        assert!(took < lease, "{took:?}");
        assert_eq!(followers.count(), 1);
        assert!(!followers.applied(silent, 3));
    }
}
