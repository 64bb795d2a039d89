//! The caller's side of `mcp.v1.McpService/Handle`, the call behind every MCP message, without
//! tonic's generated client.
//!
//! Through the generated client, one call built its request in tonic's encoder (a body the
//! transport then read back into one piece), went through its request and response layers, and
//! decoded its frames through a streaming decoder with a buffer of its own, reading the call's
//! outcome from a copy of the trailers. Here the one message is encoded straight into the piece
//! the transport sends; each frame is decoded from the data as received (a frame found whole in
//! the piece that brought it is decoded from there; one that spans pieces is gathered, once, in
//! a buffer sized by its prefix); and the outcome is read from `grpc-status` in place.
//!
//! The caller sees what tonic's client showed it for every answer mcp-service gives: the frames
//! in order, then the end or the call's status, with tonic's codes for a frame above the limit
//! (`OUT_OF_RANGE`) and an answer that ends without a status (`UNKNOWN`). Two differences, for
//! answers no gRPC server gives: an HTTP status other than 200 without `grpc-status` ends the
//! call at once, coded as gRPC's HTTP/2 mapping says (tonic read the body first, for trailers
//! that might carry a status); and once a call has failed, each later [`Frames::message`] gives
//! its status again (tonic's gave the end).

use std::pin::Pin;

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use http_body::Body as _;
use prost::Message as _;
use tonic::{Code, Status};
use tower::ServiceExt as _;

use crate::mcp as pb;
use crate::transport::GrpcChannel;

/// The path of `mcp.v1.McpService/Handle`.
pub const HANDLE_PATH: &str = "/mcp.v1.McpService/Handle";

/// What gRPC itself sets, by names made once (a lookup by text parses the name first).
const RESERVED: [http::HeaderName; 3] =
    [GRPC_STATUS, http::HeaderName::from_static("grpc-message"), http::HeaderName::from_static("grpc-message-type")];

/// [`HANDLE_PATH`] as a URI, parsed once (a clone shares its bytes).
static HANDLE_URI: std::sync::LazyLock<http::Uri> = std::sync::LazyLock::new(|| http::Uri::from_static(HANDLE_PATH));

/// The length of gRPC's message prefix: a compression flag and a 32-bit big-endian length.
const PREFIX: usize = 5;

/// The header (or trailer) a gRPC call's outcome is in, by a name made once (a lookup by text
/// parses the name each time: about 300 instructions a call).
pub const GRPC_STATUS: http::HeaderName = http::HeaderName::from_static("grpc-status");

/// Call `Handle` with `request` (its metadata as the caller set it: the trace, the service
/// token; its extensions: a replica's affinity) on `channel`, and return the call's frames once
/// the answer's headers have come.
pub async fn handle(channel: GrpcChannel, request: tonic::Request<pb::McpRequest>) -> Result<Frames, Status> {
    // Its extensions go with it to the channel (a replica's affinity); they are not sent.
    let (metadata, extensions, message) = request.into_parts();
    // A message longer than gRPC's 32-bit length cannot be sent; the gateway's own limit keeps
    // bodies far below it.
    let len = message.encoded_len();
    let Ok(prefix_len) = u32::try_from(len) else {
        return Err(Status::resource_exhausted("the request is too large for one gRPC message"));
    };
    let mut encoded = BytesMut::with_capacity(PREFIX + len);
    encoded.put_u8(0);
    encoded.put_u32(prefix_len);
    message.encode(&mut encoded).map_err(|e| Status::internal(format!("encoding the request: {e}")))?;
    let mut headers = metadata.into_headers();
    // As tonic's client: what gRPC itself sets is not taken from the caller's metadata.
    for reserved in &RESERVED {
        headers.remove(reserved);
    }
    headers.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/grpc"));
    headers.insert(http::header::TE, http::HeaderValue::from_static("trailers"));
    // Made in place, not by `http::Request`'s builder: that parsed the path into a new
    // allocation for every call, and moved the request's parts through each of its steps.
    let mut request = http::Request::new(tonic::body::Body::new(http_body_util::Full::new(encoded.freeze())));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = HANDLE_URI.clone();
    *request.version_mut() = http::Version::HTTP_2;
    *request.headers_mut() = headers;
    *request.extensions_mut() = extensions;
    // The status a failed transport carries (its source), as tonic's client found it.
    let response = channel.oneshot(request).await.map_err(|e| Status::from_error(Box::new(e)))?;
    Frames::from_response(response, crate::MAX_MESSAGE_BYTES)
}

/// The frames of one `Handle` call, as they come.
pub struct Frames {
    body: tonic::body::Body,
    /// Received data not yet decoded, as it came (the frames found whole in it are decoded
    /// from where it is)...
    piece: Bytes,
    /// ...or gathered, when a frame spans pieces. One of the two is empty.
    buffered: BytesMut,
    /// The largest frame taken.
    limit: usize,
    /// How the call ended, once it has.
    end: Option<Result<(), Status>>,
}

impl Frames {
    /// The answer's headers checked: a status there ends the call, as with tonic's client; so
    /// does an HTTP status other than 200 (see the module's documentation).
    pub fn from_response(response: http::Response<tonic::body::Body>, limit: usize) -> Result<Frames, Status> {
        let (parts, body) = response.into_parts();
        let end = match status_in(&parts.headers) {
            Some(Ok(())) => Some(Ok(())),
            Some(Err(status)) => return Err(status),
            None if parts.status != http::StatusCode::OK => return Err(status_of_http(parts.status)),
            None => None,
        };
        Ok(Frames { body, piece: Bytes::new(), buffered: BytesMut::new(), limit, end })
    }

    /// The next frame; `Ok(None)` once the call ended well, its status when it did not (and
    /// again on every later call). Cancel-safe: what a dropped call had received stays.
    pub async fn message(&mut self) -> Result<Option<pb::McpFrame>, Status> {
        loop {
            match self.decode() {
                Ok(Some(frame)) => return Ok(Some(frame)),
                Ok(None) => {}
                Err(status) => {
                    // The call is over: what is left (a buffer sized for a large frame among
                    // it) goes now.
                    self.piece = Bytes::new();
                    self.buffered = BytesMut::new();
                    self.end = Some(Err(status.clone()));
                    return Err(status);
                }
            }
            if let Some(end) = &self.end {
                return match end {
                    Ok(()) if self.piece.is_empty() && self.buffered.is_empty() => Ok(None),
                    Ok(()) => Err(Status::internal("the call ended inside a message")),
                    Err(status) => Err(status.clone()),
                };
            }
            let next = std::future::poll_fn(|cx| Pin::new(&mut self.body).poll_frame(cx)).await;
            self.take(next);
        }
    }

    /// Read the call to its end (the trailers mostly came with the final frame). Dropping it
    /// unread would reset its HTTP/2 stream, and a connection that sees too many resets is
    /// closed by the HTTP/2 layer with every call on it.
    pub async fn finish(mut self) {
        use futures_util::FutureExt as _;
        loop {
            match self.message().now_or_never() {
                Some(Ok(Some(_))) => {}
                Some(_) => return,
                None => break,
            }
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
            while let Ok(Some(_)) = self.message().await {}
        })
        .await;
    }

    /// One piece of the answer's body taken in.
    fn take(&mut self, next: Option<Result<http_body::Frame<Bytes>, Status>>) {
        match next {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) if self.piece.is_empty() && self.buffered.is_empty() => self.piece = data,
                Ok(data) => {
                    self.gather();
                    self.buffered.extend_from_slice(&data);
                }
                Err(frame) => {
                    if let Ok(trailers) = frame.into_trailers() {
                        self.end = Some(status_in(&trailers).unwrap_or_else(missing_status));
                    }
                }
            },
            Some(Err(status)) => self.end = Some(Err(status)),
            None => self.end = Some(missing_status()),
        }
    }

    /// Move the piece taken last into the buffer, where the rest of its frame will join it.
    fn gather(&mut self) {
        if !self.piece.is_empty() {
            self.buffered.extend_from_slice(&self.piece);
            self.piece = Bytes::new();
        }
    }

    /// The first frame received, when it has come whole.
    fn decode(&mut self) -> Result<Option<pb::McpFrame>, Status> {
        let received: &[u8] = if self.piece.is_empty() { &self.buffered } else { &self.piece };
        if received.len() < PREFIX {
            self.gather();
            return Ok(None);
        }
        if received[0] != 0 {
            return Err(Status::internal(format!(
                "a frame marked compressed (flag {}), which this call did not ask for",
                received[0]
            )));
        }
        let len = u32::from_be_bytes([received[1], received[2], received[3], received[4]]) as usize;
        if len > self.limit {
            // tonic's code for a message above its decoding limit.
            return Err(Status::out_of_range(format!(
                "a frame of {len} bytes, above the limit of {} bytes",
                self.limit
            )));
        }
        if received.len() < PREFIX + len {
            // Room for the whole frame at once, as its prefix announced it (within the limit).
            self.buffered.reserve(PREFIX + len - self.buffered.len());
            self.gather();
            return Ok(None);
        }
        let message = if self.piece.is_empty() {
            self.buffered.advance(PREFIX);
            self.buffered.split_to(len).freeze()
        } else {
            self.piece.advance(PREFIX);
            self.piece.split_to(len)
        };
        pb::McpFrame::decode(message)
            .map(Some)
            .map_err(|e| Status::internal(format!("a frame that does not decode: {e}")))
    }
}

/// The outcome `headers` carry, if any: `grpc-status: 0` read in place, any other through tonic.
fn status_in(headers: &http::HeaderMap) -> Option<Result<(), Status>> {
    let code = headers.get(&GRPC_STATUS)?;
    if code.as_bytes() == b"0" {
        return Some(Ok(()));
    }
    Some(Err(Status::from_header_map(headers).unwrap_or_else(|| Status::unknown("an unreadable grpc-status"))))
}

/// A call that ended without a status: gRPC requires one in the trailers (`UNKNOWN`, as tonic
/// and grpc-go code it).
fn missing_status() -> Result<(), Status> {
    Err(Status::unknown("the call ended without a grpc-status"))
}

/// The status of an answer that is not gRPC's, as gRPC's HTTP/2 mapping codes it.
fn status_of_http(status: http::StatusCode) -> Status {
    let code = match status {
        http::StatusCode::BAD_REQUEST => Code::Internal,
        http::StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        http::StatusCode::FORBIDDEN => Code::PermissionDenied,
        http::StatusCode::NOT_FOUND => Code::Unimplemented,
        http::StatusCode::TOO_MANY_REQUESTS
        | http::StatusCode::BAD_GATEWAY
        | http::StatusCode::SERVICE_UNAVAILABLE
        | http::StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("the answer was HTTP {status}, not gRPC"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(json: &str, disposition: pb::Disposition) -> Bytes {
        let message = pb::McpFrame {
            json: Bytes::copy_from_slice(json.as_bytes()),
            disposition: disposition as i32,
            ..Default::default()
        };
        let mut out = BytesMut::new();
        out.put_u8(0);
        out.put_u32(message.encoded_len() as u32);
        message.encode(&mut out).expect("encode");
        out.freeze()
    }

    fn trailers(pairs: &[(&'static str, &'static str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, http::HeaderValue::from_static(v));
        }
        map
    }

    /// An answer whose body yields `pieces`, then `end` (trailers, an error, or nothing).
    fn answer(
        headers: &[(&'static str, &'static str)],
        pieces: Vec<Bytes>,
        end: Option<Result<http::HeaderMap, Status>>,
    ) -> http::Response<tonic::body::Body> {
        let mut frames: Vec<Result<http_body::Frame<Bytes>, Status>> =
            pieces.into_iter().map(|p| Ok(http_body::Frame::data(p))).collect();
        match end {
            Some(Ok(map)) => frames.push(Ok(http_body::Frame::trailers(map))),
            Some(Err(status)) => frames.push(Err(status)),
            None => {}
        }
        let body = http_body_util::StreamBody::new(tokio_stream::iter(frames));
        let mut response = http::Response::new(tonic::body::Body::new(body));
        *response.headers_mut() = trailers(headers);
        response
    }

    async fn all(mut frames: Frames) -> (Vec<String>, Result<(), Status>) {
        let mut got = Vec::new();
        loop {
            match frames.message().await {
                Ok(Some(f)) => got.push(String::from_utf8(f.json.to_vec()).expect("utf-8")),
                Ok(None) => return (got, Ok(())),
                Err(status) => return (got, Err(status)),
            }
        }
    }

    const OK: &[(&str, &str)] = &[("grpc-status", "0")];

    #[tokio::test]
    async fn frames_come_whole_however_the_body_is_cut() {
        let one = frame(r#"{"progress":1}"#, pb::Disposition::Interim);
        let two = frame(&format!(r#"{{"result":"{}"}}"#, "x".repeat(70_000)), pb::Disposition::Reply);
        let whole: Vec<u8> = [one.as_ref(), two.as_ref()].concat();
        for cut in [1, 2, 5, 6, 7, 1000, 16_384] {
            let pieces: Vec<Bytes> = whole.chunks(cut).map(Bytes::copy_from_slice).collect();
            let frames = Frames::from_response(answer(&[], pieces, Some(Ok(trailers(OK)))), 1 << 20).expect("frames");
            let (got, end) = all(frames).await;
            assert_eq!(got.len(), 2, "cut {cut}");
            assert_eq!(got[0], r#"{"progress":1}"#);
            assert_eq!(got[1].len(), 70_013, "cut {cut}");
            assert!(end.is_ok(), "cut {cut}: {end:?}");
        }
    }

    #[tokio::test]
    async fn a_frame_that_came_whole_is_not_copied() {
        let piece = frame(r#"{"result":{}}"#, pb::Disposition::Reply);
        let range = piece.as_ptr_range();
        let mut frames =
            Frames::from_response(answer(&[], vec![piece.clone()], Some(Ok(trailers(OK)))), 1 << 20).expect("frames");
        let got = frames.message().await.expect("frame").expect("one");
        assert!(range.contains(&got.json.as_ptr()), "the JSON is a slice of the piece received");
        assert_eq!(got.disposition(), pb::Disposition::Reply);
        assert!(frames.message().await.expect("end").is_none());
    }

    #[tokio::test]
    async fn several_frames_in_one_piece_come_one_by_one() {
        let pieces = vec![
            [
                frame("1", pb::Disposition::Interim),
                frame("2", pb::Disposition::Interim),
                frame("3", pb::Disposition::Reply),
            ]
            .concat()
            .into(),
        ];
        let frames = Frames::from_response(answer(&[], pieces, Some(Ok(trailers(OK)))), 1 << 20).expect("frames");
        let (got, end) = all(frames).await;
        assert_eq!(got, ["1", "2", "3"]);
        assert!(end.is_ok());
    }

    #[tokio::test]
    async fn the_trailers_status_ends_the_call_after_its_frames() {
        let pieces = vec![frame("1", pb::Disposition::Interim)];
        let end = trailers(&[("grpc-status", "14"), ("grpc-message", "going%20away")]);
        let (got, end) = all(Frames::from_response(answer(&[], pieces, Some(Ok(end))), 1 << 20).expect("frames")).await;
        assert_eq!(got, ["1"]);
        let status = end.expect_err("a status");
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), "going away");
    }

    #[tokio::test]
    async fn a_status_in_the_headers_ends_the_call_at_once() {
        let refused = answer(&[("grpc-status", "16"), ("grpc-message", "no")], vec![], None);
        let status = Frames::from_response(refused, 1 << 20).err().expect("refused");
        assert_eq!(status.code(), Code::Unauthenticated);
        let empty = Frames::from_response(answer(OK, vec![], None), 1 << 20).expect("an answer without frames");
        let (got, end) = all(empty).await;
        assert!(got.is_empty() && end.is_ok());
    }

    #[tokio::test]
    async fn an_answer_that_is_not_grpc_is_coded_by_its_http_status() {
        for (http, code) in [
            (http::StatusCode::NOT_FOUND, Code::Unimplemented),
            (http::StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable),
            (http::StatusCode::BAD_REQUEST, Code::Internal),
            (http::StatusCode::IM_A_TEAPOT, Code::Unknown),
        ] {
            let mut response = answer(&[], vec![], None);
            *response.status_mut() = http;
            let status = Frames::from_response(response, 1 << 20).err().expect("refused");
            assert_eq!(status.code(), code, "{http}");
        }
    }

    #[tokio::test]
    async fn broken_answers_are_errors_not_ends() {
        // No trailers: gRPC requires a status.
        let (got, end) =
            all(Frames::from_response(answer(&[], vec![frame("1", pb::Disposition::Reply)], None), 1 << 20)
                .expect("frames"))
            .await;
        assert_eq!(got, ["1"]);
        assert_eq!(end.expect_err("no status").code(), Code::Unknown);
        // The end inside a frame.
        let cut = frame("12345", pb::Disposition::Reply).slice(..8);
        let (got, end) =
            all(Frames::from_response(answer(&[], vec![cut], Some(Ok(trailers(OK)))), 1 << 20).expect("frames")).await;
        assert!(got.is_empty());
        assert_eq!(end.expect_err("cut").code(), Code::Internal);
        // A frame above the limit, refused from its prefix.
        let big = frame(&"x".repeat(2000), pb::Disposition::Reply).slice(..5);
        let (_, end) = all(Frames::from_response(answer(&[], vec![big], None), 1000).expect("frames")).await;
        assert_eq!(end.expect_err("too large").code(), Code::OutOfRange);
        // A compressed frame.
        let mut compressed = BytesMut::from(&frame("1", pb::Disposition::Reply)[..]);
        compressed[0] = 1;
        let (_, end) =
            all(Frames::from_response(answer(&[], vec![compressed.freeze()], Some(Ok(trailers(OK)))), 1 << 20)
                .expect("frames"))
            .await;
        assert_eq!(end.expect_err("compressed").code(), Code::Internal);
        // Bytes that are not a frame.
        let garbage = Bytes::from_static(b"\0\0\0\0\x03\xff\xff\xff");
        let (_, end) =
            all(Frames::from_response(answer(&[], vec![garbage], Some(Ok(trailers(OK)))), 1 << 20).expect("frames"))
                .await;
        assert_eq!(end.expect_err("not protobuf").code(), Code::Internal);
        // The stream failed (a reset): its status.
        let (got, end) = all(Frames::from_response(
            answer(&[], vec![frame("1", pb::Disposition::Interim)], Some(Err(Status::cancelled("reset")))),
            1 << 20,
        )
        .expect("frames"))
        .await;
        assert_eq!(got, ["1"]);
        assert_eq!(end.expect_err("reset").code(), Code::Cancelled);
    }
    #[tokio::test]
    async fn every_cut_of_small_frames_decodes_and_whole_frames_are_not_copied() {
        let frames = [
            frame("a", pb::Disposition::Interim),
            frame("bb", pb::Disposition::Interim),
            frame("ccc", pb::Disposition::Reply),
        ];
        let whole: Vec<u8> = frames.concat();
        for i in 0..=whole.len() {
            for j in i..=whole.len() {
                // Three pieces (some empty), cut at every pair of places.
                let pieces = vec![
                    Bytes::copy_from_slice(&whole[..i]),
                    Bytes::copy_from_slice(&whole[i..j]),
                    Bytes::copy_from_slice(&whole[j..]),
                ];
                let (got, end) =
                    all(Frames::from_response(answer(&[], pieces, Some(Ok(trailers(OK)))), 1 << 20).expect("frames"))
                        .await;
                assert_eq!(got, ["a", "bb", "ccc"], "cut at {i} and {j}");
                assert!(end.is_ok(), "cut at {i} and {j}");
            }
        }
        // The rest of one frame and two whole ones in one piece, then a whole one alone: that
        // one is decoded from its own piece.
        let last = frame("dddd", pb::Disposition::Reply);
        let range = last.as_ptr_range();
        let pieces = vec![Bytes::copy_from_slice(&whole[..3]), Bytes::copy_from_slice(&whole[3..]), last];
        let mut got = Frames::from_response(answer(&[], pieces, Some(Ok(trailers(OK)))), 1 << 20).expect("frames");
        for _ in 0..3 {
            got.message().await.expect("frame").expect("one");
        }
        let alone = got.message().await.expect("frame").expect("the last");
        assert!(range.contains(&alone.json.as_ptr()), "decoded from its own piece");
    }

    #[tokio::test]
    async fn a_frame_at_the_limit_is_taken_and_none_above_it_is_reserved_for() {
        let at = frame(&"x".repeat(100), pb::Disposition::Reply);
        let limit = at.len() - PREFIX;
        let (got, end) =
            all(Frames::from_response(answer(&[], vec![at.clone()], Some(Ok(trailers(OK)))), limit).expect("frames"))
                .await;
        assert_eq!(got.len(), 1);
        assert!(end.is_ok());
        let mut over = Frames::from_response(answer(&[], vec![at.slice(..6)], None), limit - 1).expect("frames");
        assert_eq!(over.message().await.expect_err("over").code(), Code::OutOfRange);
        assert_eq!(over.buffered.capacity(), 0, "nothing reserved, nothing kept");
        // The call stays failed.
        assert_eq!(over.message().await.expect_err("again").code(), Code::OutOfRange);
    }

    #[tokio::test]
    async fn a_message_dropped_while_waiting_loses_nothing() {
        use futures_util::FutureExt as _;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, Status>>(4);
        let body = http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        let response = http::Response::new(tonic::body::Body::new(body));
        let mut frames = Frames::from_response(response, 1 << 20).expect("frames");
        let whole = frame(r#"{"result":{}}"#, pb::Disposition::Reply);
        assert!(frames.message().now_or_never().is_none(), "nothing yet");
        tx.send(Ok(http_body::Frame::data(whole.slice(..7)))).await.expect("send");
        assert!(frames.message().now_or_never().is_none(), "half a frame");
        tx.send(Ok(http_body::Frame::data(whole.slice(7..)))).await.expect("send");
        tx.send(Ok(http_body::Frame::trailers(trailers(OK)))).await.expect("send");
        let got = frames.message().await.expect("frame").expect("one");
        assert_eq!(&got.json[..], br#"{"result":{}}"#);
        assert!(frames.message().await.expect("end").is_none());
    }

    #[tokio::test]
    async fn the_request_goes_as_tonic_s_client_sent_it() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<http::Request<tonic::body::Body>>();
        let channel: GrpcChannel = tower::util::BoxCloneSyncService::new(tower::service_fn(
            move |request: http::Request<tonic::body::Body>| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(request);
                    let mut answer = http::Response::new(tonic::body::Body::empty());
                    *answer.headers_mut() = trailers(OK);
                    Ok::<_, crate::transport::TransportError>(answer)
                }
            },
        ));
        let message = pb::McpRequest {
            body: Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            request_id: "r-1".into(),
            ..Default::default()
        };
        let mut request = tonic::Request::new(message.clone());
        request.metadata_mut().insert("authorization", "Bearer t".parse().expect("value"));
        request.metadata_mut().insert("grpc-status", "13".parse().expect("value"));
        let mut frames = handle(channel, request).await.expect("called");
        assert!(frames.message().await.expect("end").is_none(), "a status of 0 in the headers: no frames");
        let sent = rx.recv().await.expect("sent");
        assert_eq!(sent.method(), http::Method::POST);
        assert_eq!(sent.uri().path(), HANDLE_PATH);
        assert_eq!(sent.version(), http::Version::HTTP_2);
        assert_eq!(sent.headers()["content-type"], "application/grpc");
        assert_eq!(sent.headers()["te"], "trailers");
        assert_eq!(sent.headers()["authorization"], "Bearer t");
        assert!(sent.headers().get("grpc-status").is_none(), "gRPC's own headers are not the caller's to set");
        let body = http_body_util::BodyExt::collect(sent.into_body()).await.expect("body").to_bytes();
        assert_eq!(body[0], 0, "not compressed");
        assert_eq!(u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize, body.len() - PREFIX);
        assert_eq!(pb::McpRequest::decode(body.slice(PREFIX..)).expect("decodes"), message);
    }
}
