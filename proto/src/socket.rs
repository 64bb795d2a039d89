//! Sockets between the services, written so that h2 batches what is ready together.
//!
//! h2 (under tonic's server and under [`crate::link`]) copies a DATA frame into its write
//! buffer when the frame is small: at most 256 bytes when the socket takes vectored writes,
//! 1 KiB when it does not. A larger frame waits in a slot of its own, and h2 writes out (and
//! flushes) everything before it takes the next frame. Most messages between the services are
//! above 256 bytes (a call's JSON body and caller, a tool's answer), so over a plain TCP socket
//! every call or answer cost a write of its own even when many were ready together.
//! [`Unvectored`] hides the socket's vectored writes: messages up to 1 KiB are copied, and the
//! frames ready together leave in one write. (Collecting every write until the flush does not
//! do it alone: h2 flushes the socket itself before it takes the next frame after a large one.)

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::{Stream, StreamExt as _};

/// The most a socket holds back: h2's write buffer.
const HOLD: usize = 16 * 1024;

/// A socket written without vectored writes (see the module documentation). A frame above
/// 1 KiB reaches it in two writes (the buffer, which ends with the frame's head, then the rest
/// of the frame): what is written is held back, up to [`HOLD`], and leaves with the next
/// write in one vectored system call, or at the flush that h2 makes after each such frame
/// and at the end of each turn.
pub struct Unvectored<T = TcpStream> {
    io: T,
    held: Vec<u8>,
}

impl<T> Unvectored<T> {
    pub fn new(io: T) -> Self {
        Unvectored { io, held: Vec::new() }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Unvectored<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> Unvectored<T> {
    /// Write out what is held.
    fn poll_release(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

/// `poll_write_vectored` and `is_write_vectored` are left to their defaults (one slice at a
/// time; not vectored).
impl<T: AsyncWrite + Unpin> AsyncWrite for Unvectored<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        loop {
            if this.held.len() + buf.len() <= HOLD {
                this.held.extend_from_slice(buf);
                return Poll::Ready(Ok(buf.len()));
            }
            if this.held.is_empty() {
                return Pin::new(&mut this.io).poll_write(cx, buf);
            }
            let both = [std::io::IoSlice::new(&this.held), std::io::IoSlice::new(buf)];
            let n = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, &both))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            let held = this.held.len();
            if n > held {
                this.held.clear();
                return Poll::Ready(Ok(n - held));
            }
            this.held.drain(..n);
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_release(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_release(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Unvectored {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// `listener` for `axum::serve`, each connection it accepts with `TCP_NODELAY`. Without it an
/// answer written in more than one piece (a large body, or head and body apart) holds its last
/// segment back until the client acknowledges the one before (Nagle), and a client that
/// acknowledges late (delayed ACK, up to 40 ms on Linux) stalls it. Measured on one connection
/// reading a 1 MiB resource: 77–107 answers a second with a p99 of 45 ms without it, 1 270–1 840
/// with a p99 of about 1 ms with it.
pub fn no_delay(listener: TcpListener) -> axum::serve::TapIo<TcpListener, fn(&mut TcpStream)> {
    use axum::serve::ListenerExt as _;
    listener.tap_io(set_no_delay)
}

fn set_no_delay(tcp: &mut TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
    }
}

/// The connections `listener` accepts, with `TCP_NODELAY`, for a tonic server.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = std::io::Result<Unvectored>> {
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map(|accepted| accepted.map(Unvectored::new))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;

    use super::*;

    #[tokio::test]
    async fn an_axum_listener_accepts_with_no_delay() {
        use axum::serve::Listener as _;
        let plain = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = plain.local_addr().expect("address");
        let mut listener = no_delay(plain);
        let client = tokio::spawn(TcpStream::connect(addr));
        let (accepted, peer) = listener.accept().await;
        assert!(accepted.nodelay().expect("the option reads"), "TCP_NODELAY set on the accepted side");
        let client = client.await.expect("task").expect("connects");
        assert_eq!(peer, client.local_addr().expect("address"));
    }

    /// A TCP socket that counts the writes made to it.
    struct Counting(TcpStream, Arc<AtomicUsize>);

    impl AsyncRead for Counting {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.0).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counting {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut self.0).poll_write(cx, buf)
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
        }

        fn is_write_vectored(&self) -> bool {
            self.0.is_write_vectored()
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.0).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.0).poll_shutdown(cx)
        }
    }

    /// An HTTP/2 server on port 0 that answers every request, once read, with an empty 200.
    async fn server() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("test setup");
        let addr = listener.local_addr().expect("test setup");
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut conn = h2::server::handshake(tcp).await.expect("handshake");
                    while let Some(Ok((request, mut respond))) = conn.accept().await {
                        tokio::spawn(async move {
                            let mut body = request.into_body();
                            while let Some(Ok(data)) = body.data().await {
                                let _ = body.flow_control().release_capacity(data.len());
                            }
                            let _ = respond.send_response(http::Response::new(()), true);
                        });
                    }
                });
            }
        });
        addr
    }

    /// The writes an h2 client makes to its socket for 20 calls of `size` bytes made together
    /// (after a first call, so that the handshake is over).
    async fn writes_for_calls_made_together<T>(size: usize, wrap: impl FnOnce(Counting) -> T) -> usize
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let tcp = TcpStream::connect(server().await).await.expect("connect");
        tcp.set_nodelay(true).expect("test setup");
        let writes = Arc::new(AtomicUsize::new(0));
        let (send, connection) = h2::client::handshake(wrap(Counting(tcp, writes.clone()))).await.expect("handshake");
        tokio::spawn(connection);
        let call = |send: &h2::client::SendRequest<Bytes>| {
            let mut send = send.clone();
            let request = http::Request::post("http://test/a/b").body(()).expect("test setup");
            let (response, mut stream) = send.send_request(request, false).expect("sent");
            stream.send_data(Bytes::from(vec![b'x'; size]), true).expect("sent");
            response
        };
        call(&send.clone().ready().await.expect("ready")).await.expect("first answer");
        writes.store(0, Ordering::SeqCst);
        // On the test's one thread, the connection's task runs only once this one waits.
        let together: Vec<_> = (0..20).map(|_| call(&send)).collect();
        for response in together {
            response.await.expect("an answer");
        }
        writes.load(Ordering::SeqCst)
    }

    /// Over a plain TCP socket, each call's message above 256 bytes is a write of its own;
    /// unvectored, the calls made together leave in one or two writes (h2's buffer holds 16 KiB),
    /// and a message above 1 KiB, which h2 hands over in two pieces, in one write.
    #[tokio::test]
    async fn calls_made_together_leave_together_when_unvectored() {
        let plain = writes_for_calls_made_together(600, |c| c).await;
        assert!(plain >= 20, "{plain} writes for 20 calls over a plain socket");
        let unvectored = writes_for_calls_made_together(600, Unvectored::new).await;
        assert!(unvectored <= 3, "{unvectored} writes for 20 calls unvectored");
        let large = writes_for_calls_made_together(4000, Unvectored::new).await;
        assert!(large <= 22, "{large} writes for 20 calls of 4000 bytes unvectored");
    }

    /// A writer that takes at most `step` bytes per write (a socket whose buffer is nearly full),
    /// or none every third time (would block), keeping what it took.
    struct Trickle {
        step: usize,
        turn: usize,
        taken: Vec<u8>,
    }

    impl AsyncWrite for Trickle {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
            self.turn += 1;
            if self.turn.is_multiple_of(3) {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            let n = buf.len().min(self.step);
            self.taken.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let all: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).take(self.step).collect();
            self.as_mut().poll_write(cx, &all)
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// Whatever the socket takes at a time, the bytes leave whole and in order, held ones first.
    #[tokio::test]
    async fn held_writes_leave_whole_and_in_order() {
        use tokio::io::AsyncWriteExt as _;
        for step in [3, 100, 1000, 5000, 1 << 20] {
            let mut socket = Unvectored::new(Trickle { step, turn: 0, taken: Vec::new() });
            let mut sent = Vec::new();
            for (i, len) in [10, 1200, 20_000, 3, 16 * 1024, 16 * 1024 + 1, 700].into_iter().enumerate() {
                let part: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8).collect();
                socket.write_all(&part).await.expect("write");
                sent.extend(part);
            }
            socket.flush().await.expect("flush");
            assert!(socket.held.is_empty());
            assert_eq!(socket.io.taken.len(), sent.len(), "step {step}");
            assert!(socket.io.taken == sent, "step {step}: the bytes differ");
        }
    }
}
