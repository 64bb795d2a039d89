//! Sockets between the services, written so that h2 batches what is ready together.
//!
//! h2 (under tonic's server and under [`crate::link`]) copies a DATA frame into its write
//! buffer when the frame is small: at most 256 bytes when the socket takes vectored writes,
//! 1 KiB when it does not. A larger frame waits in a slot of its own, and h2 writes out (and
//! flushes) everything before it takes the next frame. Most messages between the services are
//! above 256 bytes (a call's JSON body and caller, a tool's answer), so over a plain TCP socket
//! every call or answer cost a write of its own even when many were ready together.
//! [`Unvectored`] hides the socket's vectored writes: messages up to 1 KiB are copied, and the
//! frames ready together leave in one write. (Collecting the writes in a buffer does not help:
//! h2 flushes the socket itself before each large frame.)

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::{Stream, StreamExt as _};

/// A socket written without vectored writes (see the module documentation).
pub struct Unvectored<T = TcpStream>(pub T);

impl<T: AsyncRead + Unpin> AsyncRead for Unvectored<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

/// `poll_write_vectored` and `is_write_vectored` are left to their defaults (one slice at a
/// time; not vectored).
impl<T: AsyncWrite + Unpin> AsyncWrite for Unvectored<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Unvectored {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.connect_info()
    }
}

/// The connections `listener` accepts, with `TCP_NODELAY`, for a tonic server.
pub fn incoming(listener: TcpListener) -> impl Stream<Item = std::io::Result<Unvectored>> {
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map(|accepted| accepted.map(Unvectored))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;

    use super::*;

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

    /// The writes an h2 client makes to its socket for 20 calls of 600 bytes made together
    /// (after a first call, so that the handshake is over).
    async fn writes_for_calls_made_together<T>(wrap: impl FnOnce(Counting) -> T) -> usize
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
            stream.send_data(Bytes::from(vec![b'x'; 600]), true).expect("sent");
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

    /// Over a plain TCP socket, each call's message is a write of its own; unvectored, the calls
    /// made together leave in one or two writes (h2's buffer holds 16 KiB).
    #[tokio::test]
    async fn calls_made_together_leave_together_when_unvectored() {
        let plain = writes_for_calls_made_together(|c| c).await;
        assert!(plain >= 20, "{plain} writes for 20 calls over a plain socket");
        let unvectored = writes_for_calls_made_together(Unvectored).await;
        assert!(unvectored <= 3, "{unvectored} writes for 20 calls unvectored");
    }
}
