//! The raw-replay floor shared by the load benches: what a machine asked of the server,
//! recorded from its [`Replay`] history, sent again with bare async-nats calls and no logic.
//!
//! A machine's cost over its I/O is only visible against the same I/O without the machine. The
//! floor is therefore the exact request sequence one run made — the same subjects, payload
//! bytes, `Nats-Expected-Stream`, `Nats-Expected-Last-Subject-Sequence` and `KV-Operation`
//! headers, the same `STREAM.INFO` listing and leader reads — replayed against a mirror space:
//! a second space on the same server that has received exactly the same writes in the same
//! order, so every stream sequence (every pinned revision) lines up. Each replayed answer is
//! checked against the recorded observation (a write's ack sequence, a read's revision, a
//! listing's size), so a floor that drifted from the measured run fails loudly instead of
//! timing something else.
//!
//! The history comes from [`Replay::history`] rather than from a [`cotal_io_nats::SendHook`]:
//! the hook sees only writes, and reads (leader gets, key listings, artifact reads) are most of
//! a ceremony's round trips.

use std::time::Duration;

use cotal_core::canon::Digest;
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::machine::{Effect, Observation, Replay, Script};
use cotal_core::EpError;
use cotal_io_nats::async_nats::header::{HeaderMap, NATS_EXPECTED_STREAM};
use cotal_io_nats::async_nats::jetstream::message::PublishMessage;
use cotal_io_nats::async_nats::jetstream::stream::{LastRawMessageErrorKind, Stream};
use cotal_io_nats::async_nats::jetstream::{self, Context};
use cotal_io_nats::{NatsWorld, Space};
use serde_json::{json, Value};

/// Every effect a run performed, with the observation that answered it, in order.
pub type History = Vec<(Effect, Observation)>;

/// Runs `script` to completion in `world`, appending its history to `log`.
pub async fn run_recorded<S: Script>(
    world: &mut NatsWorld<'_>,
    script: S,
    log: &mut History,
) -> Result<S::Output, EpError> {
    let mut machine = Replay::new(script);
    let outcome = world.run(&mut machine).await;
    log.extend(machine.history().iter().cloned());
    outcome
}

/// One bound store of the mirror: its stream handle (looked up once, as a [`Space`] binds) and
/// the subject prefix of its keys.
struct Bound {
    store: Store,
    stream: Stream,
    subject_prefix: String,
}

/// Replays recorded histories against a mirror space, counting its round trips.
pub struct Raw {
    js: Context,
    stores: Vec<Bound>,
    round_trips: u64,
}

impl Raw {
    /// Binds `stores` of the mirror `space` over its own connection.
    pub async fn bind(space: &Space, stores: &[Store]) -> Result<Raw, String> {
        let js = jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(5))
            .build(space.client().clone());
        let mut bound = Vec::new();
        for &store in stores {
            let layout = space.layout(store);
            let stream = js
                .get_stream(&layout.stream)
                .await
                .map_err(|e| format!("binding the mirror's {} failed: {e}", layout.stream))?;
            bound.push(Bound {
                store,
                stream,
                subject_prefix: layout.subject_prefix.clone(),
            });
        }
        Ok(Raw {
            js,
            stores: bound,
            round_trips: 0,
        })
    }

    /// Requests sent so far (one request and its reply each, as [`Space::round_trips`] counts).
    pub fn round_trips(&self) -> u64 {
        self.round_trips
    }

    fn bound(stores: &[Bound], store: Store) -> Result<&Bound, String> {
        stores
            .iter()
            .find(|b| b.store == store)
            .ok_or_else(|| format!("the mirror did not bind {store:?}"))
    }

    /// Sends every KV request and artifact read of `history` in order and checks each answer
    /// against the recorded one. Evictions and probes are answered without I/O on both sides
    /// (the benches' stand-ins), so they have nothing to replay.
    pub async fn replay(&mut self, history: &[(Effect, Observation)]) -> Result<(), String> {
        for (at, (effect, recorded)) in history.iter().enumerate() {
            let lined_up = match (effect, recorded) {
                (Effect::Kv(request), Observation::Kv(outcome)) => {
                    self.request(request, outcome).await?
                }
                (Effect::ReadArtifact(digest), Observation::Artifact(bytes)) => {
                    self.artifact(digest).await? == bytes.is_some()
                }
                (Effect::Evict(_) | Effect::Probe(_) | Effect::ProbePlane(_), _) => true,
                (effect, _) => return Err(format!("step {at}: no raw replay for {effect:?}")),
            };
            if !lined_up {
                return Err(format!(
                    "step {at}: the mirror answered {effect:?} otherwise than the recorded \
                     {recorded:?}; the mirror space is not in the measured space's state"
                ));
            }
        }
        Ok(())
    }

    /// One KV request; whether the mirror's answer agrees with `recorded`.
    async fn request(&mut self, request: &KvRequest, recorded: &KvOutcome) -> Result<bool, String> {
        let written = |seq: Option<u64>| match recorded {
            KvOutcome::Written(r) => seq == Some(r.0),
            KvOutcome::CasLost => seq.is_none(),
            _ => false,
        };
        Ok(match request {
            KvRequest::Get { store, key } => {
                let seq = self.last(*store, key).await?.map(|(seq, _)| seq);
                match recorded {
                    KvOutcome::Entry(entry) => seq == entry.as_ref().map(|e| e.revision.0),
                    _ => false,
                }
            }
            KvRequest::GetFirst { store, key } => {
                let seq = self.first(*store, key).await?;
                match recorded {
                    KvOutcome::Entry(entry) => seq == entry.as_ref().map(|e| e.revision.0),
                    _ => false,
                }
            }
            KvRequest::Keys { store, prefix } => {
                let listed = self.keys(*store, prefix).await?;
                matches!(recorded, KvOutcome::Keys(keys) if keys.len() == listed)
            }
            KvRequest::CreateStrict { store, key, value } => {
                written(self.publish(*store, key, value, None, 0).await?)
            }
            KvRequest::Update {
                store,
                key,
                value,
                expected,
            } => written(self.publish(*store, key, value, None, expected.0).await?),
            KvRequest::Delete {
                store,
                key,
                expected,
            } => written(
                self.publish(*store, key, &[], Some("DEL"), expected.0)
                    .await?,
            ),
            // The NATS KV create: create-only, and over a DEL/PURGE marker a publish pinned to
            // the marker (the same round trips `Space` makes).
            KvRequest::Create { store, key, value } => {
                let seq = match self.publish(*store, key, value, None, 0).await? {
                    Some(seq) => Some(seq),
                    None => match self.last(*store, key).await? {
                        Some((marker, false)) => {
                            self.publish(*store, key, value, None, marker).await?
                        }
                        _ => None,
                    },
                };
                written(seq)
            }
        })
    }

    /// `STREAM.MSG.GET last_by_subj`: the last message's sequence and whether it is a live
    /// value (no `KV-Operation` header), or `None` when the subject has none.
    async fn last(&mut self, store: Store, key: &str) -> Result<Option<(u64, bool)>, String> {
        let bound = Self::bound(&self.stores, store)?;
        let subject = format!("{}{key}", bound.subject_prefix);
        self.round_trips += 1;
        match bound.stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => Ok(Some((m.sequence, m.headers.get("KV-Operation").is_none()))),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(format!("the raw read of {subject} failed: {e}")),
        }
    }

    /// The sequence of the first message on `key`'s subject, if any.
    async fn first(&mut self, store: Store, key: &str) -> Result<Option<u64>, String> {
        let bound = Self::bound(&self.stores, store)?;
        let subject = format!("{}{key}", bound.subject_prefix);
        self.round_trips += 1;
        match bound
            .stream
            .get_first_raw_message_by_subject(&subject, 1)
            .await
        {
            Ok(m) => Ok(Some(m.sequence)),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(format!("the raw first read of {subject} failed: {e}")),
        }
    }

    /// The contract artifact read: the last message on the digest's subject, and the first
    /// when the last does not hash to the digest. Whether a live artifact is there.
    async fn artifact(&mut self, digest: &Digest) -> Result<bool, String> {
        let bound = Self::bound(&self.stores, Store::Contracts)?;
        let subject = format!("{}{}", bound.subject_prefix, digest.hex());
        self.round_trips += 1;
        let last = match bound.stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => m,
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => return Ok(false),
            Err(e) => return Err(format!("the raw read of {subject} failed: {e}")),
        };
        if Digest::of(&last.payload) == *digest {
            return Ok(true);
        }
        self.round_trips += 1;
        bound
            .stream
            .get_first_raw_message_by_subject(&subject, 1)
            .await
            .map(|_| true)
            .map_err(|e| format!("the raw first read of {subject} failed: {e}"))
    }

    /// `STREAM.INFO` with a token-aligned `subjects_filter`, paged: how many keys under
    /// `prefix` hold a message.
    async fn keys(&mut self, store: Store, prefix: &str) -> Result<usize, String> {
        let bound = Self::bound(&self.stores, store)?;
        let aligned = prefix
            .rfind('.')
            .and_then(|i| prefix.get(..=i))
            .unwrap_or("");
        let filter = format!("{}{aligned}>", bound.subject_prefix);
        let api = format!("STREAM.INFO.{}", bound.stream.cached_info().config.name);
        let wanted = format!("{}{prefix}", bound.subject_prefix);
        let (mut listed, mut offset) = (0, 0u64);
        loop {
            self.round_trips += 1;
            let page: Value = self
                .js
                .request(
                    api.clone(),
                    &json!({"subjects_filter": filter, "offset": offset}),
                )
                .await
                .map_err(|e| format!("the raw listing of {filter} failed: {e}"))?;
            // An empty listing carries no `subjects` member at all.
            let subjects = page.pointer("/state/subjects").and_then(Value::as_object);
            listed += subjects.map_or(0, |s| s.keys().filter(|k| k.starts_with(&wanted)).count());
            let got = subjects.map_or(0, |s| s.len() as u64);
            offset += got;
            let total = page.get("total").and_then(Value::as_u64).unwrap_or(0);
            if got == 0 || offset >= total {
                return Ok(listed);
            }
        }
    }

    /// Publishes with `Nats-Expected-Stream`, the expected last subject sequence `expected`
    /// and, when given, `KV-Operation`; the ack's sequence, or `None` when the server refused.
    async fn publish(
        &mut self,
        store: Store,
        key: &str,
        value: &[u8],
        operation: Option<&str>,
        expected: u64,
    ) -> Result<Option<u64>, String> {
        let bound = Self::bound(&self.stores, store)?;
        let mut headers = HeaderMap::new();
        headers.insert(
            NATS_EXPECTED_STREAM,
            bound.stream.cached_info().config.name.as_str(),
        );
        if let Some(operation) = operation {
            headers.insert("KV-Operation", operation);
        }
        let message = PublishMessage::build()
            .payload(value.to_vec().into())
            .headers(headers)
            .expected_last_subject_sequence(expected);
        let subject = format!("{}{key}", bound.subject_prefix);
        self.round_trips += 1;
        let ack = self
            .js
            .send_publish(subject.clone(), message)
            .await
            .map_err(|e| format!("the raw publish to {subject} was not sent: {e}"))?;
        Ok(ack.await.ok().map(|ack| ack.sequence))
    }
}
