//! One space's stores on a NATS server: bound once (and, on the plane's connections, verified),
//! then every [`KvRequest`] executed against them with NATS JetStream KV semantics.
//!
//! Round trips (one request and its reply each; [`Space::round_trips`] counts them):
//!
//! | operation | round trips |
//! | --- | --- |
//! | bind ([`Space::connect`] / [`Space::bind`]) | 1 `STREAM.INFO` per bound store (7 with [`StoreSet::ALL`]); +1 `STREAM.CREATE` per missing store (one more each 250 ms while a cluster cannot place it yet, for up to 10 s) |
//! | bind with [`Bind::Participant`] | none: stream handles by name |
//! | [`Space::verify_shapes`] | 1 `STREAM.INFO` per bound store |
//! | `Get` | 1 `STREAM.MSG.GET` (`last_by_subj`, leader-served) |
//! | `GetFirst` | 1 `STREAM.MSG.GET` (`next_by_subj` from sequence 1, leader-served) |
//! | `Get`, `GetFirst` of the contract store with [`Bind::Participant`] | 1 `DIRECT.GET` (`last_by_subj` in the subject; `next_by_subj` in the body) |
//! | `CreateStrict`, `Update`, `Delete` | 1 publish + ack |
//! | `Create` | 1 on an empty subject; over an existing message +1 read, and over a DEL/PURGE marker +1 pinned publish (3) |
//! | `Keys` | 1 `STREAM.INFO` with `subjects_filter` per page of subjects |
//! | `Keys` with [`Bind::Participant`] | 1 `CONSUMER.CREATE` (the filter-subject form) + 1 `CONSUMER.DELETE`; the listing itself is pushed to the connection's inbox |
//! | `ReadArtifact` | 1 read of the last message; +1 `next_by_subj` read of the first message when the last does not hash to the digest |
//!
//! No request binds anything: stream handles are made once at bind and reused, so the counts
//! above are the whole cost. A request against a store this space did not bind
//! ([`SpaceOptions::stores`]) is `Unavailable` naming the store, and sends nothing: a connection
//! whose grant lacks a store's rows binds without it instead of failing at the first request.
//!
//! Outcome mapping for writes (DESIGN §3, F11):
//! * refused before anything went out (not connected, invalid key, the client could not queue
//!   the publish) → `Unavailable`;
//! * the server answered with JetStream error 10071 or 10164 (wrong last sequence) → `CasLost`;
//!   10077 (a discard-new-per-subject store already holds a message on the subject) → `CasLost`
//!   for create-only writes, whose condition it refutes, and `Unavailable` otherwise (that store
//!   shape refuses every second message, so nothing was written);
//! * any other JetStream error, or no responders → `Unavailable` (the server stored nothing);
//! * the publish went out but no readable ack came back (timeout, connection lost, garbled
//!   reply) → `Ambiguous`: only a leader read-back can tell whether it committed.
//!
//! Reads never mutate, so every read failure is `Unavailable`; 10037 (no message) is absence.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::header::{HeaderMap, NATS_EXPECTED_STREAM};
use async_nats::jetstream::consumer::{push, AckPolicy, DeliverPolicy};
use async_nats::jetstream::context::{
    CreateStreamError, CreateStreamErrorKind, GetStreamErrorKind, PublishErrorKind,
};
use async_nats::jetstream::message::{PublishMessage, StreamMessage};
use async_nats::jetstream::stream::{
    ConsumerCreateStrictErrorKind, DirectGetErrorKind, LastRawMessageErrorKind, Stream,
};
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::{self, Context};
use async_nats::{Client, StatusCode, Subscriber};
use bytes::Bytes;
use cotal_core::canon::Digest;
use cotal_core::kv::{Entry, KvOutcome, KvRequest, Operation, Revision, Store};
use cotal_core::machine::Observation;
use cotal_core::names::SpaceName;
use cotal_core::EpError;
use futures::future::BoxFuture;
use futures::StreamExt as _;
use serde_json::{json, Value};

use crate::host::GateWrites;
use crate::shape::{desired_config, verify, Replicas, StoreLayout};

/// JetStream: no message matches a `STREAM.MSG.GET`.
pub const NO_MESSAGE_FOUND: u64 = 10037;
/// JetStream: the expected last (subject) sequence did not hold.
pub const WRONG_LAST_SEQUENCE: u64 = 10071;
/// JetStream: the same check as 10071, as the clustered path reports it.
pub const WRONG_LAST_SEQUENCE_CONSTANT: u64 = 10164;
/// JetStream: the store refused the message (a discard-new-per-subject stream that already
/// holds a message on the subject answers this).
pub const STORE_FAILED: u64 = 10077;
/// JetStream: the stream does not exist.
pub const STREAM_NOT_FOUND: u64 = 10059;
/// JetStream: no suitable peers for placement (a replicated create the meta leader cannot place).
pub const CLUSTER_NO_PEERS: u64 = 10005;

/// How long a bind waits out a replicated create the cluster cannot place yet. A meta leader
/// places replicas only on peers whose first statistics it has received, which can trail the
/// cluster's routes and election by seconds; a peer that is really gone stays unplaceable, and
/// the bind then fails naming the server's reason.
const PLACEMENT_WAIT: Duration = Duration::from_secs(10);
/// The pause between placement attempts while waiting.
const PLACEMENT_RETRY: Duration = Duration::from_millis(250);

/// The `KV-Operation` header of DEL/PURGE markers.
const KV_OPERATION: &str = "KV-Operation";

/// The pauses before each resend of a publish that found no responders: 0.7 s in all, well
/// inside a request's timeout, and long enough for a new stream leader's interest to reach
/// every route.
const NO_RESPONDERS_WAITS: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
];
/// How long a participant's listing consumer outlives its subscription when its delete is lost:
/// longer than any listing takes, short enough that an abandoned one does not linger.
const LISTING_INACTIVE_THRESHOLD: Duration = Duration::from_secs(10);
/// The reason header of server-written limit markers (ADR-43).
const MARKER_REASON: &str = "Nats-Marker-Reason";

/// Where in a write a [`SendHook`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendPhase {
    /// Right before the publish is handed to the connection.
    Before,
    /// The publish went out; its ack has not been read yet.
    After,
}

/// Called around each write's publish with the request it serves. Tests use it to pause or
/// crash the server at exactly these points; production drivers install none.
pub type SendHook = Box<dyn FnMut(SendPhase, &KvRequest) -> BoxFuture<'static, ()> + Send>;

/// Which of a space's stores a [`Space`] binds (the seven of every space, and the actor ledger's
/// of a space whose ledger is replicated). A restricted connection binds only the
/// stores its grant covers: a [`Bind::Verified`] bind proves each store's shape with
/// `STREAM.INFO` (F10), which a grant without that row cannot do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoreSet {
    auth: bool,
    records: bool,
    admission: bool,
    contracts: bool,
    issued: bool,
    accepted: bool,
    sessions: bool,
    actors: bool,
}

impl StoreSet {
    /// The seven stores of every space: the unrestricted plane and the mint writer's boot
    /// ensure. The actor ledger's store is not among them: only a space whose ledger is
    /// replicated has it, bound on its own connection.
    pub const ALL: StoreSet = StoreSet {
        auth: true,
        records: true,
        admission: true,
        contracts: true,
        issued: true,
        accepted: true,
        sessions: true,
        actors: false,
    };

    /// Exactly `stores` (repeats are harmless).
    pub fn of(stores: &[Store]) -> StoreSet {
        let has = |s: Store| stores.contains(&s);
        StoreSet {
            auth: has(Store::Auth),
            records: has(Store::Records),
            admission: has(Store::Admission),
            contracts: has(Store::Contracts),
            issued: has(Store::Issued),
            accepted: has(Store::Accepted),
            sessions: has(Store::Sessions),
            actors: has(Store::Actors),
        }
    }

    pub fn contains(self, store: Store) -> bool {
        match store {
            Store::Auth => self.auth,
            Store::Records => self.records,
            Store::Admission => self.admission,
            Store::Contracts => self.contracts,
            Store::Issued => self.issued,
            Store::Accepted => self.accepted,
            Store::Sessions => self.sessions,
            Store::Actors => self.actors,
        }
    }
}

/// What a bind proves before a [`Space`] serves on its stores, and so which requests the
/// connection's grant must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bind {
    /// The plane's own connections: every bound store's shape is proven with `STREAM.INFO` at
    /// bind (F10) and a missing store may be created; `Keys` is the stream leader's
    /// `STREAM.INFO` subjects listing, which creates nothing (F98).
    #[default]
    Verified,
    /// An untrusted participant's connection over a reference-shaped grant (a remote manager's
    /// executor, `cotal_core::profiles::remote_manager`): no `STREAM.INFO` on any store, reads
    /// by `STREAM.MSG.GET` and Direct Get, writes by key-pinned publishes, and a family listing
    /// only as a consumer pinned to its own family.
    ///
    /// * The bind makes no request: stream handles are made from the store names
    ///   ([`StoreLayout`]), shapes unproven, and no store is ever created
    ///   ([`SpaceOptions::create_missing`], [`SpaceOptions::replicas`] and
    ///   [`SpaceOptions::replicas_as_found`] are not consulted). Skipping the proof is sound
    ///   here because a participant decides no authority: the plane, which proves every store's
    ///   shape at each of its own binds, does, and every write a participant makes is a
    ///   revision-pinned publish the server fences (`Nats-Expected-Last-Subject-Sequence`,
    ///   `Nats-Expected-Stream`), so a misread store can make a participant's write lose, never
    ///   land over a row it did not see.
    /// * `Keys` runs as an ephemeral listing consumer (see the round-trip table): the
    ///   reference's `kv.keys`, the one listing the reference grant admits.
    /// * Reads of the contract store are Direct Gets, the only reads that grant holds on
    ///   `EPC_<space>`: an artifact sits on its digest's subject, one message per subject,
    ///   and the reader hashes what comes back ([`Space::read_artifact`]), so a follower's
    ///   answer can at worst be stale absence, never other bytes. Every other store is still
    ///   read leader-served.
    Participant,
}

/// How to reach and bind a space.
#[derive(Debug, Clone)]
pub struct SpaceOptions {
    pub replicas: Replicas,
    /// Bounds every JetStream request, including the wait for a publish ack; past it a write is
    /// `Ambiguous`.
    pub request_timeout: Duration,
    /// Create stores that do not exist yet (with the verified shape). Without it a missing
    /// store is `failed-precondition`.
    pub create_missing: bool,
    /// The stores to bind; requests against any other store are `Unavailable`.
    pub stores: StoreSet,
    /// Accept an existing store at whatever replica count (1 or 3) it was created with, instead
    /// of requiring [`SpaceOptions::replicas`]: for connections that never create a store (the
    /// read-only views, the reconciler), whose callers need not know how the space was made.
    /// Every other part of the shape is still verified.
    pub replicas_as_found: bool,
    /// What the bind proves, and so the requests the connection's grant must hold.
    pub bind: Bind,
}

impl SpaceOptions {
    /// A participant's binding of `stores` ([`Bind::Participant`]): no request at bind, no
    /// store created, every request bounded by the default timeout.
    pub fn participant(stores: StoreSet) -> SpaceOptions {
        SpaceOptions {
            create_missing: false,
            replicas_as_found: true,
            stores,
            bind: Bind::Participant,
            ..SpaceOptions::default()
        }
    }

    /// A verified binding of `stores` as they exist: none created, each at whatever replica
    /// count it was made with (an operator's short connection, which need not know how the
    /// space was made; every other part of the shape is still verified).
    pub fn existing(stores: &[cotal_core::kv::Store]) -> SpaceOptions {
        SpaceOptions {
            create_missing: false,
            replicas_as_found: true,
            stores: StoreSet::of(stores),
            ..SpaceOptions::default()
        }
    }
}

impl Default for SpaceOptions {
    fn default() -> Self {
        SpaceOptions {
            replicas: Replicas::One,
            request_timeout: Duration::from_secs(5),
            create_missing: true,
            stores: StoreSet::ALL,
            replicas_as_found: false,
            bind: Bind::Verified,
        }
    }
}

/// The replica count a bind verifies `live` against.
fn replicas_for(options: &SpaceOptions, live: &async_nats::jetstream::stream::Config) -> Replicas {
    if options.replicas_as_found {
        Replicas::from_count(live.num_replicas).unwrap_or(options.replicas)
    } else {
        options.replicas
    }
}

/// One store: its layout and, when bound, the stream handle every request reuses. The handle
/// caches no info: every request reads the stream's live state.
#[derive(Debug)]
struct Bound {
    layout: StoreLayout,
    stream: Option<Stream<()>>,
}

impl Bound {
    /// The stream handle, or why there is none (the store was not bound).
    fn stream(&self) -> Result<&Stream<()>, String> {
        self.stream.as_ref().ok_or_else(|| {
            format!(
                "store {} (stream {}) is not bound on this connection, so nothing was sent",
                self.layout.name, self.layout.stream
            )
        })
    }
}

/// A space's stores on one connection, the bound ones shape-verified unless the connection is
/// a participant's ([`Bind::Participant`]).
#[derive(Debug)]
pub struct Space {
    client: Client,
    js: Context,
    space: SpaceName,
    options: SpaceOptions,
    auth: Bound,
    records: Bound,
    admission: Bound,
    contracts: Bound,
    issued: Bound,
    accepted: Bound,
    sessions: Bound,
    actors: Bound,
    round_trips: AtomicU64,
    /// Wakes host-fence waiters on this space's own gate writes ([`crate::host`]); shared by
    /// the successive bindings of one [`AuthorityClient`](crate::authority::AuthorityClient).
    gate_writes: Arc<GateWrites>,
}

/// Why a publish did not produce a revision.
#[derive(Debug)]
enum PublishFailure {
    /// 10071 / 10164.
    WrongLastSequence,
    /// 10077: the discard-new-per-subject store already holds a message there.
    SubjectFull,
    /// Nothing went out, or the server refused it before storing.
    NotStored(String),
    /// No subscription took it, so nothing was stored; [`Space::publish`] sends it again.
    NoResponders(String),
    /// It went out; no readable answer came back.
    Unknown(String),
}

fn api_code(e: &(dyn std::error::Error + 'static)) -> Option<u64> {
    e.downcast_ref::<jetstream::Error>()
        .map(|e| e.error_code().0)
}

fn is_valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.split('.').all(|t| {
            !t.is_empty()
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '/' | '_' | '='))
        })
}

/// A `Keys` prefix: a key, a key with a trailing `.`, or empty.
fn is_valid_prefix(prefix: &str) -> bool {
    prefix.is_empty() || is_valid_key(prefix.strip_suffix('.').unwrap_or(prefix))
}

/// Decodes a stored message into the entry a leader read returns: `KV-Operation: DEL|PURGE`
/// markers and server limit markers (`Nats-Marker-Reason: MaxAge|Purge` → PURGE,
/// `Remove` → DEL), everything else a PUT.
fn decode(key: &str, message: StreamMessage) -> Result<Entry, String> {
    let header = |name: &str| message.headers.get(name).map(|v| v.as_str().to_owned());
    let operation = match (
        header(KV_OPERATION).as_deref(),
        header(MARKER_REASON).as_deref(),
    ) {
        (Some("DEL"), _) => Operation::Delete,
        (Some("PURGE"), _) => Operation::Purge,
        (Some(other), _) => {
            return Err(format!(
                "{key} at revision {} carries an unknown KV-Operation {other:?}; the stored \
                 message is corrupt",
                message.sequence
            ))
        }
        (None, Some("MaxAge" | "Purge")) => Operation::Purge,
        (None, Some("Remove")) => Operation::Delete,
        (None, Some(other)) => {
            return Err(format!(
                "{key} at revision {} carries an unknown Nats-Marker-Reason {other:?}",
                message.sequence
            ))
        }
        (None, None) => Operation::Put,
    };
    Ok(Entry {
        key: key.to_owned(),
        value: message.payload.to_vec(),
        revision: Revision(message.sequence),
        operation,
    })
}

impl Space {
    /// Connects to `url` (one URL, or several separated by commas: the nodes of a cluster, any
    /// of which the client may fail over to) and binds `space` (see [`Space::bind`]). An
    /// unreachable server is `unavailable`.
    pub async fn connect(
        url: impl Into<crate::Dial>,
        space: SpaceName,
        options: SpaceOptions,
    ) -> Result<Space, EpError> {
        let dial: crate::Dial = url.into();
        let client = dial
            .apply(async_nats::ConnectOptions::new())
            .name("cotal-authd")
            .connection_timeout(options.request_timeout)
            .connect(dial.urls())
            .await
            .map_err(|e| {
                EpError::unavailable(format!(
                    "cannot connect to the NATS server at {}: {}",
                    dial.servers(),
                    dial.describe(&e)
                ))
            })?;
        Space::bind(client, space, options).await
    }

    /// Binds the space's stores named by [`SpaceOptions::stores`] on `client`: reads each
    /// stream's config (creating missing ones when allowed) and verifies its shape
    /// ([`crate::shape`]). Any store of the wrong shape fails the whole bind with
    /// `failed-precondition` naming the setting: the plane does not serve on it. With all four
    /// stores: 4 round trips for an existing space, 8 for a new one. A participant's bind
    /// ([`Bind::Participant`]) reads nothing and makes the handles from the names.
    pub async fn bind(
        client: Client,
        space: SpaceName,
        options: SpaceOptions,
    ) -> Result<Space, EpError> {
        Space::bind_sharing(client, space, options, Arc::default()).await
    }

    /// [`Space::bind`], announcing own gate writes on `gate_writes` instead of a fresh hub, so a
    /// fence waiter keeps being woken when a new binding replaces this one.
    pub async fn bind_sharing(
        client: Client,
        space: SpaceName,
        options: SpaceOptions,
        gate_writes: Arc<GateWrites>,
    ) -> Result<Space, EpError> {
        let js = jetstream::ContextBuilder::new()
            .timeout(options.request_timeout)
            .build(client.clone());
        let round_trips = AtomicU64::new(0);
        let bind = |store| bind_store(&js, StoreLayout::of(store, &space), &options, &round_trips);
        let auth = bind(Store::Auth).await?;
        let records = bind(Store::Records).await?;
        let admission = bind(Store::Admission).await?;
        let contracts = bind(Store::Contracts).await?;
        let issued = bind(Store::Issued).await?;
        let accepted = bind(Store::Accepted).await?;
        let sessions = bind(Store::Sessions).await?;
        let actors = bind(Store::Actors).await?;
        Ok(Space {
            client,
            js,
            space,
            options,
            auth,
            records,
            admission,
            contracts,
            issued,
            accepted,
            sessions,
            actors,
            round_trips,
            gate_writes,
        })
    }

    /// Re-reads every bound store's config and verifies it again (1 round trip each): for a
    /// long-running plane that must stop serving when an operator reshapes a store under it. A
    /// participant's grant holds no `STREAM.INFO`, so there it is `unavailable`.
    pub async fn verify_shapes(&self) -> Result<(), EpError> {
        for bound in self.all() {
            let Some(stream) = &bound.stream else {
                continue;
            };
            self.count();
            let info = stream.get_info().await.map_err(|e| {
                EpError::unavailable(format!(
                    "cannot read the config of stream {}: {e}",
                    bound.layout.stream
                ))
            })?;
            verify(
                &bound.layout,
                &info.config,
                replicas_for(&self.options, &info.config),
            )?;
        }
        Ok(())
    }

    pub fn space(&self) -> &SpaceName {
        &self.space
    }

    /// The connection (for draining it, or for tests that need a side channel).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Where `store` lives.
    pub fn layout(&self, store: Store) -> &StoreLayout {
        &self.bound(store).layout
    }

    /// The last sequence of `store`'s stream, from the stream leader (`STREAM.INFO`): what the
    /// rollback check compares with the highest it saw.
    pub async fn last_sequence(&self, store: Store) -> Result<u64, String> {
        self.connected()?;
        let bound = self.bound(store);
        let stream = &bound.layout.stream;
        self.count();
        let info: Value = self
            .js
            .request(format!("STREAM.INFO.{stream}"), &json!({}))
            .await
            .map_err(|e| format!("reading the state of stream {stream} failed: {e}"))?;
        if let Some(error) = info.get("error") {
            return Err(format!(
                "reading the state of stream {stream} was refused: {error}"
            ));
        }
        info.pointer("/state/last_seq")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("stream {stream}'s info carries no last sequence"))
    }

    /// Server round trips made so far, bind included.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// The hub announcing this space's own gate writes.
    pub fn gate_writes(&self) -> &GateWrites {
        &self.gate_writes
    }

    fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    fn all(&self) -> [&Bound; 8] {
        [
            &self.auth,
            &self.records,
            &self.admission,
            &self.contracts,
            &self.issued,
            &self.accepted,
            &self.sessions,
            &self.actors,
        ]
    }

    fn bound(&self, store: Store) -> &Bound {
        match store {
            Store::Auth => &self.auth,
            Store::Records => &self.records,
            Store::Admission => &self.admission,
            Store::Contracts => &self.contracts,
            Store::Issued => &self.issued,
            Store::Accepted => &self.accepted,
            Store::Sessions => &self.sessions,
            Store::Actors => &self.actors,
        }
    }

    fn connected(&self) -> Result<(), String> {
        match self.client.connection_state() {
            State::Connected => Ok(()),
            other => Err(format!(
                "the NATS connection is {other:?}; nothing was sent"
            )),
        }
    }

    /// Executes one request.
    pub async fn execute(&self, request: &KvRequest) -> KvOutcome {
        self.execute_hooked(request, None).await
    }

    /// Executes one request, calling `hook` around each publish it makes. A gate write that
    /// committed or may have committed is announced on [`Space::gate_writes`].
    pub async fn execute_hooked(
        &self,
        request: &KvRequest,
        hook: Option<&mut SendHook>,
    ) -> KvOutcome {
        let outcome = self.dispatch(request, hook).await;
        self.gate_writes.note(request, &outcome);
        outcome
    }

    async fn dispatch(&self, request: &KvRequest, mut hook: Option<&mut SendHook>) -> KvOutcome {
        let key = request.key();
        let valid = match request {
            KvRequest::Keys { .. } => is_valid_prefix(key),
            _ => is_valid_key(key),
        };
        if !valid {
            return KvOutcome::Unavailable(format!(
                "{key:?} is not a valid KV key (or prefix); nothing was sent"
            ));
        }
        let bound = self.bound(request.store());
        if let Err(why) = bound.stream() {
            return KvOutcome::Unavailable(why);
        }
        match request {
            KvRequest::Get { key, .. } => match self.get(bound, key).await {
                Ok(entry) => KvOutcome::Entry(entry),
                Err(why) => KvOutcome::Unavailable(why),
            },
            KvRequest::GetFirst { key, .. } => match self.first_from(bound, key, 1).await {
                Ok(entry) => KvOutcome::Entry(entry),
                Err(why) => KvOutcome::Unavailable(why),
            },
            KvRequest::Keys { prefix, .. } => match self.keys(bound, prefix).await {
                Ok(keys) => KvOutcome::Keys(keys),
                Err(why) => KvOutcome::Unavailable(why),
            },
            KvRequest::CreateStrict { key, value, .. } => {
                let sent = self
                    .publish(bound, request, key, value, None, Some(0), hook)
                    .await;
                write_outcome(sent, true)
            }
            KvRequest::Update {
                key,
                value,
                expected,
                ..
            } => {
                let sent = self
                    .publish(bound, request, key, value, None, Some(expected.0), hook)
                    .await;
                write_outcome(sent, false)
            }
            KvRequest::Delete { key, expected, .. } => {
                let sent = self
                    .publish(
                        bound,
                        request,
                        key,
                        &[],
                        Some("DEL"),
                        Some(expected.0),
                        hook,
                    )
                    .await;
                write_outcome(sent, false)
            }
            KvRequest::Create { key, value, .. } => {
                let first = self
                    .publish(
                        bound,
                        request,
                        key,
                        value,
                        None,
                        Some(0),
                        hook.as_deref_mut(),
                    )
                    .await;
                match first {
                    Err(PublishFailure::WrongLastSequence | PublishFailure::SubjectFull) => {}
                    other => return write_outcome(other, true),
                }
                // The subject holds a message. Like the KV client's create, recreate over a
                // DEL/PURGE marker with a CAS pinned to the marker's revision; a live value
                // means the create lost.
                match self.get(bound, key).await {
                    Ok(Some(marker)) if !marker.is_put() => {
                        let sent = self
                            .publish(
                                bound,
                                request,
                                key,
                                value,
                                None,
                                Some(marker.revision.0),
                                hook,
                            )
                            .await;
                        write_outcome(sent, true)
                    }
                    Ok(_) => KvOutcome::CasLost,
                    Err(why) => KvOutcome::Unavailable(format!(
                        "the create of {key} found the subject occupied and the read of what \
                         is there failed ({why}); nothing was written"
                    )),
                }
            }
        }
    }

    /// Whether reads of `bound` are Direct Gets: only a participant's reads of the contract
    /// store, whose grant holds no other read there (see [`Bind::Participant`]).
    fn direct_reads(&self, bound: &Bound) -> bool {
        self.options.bind == Bind::Participant && bound.layout.store == Store::Contracts
    }

    /// Leader-served read of `key`'s last message (`STREAM.MSG.GET last_by_subj`), never a
    /// Direct Get a follower could answer stale (F6, F7, F8); except a participant's contract
    /// read ([`Self::direct_reads`]), which only a Direct Get can make.
    async fn get(&self, bound: &Bound, key: &str) -> Result<Option<Entry>, String> {
        self.connected()?;
        let subject = bound.layout.subject(key);
        let stream = bound.stream()?;
        self.count();
        if self.direct_reads(bound) {
            return match stream.direct_get_last_for_subject(subject.as_str()).await {
                Ok(message) => decode(key, message).map(Some),
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("the direct read of {subject} failed: {e}")),
            };
        }
        match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(message) => decode(key, message).map(Some),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(format!("the leader read of {subject} failed: {e}")),
        }
    }

    /// The first message on `key`'s subject (`STREAM.MSG.GET next_by_subj` from sequence
    /// `from`), leader-served; a Direct Get where [`Self::get`] makes one.
    async fn first_from(
        &self,
        bound: &Bound,
        key: &str,
        from: u64,
    ) -> Result<Option<Entry>, String> {
        self.connected()?;
        let subject = bound.layout.subject(key);
        let stream = bound.stream()?;
        self.count();
        if self.direct_reads(bound) {
            return match stream
                .direct_get_next_for_subject(subject.as_str(), Some(from))
                .await
            {
                Ok(message) => decode(key, message).map(Some),
                Err(e) if e.kind() == DirectGetErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!(
                    "the direct read of {subject} from {from} failed: {e}"
                )),
            };
        }
        match stream
            .get_first_raw_message_by_subject(&subject, from)
            .await
        {
            Ok(message) => decode(key, message).map(Some),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(format!(
                "the leader read of {subject} from {from} failed: {e}"
            )),
        }
    }

    /// Every retained message of `key`, oldest first (one round trip per message, plus one).
    /// A diagnostic and test read; no machine needs it.
    pub async fn history(&self, store: Store, key: &str) -> Result<Vec<Entry>, EpError> {
        if !is_valid_key(key) {
            return Err(EpError::bad_request(format!(
                "{key:?} is not a valid KV key"
            )));
        }
        let bound = self.bound(store);
        let mut out: Vec<Entry> = Vec::new();
        let mut from = 1;
        while let Some(entry) = self
            .first_from(bound, key, from)
            .await
            .map_err(EpError::unavailable)?
        {
            from = entry.revision.0 + 1;
            out.push(entry);
        }
        Ok(out)
    }

    /// Every key under `prefix` whose subject holds a message, markers included, sorted, as
    /// the bind's mode lists them: [`Self::keys_by_info`] or, for a participant,
    /// [`Self::keys_by_consumer`]. Both return the same keys: a DEL/PURGE marker is listed,
    /// never skipped, and its reader sees the marker when it reads the key.
    async fn keys(&self, bound: &Bound, prefix: &str) -> Result<Vec<String>, String> {
        self.connected()?;
        let mut keys = match self.options.bind {
            Bind::Verified => self.keys_by_info(bound, prefix).await?,
            Bind::Participant => self.keys_by_consumer(bound, prefix).await?,
        };
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// `STREAM.INFO` with a `subjects_filter`, paged. The stream leader answers it and no
    /// consumer is created, so enumeration needs no `CONSUMER.CREATE` grant on the auth bucket
    /// (F98).
    async fn keys_by_info(&self, bound: &Bound, prefix: &str) -> Result<Vec<String>, String> {
        let filter = listing_filter(&bound.layout, prefix);
        let api = format!("STREAM.INFO.{}", bound.layout.stream);
        let mut keys = Vec::new();
        let mut offset: u64 = 0;
        loop {
            self.count();
            let page: Value = self
                .js
                .request(
                    api.clone(),
                    &json!({"subjects_filter": filter, "offset": offset}),
                )
                .await
                .map_err(|e| format!("listing {filter} failed: {e}"))?;
            if let Some(error) = page.get("error") {
                return Err(format!("listing {filter} was refused: {error}"));
            }
            let subjects = page
                .pointer("/state/subjects")
                .and_then(Value::as_object)
                .map(|m| m.iter().collect::<Vec<_>>())
                .unwrap_or_default();
            let got = subjects.len() as u64;
            for (subject, count) in subjects {
                let key = subject.strip_prefix(bound.layout.subject_prefix.as_str());
                if let Some(key) = key.filter(|k| k.starts_with(prefix)) {
                    if count.as_u64().unwrap_or(0) > 0 {
                        keys.push(key.to_owned());
                    }
                }
            }
            offset += got;
            let total = page.get("total").and_then(Value::as_u64).unwrap_or(0);
            if got == 0 || offset >= total {
                break;
            }
        }
        Ok(keys)
    }

    /// A participant's listing, the reference's `kv.keys`: an ephemeral push consumer made with
    /// the filter-subject create (`CONSUMER.CREATE.<stream>.<name>.<filter>`, the only create a
    /// reference-shaped grant admits, pinned to one family), delivering the last message of each
    /// subject under the filter, headers only, to a fresh inbox under the connection's own
    /// prefix. The subscription is made before the consumer, so no delivery is missed; the
    /// listing ends with the delivery the server counts no message pending after, or at once
    /// when the consumer was made with nothing to deliver. Every delivery is a key with a
    /// message, whatever its operation: a marker is listed as [`Self::keys_by_info`] lists it.
    /// The listing is bounded by [`SpaceOptions::request_timeout`]; the consumer is deleted
    /// after it, best-effort (its inactivity threshold removes one a lost delete leaves).
    async fn keys_by_consumer(&self, bound: &Bound, prefix: &str) -> Result<Vec<String>, String> {
        let stream = bound.stream()?;
        let filter = listing_filter(&bound.layout, prefix);
        let inbox = self.client.new_inbox();
        // The inbox's last token is a fresh NUID: unique, and a valid consumer name.
        let name = format!(
            "keys_{}",
            inbox.rsplit_once('.').map_or(inbox.as_str(), |(_, t)| t)
        );
        let deadline = tokio::time::Instant::now() + self.options.request_timeout;
        let mut deliveries = self
            .client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| format!("listing {filter}: subscribing its inbox failed: {e}"))?;
        let config = push::Config {
            deliver_subject: inbox,
            name: Some(name.clone()),
            filter_subject: filter.clone(),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ack_policy: AckPolicy::None,
            headers_only: true,
            memory_storage: true,
            num_replicas: 1,
            inactive_threshold: LISTING_INACTIVE_THRESHOLD,
            ..push::Config::default()
        };
        self.count();
        let created = tokio::time::timeout_at(
            deadline,
            self.js
                .create_consumer_strict_on_stream(config, &bound.layout.stream),
        )
        .await;
        let listed = match created {
            Ok(Ok(consumer)) => {
                let info = consumer.cached_info();
                // Empty only if nothing is pending and nothing went out: an info taken after
                // the deliveries began (a clustered create answers with live info) counts 0
                // pending once the last one left, and that one says so itself.
                if info.num_pending == 0 && info.delivered.consumer_sequence == 0 {
                    Ok(Vec::new())
                } else {
                    tokio::time::timeout_at(
                        deadline,
                        read_listing(&mut deliveries, &self.js, &bound.layout, prefix),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err(format!(
                            "listing {filter} did not complete within {:?}",
                            self.options.request_timeout
                        ))
                    })
                }
            }
            // The server answered, refusing: no consumer of ours exists, and a namesake is not
            // ours to delete.
            Ok(Err(e))
                if matches!(
                    e.kind(),
                    ConsumerCreateStrictErrorKind::JetStream(_)
                        | ConsumerCreateStrictErrorKind::AlreadyExists
                ) =>
            {
                return Err(format!("listing {filter} was refused: {e}"));
            }
            Ok(Err(e)) => Err(format!("creating the listing of {filter} failed: {e}")),
            Err(_) => Err(format!(
                "creating the listing of {filter} got no answer within {:?}",
                self.options.request_timeout
            )),
        };
        drop(deliveries);
        self.count();
        if let Err(e) = stream.delete_consumer(&name).await {
            tracing::debug!(
                consumer = %name,
                stream = %bound.layout.stream,
                "the listing consumer was not deleted ({e}); its inactivity threshold removes it"
            );
        }
        listed
    }

    /// Publishes one message with `Nats-Expected-Stream` (so a write can only land in this
    /// store) and, when given, `Nats-Expected-Last-Subject-Sequence` and `KV-Operation`. A lost
    /// pin is reported as such, never retried here (F11: the caller re-reads and re-decides).
    ///
    /// "No responders" is retried a few times: the server answers it only when no subscription
    /// took the message, so nothing was stored and sending again cannot write twice. It is what a
    /// stream says for a moment after it is created or changes leader, while its interest
    /// crosses the cluster's routes; nats.go's JetStream publish retries it for the same reason.
    #[allow(clippy::too_many_arguments)]
    async fn publish(
        &self,
        bound: &Bound,
        request: &KvRequest,
        key: &str,
        value: &[u8],
        operation: Option<&str>,
        expected: Option<u64>,
        mut hook: Option<&mut SendHook>,
    ) -> Result<Revision, PublishFailure> {
        if let Some(hook) = hook.as_deref_mut() {
            hook(SendPhase::Before, request).await;
        }
        let subject = bound.layout.subject(key);
        let mut waits = NO_RESPONDERS_WAITS.iter();
        loop {
            let sent = self
                .publish_once(
                    bound,
                    &subject,
                    value,
                    operation,
                    expected,
                    hook.take(),
                    request,
                )
                .await;
            match (sent, waits.next()) {
                (Err(PublishFailure::NoResponders(_)), Some(wait)) => {
                    tokio::time::sleep(*wait).await
                }
                (sent, _) => return sent,
            }
        }
    }

    /// One send of [`Self::publish`]; `hook` sees the first send only, as one write is one
    /// request however often "no responders" makes it go out.
    #[allow(clippy::too_many_arguments)]
    async fn publish_once(
        &self,
        bound: &Bound,
        subject: &str,
        value: &[u8],
        operation: Option<&str>,
        expected: Option<u64>,
        hook: Option<&mut SendHook>,
        request: &KvRequest,
    ) -> Result<Revision, PublishFailure> {
        self.connected().map_err(PublishFailure::NotStored)?;
        let mut headers = HeaderMap::new();
        headers.insert(NATS_EXPECTED_STREAM, bound.layout.stream.as_str());
        if let Some(op) = operation {
            headers.insert(KV_OPERATION, op);
        }
        let mut message = PublishMessage::build()
            .payload(Bytes::copy_from_slice(value))
            .headers(headers);
        if let Some(expected) = expected {
            message = message.expected_last_subject_sequence(expected);
        }
        self.count();
        let ack = self
            .js
            .send_publish(subject.to_owned(), message)
            .await
            .map_err(|e| {
                PublishFailure::NotStored(format!("the publish to {subject} was not sent: {e}"))
            })?;
        if let Some(hook) = hook {
            hook(SendPhase::After, request).await;
        }
        match ack.await {
            Ok(ack) => Ok(Revision(ack.sequence)),
            Err(e) => Err(match e.kind() {
                PublishErrorKind::WrongLastSequence => PublishFailure::WrongLastSequence,
                PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => {
                    PublishFailure::Unknown(format!(
                        "the publish to {subject} went out but its ack did not come back ({e})"
                    ))
                }
                PublishErrorKind::StreamNotFound => PublishFailure::NoResponders(format!(
                    "no stream answered the publish to {subject} (no responders, {} sends)",
                    NO_RESPONDERS_WAITS.len() + 1
                )),
                PublishErrorKind::Other => match std::error::Error::source(&e).and_then(api_code) {
                    Some(WRONG_LAST_SEQUENCE | WRONG_LAST_SEQUENCE_CONSTANT) => {
                        PublishFailure::WrongLastSequence
                    }
                    Some(STORE_FAILED) => PublishFailure::SubjectFull,
                    Some(code) => PublishFailure::NotStored(format!(
                        "the server refused the publish to {subject} (error {code}): {e}"
                    )),
                    None => PublishFailure::Unknown(format!(
                        "the publish to {subject} went out but its answer is unreadable ({e})"
                    )),
                },
                _ => PublishFailure::NotStored(format!(
                    "the server refused the publish to {subject}: {e}"
                )),
            }),
        }
    }

    /// Reads a contract artifact for `digest` and picks the bytes that hash to it: the last
    /// message on the digest subject, else the FIRST one (the create-only winner; anything later
    /// is a shadow append). When neither hashes right the last live bytes are returned anyway,
    /// so the core's verification fails loud (`internal`) rather than reading them as absent;
    /// `Artifact(None)` only when the subject holds no live message at all.
    pub async fn read_artifact(&self, digest: &Digest) -> Observation {
        let bound = &self.contracts;
        let key = digest.hex();
        let last = match self.get(bound, &key).await {
            Ok(entry) => entry.filter(Entry::is_put),
            Err(why) => return Observation::ArtifactUnavailable(why),
        };
        if let Some(entry) = &last {
            if Digest::of(&entry.value) == *digest {
                return Observation::Artifact(last.map(|e| e.value));
            }
        }
        let first = match self.first_from(bound, &key, 1).await {
            Ok(entry) => entry.filter(Entry::is_put),
            Err(why) => return Observation::ArtifactUnavailable(why),
        };
        match (first, last) {
            (Some(first), _) if Digest::of(&first.value) == *digest => {
                Observation::Artifact(Some(first.value))
            }
            (_, Some(last)) => Observation::Artifact(Some(last.value)),
            (first, None) => Observation::Artifact(first.map(|e| e.value)),
        }
    }
}

/// The subject filter listing `prefix` of `layout`'s store. It must be token-aligned:
/// everything up to the prefix's last `.`, then `>`; the rest of the prefix is matched against
/// each listed key.
fn listing_filter(layout: &StoreLayout, prefix: &str) -> String {
    let aligned = prefix
        .rfind('.')
        .and_then(|i| prefix.get(..=i))
        .unwrap_or("");
    format!("{}{aligned}>", layout.subject_prefix)
}

/// Reads a listing consumer's deliveries until one says no message is pending after it
/// (the `pending` token of its `$JS.ACK` reply subject), returning the key of each delivered
/// subject under `prefix`.
async fn read_listing(
    deliveries: &mut Subscriber,
    js: &Context,
    layout: &StoreLayout,
    prefix: &str,
) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    while let Some(message) = deliveries.next().await {
        // A heartbeat or flow-control message (100) carries no row (this consumer asks for
        // neither); any other status ends the listing unfinished, as the server ended it.
        match message.status {
            None => {}
            Some(StatusCode::IDLE_HEARTBEAT) => continue,
            Some(status) => {
                return Err(format!(
                    "the server interrupted the listing ({status} {})",
                    message.description.as_deref().unwrap_or("")
                ))
            }
        }
        let delivery = jetstream::Message {
            message,
            context: js.clone(),
        };
        let pending = delivery
            .info()
            .map_err(|e| {
                format!(
                    "a listing delivery on {} carries no readable JetStream metadata ({e})",
                    delivery.subject
                )
            })?
            .pending;
        let key = delivery
            .subject
            .as_str()
            .strip_prefix(layout.subject_prefix.as_str());
        if let Some(key) = key.filter(|k| k.starts_with(prefix)) {
            keys.push(key.to_owned());
        }
        if pending == 0 {
            return Ok(keys);
        }
    }
    Err("the listing's subscription ended before its last delivery".to_owned())
}

/// Maps a publish result to the request's outcome; `create_only` says whether a full
/// discard-new-per-subject subject refutes the write's own condition (a create) or refuses an
/// otherwise valid write (an update or delete on a one-message-per-subject store).
fn write_outcome(sent: Result<Revision, PublishFailure>, create_only: bool) -> KvOutcome {
    match sent {
        Ok(revision) => KvOutcome::Written(revision),
        Err(PublishFailure::WrongLastSequence) => KvOutcome::CasLost,
        Err(PublishFailure::SubjectFull) if create_only => KvOutcome::CasLost,
        Err(PublishFailure::SubjectFull) => KvOutcome::Unavailable(
            "the store keeps one message per subject and refused a second one; nothing was \
             written"
                .to_owned(),
        ),
        Err(PublishFailure::NotStored(why) | PublishFailure::NoResponders(why)) => {
            KvOutcome::Unavailable(why)
        }
        Err(PublishFailure::Unknown(why)) => KvOutcome::Ambiguous(why),
    }
}

/// Binds one store: `STREAM.INFO`, else (when missing and allowed) `STREAM.CREATE`; then
/// verifies the live config. A concurrent creator with another config makes the create fail;
/// the store is then re-read and verified, so the refusal names the differing setting. A
/// participant's bind ([`Bind::Participant`]) only names the stream.
async fn bind_store(
    js: &Context,
    layout: StoreLayout,
    options: &SpaceOptions,
    round_trips: &AtomicU64,
) -> Result<Bound, EpError> {
    if !options.stores.contains(layout.store) {
        return Ok(Bound {
            layout,
            stream: None,
        });
    }
    if options.bind == Bind::Participant {
        return named(js, layout).await;
    }
    let count = || round_trips.fetch_add(1, Ordering::Relaxed);
    let unreachable = |what: &str, e: &dyn std::fmt::Display| {
        EpError::unavailable(format!(
            "cannot {what} stream {} of store {}: {e}",
            layout.stream, layout.name
        ))
    };
    count();
    let stream = match js.get_stream(&layout.stream).await {
        Ok(stream) => stream,
        Err(e) => {
            let missing = matches!(e.kind(), GetStreamErrorKind::JetStream(ref j)
                if j.error_code() == ErrorCode(STREAM_NOT_FOUND));
            if !missing {
                return Err(unreachable("read", &e));
            }
            if !options.create_missing {
                return Err(EpError::failed_precondition(format!(
                    "store {} (stream {}) does not exist and this bind may not create it",
                    layout.name, layout.stream
                )));
            }
            create_placed(js, &layout, options, &count)
                .await
                .map_err(|e| unreachable("create", &e))?
        }
    };
    let live = &stream.cached_info().config;
    verify(&layout, live, replicas_for(options, live))?;
    named(js, layout).await
}

/// Creates a missing store's stream; a create refused because another creator won the race is
/// answered by reading the winner's stream, which the caller then verifies. A create the cluster
/// cannot place yet is retried for [`PLACEMENT_WAIT`].
async fn create_placed(
    js: &Context,
    layout: &StoreLayout,
    options: &SpaceOptions,
    count: &impl Fn() -> u64,
) -> Result<jetstream::stream::Stream, CreateStreamError> {
    let deadline = tokio::time::Instant::now() + PLACEMENT_WAIT;
    loop {
        count();
        match js
            .create_stream(desired_config(layout, options.replicas))
            .await
        {
            Ok(stream) => return Ok(stream),
            Err(e) if unplaceable(&e) && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(PLACEMENT_RETRY).await;
            }
            Err(e) if matches!(e.kind(), CreateStreamErrorKind::JetStream(_)) => {
                count();
                return js.get_stream(&layout.stream).await.map_err(|_| e);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Whether a create failed only because the cluster has no peers to place it on yet.
fn unplaceable(e: &CreateStreamError) -> bool {
    matches!(e.kind(), CreateStreamErrorKind::JetStream(ref j)
        if j.error_code() == ErrorCode(CLUSTER_NO_PEERS))
}

/// The bound store with its reusable stream handle, made without a request: a verified bind
/// has just read the config it needs, and a participant's reads none.
async fn named(js: &Context, layout: StoreLayout) -> Result<Bound, EpError> {
    match js.get_stream_no_info(&layout.stream).await {
        Ok(stream) => Ok(Bound {
            layout,
            stream: Some(stream),
        }),
        Err(e) => Err(EpError::internal(format!(
            "stream {} of store {} cannot be named: {e}",
            layout.stream, layout.name
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_prefixes_are_subject_safe() {
        for ok in ["epgate.a.b", "a", "x-y_z/w=1", "sha256-abc"] {
            assert!(is_valid_key(ok), "{ok}");
        }
        for bad in ["", ".a", "a.", "a..b", "a b", "a.*", "a.>", "é"] {
            assert!(!is_valid_key(bad), "{bad}");
        }
        assert!(is_valid_prefix(""));
        assert!(is_valid_prefix("epcred.x."));
        assert!(is_valid_prefix("svc.x"));
        assert!(!is_valid_prefix("a.>"));
        assert!(!is_valid_prefix("."));
    }

    fn create_error(code: u64) -> CreateStreamError {
        let error = serde_json::from_value(json!({
            "code": 400, "err_code": code, "description": "refused"
        }))
        .unwrap();
        CreateStreamError::new(CreateStreamErrorKind::JetStream(error))
    }

    #[test]
    fn only_a_placement_refusal_is_waited_out() {
        assert!(unplaceable(&create_error(CLUSTER_NO_PEERS)));
        // A stream that exists with another config, and a create that timed out, are answered at
        // once: waiting cannot change either.
        assert!(!unplaceable(&create_error(10058)));
        assert!(!unplaceable(&CreateStreamError::new(
            CreateStreamErrorKind::TimedOut
        )));
    }

    #[test]
    fn a_listing_filter_is_token_aligned() {
        let layout = StoreLayout::of(Store::Auth, &SpaceName::parse("s").unwrap());
        let filter = |prefix| listing_filter(&layout, prefix);
        assert_eq!(filter("epcred.m.i."), "$KV.cotal_auth_s.epcred.m.i.>");
        assert_eq!(filter("epcred.m.i.sha"), "$KV.cotal_auth_s.epcred.m.i.>");
        assert_eq!(filter("epcred"), "$KV.cotal_auth_s.>");
        assert_eq!(filter(""), "$KV.cotal_auth_s.>");
    }
}
