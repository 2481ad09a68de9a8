//! The run journal's checkpoint reader on a real `nats-server`, mirroring
//! `core/tests/run_checkpoint_read.rs` on the KV model: a run driver appends the reference's
//! journal records to the run's one subject of `WFJ_<space>` (each append fenced by
//! `Nats-Expected-Last-Subject-Sequence`, another run's appends interleaved on the same stream)
//! and the commit path writes the pause's status row. The plane then reads: a waiting
//! checkpoint reads `Waiting` with its token, an answered one `Resumed` with the answer id, an
//! absent step `None`, and a garbled record or an unreadable journal is a refusal, never
//! `None`. A connection holding only the reader's grant rows reads it; one without the journal
//! row is refused.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

#[path = "../../core/tests/journal_fixtures/mod.rs"]
mod journal_fixtures;

use std::time::Duration;

use cotal_core::driver::ModelWorld;
use cotal_core::journal::RunId;
use cotal_core::kv::{KvOutcome, KvRequest, Revision, Store};
use cotal_core::machine::Replay;
use cotal_core::names::{EndpointName, SpaceName};
use cotal_core::profiles::CheckpointToken;
use cotal_core::run::{
    checkpoint_status_key, journal_checkpoint_rows, journal_stream, journal_subject, AnswerId,
    CheckpointState, JournalCheckpoint, OperatorAnswers, ReadJournalCheckpoint,
};
use cotal_core::{EpError, ErrorCode};
use cotal_io_nats::async_nats::header::HeaderMap;
use cotal_io_nats::async_nats::jetstream::stream::{Config, RetentionPolicy, StorageType};
use cotal_io_nats::async_nats::jetstream::{self, Context};
use cotal_io_nats::async_nats::{Client, ConnectOptions};
use cotal_io_nats::journal::read_journal_checkpoint;
use cotal_io_nats::{RunJournals, Space, SpaceOptions, StoreSet};
use cotal_tests::nats::{NatsServer, ServerOptions};
use journal_fixtures::*;

/// Another run whose appends interleave with [`RUN`]'s on the same stream.
const OTHER_RUN: &str = "run-fedcba9876543210fedcba9876543210";
const TIMEOUT: Duration = Duration::from_secs(5);

fn space_name() -> SpaceName {
    SpaceName::parse("s1").unwrap()
}

fn manager() -> EndpointName {
    EndpointName::parse("manager").unwrap()
}

fn run_id(run: &str) -> RunId {
    RunId::parse(run).unwrap()
}

fn answers(run: &str, step: &str) -> OperatorAnswers {
    OperatorAnswers {
        run_id: run_id(run),
        step_key: step.to_owned(),
        amend: false,
    }
}

fn status_key() -> String {
    checkpoint_status_key(&manager(), &CheckpointToken::parse(TOKEN).unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn refused<T: std::fmt::Debug>(r: Result<T, EpError>, code: ErrorCode, needle: &str) {
    let e = r.expect_err(needle);
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(needle), "wanted {needle:?} in {e}");
}

/// The journal stream as the space's provisioning creates it (`endpoint-binding.ts`
/// `createEndpointStreams`): one subject per run, limits retention, file storage, no
/// `max_age`, no Direct Get.
async fn create_journal_stream(js: &Context) {
    js.create_stream(Config {
        name: journal_stream(&space_name()),
        subjects: vec![format!("cotal.{}.wfj.*", space_name())],
        retention: RetentionPolicy::Limits,
        storage: StorageType::File,
        allow_direct: false,
        ..Config::default()
    })
    .await
    .unwrap();
}

/// A run's appender as `run-journal.ts` is one: every record carries
/// `Nats-Expected-Last-Subject-Sequence` for the run's subject, and the head advances only from
/// the ack.
struct Appender {
    subject: String,
    head: u64,
}

impl Appender {
    fn new(run: &str) -> Self {
        Appender {
            subject: journal_subject(&space_name(), &run_id(run)),
            head: 0,
        }
    }

    async fn append(&mut self, js: &Context, record: &str) {
        let mut headers = HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            self.head.to_string().as_str(),
        );
        let ack = js
            .publish_with_headers(
                self.subject.clone(),
                headers,
                record.as_bytes().to_vec().into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        self.head = ack.sequence;
    }
}

/// The other run's activation: the same bytes under its own run id.
fn other_activation() -> String {
    ACTIVATION.replace(RUN, OTHER_RUN)
}

/// The status row written the way the commit path writes it: the mint creates it, the
/// settlement updates it pinned to the revision it read.
async fn write_status(space: &Space, bytes: &str, expected: Option<Revision>) -> Revision {
    let request = match expected {
        None => KvRequest::CreateStrict {
            store: Store::Records,
            key: status_key(),
            value: bytes.as_bytes().to_vec(),
        },
        Some(expected) => KvRequest::Update {
            store: Store::Records,
            key: status_key(),
            value: bytes.as_bytes().to_vec(),
            expected,
        },
    };
    match space.execute(&request).await {
        KvOutcome::Written(revision) => revision,
        other => panic!("the status write did not commit: {other:?}"),
    }
}

/// The same read on the KV model, over the journal bytes the server holds.
fn on_model(
    status: &str,
    records: &[&str],
    step: &str,
) -> Result<Option<JournalCheckpoint>, EpError> {
    let mut world = ModelWorld::default();
    world
        .kv
        .put(Store::Records, &status_key(), status.as_bytes());
    let read =
        ReadJournalCheckpoint::for_answers(manager(), &answers(RUN, step), messages(records));
    cotal_core::driver::drive(&mut Replay::new(read), &mut world)
}

/// The plane's journal-reading context on `client` (call inside the runtime).
fn reader(client: Client) -> Context {
    jetstream::ContextBuilder::new()
        .timeout(TIMEOUT)
        .build(client)
}

/// A server, the space bound on an unrestricted connection, and the journal stream.
struct Fixture {
    server: NatsServer,
    rt: tokio::runtime::Runtime,
    space: Space,
    js: Context,
    journals: RunJournals,
}

fn fixture(options: ServerOptions, connect: ConnectOptions) -> Fixture {
    let server = NatsServer::start(options).unwrap();
    let rt = runtime();
    let client: Client = rt.block_on(connect.connect(server.url())).unwrap();
    let space = rt
        .block_on(Space::bind(
            client.clone(),
            space_name(),
            SpaceOptions {
                request_timeout: TIMEOUT,
                ..SpaceOptions::default()
            },
        ))
        .unwrap();
    let (js, journals) = rt.block_on(async {
        let js = jetstream::new(client.clone());
        (js, RunJournals::new(reader(client), space_name()))
    });
    Fixture {
        server,
        rt,
        space,
        js,
        journals,
    }
}

impl Fixture {
    fn read(&self, run: &str, step: &str) -> Result<Option<JournalCheckpoint>, EpError> {
        self.rt.block_on(read_journal_checkpoint(
            &self.journals,
            &self.space,
            &manager(),
            &answers(run, step),
        ))
    }
}

#[test]
fn a_waiting_checkpoint_reads_waiting_and_an_answered_one_resumed_with_its_answer_id() {
    let f = fixture(ServerOptions::default(), ConnectOptions::new());
    let mut run = Appender::new(RUN);
    let mut other = Appender::new(OTHER_RUN);
    let status_revision = f.rt.block_on(async {
        create_journal_stream(&f.js).await;
        run.append(&f.js, ACTIVATION).await;
        other.append(&f.js, &other_activation()).await;
        run.append(&f.js, CHECKPOINT_BEGIN).await;
        let revision = write_status(&f.space, STATUS_WAITING, None).await;
        run.append(&f.js, CHECKPOINT_BOUND).await;
        revision
    });

    let before = f.journals.round_trips();
    let waiting = f.read(RUN, STEP).unwrap();
    assert_eq!(
        waiting,
        Some(JournalCheckpoint {
            step_key: STEP.into(),
            token: CheckpointToken::parse(TOKEN).unwrap(),
            state: CheckpointState::Waiting,
        })
    );
    assert_eq!(
        f.journals.round_trips() - before,
        4,
        "three records and the read that finds no fourth; the other run's record is skipped"
    );
    let journal = [ACTIVATION, CHECKPOINT_BEGIN, CHECKPOINT_BOUND];
    assert_eq!(waiting, on_model(STATUS_WAITING, &journal, STEP).unwrap());

    // The answer is accepted: the commit path settles the status, then the driver the step.
    f.rt.block_on(async {
        write_status(&f.space, STATUS_RESUMED, Some(status_revision)).await;
        run.append(&f.js, CHECKPOINT_SETTLED).await;
    });
    let answered = f.read(RUN, STEP).unwrap().unwrap();
    assert_eq!(
        answered.state,
        CheckpointState::Resumed {
            answer_id: Some(AnswerId::parse(ANSWER).unwrap())
        }
    );
    assert_eq!(answered.token.as_str(), TOKEN);
    let journal = [
        ACTIVATION,
        CHECKPOINT_BEGIN,
        CHECKPOINT_BOUND,
        CHECKPOINT_SETTLED,
    ];
    assert_eq!(
        Some(answered),
        on_model(STATUS_RESUMED, &journal, STEP).unwrap()
    );
}

#[test]
fn an_absent_step_or_a_run_never_journaled_reads_none() {
    let f = fixture(ServerOptions::default(), ConnectOptions::new());
    let mut run = Appender::new(RUN);
    f.rt.block_on(async {
        create_journal_stream(&f.js).await;
        run.append(&f.js, ACTIVATION).await;
        run.append(&f.js, CHECKPOINT_BEGIN).await;
        write_status(&f.space, STATUS_WAITING, None).await;
    });
    assert_eq!(f.read(RUN, "/checkpoint:other#0").unwrap(), None);
    assert_eq!(f.read(OTHER_RUN, STEP).unwrap(), None);
}

#[test]
fn a_garbled_record_is_refused_never_none() {
    let f = fixture(ServerOptions::default(), ConnectOptions::new());
    let mut run = Appender::new(RUN);
    let mut other = Appender::new(OTHER_RUN);
    f.rt.block_on(async {
        create_journal_stream(&f.js).await;
        write_status(&f.space, STATUS_WAITING, None).await;
        run.append(&f.js, ACTIVATION).await;
        run.append(&f.js, CHECKPOINT_BEGIN).await;
        // A record carrying a field the closed entry schema does not name.
        run.append(
            &f.js,
            &CHECKPOINT_BOUND.replace(r#""external":{"#, r#""priority":1,"external":{"#),
        )
        .await;
        // Another run's journal whose second record is not JSON at all.
        other.append(&f.js, &other_activation()).await;
        other.append(&f.js, "{\"v\":1,").await;
    });
    for step in [STEP, "/checkpoint:other#0"] {
        refused(
            f.read(RUN, step),
            ErrorCode::Internal,
            "unknown field \"priority\"",
        );
        refused(
            f.read(OTHER_RUN, step),
            ErrorCode::Internal,
            "not valid JSON",
        );
    }
}

#[test]
fn a_journal_that_cannot_be_read_is_unavailable_never_none() {
    let f = fixture(ServerOptions::default(), ConnectOptions::new());
    // No journal stream in this space at all.
    refused(
        f.read(RUN, STEP),
        ErrorCode::Unavailable,
        "an unreadable journal is never an empty one",
    );
    // A journal read against the records of another space is a wiring bug.
    let elsewhere = f.rt.block_on(async {
        RunJournals::new(
            reader(f.space.client().clone()),
            SpaceName::parse("s2").unwrap(),
        )
    });
    refused(
        f.rt.block_on(read_journal_checkpoint(
            &elsewhere,
            &f.space,
            &manager(),
            &answers(RUN, STEP),
        )),
        ErrorCode::Internal,
        "records of space s1",
    );
}

/// The reader's grant rows are enough, and the journal row is needed: a connection holding
/// [`journal_checkpoint_rows`] (plus the `STREAM.INFO` its records binding proves the store's
/// shape with) reads the checkpoint; one without the journal row is refused, not answered
/// `None`.
#[test]
fn the_readers_grant_rows_suffice_and_without_the_journal_row_it_is_refused() {
    let rows = journal_checkpoint_rows(&space_name());
    let bind = format!("$JS.API.STREAM.INFO.KV_cotal_records_{}", space_name());
    let quoted = |rows: &[&str]| {
        rows.iter()
            .map(|r| format!("\"{r}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let config = format!(
        "authorization {{\n  users = [\n    {{user: writer, password: w}}\n    \
         {{user: reader, password: r, permissions: {{publish: [{}], subscribe: [\"_INBOX.>\"]}}}}\n    \
         {{user: blind, password: b, permissions: {{publish: [{}], subscribe: [\"_INBOX.>\"]}}}}\n  ]\n}}\n",
        quoted(&[&rows[0], &rows[1], &bind]),
        quoted(&[&rows[1], &bind]),
    );
    let f = fixture(
        ServerOptions {
            extra_config: config,
            ..ServerOptions::default()
        },
        ConnectOptions::with_user_and_password("writer".into(), "w".into()),
    );
    let mut run = Appender::new(RUN);
    f.rt.block_on(async {
        create_journal_stream(&f.js).await;
        run.append(&f.js, ACTIVATION).await;
        run.append(&f.js, CHECKPOINT_BEGIN).await;
        write_status(&f.space, STATUS_WAITING, None).await;
    });
    let restricted = |user: &str, password: &str| {
        let client =
            f.rt.block_on(
                ConnectOptions::with_user_and_password(user.into(), password.into())
                    .connect(f.server.url()),
            )
            .unwrap();
        let records =
            f.rt.block_on(Space::bind(
                client.clone(),
                space_name(),
                SpaceOptions {
                    request_timeout: Duration::from_secs(1),
                    create_missing: false,
                    stores: StoreSet::of(&[Store::Records]),
                    replicas_as_found: true,
                    ..SpaceOptions::default()
                },
            ))
            .unwrap();
        f.rt.block_on(async {
            let js = jetstream::ContextBuilder::new()
                .timeout(Duration::from_secs(1))
                .build(client);
            let journals = RunJournals::new(js, space_name());
            read_journal_checkpoint(&journals, &records, &manager(), &answers(RUN, STEP)).await
        })
    };
    let read = restricted("reader", "r").unwrap().unwrap();
    assert_eq!(read.state, CheckpointState::Waiting);
    assert_eq!(read.token.as_str(), TOKEN);
    refused(
        restricted("blind", "b"),
        ErrorCode::Unavailable,
        "an unreadable journal",
    );
}
