//! Streams of other APIs (Anthropic Messages, OpenAI Responses) made from the chat stream:
//! a [`Translate`] turns each chat chunk into its API's events; [`sse`] pumps them out.

use std::collections::VecDeque;
use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, Sse};

use crate::completions::StreamState;

/// What every translator holds: the chat stream it reads, the events ready to send, and
/// whether the stream has ended.
pub(crate) struct Pump {
    /// The chat stream.
    pub s: StreamState,
    /// Events made and not yet sent.
    pub out: VecDeque<SseEvent>,
    /// Set by a translator after its last event (or an error event).
    pub done: bool,
    started: bool,
}

impl Pump {
    /// A pump reading `s`.
    pub fn new(s: StreamState) -> Pump {
        Pump {
            s,
            out: VecDeque::new(),
            done: false,
            started: false,
        }
    }
}

/// One API's stream events from the chat stream's chunks.
pub(crate) trait Translate: Send + 'static {
    /// The translator's [`Pump`].
    fn pump(&mut self) -> &mut Pump;
    /// Queues the events that open the stream (before any chunk).
    fn start(&mut self);
    /// Queues the events for one chat chunk (JSON text, or `[DONE]` at the end); sets
    /// `pump().done` after the stream's last event.
    fn on_chunk(&mut self, chunk: &str);
}

/// The next event of `t`'s stream (None once it is over).
async fn next<T: Translate>(t: &mut T) -> Option<SseEvent> {
    loop {
        if !t.pump().started {
            t.pump().started = true;
            t.start();
        }
        let p = t.pump();
        if let Some(e) = p.out.pop_front() {
            return Some(e);
        }
        if p.done {
            return None;
        }
        match p.s.next().await {
            Some(chunk) => t.on_chunk(&chunk),
            None => p.done = true,
        }
    }
}

/// `t`'s events as a server-sent event stream.
pub(crate) fn sse<T: Translate>(
    t: T,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    Sse::new(futures_util::stream::unfold(t, |mut t| async move {
        let e = next(&mut t).await?;
        Some((Ok(e), t))
    }))
}
