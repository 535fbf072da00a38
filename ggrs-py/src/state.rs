//! A model's one session and its prompt cache, behind the lock every call takes.

use std::sync::{Mutex, MutexGuard};

use ggrs_llama::{PromptCache, Session};

/// The session and what its cache holds; one generation or evaluation at a time.
pub struct State {
    pub session: Session,
    pub cache: PromptCache,
}

/// Locks the state; a worker that panicked while holding it leaves a session whose cache
/// may be half-written, so it is cleared before use.
pub fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    match state.lock() {
        Ok(g) => g,
        Err(poisoned) => {
            let mut g = poisoned.into_inner();
            let State { session, cache } = &mut *g;
            cache.forget(session);
            state.clear_poison();
            g
        }
    }
}
