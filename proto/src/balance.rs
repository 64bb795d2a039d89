//! Where a service finds the replicas of another, and how it spreads its calls over them.
//!
//! A target is written in one of three forms:
//!
//! - `http://host:port`: one HTTP/2 connection (through a Kubernetes ClusterIP Service that is
//!   balanced per connection, not per request);
//! - `http://a:1,http://b:2`: a fixed set of replicas;
//! - `dns:///host:port`: every address `host` resolves to (a headless Service lists the ready
//!   pods), resolved again every [`RESOLVE_EVERY`].
//!
//! With several replicas every call goes to the replica with the fewest calls in flight (their
//! streams included) among those that answer, the next in turn among equals: a plain turn would
//! let a regular pattern (a quick call then a slow one) put every slow call on one replica. A replica whose connection fails is set aside and probed (a TCP connect, with
//! backoff up to two seconds) until it accepts connections again; while no replica is known to
//! answer, calls go to the next one anyway and fail as a single connection would. A call the
//! chosen replica never processed (no connection could be made to it, its connection could
//! not take the call, the stream was refused, or the replica's shutdown notice left the call
//! out) is sent to another replica, up to three in all.
//!
//! A call may name an affinity key ([`set_affinity`], a legacy session id): all calls with the
//! same key go to the same replica while it answers (rendezvous hashing: when replicas come or
//! go, only the keys of those replicas move), because a legacy session's interactive parts
//! (streams, answers the server awaits from the client) live in one replica's memory.
//!
//! tonic's own `balance_channel` is not used: it keeps routing to replicas that refuse
//! connections and only takes address changes when a call is made.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::watch;
use tonic::body::Body;
use tower::Service;

use crate::link::{Link, Settings};

use crate::transport::{GrpcChannel, TransportError};

/// A call's affinity key, in its extensions: it chooses the replica and never travels (the
/// service has the session id in the message).
#[derive(Clone, Debug)]
pub struct Affinity(pub bytes::Bytes);

/// Send `request` to the replica its `key` maps to (see the module documentation).
pub fn set_affinity<T>(request: &mut tonic::Request<T>, key: String) {
    request.extensions_mut().insert(Affinity(key.into()));
}

/// Calls that stay open for as long as their caller lives (change feeds, a legacy session's
/// standalone stream): they are not counted as load, or the replica holding one would look busy
/// for good.
const LONG_LIVED: [&str; 3] =
    ["/mcp.v1.McpService/WatchCatalog", "/mcp.v1.McpService/Listen", "/registry.v1.Registry/Watch"];

/// How often a `dns:///` target is resolved again.
pub const RESOLVE_EVERY: Duration = Duration::from_secs(2);

/// The longest wait between two probes of a replica that stopped answering.
const PROBE_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// A parsed target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One URL, one connection.
    Single(String),
    /// A fixed list of URLs.
    List(Vec<String>),
    /// A DNS name and port, resolved again and again.
    Dns { host: String, port: u16 },
}

impl Target {
    /// Parse the three forms above; the message names what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(rest) = text.strip_prefix("dns:") {
            // `dns:///host:port` (no DNS server authority) or `dns:host:port`.
            let name = rest.strip_prefix("///").unwrap_or(rest);
            if name.starts_with('/') {
                return Err(format!("`{text}`: a DNS server in the target is not supported; write dns:///host:port"));
            }
            let (host, port) =
                name.rsplit_once(':').ok_or_else(|| format!("`{text}`: the port is missing (dns:///host:port)"))?;
            let port: u16 =
                port.parse().map_err(|_| format!("`{text}`: `{port}` is not a port number (dns:///host:port)"))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if host.is_empty() || port == 0 {
                return Err(format!("`{text}`: write dns:///host:port with a host name and a port"));
            }
            return Ok(Target::Dns { host: host.to_owned(), port });
        }
        let urls: Vec<&str> = text.split(',').map(str::trim).collect();
        for url in &urls {
            check_url(url).map_err(|reason| format!("`{url}`: {reason}"))?;
        }
        let mut urls: Vec<String> = urls.into_iter().map(str::to_owned).collect();
        if urls.len() == 1 {
            return Ok(Target::Single(urls.remove(0)));
        }
        let distinct: BTreeSet<&String> = urls.iter().collect();
        if distinct.len() != urls.len() {
            return Err(format!("`{text}`: a URL is listed twice"));
        }
        Ok(Target::List(urls))
    }
}

/// An `http://host:port` URL with nothing after the authority but an optional `/` (the
/// services speak plain HTTP/2 to one another: see [`crate::link`]).
fn check_url(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("not a URL ({e})"))?;
    if parsed.scheme() != "http" {
        return Err("the scheme must be http (or the target dns:///host:port)".into());
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the host is missing".into());
    }
    if parsed.port_or_known_default().is_none() {
        return Err("the port is missing".into());
    }
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err("only scheme, host and port may be given".into());
    }
    Link::check(url)
}

/// The largest HTTP/2 frame this process accepts from the services it calls (the HTTP/2
/// default is 16 KiB). A large answer (a 1 MiB resource) then arrives in fewer frames, each a
/// poll, a header and a wake-up fewer.
pub const MAX_FRAME_SIZE: u32 = 256 * 1024;

/// A channel to `target`, every connection set up with `settings` (timeouts, keep-alive).
/// `component` names the other side in logs, errors and the `grpc_upstream_replicas` gauge.
/// Must be called inside a Tokio runtime (a `dns:///` target resolves in a task of its own,
/// which ends when the channel and all its clones are gone).
pub fn connect(component: &'static str, target: &Target, settings: Settings) -> Result<GrpcChannel, String> {
    connect_each(component, target, settings).map(|(channel, _)| channel)
}

/// [`connect`], and the replicas of `target` one by one, as they come and go: for calls that
/// must reach every replica (a feed each replica sends).
pub fn connect_each(
    component: &'static str,
    target: &Target,
    settings: Settings,
) -> Result<(GrpcChannel, Replicas), String> {
    let link = move |url: &str| Link::new(url, settings).map_err(|e| format!("`{url}`: {e}"));
    match target {
        Target::Single(url) => {
            let link = link(url)?;
            Ok((crate::transport::network(link.clone()), Replicas(Members::Single(url.clone(), link))))
        }
        Target::List(urls) => {
            let mut members = Vec::with_capacity(urls.len());
            for url in urls {
                let parsed = url::Url::parse(url).map_err(|e| format!("`{url}`: {e}"))?;
                let host = parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
                let port = parsed.port_or_known_default().unwrap_or_default();
                members.push(Member::new(component, url.clone(), Probe::Name(host.to_owned(), port), link(url)?));
            }
            let (tx, rx) = watch::channel(members.clone());
            let pool = Pool::new(component, rx);
            for member in &members {
                member.start_probe(Duration::ZERO);
            }
            pool.report(&members);
            // A fixed set: the sender may go; receivers keep the last value.
            drop(tx);
            let replicas = Replicas(Members::Pool(pool.members.clone()));
            Ok((GrpcChannel::new(Balanced(pool)), replicas))
        }
        Target::Dns { host, port } => {
            let (tx, rx) = watch::channel(Vec::new());
            let pool = Pool::new(component, rx);
            let weak = Arc::downgrade(&pool);
            let make = move |addr: SocketAddr| link(&format!("http://{addr}"));
            tokio::spawn(resolve(component, host.clone(), *port, tx, weak, make));
            let replicas = Replicas(Members::Pool(pool.members.clone()));
            Ok((GrpcChannel::new(Balanced(pool)), replicas))
        }
    }
}

/// Every replica of a target, each with a channel of its own (calls on it are not balanced,
/// and not counted as the replica's load).
#[derive(Clone)]
pub struct Replicas(Members);

#[derive(Clone)]
enum Members {
    /// One URL: its one connection.
    Single(String, Link),
    Pool(watch::Receiver<Vec<Arc<Member>>>),
}

impl Replicas {
    /// The replicas listed now: a key naming each (its URL or address) and a channel to it.
    pub fn current(&self) -> Vec<(String, GrpcChannel)> {
        match &self.0 {
            Members::Single(url, link) => vec![(url.clone(), crate::transport::network(link.clone()))],
            Members::Pool(members) => {
                members.borrow().iter().map(|m| (m.key.clone(), crate::transport::network(m.link.clone()))).collect()
            }
        }
    }

    /// The keys of the replicas listed now.
    pub fn keys(&self) -> Vec<String> {
        match &self.0 {
            Members::Single(url, _) => vec![url.clone()],
            Members::Pool(members) => members.borrow().iter().map(|m| m.key.clone()).collect(),
        }
    }

    /// Until the list changes; `false` once it never will (a fixed list, or the channel gone).
    pub async fn changed(&mut self) -> bool {
        match &mut self.0 {
            Members::Single(..) => false,
            Members::Pool(members) => members.changed().await.is_ok(),
        }
    }
}

/// Resolve `host:port` until the pool is gone, publishing every change of the address set.
async fn resolve(
    component: &'static str,
    host: String,
    port: u16,
    tx: watch::Sender<Vec<Arc<Member>>>,
    pool: Weak<Pool>,
    make: impl Fn(SocketAddr) -> Result<Link, String> + Send,
) {
    let mut failing = false;
    loop {
        match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(found) => {
                let addrs: BTreeSet<SocketAddr> = found.collect();
                let current: BTreeSet<String> = tx.borrow().iter().map(|m| m.key.clone()).collect();
                let wanted: BTreeSet<String> = addrs.iter().map(ToString::to_string).collect();
                if failing {
                    tracing::info!(component, host, "{component}: name resolves again");
                    failing = false;
                }
                if !addrs.is_empty() && current != wanted {
                    let old = tx.borrow().clone();
                    let mut next = Vec::with_capacity(addrs.len());
                    for addr in addrs {
                        let key = addr.to_string();
                        if let Some(kept) = old.iter().find(|m| m.key == key) {
                            next.push(kept.clone());
                            continue;
                        }
                        match make(addr) {
                            Ok(endpoint) => {
                                let member = Member::new(component, key, Probe::Addr(addr), endpoint);
                                member.start_probe(Duration::ZERO);
                                next.push(member);
                            }
                            Err(e) => tracing::warn!(component, "{component}: {e}"),
                        }
                    }
                    let listed: Vec<&str> = next.iter().map(|m| m.key.as_str()).collect();
                    tracing::info!(component, host, replicas = ?listed, "{component}: replicas changed");
                    if let Some(pool) = pool.upgrade() {
                        pool.report(&next);
                    }
                    tx.send_replace(next);
                }
            }
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        component,
                        host,
                        "{component}: cannot resolve {host}: {e}; keeping the replicas known"
                    );
                    failing = true;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(RESOLVE_EVERY) => {}
            () = tx.closed() => return,
        }
        if pool.strong_count() == 0 {
            return;
        }
    }
}

/// How a replica is probed: by name (resolved by the system) or by address.
#[derive(Debug, Clone)]
enum Probe {
    Name(String, u16),
    Addr(SocketAddr),
}

const PROBING: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

/// One replica: its connection (made when first used) and whether it answers.
struct Member {
    component: &'static str,
    key: String,
    probe: Probe,
    link: Link,
    state: AtomicU8,
    /// Calls sent and not yet answered to the end (a stream counts until it ends).
    in_flight: Arc<AtomicUsize>,
}

impl Member {
    fn new(component: &'static str, key: String, probe: Probe, link: Link) -> Arc<Self> {
        Arc::new(Member {
            component,
            key,
            probe,
            link,
            state: AtomicU8::new(PROBING),
            in_flight: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// `grpc_upstream_replicas_up`: replicas known to accept connections.
    fn count_up(&self, change: f64) {
        metrics::gauge!("grpc_upstream_replicas_up", "upstream" => self.component).increment(change);
    }

    fn is_up(&self) -> bool {
        self.state.load(Ordering::Relaxed) == UP
    }

    fn load(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// A call failed on the connection: set the replica aside and probe it.
    fn failed(self: &Arc<Self>) {
        if self.state.compare_exchange(UP, DOWN, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            let component = self.component;
            tracing::warn!(component, replica = %self.key, "{component}: replica {} stopped answering", self.key);
            self.count_up(-1.0);
            self.start_probe(Duration::from_millis(100));
        }
    }

    /// Probe until the replica accepts a connection, or until it is no longer listed.
    fn start_probe(self: &Arc<Self>, first_wait: Duration) {
        let component = self.component;
        let weak = Arc::downgrade(self);
        let probe = self.probe.clone();
        tokio::spawn(async move {
            let mut wait = first_wait;
            loop {
                tokio::time::sleep(wait).await;
                let connected = match &probe {
                    Probe::Addr(addr) => {
                        tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await
                    }
                    Probe::Name(host, port) => {
                        tokio::time::timeout(
                            Duration::from_secs(2),
                            tokio::net::TcpStream::connect((host.as_str(), *port)),
                        )
                        .await
                    }
                };
                let Some(member) = weak.upgrade() else { return };
                if matches!(connected, Ok(Ok(_))) {
                    let before = member.state.swap(UP, Ordering::Relaxed);
                    if before != UP {
                        member.count_up(1.0);
                    }
                    if before == DOWN {
                        tracing::info!(component, replica = %member.key, "{component}: replica {} answers again", member.key);
                    }
                    return;
                }
                member.state.store(DOWN, Ordering::Relaxed);
                wait = if wait.is_zero() { Duration::from_millis(100) } else { (wait * 2).min(PROBE_BACKOFF_MAX) };
            }
        });
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if self.state.load(Ordering::Relaxed) == UP {
            self.count_up(-1.0);
        }
    }
}

/// The replicas of one component and the turn.
struct Pool {
    component: &'static str,
    members: watch::Receiver<Vec<Arc<Member>>>,
    next: AtomicUsize,
    /// How long a call waits for a `dns:///` target to resolve to something.
    wait: Duration,
}

impl Pool {
    fn new(component: &'static str, members: watch::Receiver<Vec<Arc<Member>>>) -> Arc<Self> {
        Arc::new(Pool { component, members, next: AtomicUsize::new(0), wait: Duration::from_secs(5) })
    }

    /// `grpc_upstream_replicas`: replicas listed (by the target or the name's DNS answer).
    fn report(&self, members: &[Arc<Member>]) {
        metrics::gauge!("grpc_upstream_replicas", "upstream" => self.component).set(members.len() as f64);
    }

    #[cfg(test)]
    async fn pick(&self) -> Result<Arc<Member>, TransportError> {
        self.pick_for(None).await
    }

    /// The replica for a call: by affinity when it has a key, else the least busy.
    async fn pick_for(&self, affinity: Option<&[u8]>) -> Result<Arc<Member>, TransportError> {
        let mut members = self.members.clone();
        if members.borrow().is_empty() {
            // A `dns:///` target not resolved yet (start-up) or resolving to nothing.
            let found = tokio::time::timeout(self.wait, members.wait_for(|m| !m.is_empty())).await;
            if !matches!(found, Ok(Ok(_))) {
                return Err(TransportError::no_replica(self.component));
            }
        }
        let listed = members.borrow();
        if let Some(key) = affinity
            && let Some(member) = rendezvous(&listed, key)
        {
            return Ok(member);
        }
        Ok(self
            .choose(&listed, &[])
            .unwrap_or_else(|| listed[self.next.load(Ordering::Relaxed) % listed.len()].clone()))
    }

    /// Among `listed` but not `tried`: the replica that answers with the fewest calls in flight,
    /// the first from the turn among equals; else (none answers) the first untried from the turn.
    fn choose(&self, listed: &[Arc<Member>], tried: &[String]) -> Option<Arc<Member>> {
        let count = listed.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let mut best: Option<&Arc<Member>> = None;
        let mut fallback = None;
        for member in (0..count).map(|i| &listed[(start + i) % count]).filter(|m| !tried.contains(&m.key)) {
            fallback.get_or_insert(member);
            if member.is_up() && best.is_none_or(|b| member.load() < b.load()) {
                best = Some(member);
            }
        }
        best.or(fallback).cloned()
    }
}

/// The replica that answers with the highest score for `key` (rendezvous hashing).
fn rendezvous(listed: &[Arc<Member>], key: &[u8]) -> Option<Arc<Member>> {
    use std::hash::{Hash as _, Hasher as _};
    let score = |member: &Member| {
        // SipHash with fixed keys: the same choice in every replica of the caller.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        member.key.hash(&mut hasher);
        hasher.finish()
    };
    listed.iter().filter(|m| m.is_up()).max_by_key(|m| score(m)).cloned()
}

/// The tower service over a pool: each call to the next replica.
#[derive(Clone)]
struct Balanced(Arc<Pool>);

impl Service<http::Request<Body>> for Balanced {
    type Response = http::Response<Body>;
    type Error = TransportError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Readiness is the chosen replica's, awaited in `call`.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let pool = self.0.clone();
        Box::pin(async move {
            let affinity = request.extensions_mut().remove::<Affinity>();
            let member = pool.pick_for(affinity.as_ref().map(|key| &key.0[..])).await?;
            let listed = pool.members.borrow().len();
            // The body in one piece (see `read_message`), kept, with several replicas, so that
            // a call the chosen replica never processed can go to another one.
            let (parts, message) = crate::transport::read_message(request).await?;
            if listed < 2 {
                return send(&member, parts, message).await;
            }
            let mut member = member;
            let mut tried = vec![member.key.clone()];
            loop {
                let outcome = send(&member, parts.clone(), message.clone()).await;
                let Err(error) = &outcome else { return outcome };
                if tried.len() >= listed.min(3) || !error.never_processed() {
                    return outcome;
                }
                let Some(other) = pool.pick_untried(&tried) else { return outcome };
                tracing::debug!(component = pool.component, from = %member.key, to = %other.key, "retrying a call the replica never processed");
                tried.push(other.key.clone());
                member = other;
            }
        })
    }
}

/// One call on one replica; a failure sets the replica aside.
async fn send(
    member: &Arc<Member>,
    parts: http::request::Parts,
    message: bytes::Bytes,
) -> Result<http::Response<Body>, TransportError> {
    let call = (!LONG_LIVED.contains(&parts.uri.path())).then(|| InFlight::new(&member.in_flight));
    match member.link.send(parts, message).await {
        Ok(response) => Ok(match call {
            Some(call) => response.map(|body| Body::new(Counted { body, _call: call })),
            None => response,
        }),
        Err(e) => {
            member.failed();
            Err(e)
        }
    }
}

impl Pool {
    /// The replica to try after `tried` failed.
    fn pick_untried(&self, tried: &[String]) -> Option<Arc<Member>> {
        let listed = self.members.borrow();
        self.choose(&listed, tried)
    }
}

/// Counts a call in flight on a replica until dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        InFlight(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that keeps its call counted until it ends.
struct Counted {
    body: Body,
    _call: InFlight,
}

impl http_body::Body for Counted {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_parse() {
        assert_eq!(
            Target::parse("http://127.0.0.1:50051").expect("test setup"),
            Target::Single("http://127.0.0.1:50051".into())
        );
        assert_eq!(
            Target::parse("http://a:1, http://b:2").expect("test setup"),
            Target::List(vec!["http://a:1".into(), "http://b:2".into()])
        );
        assert_eq!(
            Target::parse("dns:///mcp-service-pods:50051").expect("test setup"),
            Target::Dns { host: "mcp-service-pods".into(), port: 50051 }
        );
        assert_eq!(
            Target::parse("dns:localhost:7").expect("test setup"),
            Target::Dns { host: "localhost".into(), port: 7 }
        );
        assert_eq!(Target::parse("dns:///[::1]:7").expect("test setup"), Target::Dns { host: "::1".into(), port: 7 });
    }

    #[test]
    fn long_lived_calls_are_named_as_generated() {
        use crate::mcp::mcp_service_server::SERVICE_NAME as MCP;
        use crate::registry::registry_server::SERVICE_NAME as REGISTRY;
        let expected = [format!("/{MCP}/WatchCatalog"), format!("/{MCP}/Listen"), format!("/{REGISTRY}/Watch")];
        assert_eq!(LONG_LIVED.map(str::to_owned), expected);
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("dns:///name", "port is missing"),
            ("dns:///name:http", "not a port number"),
            ("dns:///:80", "host name"),
            ("dns://8.8.8.8/name:80", "DNS server"),
            ("ftp://a:1", "scheme"),
            ("http://a:1,", "not a URL"),
            ("http://a:1,http://a:1", "listed twice"),
            ("http://a:1/path", "only scheme"),
            ("nonsense", "not a URL"),
        ] {
            let error = Target::parse(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }

    /// A gRPC-speaking stand-in is not needed to see the turn and the setting aside: a plain
    /// TCP listener accepts connections (the probe), a closed port refuses them.
    #[tokio::test]
    async fn replicas_that_refuse_are_set_aside_and_taken_back() {
        let open = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("test setup");
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("test setup");
        let closed_addr = closed.local_addr().expect("test setup");
        drop(closed);
        let target = Target::List(vec![
            format!("http://{}", open.local_addr().expect("test setup")),
            format!("http://{closed_addr}"),
        ]);
        let Target::List(urls) = &target else { unreachable!() };
        let members = members_of(urls);
        for m in &members {
            m.start_probe(Duration::ZERO);
        }
        let (_tx, rx) = watch::channel(members.clone());
        let pool = Pool::new("test", rx);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(members[0].is_up());
        assert!(!members[1].is_up());
        for _ in 0..4 {
            assert_eq!(pool.pick().await.expect("test setup").key, members[0].key);
        }
        // The closed port opens: the probe takes it back and the turn includes it again.
        let reopened = tokio::net::TcpListener::bind(closed_addr).await.expect("test setup");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(members[1].is_up());
        let picked: BTreeSet<String> =
            [pool.pick().await.expect("test setup").key.clone(), pool.pick().await.expect("test setup").key.clone()]
                .into();
        assert_eq!(picked.len(), 2);
        // The one with fewer calls in flight is preferred, whatever the turn.
        let busy = InFlight::new(&members[0].in_flight);
        for _ in 0..4 {
            assert_eq!(pool.pick().await.expect("test setup").key, members[1].key);
        }
        drop(busy);
        // Affinity: one key, one replica, however busy; different keys spread.
        let busy = InFlight::new(&members[0].in_flight);
        let mut chosen = BTreeSet::new();
        for key in 0..16 {
            let key = format!("session-{key}");
            let first = pool.pick_for(Some(key.as_bytes())).await.expect("a replica").key.clone();
            for _ in 0..3 {
                assert_eq!(pool.pick_for(Some(key.as_bytes())).await.expect("a replica").key, first);
            }
            chosen.insert(first);
        }
        assert_eq!(chosen.len(), 2, "16 keys over two replicas");
        drop(busy);
        drop(reopened);
    }

    /// A replica for each URL, probed by its host and port. Keys of their own, not the URLs'
    /// random ports: the same choice of replica for a key on every run.
    fn members_of(urls: &[String]) -> Vec<Arc<Member>> {
        urls.iter()
            .enumerate()
            .map(|(i, url)| {
                let p = url::Url::parse(url).expect("test setup");
                let probe = Probe::Name(p.host_str().expect("test setup").into(), p.port().expect("test setup"));
                let link = Link::new(url, Settings::default()).expect("test setup");
                Member::new("test", format!("replica-{i}"), probe, link)
            })
            .collect()
    }

    /// A stand-in replica on a port of its own: each call's headers are sent to `seen` with
    /// `name`, and answered with an empty gRPC success (`Pipe` with `UNIMPLEMENTED`, as a
    /// service that does not know it: `Handle` calls then take a stream each, and are seen).
    async fn stand_in(name: usize, seen: tokio::sync::mpsc::UnboundedSender<(usize, http::HeaderMap)>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("test setup");
        let addr = listener.local_addr().expect("test setup");
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Ok(mut conn) = h2::server::handshake(socket).await else { return };
                    while let Some(Ok((request, mut respond))) = conn.accept().await {
                        if request.uri().path() == crate::pipe::PIPE_PATH {
                            let refused = http::Response::builder().header("grpc-status", "12").body(());
                            let _ = respond.send_response(refused.expect("test setup"), true);
                            continue;
                        }
                        let _ = seen.send((name, request.headers().clone()));
                        let head = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(())
                            .expect("test setup");
                        let Ok(mut stream) = respond.send_response(head, false) else { return };
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        let _ = stream.send_trailers(trailers);
                    }
                });
            }
        });
        format!("http://{addr}")
    }

    /// Calls made as the gateway makes them (`call::handle`, and tonic's generated client): the
    /// affinity key chooses the replica, through a pool, and is sent to none, through a pool or
    /// to a single URL; the call's metadata goes.
    #[tokio::test]
    async fn the_affinity_key_chooses_but_does_not_travel() {
        let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let urls = [stand_in(0, seen_tx.clone()).await, stand_in(1, seen_tx).await];
        let members = members_of(&urls);
        for member in &members {
            member.start_probe(Duration::ZERO);
        }
        for _ in 0..100 {
            if members.iter().all(|m| m.is_up()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(members.iter().all(|m| m.is_up()), "both stand-ins answer the probe");
        let (_tx, rx) = watch::channel(members);
        let balanced = GrpcChannel::new(Balanced(Pool::new("test", rx)));
        let single = connect("test", &Target::Single(urls[0].clone()), Settings::default()).expect("test setup");
        // A `Handle` call as the gateway makes it (`call::handle`), and a stream through
        // tonic's generated client (as `Listen` and `EndSession` are called).
        fn kept<T>(message: T, key: &str) -> tonic::Request<T> {
            let mut request = tonic::Request::new(message);
            request.metadata_mut().insert("x-kept", tonic::metadata::MetadataValue::from_static("yes"));
            set_affinity(&mut request, key.to_owned());
            request
        }
        let call = async |channel: GrpcChannel, key: &str, generated: bool| {
            if generated {
                let mut client = crate::mcp::mcp_service_client::McpServiceClient::new(channel);
                let listen = kept(crate::mcp::ListenRequest::default(), key);
                let mut stream = client.listen(listen).await.expect("an answer").into_inner();
                while let Ok(Some(_)) = stream.message().await {}
            } else {
                let handle = kept(crate::mcp::McpRequest::default(), key);
                crate::call::handle(channel, handle).await.expect("an answer").finish().await;
            }
        };
        let mut chosen = BTreeSet::new();
        for key in (0..16).map(|k| format!("session-{k}.seal")) {
            let mut replicas = BTreeSet::new();
            for (how, channel, generated) in [
                ("pool", &balanced, false),
                ("pool", &balanced, true),
                ("pool", &balanced, false),
                ("pool", &balanced, true),
                ("single", &single, false),
                ("single", &single, true),
            ] {
                call(channel.clone(), &key, generated).await;
                let (replica, headers) = seen.recv().await.expect("the call reached a replica");
                assert!(
                    headers.values().all(|v| !v.as_bytes().windows(key.len()).any(|w| w == key.as_bytes())),
                    "{how}: the key travelled: {headers:?}"
                );
                assert_eq!(headers.get("x-kept").map(http::HeaderValue::as_bytes), Some(&b"yes"[..]), "{how}");
                if how == "pool" {
                    replicas.insert(replica);
                }
            }
            assert_eq!(replicas.len(), 1, "{key}: one replica for its calls");
            chosen.extend(replicas);
        }
        assert_eq!(chosen.len(), 2, "16 keys over two replicas");
    }

    #[tokio::test]
    async fn an_unresolvable_pool_fails_after_a_bounded_wait() {
        let (_tx, rx) = watch::channel(Vec::new());
        let pool = Arc::new(Pool {
            wait: Duration::from_millis(50),
            ..Arc::into_inner(Pool::new("test", rx)).expect("test setup")
        });
        let error = pool.pick().await.err().expect("no replica");
        assert!(error.to_string().contains("no replica of test"), "{error}");
    }
}
