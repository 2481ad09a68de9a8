//! What the campaign's clients were told, in the order they were told it: the client side of a
//! Jepsen-style history. Only acknowledged outcomes are recorded as facts; a refusal records
//! its code so the checker can hold it to the documented catalog.

use std::sync::Mutex;
use std::time::Instant;

/// One thing a client was told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A registration of `gate` completed: the gate reopened at these coordinates for `worker`.
    Registered {
        gate: String,
        worker: u32,
        epoch: u64,
        generation: u64,
        registration_revision: u64,
    },
    /// A serve mint released the credential recorded at `row_key`: its touch of `gate` won and
    /// produced `gate_revision`, under the worker's registration at `epoch`.
    Released {
        gate: String,
        worker: u32,
        row_key: String,
        gate_revision: u64,
        epoch: u64,
        registration_revision: u64,
    },
    /// The root credential `row_key` was handed out by an exchange (its row is `active`).
    Exchanged { row_key: String },
    /// A connect check admitted the credential at `row_key`; it began at `started_ms`.
    Admitted { row_key: String, started_ms: u64 },
    /// The operator's revoke of the credential at `row_key` was acknowledged at `acked_ms`.
    Revoked { row_key: String, acked_ms: u64 },
    /// An operation refused with `code` (the wire name, e.g. `expired`).
    Refused {
        op: &'static str,
        code: String,
        message: String,
    },
}

/// The shared, append-only log of one run, with a clock every client reads the same way.
#[derive(Debug)]
pub struct History {
    start: Instant,
    events: Mutex<Vec<Event>>,
}

impl Default for History {
    fn default() -> Self {
        Self::new()
    }
}

impl History {
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Milliseconds since the run began.
    pub fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    pub fn record(&self, event: Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event);
        }
    }

    /// Everything recorded so far, in order.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
}
