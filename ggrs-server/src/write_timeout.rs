//! A connection whose writes must make progress: a client that stops reading an answer (a
//! long stream, say) makes the socket's buffers fill and every write wait; after
//! [`ServerConfig::write_timeout`](crate::ServerConfig::write_timeout) of waiting the write
//! fails, hyper closes the connection, and the request's future is dropped, which cancels
//! its generation and frees its slot.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::rt::{Read, ReadBufCursor, Write};
use tokio::time::{sleep, Sleep};

/// `io` with writes that fail after `timeout` without progress.
pub(crate) struct WriteTimeout<T> {
    io: T,
    timeout: Duration,
    /// Set while a write waits: when it gives up.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> WriteTimeout<T> {
    pub fn new(io: T, timeout: Duration) -> WriteTimeout<T> {
        WriteTimeout {
            io,
            timeout,
            stalled: None,
        }
    }

    /// After a write returned `Pending`: `Pending` still, or an error once the timeout has
    /// passed since the first write that waited.
    fn wait<R>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        let timeout = self.timeout;
        let deadline = self.stalled.get_or_insert_with(|| Box::pin(sleep(timeout)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {:.0} s (--write-timeout)",
                    timeout.as_secs_f64()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The outcome of a write: progress resets the clock.
    fn track<R>(&mut self, p: Poll<io::Result<R>>, cx: &mut Context<'_>) -> Poll<io::Result<R>> {
        match p {
            Poll::Pending => self.wait(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl<T: Read + Unpin> Read for WriteTimeout<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for WriteTimeout<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.io).poll_write(cx, buf);
        self.track(p, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let p = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.track(p, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = Pin::new(&mut self.io).poll_flush(cx);
        self.track(p, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let p = Pin::new(&mut self.io).poll_shutdown(cx);
        self.track(p, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose writes wait for good until `ready` (a client that reads
    /// nothing, then reads).
    struct Client {
        ready: bool,
    }

    impl Write for Client {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.ready {
                Poll::Ready(Ok(buf.len()))
            } else {
                Poll::Pending
            }
        }

        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// One write of 4 bytes.
    async fn write(w: &mut WriteTimeout<Client>) -> io::Result<usize> {
        std::future::poll_fn(|cx| Pin::new(&mut *w).poll_write(cx, b"data")).await
    }

    #[tokio::test]
    async fn a_write_that_waits_too_long_fails_and_progress_resets_the_clock() {
        let mut w = WriteTimeout::new(Client { ready: false }, Duration::from_millis(300));
        let t0 = std::time::Instant::now();
        let e = write(&mut w).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let waited = t0.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        // The client reads: writes go on, and the clock is reset.
        w.io.ready = true;
        assert_eq!(write(&mut w).await.unwrap(), 4);
        assert!(w.stalled.is_none());
    }
}
