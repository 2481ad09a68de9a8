//! One in-process run per key (F49: one process never runs one operation twice at once): a
//! caller either starts the run of its key or joins the one in flight. A run goes on its own
//! task, so a caller that stops waiting (its request's deadline, a dropped connection) never
//! cancels it halfway; once it ended, the next caller of that key starts a fresh run, which
//! resumes from what the stores hold.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use cotal_core::EpError;
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::task::AbortHandle;

/// A run's outcome, awaited by every caller that joined it.
pub type Done<T> = Shared<BoxFuture<'static, Result<T, EpError>>>;

/// One run in flight, bound to the target it acts on.
struct Flight<T> {
    target: String,
    serial: u64,
    done: Done<T>,
    abort: AbortHandle,
}

/// How a caller got its run.
pub enum Boarded<T> {
    /// This caller started it.
    Started(Done<T>),
    /// A run of the same key and target was already in flight.
    Joined(Done<T>),
}

impl<T> std::fmt::Debug for Boarded<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Boarded::Started(_) => "Started",
            Boarded::Joined(_) => "Joined",
        })
    }
}

/// The runs in flight, by key.
pub struct Flights<K, T> {
    runs: Mutex<(u64, HashMap<K, Flight<T>>)>,
}

impl<K, T> std::fmt::Debug for Flights<K, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flights").finish_non_exhaustive()
    }
}

impl<K, T> Default for Flights<K, T> {
    fn default() -> Self {
        Flights {
            runs: Mutex::new((0, HashMap::new())),
        }
    }
}

impl<K, T> Flights<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    /// Joins the run of `key` in flight, or starts `run` as it. A run in flight for `key` but
    /// another `target` is returned as `Err` with that target, and nothing starts: a key names
    /// one target's operation.
    pub fn board<F>(self: &Arc<Self>, key: K, target: String, run: F) -> Result<Boarded<T>, String>
    where
        F: Future<Output = Result<T, EpError>> + Send + 'static,
    {
        let mut guard = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let (serial, runs) = &mut *guard;
        if let Some(flight) = runs.get(&key) {
            if flight.target != target {
                return Err(flight.target.clone());
            }
            return Ok(Boarded::Joined(flight.done.clone()));
        }
        *serial += 1;
        let this = *serial;
        let me = Arc::clone(self);
        let ended = key.clone();
        let task = tokio::spawn(async move {
            let result = run.await;
            let mut guard = me.runs.lock().unwrap_or_else(PoisonError::into_inner);
            if guard.1.get(&ended).is_some_and(|f| f.serial == this) {
                guard.1.remove(&ended);
            }
            result
        });
        let abort = task.abort_handle();
        let done: Done<T> = async move {
            task.await.unwrap_or_else(|e| {
                Err(EpError::unavailable(format!(
                    "the run stopped before it finished ({e}); asking again resumes it"
                )))
            })
        }
        .boxed()
        .shared();
        let flight = Flight {
            target,
            serial: this,
            done: done.clone(),
            abort,
        };
        runs.insert(key, flight);
        Ok(Boarded::Started(done))
    }

    /// Stops every run in flight and waits for each to end: each resumes under its key on the
    /// next call, so stopping one halfway loses nothing.
    pub async fn close(&self) {
        let stopped: Vec<Done<T>> = {
            let mut guard = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
            guard
                .1
                .drain()
                .map(|(_, flight)| {
                    flight.abort.abort();
                    flight.done
                })
                .collect()
        };
        for done in stopped {
            let _ = done.await;
        }
    }
}
