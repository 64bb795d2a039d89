//! The `mcp.v1.McpService` gRPC service: one JSON-RPC body in, a stream of frames out; plus
//! the legacy session's standalone stream and its end.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt as _};
use mcp_proto::mcp::{self as pb, mcp_service_server::McpService};
use mcp_proto::request_log::{Field, RequestLog};
use mcp_proto::vocab::Era;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::context::{Context, Frame};
use crate::dispatch::Engine;

/// The generated service's implementation of the methods other than `Handle`, which
/// [`crate::grpc_server`] answers before the generated service is reached, over the network
/// (the work polled inside the answer) and in process (`InProcess`: the work on a task of its
/// own); both start its work with [`start`].
pub struct McpGrpc {
    engine: Arc<Engine>,
}

impl McpGrpc {
    pub fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }
}

type FrameStream = Pin<Box<dyn Stream<Item = Result<pb::McpFrame, Status>> + Send + 'static>>;

fn frames(rx: mpsc::Receiver<Frame>) -> FrameStream {
    Box::pin(ReceiverStream::new(rx).map(|f| Ok(message(f))))
}

/// A request's work, in its request log (and span), and the frames it sends: the channel ends
/// when the work does (the work holds its only sender).
pub(crate) fn start(
    engine: Arc<Engine>,
    metadata: &tonic::metadata::MetadataMap,
    req: pb::McpRequest,
) -> (std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>, mpsc::Receiver<Frame>) {
    // The span (only when traces are exported) is made with the fields known now.
    let request_id = (!req.request_id.is_empty()).then_some(req.request_id.as_str());
    let span = if mcp_proto::telemetry::traces_on() {
        tracing::info_span!(
            "mcp.handle",
            otel.name = "mcp-service handle",
            request_id = request_id,
            trace_id = tracing::field::Empty,
            mcp.method = tracing::field::Empty,
            mcp.era = tracing::field::Empty,
            mcp.tool = tracing::field::Empty,
            outcome = tracing::field::Empty,
            error.code = tracing::field::Empty,
        )
    } else {
        tracing::Span::none()
    };
    let trace_id = mcp_proto::telemetry::extract_grpc(&span, metadata);
    let mut log = RequestLog::new("mcp.handle", span);
    log.set("otel.name", "mcp-service handle".into());
    if let Some(id) = request_id {
        log.set("request_id", id.to_owned().into());
    }
    log.record([("trace_id", trace_id.map(Field::from))]);
    let era = req.era();
    let transport = req.transport();
    // The request is taken apart, not copied.
    let pb::McpRequest {
        body,
        header_version,
        principal,
        session_id,
        accepts_stream,
        param_headers,
        if_tag,
        outline,
        ..
    } = req;
    let ctx = Context {
        era: match era {
            pb::Era::Legacy => Some(Era::Legacy),
            pb::Era::Modern => Some(Era::Modern),
            pb::Era::Unspecified => None,
        },
        header_version: (!header_version.is_empty()).then_some(header_version),
        transport,
        principal,
        session: None,
        session_token: (!session_id.is_empty()).then_some(session_id),
        accepts_stream,
        param_headers,
        if_tag: (!if_tag.is_empty()).then_some(if_tag),
    };
    let (tx, rx) = mpsc::channel(16);
    // The engine's work (several kilobytes of state: its nested calls) is made in a box of its
    // own, inside the small future the request log wraps: that one is moved four times on its
    // way into the returned box (into the span's and the log's wrappers, out of them, into the
    // box), and each move copied all of the work's state when the work was inside it.
    let work = async move { Box::pin(engine.handle(&body, outline.as_ref(), &ctx, &tx)).await };
    (Box::pin(log.scope(work)), rx)
}

/// A frame as the `McpFrame` message it travels in.
pub(crate) fn message(f: Frame) -> pb::McpFrame {
    pb::McpFrame {
        json: f.json.into(),
        disposition: f.disposition as i32,
        session_id: f.session_id.unwrap_or_default(),
        cache: f.cache,
    }
}

#[tonic::async_trait]
impl McpService for McpGrpc {
    type HandleStream = FrameStream;

    async fn handle(&self, _: Request<pb::McpRequest>) -> Result<Response<Self::HandleStream>, Status> {
        // Never reached: the servers answer `Handle` before the generated service.
        Err(Status::unimplemented("Handle is answered by mcp-service's own server"))
    }

    type PipeStream = Pin<Box<dyn Stream<Item = Result<pb::PipeFrame, Status>> + Send + 'static>>;

    async fn pipe(&self, _: Request<tonic::Streaming<pb::PipeCall>>) -> Result<Response<Self::PipeStream>, Status> {
        // Never reached over the network (mcp-service's own server answers `Pipe`); in process
        // (standalone) nothing calls it: the link that makes pipes is the network's.
        Err(Status::unimplemented("Pipe is answered by mcp-service's own server"))
    }

    type ListenStream = FrameStream;

    async fn listen(&self, request: Request<pb::ListenRequest>) -> Result<Response<Self::ListenStream>, Status> {
        let req = request.into_inner();
        let session = self.engine.sessions.resolve(&req.session_id).map_err(|e| Status::not_found(e.to_string()))?;
        let (tx, rx) = mpsc::channel(16);
        if !session.open_stream(tx) {
            return Err(Status::not_found(crate::session::SessionError::Ended.to_string()));
        }
        Ok(Response::new(frames(rx)))
    }

    type WatchCatalogStream = Pin<Box<dyn Stream<Item = Result<pb::CatalogFingerprint, Status>> + Send + 'static>>;

    async fn watch_catalog(
        &self,
        _request: Request<pb::WatchCatalogRequest>,
    ) -> Result<Response<Self::WatchCatalogStream>, Status> {
        let fingerprint = |c: &Option<Arc<crate::catalog::CatalogView>>| pb::CatalogFingerprint {
            fingerprint: c.as_ref().map_or(0, |c| c.fingerprint),
        };
        let rx = self.engine.catalog.watch();
        let first = fingerprint(&rx.borrow());
        // Each change once (equal consecutive fingerprints collapse), until the caller leaves.
        let changes = tokio_stream::wrappers::WatchStream::from_changes(rx).map(move |c| fingerprint(&c));
        let stream = futures_util::stream::once(async move { first })
            .chain(changes)
            .scan(None, |last, f| {
                let repeat = *last == Some(f.fingerprint);
                *last = Some(f.fingerprint);
                std::future::ready(Some((!repeat).then_some(f)))
            })
            .filter_map(|f| std::future::ready(f.map(Ok)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn end_session(
        &self,
        request: Request<pb::EndSessionRequest>,
    ) -> Result<Response<pb::EndSessionResponse>, Status> {
        let token = request.into_inner().session_id;
        let ended = self.engine.sessions.end(&token);
        if ended && let Some(seal) = mcp_proto::vocab::session_seal(&token) {
            // Answered once no gateway may still answer the session's lists by itself.
            self.engine.followers.ended(seal).await;
        }
        Ok(Response::new(pb::EndSessionResponse { ended }))
    }

    type FollowSessionsStream = Pin<Box<dyn Stream<Item = Result<pb::SessionNews, Status>> + Send + 'static>>;

    async fn follow_sessions(
        &self,
        _request: Request<pb::FollowSessionsRequest>,
    ) -> Result<Response<Self::FollowSessionsStream>, Status> {
        let (id, news) = self.engine.followers.join();
        Ok(Response::new(Box::pin(Following { engine: self.engine.clone(), id, news: ReceiverStream::new(news) })))
    }

    async fn follower(
        &self,
        request: Request<pb::SessionFollowerMessage>,
    ) -> Result<Response<pb::SessionFollowerAnswer>, Status> {
        use pb::session_follower_message::Kind;
        let message = request.into_inner();
        let followers = &self.engine.followers;
        let following = match message.kind {
            Some(Kind::Ping(n)) => followers.ping(message.follower, n),
            Some(Kind::Applied(seq)) => followers.applied(message.follower, seq),
            None => return Err(Status::invalid_argument("a ping or the ends applied")),
        };
        Ok(Response::new(pb::SessionFollowerAnswer { following }))
    }
}

/// A follower's stream of session news; the follower leaves when it is dropped.
struct Following {
    engine: Arc<Engine>,
    id: u64,
    news: ReceiverStream<pb::SessionNews>,
}

impl Stream for Following {
    type Item = Result<pb::SessionNews, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        self.news.poll_next_unpin(cx).map(|n| n.map(Ok))
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        self.engine.followers.leave(self.id);
    }
}
