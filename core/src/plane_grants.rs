//! The grants of the plane's own, self-minted data-account connections (reference-auth-service
//! §2.5, §2.12; SPEC §13.9): one pure builder per connection, from the space and the
//! connection's id to the exact NATS `pub`/`sub` allow rows, plus the CONNZ label of every
//! connection the plane opens ([`PlaneConnection`]).
//!
//! The plane holds the data account's signing key, so its infrastructure access is signed from
//! that key directly instead of from a ledgered credential row (no connect ever re-reads the
//! plane's own row, so a row would be no enforcement point). Each credential is short
//! ([`AUTHORITY_CLIENT_TTL_SECS`]) and re-minted in process; revoking it means stopping the
//! plane or rotating the signing key.
//!
//! Every builder takes a [`ConnId`]: the inbox grammar `[A-Za-z0-9_-]{8,120}` is enforced when
//! the id is parsed, so a wildcard (`>`, `*`), dotted or empty id can never widen the scoped
//! reply inbox `_INBOX_<connId>.>`. Every row is checked again before it leaves
//! ([`crate::profiles`] row rules), and rows are emitted in the order of the builder's table.
//!
//! Notation in the tables: `s` = the space token, `P` = `cotal.<s>`, `auth` =
//! `cotal_auth_<s>`, `rec` = `cotal_records_<s>`, `inbox` = `_INBOX_<connId>.>`.
//!
//! Every builder keeps F98: none holds `CONSUMER.CREATE` (or any consumer API) on any stream —
//! enumeration of the auth bucket belongs to the sealed ledger scanner alone — and only
//! [`auth_barrier`] writes `plane`, as the exact key. The `STREAM.MSG.GET` rows are leader-served
//! point reads (F7, F8); they are body-selected, so each is a stream-wide metadata read while
//! the credential lives (the reference's named D32 residual).

use std::fmt;

use crate::error::EpError;
use crate::gate::ProcessEpoch;
use crate::host::{AUTH_ENDPOINT, RETIRE_LIFECYCLE};
use crate::issuance::GateRef;
use crate::jwt::Permissions;
use crate::names::{
    accepted_bucket, actors_bucket, admission_bucket, auth_bucket, contract_stream, issued_bucket,
    records_bucket, sessions_bucket, space_prefix, EndpointName, InstanceId, SpaceName,
};
use crate::profiles::{checked_permissions, inbox, registration_executor_rows, ConnId};
use crate::run::{journal_stream, served_run_request_subjects};

/// Lifetime of every self-minted plane credential: 15 minutes, re-minted at half-life. A
/// bounded in-memory credential that ends with the process, never a persisted long one
/// (reference `AUTHORITY_CLIENT_TTL_SEC`).
pub const AUTHORITY_CLIENT_TTL_SECS: u64 = 900;

/// Every connection the plane opens for itself, by role. The label is the connection's CONNZ
/// `name`, so an operator (and the close inventory of §2.9) can tell them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlaneConnection {
    /// The mint writer: store ensure and issuance ([`auth_mint`]).
    AuthMint,
    /// The short-lived connection of the plane's own `auth` registration
    /// ([`auth_registration`]).
    AuthRegistration,
    /// The read-only connect reader and gate watch ([`auth_reader`]).
    AuthReader,
    /// The remote-manager issuer ([`remote_manager_issuer`]).
    RemoteManagerIssuer,
    /// The barrier executor, the only writer of `plane` ([`auth_barrier`]).
    AuthBarrier,
    /// The sealed auth-ledger scanner, whose connection the plane claim pins ([`auth_scan`]).
    AuthScan,
    /// The sealed records scanner, pinned likewise ([`records_scan`]).
    RecordsScan,
    /// The auth control rail listener: the plane's own `auth` instance serving
    /// `retire-lifecycle` at its registered epoch ([`auth_admin`]).
    AuthAdmin,
    /// The auth callout connection: it connects with the stored callout-account creds, never a
    /// self-minted JWT, so it has a label but no builder here.
    AuthService,
    /// A short connection of the plane's system-account user (`system-user.json`): one
    /// liveness sweep or one verified eviction, then closed. Not a data-account connection, so
    /// no builder here either ([`crate::liveness::system_user_permissions`]).
    PlaneSystem,
    /// The operator's `cotal-authd gate reconcile` ([`gate_reconcile`]).
    GateReconcile,
    /// The operator's `cotal-authd actor revoke --credential` ([`credential_revoke`]).
    CredentialRevoke,
    /// A hosted plane's short connection registering one host incarnation
    /// ([`host_registration`]).
    HostRegistration,
    /// A hosted plane's connection awaiting one host incarnation's fence
    /// ([`auth_reader_watching`] on the host gate).
    HostFence,
    /// The replicated actor ledger's reader and writer ([`actor_ledger`]): a plane's, when
    /// its space keeps the ledger in KV (so it is not among [`PlaneConnection::ALL`]), and the
    /// operator's `actor` verbs' short one.
    ActorLedger,
}

impl PlaneConnection {
    /// Every connection a running plane holds, in boot order of reference §2.4/§2.5 (the
    /// callout last). The short system and reconcile connections are not among them.
    pub const ALL: [PlaneConnection; 9] = [
        PlaneConnection::AuthMint,
        PlaneConnection::AuthRegistration,
        PlaneConnection::AuthReader,
        PlaneConnection::RemoteManagerIssuer,
        PlaneConnection::AuthBarrier,
        PlaneConnection::AuthScan,
        PlaneConnection::RecordsScan,
        PlaneConnection::AuthAdmin,
        PlaneConnection::AuthService,
    ];

    /// The role token of the label (`auth-mint`, …).
    pub const fn role(self) -> &'static str {
        match self {
            PlaneConnection::AuthMint => "auth-mint",
            PlaneConnection::AuthRegistration => "auth-registration",
            PlaneConnection::AuthReader => "auth-reader",
            PlaneConnection::RemoteManagerIssuer => "remote-manager-issuer",
            PlaneConnection::AuthBarrier => "auth-barrier",
            PlaneConnection::AuthScan => "auth-scan",
            PlaneConnection::RecordsScan => "records-scan",
            PlaneConnection::AuthAdmin => "auth-admin",
            PlaneConnection::AuthService => "auth-service",
            PlaneConnection::PlaneSystem => "plane-system",
            PlaneConnection::GateReconcile => "gate-reconcile",
            PlaneConnection::CredentialRevoke => "credential-revoke",
            PlaneConnection::HostRegistration => "host-registration",
            PlaneConnection::HostFence => "host-fence",
            PlaneConnection::ActorLedger => "actor-ledger",
        }
    }

    /// The connection name: `cotal:<role>:<space>`.
    pub fn label(self, space: &SpaceName) -> String {
        format!("cotal:{}:{}", self.role(), space.token())
    }
}

impl fmt::Display for PlaneConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.role())
    }
}

/// The space-derived stream and bucket names the builders use.
struct Names {
    auth: String,
    rec: String,
    auth_stream: String,
    rec_stream: String,
    admission: String,
    admission_stream: String,
    issued: String,
    issued_stream: String,
    accepted: String,
    accepted_stream: String,
    sessions_stream: String,
    epc: String,
}

impl Names {
    fn new(space: &SpaceName) -> Names {
        let (auth, rec) = (auth_bucket(space), records_bucket(space));
        let (admission, issued, accepted) = (
            admission_bucket(space),
            issued_bucket(space),
            accepted_bucket(space),
        );
        Names {
            auth_stream: format!("KV_{auth}"),
            rec_stream: format!("KV_{rec}"),
            admission_stream: format!("KV_{admission}"),
            issued_stream: format!("KV_{issued}"),
            accepted_stream: format!("KV_{accepted}"),
            sessions_stream: format!("KV_{}", sessions_bucket(space)),
            admission,
            issued,
            accepted,
            epc: contract_stream(space),
            auth,
            rec,
        }
    }

    /// The reference's writer rows (`authorityWriterGrants`), in its order.
    /// The read-only rows the reader and the barrier both open with, in the reference's order:
    /// the JetStream probe, the bind shape proof of both stores (F10) and their leader-served
    /// point reads (F7, F8).
    fn proof_and_read_rows(&self) -> Vec<String> {
        let (a, r) = (&self.auth_stream, &self.rec_stream);
        vec![
            "$JS.API.INFO".to_owned(),
            format!("$JS.API.STREAM.INFO.{a}"),
            format!("$JS.API.STREAM.INFO.{r}"),
            format!("$JS.API.STREAM.MSG.GET.{a}"),
            format!("$JS.API.STREAM.MSG.GET.{r}"),
        ]
    }

    fn writer_rows(&self) -> Vec<String> {
        let (a, r) = (&self.auth_stream, &self.rec_stream);
        vec![
            "$JS.API.INFO".to_owned(),
            format!("$JS.API.STREAM.CREATE.{a}"),
            format!("$JS.API.STREAM.CREATE.{r}"),
            format!("$JS.API.STREAM.UPDATE.{r}"),
            format!("$JS.API.STREAM.INFO.{a}"),
            format!("$JS.API.STREAM.INFO.{r}"),
            format!("$JS.API.STREAM.MSG.GET.{a}"),
            format!("$JS.API.STREAM.MSG.GET.{r}"),
            format!("$JS.API.DIRECT.GET.{r}"),
            format!("$JS.API.DIRECT.GET.{r}.>"),
            format!("$KV.{}.gate.>", self.auth),
            format!("$KV.{}.cred.>", self.auth),
            format!("$KV.{}.bysrc.>", self.auth),
            format!("$KV.{}.lifecycle.>", self.rec),
            format!("$KV.{}.uid.>", self.rec),
        ]
    }
}

/// The create-or-verify of the `streams` the mint writer ensures: every create, then every
/// verify, in the order the rows tables number them.
fn ensure_rows(streams: &[&String]) -> Vec<String> {
    let creates = streams.iter().map(|s| format!("$JS.API.STREAM.CREATE.{s}"));
    let infos = streams.iter().map(|s| format!("$JS.API.STREAM.INFO.{s}"));
    creates.chain(infos).collect()
}

/// One store's bind shape proof (F10) and its leader-served point reads, the pair a
/// connection reading that store holds.
fn proof_and_read(stream: &str) -> [String; 2] {
    [
        format!("$JS.API.STREAM.INFO.{stream}"),
        format!("$JS.API.STREAM.MSG.GET.{stream}"),
    ]
}

fn grant(publish: Vec<String>, conn: &ConnId) -> Result<Permissions, EpError> {
    checked_permissions(publish, vec![inbox(conn)])
}

/// `cotal:auth-mint:<s>` — the mint writer: the reference's writer grants exactly, plus the
/// boot-time ensure of the two stores no one else creates.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | account JetStream probe |
/// | 2 | pub | `$JS.API.STREAM.CREATE.KV_auth` | store ensure |
/// | 3 | pub | `$JS.API.STREAM.CREATE.KV_rec` | store ensure |
/// | 4 | pub | `$JS.API.STREAM.UPDATE.KV_rec` | store ensure (reference) |
/// | 5 | pub | `$JS.API.STREAM.INFO.KV_auth` | ensure verify, bind shape proof (F10) |
/// | 6 | pub | `$JS.API.STREAM.INFO.KV_rec` | same |
/// | 7 | pub | `$JS.API.STREAM.MSG.GET.KV_auth` | leader-served reads (F7) |
/// | 8 | pub | `$JS.API.STREAM.MSG.GET.KV_rec` | leader-served reads (F8) |
/// | 9 | pub | `$JS.API.DIRECT.GET.KV_rec` | records reads feeding revision-pinned CASes (reference) |
/// | 10 | pub | `$JS.API.DIRECT.GET.KV_rec.>` | same, subject form |
/// | 11 | pub | `$KV.auth.gate.>` | the lifecycle gate CAS fence |
/// | 12 | pub | `$KV.auth.cred.>` | credential rows |
/// | 13 | pub | `$KV.auth.bysrc.>` | source index rows |
/// | 14 | pub | `$KV.rec.lifecycle.>` | alias heads |
/// | 15 | pub | `$KV.rec.uid.>` | uid reservations |
/// | 16 | pub | `$JS.API.STREAM.CREATE.KV_cotal_admission_s` | **deviation**: admission store ensure |
/// | 17 | pub | `$JS.API.STREAM.CREATE.EPC_s` | **deviation**: contract store ensure |
/// | 18 | pub | `$JS.API.STREAM.CREATE.KV_cotal_issued_s` | **deviation**: issued store ensure |
/// | 19 | pub | `$JS.API.STREAM.CREATE.KV_cotal_accepted_s` | **deviation**: accepted store ensure |
/// | 20 | pub | `$JS.API.STREAM.INFO.KV_cotal_admission_s` | **deviation**: its create-or-verify |
/// | 21 | pub | `$JS.API.STREAM.INFO.EPC_s` | **deviation**: its create-or-verify |
/// | 22 | pub | `$JS.API.STREAM.INFO.KV_cotal_issued_s` | **deviation**: its create-or-verify |
/// | 23 | pub | `$JS.API.STREAM.INFO.KV_cotal_accepted_s` | **deviation**: its create-or-verify |
/// | 24 | pub | `$JS.API.STREAM.CREATE.KV_cotal_sessions_s` | **deviation**: sessions store ensure |
/// | 25 | pub | `$JS.API.STREAM.INFO.KV_cotal_sessions_s` | **deviation**: its create-or-verify |
/// | 26–29 | pub | [`actor_ledger`]'s rows 2–5 | **deviation**: the replicated actor ledger |
/// | 30 | sub | `inbox` | replies |
///
/// Deviation (rows 16–25): in the reference the mesh provisioning (`cotal up`) creates the
/// admission, contract, issued-authority and sessions stores; this implementation has no
/// provisioner, and the plane's own registration needs the contract store at boot, so the mint
/// writer ensures all five with the same create-or-verify it runs on its own stores (a serving
/// manager's `session-ledger` credential writes session rows but may create no stream). It holds no read or write
/// on any of them: the rows create with the verified shape (F10) or prove an existing one.
///
/// Deviation (rows 26–29): a space that keeps its actor ledger replicated (`init --ledger kv`)
/// has the plane read and write the ledger's rows, which live on the host's files in the
/// reference; they ride this connection, whose bind creates the store.
pub fn auth_mint(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    let n = Names::new(space);
    let mut publish = n.writer_rows();
    publish.extend(ensure_rows(&[
        &n.admission_stream,
        &n.epc,
        &n.issued_stream,
        &n.accepted_stream,
    ]));
    publish.extend(ensure_rows(&[&n.sessions_stream]));
    publish.extend(actor_ledger_rows(space));
    grant(publish, conn)
}

/// `cotal:auth-reader:<s>` — the connect reader and the plane's gate watch: read-only over
/// both authority stores, shape-proved at every bind (F10).
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | account JetStream probe |
/// | 2 | pub | `$JS.API.STREAM.INFO.KV_auth` | bind shape proof (F10) |
/// | 3 | pub | `$JS.API.STREAM.INFO.KV_rec` | same |
/// | 4 | pub | `$JS.API.STREAM.MSG.GET.KV_auth` | leader-served gate and row reads (F7) |
/// | 5 | pub | `$JS.API.STREAM.MSG.GET.KV_rec` | leader-served record reads (F8) |
/// | 6 | sub | `inbox` | replies |
///
/// No `$KV` row: the reader writes nothing. No create: a missing store is a refusal, never
/// created by a reader.
pub fn auth_reader(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    grant(Names::new(space).proof_and_read_rows(), conn)
}

/// `cotal:auth-reader:<s>` of a running plane: [`auth_reader`]'s rows plus a subscription to
/// its own gate's key subject, which pushes every write of the gate (anyone's) to the fence
/// watch the moment it lands.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1–5 | pub | [`auth_reader`] rows 1–5 | as there |
/// | 6 | sub | `inbox` | replies |
/// | 7 | sub | `$KV.auth.<gate key>` | **deviation**: the fence's push wake (issue 13); one exact key, a core subscription, no consumer — not an enumeration, so F98 holds |
pub fn auth_reader_watching(
    space: &SpaceName,
    conn: &ConnId,
    gate: &GateRef,
) -> Result<Permissions, EpError> {
    let n = Names::new(space);
    checked_permissions(
        n.proof_and_read_rows(),
        vec![inbox(conn), format!("$KV.{}.{}", n.auth, gate.key())],
    )
}

/// `cotal:auth-scan:<s>` — the sealed auth-ledger scanner: its store's shape proof and
/// leader-served reads, and the auth-consumer reaper's list and delete.
///
/// **Deviation**: the reference's sealed scanners are the plane's only consumer-creating
/// connections. This plane enumerates without consumers (`STREAM.INFO` with a subjects filter,
/// F98), so no connection of it creates one. The one principal that may create a consumer on
/// the auth stream is a remote manager's five-minute executor (pinned to its own family, for
/// the reference's `kv.keys`); this connection lists the stream's consumers and deletes every
/// one older than that executor's lifetime, so none outlives the credential that made it
/// (`cotal_io_nats::reaper`). The scanners keep their role in the plane claim — the claim pins
/// their exact connections, and either one's drop fences the plane.
pub fn auth_scan(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    let stream = &Names::new(space).auth_stream;
    let mut publish = vec!["$JS.API.INFO".to_owned()];
    publish.extend(proof_and_read(stream));
    publish.extend([
        format!("$JS.API.CONSUMER.LIST.{stream}"),
        format!("$JS.API.CONSUMER.DELETE.{stream}.*"),
    ]);
    grant(publish, conn)
}

/// `cotal:records-scan:<s>` — the sealed records scanner: its store's shape proof and
/// leader-served reads, nothing else.
pub fn records_scan(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    let mut publish = vec!["$JS.API.INFO".to_owned()];
    publish.extend(proof_and_read(&Names::new(space).rec_stream));
    grant(publish, conn)
}

/// `cotal:remote-manager-issuer:<s>` — the writer rows 1–15 of [`auth_mint`] (without its
/// ensure deviation: the mint writer has already ensured the stores) plus the manager
/// endpoint's gate, credential and renewal-cleanup families, and the contract reads a standing
/// renewal re-derives the serve grant from.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1–15 | pub | the writer rows of [`auth_mint`] 1–15 | as there |
/// | 16 | pub | `$KV.auth.epgate.manager.>` | manager instance gates |
/// | 17 | pub | `$KV.auth.epcred.manager.>` | manager instance credential rows |
/// | 18 | pub | `$KV.auth.renewclean.manager.>` | manager instance renewal cleanup intents |
/// | 19 | pub | `$JS.API.STREAM.INFO.EPC_s` | contract store bind shape proof (F10) |
/// | 20 | pub | `$JS.API.STREAM.MSG.GET.EPC_s` | leader-served artifact reads |
/// | 21 | pub | `$KV.cotal_issued_s.>` | **deviation**: the §13.15 issuer's evidence, attempt and source-index rows |
/// | 22 | pub | `$KV.cotal_accepted_s.>` | **deviation**: the issuer's create-only accepted rows |
/// | 23 | pub | `$JS.API.STREAM.INFO.KV_cotal_issued_s` | bind shape proof (F10); the source walk's listing |
/// | 24 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_issued_s` | leader-served evidence and attempt reads (F79) |
/// | 25 | pub | `$JS.API.STREAM.INFO.KV_cotal_accepted_s` | bind shape proof (F10) |
/// | 26 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_accepted_s` | leader-served accepted-row reads |
/// | 27 | pub | `$KV.cotal_admission_s.admission.v1.manager.*` | **deviation**: run admissions of the manager endpoint, create-only (F88) |
/// | 28 | pub | `$JS.API.STREAM.INFO.KV_cotal_admission_s` | bind shape proof (F10) |
/// | 29 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_admission_s` | leader-served admission reads |
/// | 30 | pub | `$JS.API.STREAM.MSG.GET.WFJ_s` | leader-served walk of a run's journal for the pause an answering operator settles (§5.5 item 4; `run::journal_checkpoint_rows`, whose records row is row 8) |
/// | 31 | pub | `$JS.API.STREAM.INFO.KV_cotal_sessions_s` | bind shape proof (F10) |
/// | 32 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_sessions_s` | leader-served session row reads: the `session-caller` check at the exchange and at the callout (§3.5, §8.4) |
/// | 33 | pub | `inbox` | **deviation**: the run request observer's echo through the server, which proves every earlier delivery has been read before a take (`io-nats::observed`) |
/// | 34 | sub | `inbox` | replies, and the echo |
/// | 35 | sub | the twelve served run request patterns (`run::served_run_request_subjects`) | SPEC 14.8: the issuing host observes the `run-start`, `run-resume` and `run-answer` requests a forward may name; read only, it never replies |
///
/// Rows 18–20 were found by running the manager route on a real operator-mode server (test
/// `manager_route_flow`): `activate` and `renewStandingBundle` write the cleanup intent
/// `renewclean.manager.<iid>` before they release the family (reference §4.6), and
/// `renewStandingBundle` reads the registered spec's closures from the contract store.
///
/// Deviation (rows 21–29): the reference opens a one-shot `issuer` session and a 60 s
/// `run-admitter` credential pinned to one run for these writes. This plane's issuing
/// connection is long-lived and plane-internal (never issued to a peer), so it carries the
/// issuer profile itself, and its admission row is confined to the one endpoint whose runs it
/// admits. The write-plus-raw-read pairing on the issued stream is the reference issuer's named
/// residual, held here by no one but the plane.
pub fn remote_manager_issuer(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    let n = Names::new(space);
    let mut publish = n.writer_rows();
    publish.extend([
        format!("$KV.{}.epgate.manager.>", n.auth),
        format!("$KV.{}.epcred.manager.>", n.auth),
        format!("$KV.{}.renewclean.manager.>", n.auth),
    ]);
    publish.extend(proof_and_read(&n.epc));
    publish.extend([
        format!("$KV.{}.>", n.issued),
        format!("$KV.{}.>", n.accepted),
    ]);
    publish.extend(proof_and_read(&n.issued_stream));
    publish.extend(proof_and_read(&n.accepted_stream));
    publish.push(format!("$KV.{}.admission.v1.manager.*", n.admission));
    publish.extend(proof_and_read(&n.admission_stream));
    publish.push(format!("$JS.API.STREAM.MSG.GET.{}", journal_stream(space)));
    publish.extend(proof_and_read(&n.sessions_stream));
    publish.push(inbox(conn));
    let mut subscribe = vec![inbox(conn)];
    subscribe.extend(served_run_request_subjects(space));
    checked_permissions(publish, subscribe)
}

/// `cotal:auth-barrier:<s>` — the lifecycle-barrier executor: the reference's barrier grants
/// exactly, plus the plane claim key.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | account JetStream probe |
/// | 2 | pub | `$JS.API.STREAM.INFO.KV_auth` | bind shape proof (F10) |
/// | 3 | pub | `$JS.API.STREAM.INFO.KV_rec` | same |
/// | 4 | pub | `$JS.API.STREAM.MSG.GET.KV_auth` | leader-served point reads (F7) |
/// | 5 | pub | `$JS.API.STREAM.MSG.GET.KV_rec` | same (F8) |
/// | 6 | pub | `$JS.API.DIRECT.GET.KV_rec` | reads feeding revision-pinned CASes |
/// | 7 | pub | `$JS.API.DIRECT.GET.KV_rec.>` | same, subject form |
/// | 8 | pub | `$KV.auth.gate.>` | freeze/reopen CAS |
/// | 9 | pub | `$KV.auth.cred.>` | family revokes |
/// | 10 | pub | `$KV.auth.stage.*` | durable operation intents `stage.<opId>`, one token, never the session pins `stage.session.…` |
/// | 11 | pub | `$KV.rec.lifecycle.>` | containment and epoch head CASes |
/// | 12 | pub | `$KV.auth.plane` | the plane claim (§2.10), exact key — never `plane.>` (F98) |
/// | 13 | pub | `$KV.rec.frontier.>` | **deviation**: the retirement barrier's create-only frontier record (`core::lifecycle::retire`), which this plane's retire doors run here |
/// | 14 | sub | `inbox` | replies |
/// | 15 | sub | `$KV.auth.plane` | **deviation**: a start waiting on the claim wakes at the row's next write (a release hands over at once); one exact key, a core subscription, no consumer |
///
/// No consumer create at all (F98): a create body is not subject-confinable, so the barrier's
/// family scans run on the sealed scanner, never on this credential.
pub fn auth_barrier(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    let n = Names::new(space);
    let r = &n.rec_stream;
    let mut publish = n.proof_and_read_rows();
    publish.extend([
        format!("$JS.API.DIRECT.GET.{r}"),
        format!("$JS.API.DIRECT.GET.{r}.>"),
        format!("$KV.{}.gate.>", n.auth),
        format!("$KV.{}.cred.>", n.auth),
        format!("$KV.{}.stage.*", n.auth),
        format!("$KV.{}.lifecycle.>", n.rec),
        format!("$KV.{}.plane", n.auth),
        format!("$KV.{}.frontier.>", n.rec),
    ]);
    checked_permissions(publish, vec![inbox(conn), format!("$KV.{}.plane", n.auth)])
}

/// `cotal:auth-admin:<s>` — the auth control rail listener: the serving rows of the plane's
/// own `auth` instance `iid` at its registered epoch `E`, for its one command
/// [`RETIRE_LIFECYCLE`] (the `endpoint-serve` rows of [`crate::profiles::endpoint_serve`]
/// that command uses), nothing else.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | sub | `P.ep.one.auth.retire-lifecycle.> auth` | class rail, queue-qualified ONLY (F70) |
/// | 2 | sub | `P.ep.inst.auth.iid.retire-lifecycle.>` | own instance rail |
/// | 3 | sub | `inbox` | |
/// | 4 | pub | `P.ep.reply.auth.iid.E.*.*.*.*` | replies, pinned to this instance and epoch (F39) |
///
/// **Deviation**: the reference's listener also reads the caller's serve gate itself; here
/// every read of the serve-time check and the barrier runs on the barrier connection, so the
/// listener holds no store grant at all. No scatter or `describe` rows: the plane answers
/// only this command, and a grant nothing exercises is only exposure.
pub fn auth_admin(
    space: &SpaceName,
    conn: &ConnId,
    instance: &InstanceId,
    epoch: ProcessEpoch,
) -> Result<Permissions, EpError> {
    let p = space_prefix(space);
    let e = AUTH_ENDPOINT;
    let c = RETIRE_LIFECYCLE;
    checked_permissions(
        vec![format!("{p}.ep.reply.{e}.{instance}.{epoch}.*.*.*.*")],
        vec![
            format!("{p}.ep.one.{e}.{c}.> {e}"),
            format!("{p}.ep.inst.{e}.{instance}.{c}.>"),
            inbox(conn),
        ],
    )
}

/// `cotal:auth-registration:<s>` — the plane's own `auth` endpoint registration: the
/// registration-executor rows ([`crate::profiles::registration_executor`] rows 1–10) scoped to
/// endpoint [`AUTH_ENDPOINT`] and `instance`, plus what a [`Space`](crate::kv) bound over the
/// auth, records and contract stores needs to run that ceremony.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1–10 | pub | registration-executor rows 1–10 for `auth`/`iid` | the ceremony's writes and reads |
/// | 11 | pub | `$JS.API.STREAM.INFO.KV_auth` | **deviation**: bind shape proof (F10), and the `epcred.auth.iid.` family listing |
/// | 12 | pub | `$JS.API.STREAM.INFO.KV_rec` | **deviation**: bind shape proof (F10) |
/// | 13 | pub | `$JS.API.STREAM.INFO.EPC_s` | **deviation**: bind shape proof (F10) |
/// | 14 | pub | `$JS.API.STREAM.MSG.GET.EPC_s` | **deviation**: leader-served artifact reads |
/// | 15 | sub | `inbox` | replies |
///
/// Deviations, each found by running the ceremony on a real operator-mode server under rows
/// 1–10 alone (tests `nats_plane_connections`):
/// * 11–13: a bind proves each store's shape with `STREAM.INFO` before serving on it (F10);
///   the executor profile of a remote manager binds nothing, the plane does. Row 11 also serves
///   the ceremony's enumeration of the instance's `epcred` family (`STREAM.INFO` with a
///   `subjects_filter`): that is not a consumer create, so F98 holds, but it is an enumeration
///   residual — `subjects_filter` is body-selected, so the row lists any subject of the auth
///   stream, metadata only, while the credential lives.
/// * 14: artifact reads are leader-served `STREAM.MSG.GET` (a lost-create verify read must not
///   come from a stale follower, F8), while row 7 grants only `DIRECT.GET`; this aligns the
///   grant with the read the adapter makes. Body-selected like every `MSG.GET` row.
pub fn auth_registration(
    space: &SpaceName,
    conn: &ConnId,
    instance: &InstanceId,
) -> Result<Permissions, EpError> {
    registration_connection(space, conn, &EndpointName::parse(AUTH_ENDPOINT)?, instance)
}

/// `cotal:credential-revoke:<s>` — the operator's revoke of an incarnation's root credential:
/// the reader's rows (to find the head and the row, leader-served) and the credential rows'
/// write, nothing else.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1–5 | pub | the reader's rows ([`auth_reader`]) | probe, shape proofs (F10), leader reads (F7, F8) |
/// | 6 | pub | `$KV.auth.cred.>` | the revoke: a state change of the row, never a delete (F26) |
/// | 7 | sub | `inbox` | replies |
pub fn credential_revoke(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    let n = Names::new(space);
    let mut publish = n.proof_and_read_rows();
    publish.push(format!("$KV.{}.cred.>", n.auth));
    grant(publish, conn)
}

/// `cotal:actor-ledger:<s>` — the replicated actor ledger (`cotal_actors_<s>`): its store's
/// ensure and shape proof, leader-served reads and the listing, and its rows' writes; nothing
/// of any other store.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | account JetStream probe |
/// | 2 | pub | `$JS.API.STREAM.CREATE.KV_cotal_actors_s` | the ledger store's ensure |
/// | 3 | pub | `$JS.API.STREAM.INFO.KV_cotal_actors_s` | its shape proof (F10) and the listing (F98) |
/// | 4 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_actors_s` | leader-served row reads (F7) |
/// | 5 | pub | `$KV.cotal_actors_s.>` | the rows' revision-pinned writes and deletion markers |
/// | 6 | sub | `inbox` | replies |
pub fn actor_ledger(space: &SpaceName, conn: &ConnId) -> Result<Permissions, EpError> {
    let mut publish = vec!["$JS.API.INFO".to_owned()];
    publish.extend(actor_ledger_rows(space));
    grant(publish, conn)
}

/// The actor ledger store's rows 2–5 of [`actor_ledger`]: ensure, proof, reads, writes.
fn actor_ledger_rows(space: &SpaceName) -> Vec<String> {
    let bucket = actors_bucket(space);
    let stream = format!("KV_{bucket}");
    let mut rows = vec![format!("$JS.API.STREAM.CREATE.{stream}")];
    rows.extend(proof_and_read(&stream));
    rows.push(format!("$KV.{bucket}.>"));
    rows
}

/// The operator's `gate reconcile` connection ([`PlaneConnection::GateReconcile`]): exactly the
/// rows of [`auth_registration`], scoped to the one `endpoint`/`instance` whose frozen
/// registration it finishes (F14: the reconciler executes the dead registration's own op).
pub fn gate_reconcile(
    space: &SpaceName,
    conn: &ConnId,
    endpoint: &EndpointName,
    instance: &InstanceId,
) -> Result<Permissions, EpError> {
    registration_connection(space, conn, endpoint, instance)
}

/// `cotal:host-registration:<s>` — a platform host's incarnation registration (reference §7.2):
/// [`auth_registration`]'s rows for the host's reverse-DNS endpoint and one instance of it,
/// nothing of any other gate.
pub fn host_registration(
    space: &SpaceName,
    conn: &ConnId,
    endpoint: &EndpointName,
    instance: &InstanceId,
) -> Result<Permissions, EpError> {
    registration_connection(space, conn, endpoint, instance)
}

fn registration_connection(
    space: &SpaceName,
    conn: &ConnId,
    endpoint: &EndpointName,
    instance: &InstanceId,
) -> Result<Permissions, EpError> {
    let n = Names::new(space);
    let mut publish = registration_executor_rows(space, endpoint, instance);
    publish.extend([
        format!("$JS.API.STREAM.INFO.{}", n.auth_stream),
        format!("$JS.API.STREAM.INFO.{}", n.rec_stream),
    ]);
    publish.extend(proof_and_read(&n.epc));
    grant(publish, conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONN: &str = "UCONNECTIONIDXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX";
    const IID: &str = "0123456789abcdefghijklmnop";

    fn space() -> SpaceName {
        SpaceName::parse("prod").unwrap()
    }

    fn conn() -> ConnId {
        ConnId::parse(CONN).unwrap()
    }

    /// Asserts the full publish list, in order, and the one scoped inbox.
    fn rows(p: Permissions, publish: &[&str]) {
        assert_eq!(p.publish.allow, publish);
        assert_eq!(p.subscribe.allow, [format!("_INBOX_{CONN}.>")]);
        assert!(p.publish.deny.is_empty() && p.subscribe.deny.is_empty());
        assert!(p.response.is_none());
        assert!(
            !p.publish.allow.iter().any(|r| r.contains("CONSUMER")),
            "F98: no plane connection may touch the consumer API"
        );
    }

    const WRITER: [&str; 15] = [
        "$JS.API.INFO",
        "$JS.API.STREAM.CREATE.KV_cotal_auth_prod",
        "$JS.API.STREAM.CREATE.KV_cotal_records_prod",
        "$JS.API.STREAM.UPDATE.KV_cotal_records_prod",
        "$JS.API.STREAM.INFO.KV_cotal_auth_prod",
        "$JS.API.STREAM.INFO.KV_cotal_records_prod",
        "$JS.API.STREAM.MSG.GET.KV_cotal_auth_prod",
        "$JS.API.STREAM.MSG.GET.KV_cotal_records_prod",
        "$JS.API.DIRECT.GET.KV_cotal_records_prod",
        "$JS.API.DIRECT.GET.KV_cotal_records_prod.>",
        "$KV.cotal_auth_prod.gate.>",
        "$KV.cotal_auth_prod.cred.>",
        "$KV.cotal_auth_prod.bysrc.>",
        "$KV.cotal_records_prod.lifecycle.>",
        "$KV.cotal_records_prod.uid.>",
    ];

    /// The reference's reader rows, which the barrier's open with.
    const READER: [&str; 5] = [
        "$JS.API.INFO",
        "$JS.API.STREAM.INFO.KV_cotal_auth_prod",
        "$JS.API.STREAM.INFO.KV_cotal_records_prod",
        "$JS.API.STREAM.MSG.GET.KV_cotal_auth_prod",
        "$JS.API.STREAM.MSG.GET.KV_cotal_records_prod",
    ];

    #[test]
    fn mint_writer_rows_are_the_reference_writer_grants_plus_the_ensure_deviation() {
        let mut want = WRITER.to_vec();
        want.extend([
            "$JS.API.STREAM.CREATE.KV_cotal_admission_prod",
            "$JS.API.STREAM.CREATE.EPC_prod",
            "$JS.API.STREAM.CREATE.KV_cotal_issued_prod",
            "$JS.API.STREAM.CREATE.KV_cotal_accepted_prod",
            "$JS.API.STREAM.INFO.KV_cotal_admission_prod",
            "$JS.API.STREAM.INFO.EPC_prod",
            "$JS.API.STREAM.INFO.KV_cotal_issued_prod",
            "$JS.API.STREAM.INFO.KV_cotal_accepted_prod",
            "$JS.API.STREAM.CREATE.KV_cotal_sessions_prod",
            "$JS.API.STREAM.INFO.KV_cotal_sessions_prod",
            "$JS.API.STREAM.CREATE.KV_cotal_actors_prod",
            "$JS.API.STREAM.INFO.KV_cotal_actors_prod",
            "$JS.API.STREAM.MSG.GET.KV_cotal_actors_prod",
            "$KV.cotal_actors_prod.>",
        ]);
        rows(auth_mint(&space(), &conn()).unwrap(), &want);
    }

    #[test]
    fn the_actor_ledger_reaches_its_own_store_and_nothing_else() {
        rows(
            actor_ledger(&space(), &conn()).unwrap(),
            &[
                "$JS.API.INFO",
                "$JS.API.STREAM.CREATE.KV_cotal_actors_prod",
                "$JS.API.STREAM.INFO.KV_cotal_actors_prod",
                "$JS.API.STREAM.MSG.GET.KV_cotal_actors_prod",
                "$KV.cotal_actors_prod.>",
            ],
        );
    }

    #[test]
    fn reader_rows_are_read_only() {
        rows(auth_reader(&space(), &conn()).unwrap(), &READER);
    }

    #[test]
    fn remote_manager_issuer_rows_are_the_writer_plus_the_manager_families() {
        let mut want = WRITER.to_vec();
        want.extend([
            "$KV.cotal_auth_prod.epgate.manager.>",
            "$KV.cotal_auth_prod.epcred.manager.>",
            "$KV.cotal_auth_prod.renewclean.manager.>",
            "$JS.API.STREAM.INFO.EPC_prod",
            "$JS.API.STREAM.MSG.GET.EPC_prod",
            "$KV.cotal_issued_prod.>",
            "$KV.cotal_accepted_prod.>",
            "$JS.API.STREAM.INFO.KV_cotal_issued_prod",
            "$JS.API.STREAM.MSG.GET.KV_cotal_issued_prod",
            "$JS.API.STREAM.INFO.KV_cotal_accepted_prod",
            "$JS.API.STREAM.MSG.GET.KV_cotal_accepted_prod",
            "$KV.cotal_admission_prod.admission.v1.manager.*",
            "$JS.API.STREAM.INFO.KV_cotal_admission_prod",
            "$JS.API.STREAM.MSG.GET.KV_cotal_admission_prod",
            "$JS.API.STREAM.MSG.GET.WFJ_prod",
            "$JS.API.STREAM.INFO.KV_cotal_sessions_prod",
            "$JS.API.STREAM.MSG.GET.KV_cotal_sessions_prod",
        ]);
        let p = remote_manager_issuer(&space(), &conn()).unwrap();
        let inbox = format!("_INBOX_{CONN}.>");
        want.push(&inbox);
        assert_eq!(p.publish.allow, want);
        let mut subscribe = vec![inbox.clone()];
        subscribe.extend(served_run_request_subjects(&space()));
        assert_eq!(p.subscribe.allow, subscribe);
        assert!(subscribe[1..]
            .iter()
            .all(|s| s.starts_with("cotal.prod.ep.")));
        assert!(
            !p.publish.allow.iter().any(|r| r.contains("CONSUMER")),
            "F98"
        );
    }

    #[test]
    fn barrier_rows_are_the_reference_barrier_grants_plus_the_exact_plane_key() {
        let mut granted = auth_barrier(&space(), &conn()).unwrap();
        // Its one extra subscription: the claim row's exact subject (the standby's wake).
        assert_eq!(
            granted.subscribe.allow.pop().as_deref(),
            Some("$KV.cotal_auth_prod.plane")
        );
        let mut want = READER.to_vec();
        want.extend([
            "$JS.API.DIRECT.GET.KV_cotal_records_prod",
            "$JS.API.DIRECT.GET.KV_cotal_records_prod.>",
            "$KV.cotal_auth_prod.gate.>",
            "$KV.cotal_auth_prod.cred.>",
            "$KV.cotal_auth_prod.stage.*",
            "$KV.cotal_records_prod.lifecycle.>",
            "$KV.cotal_auth_prod.plane",
            "$KV.cotal_records_prod.frontier.>",
        ]);
        rows(granted, &want);
    }

    #[test]
    fn registration_rows_are_the_executor_rows_for_auth_plus_bind_and_artifact_reads() {
        let iid = InstanceId::parse(IID).unwrap();
        rows(
            auth_registration(&space(), &conn(), &iid).unwrap(),
            &[
                "$JS.API.INFO",
                &format!("$KV.cotal_auth_prod.epgate.auth.{IID}"),
                &format!("$KV.cotal_auth_prod.eprepair.auth.{IID}"),
                &format!("$KV.cotal_auth_prod.epcred.auth.{IID}.>"),
                &format!("$KV.cotal_records_prod.svc.auth.{IID}.spec"),
                &format!("$KV.cotal_records_prod.svc.auth.{IID}.status"),
                "$KV.cotal_records_prod.govern.auth",
                "cotal.prod.epc.*",
                "$JS.API.DIRECT.GET.EPC_prod.cotal.prod.epc.>",
                "$JS.API.DIRECT.GET.EPC_prod",
                "$JS.API.STREAM.MSG.GET.KV_cotal_auth_prod",
                &format!(
                    "$JS.API.DIRECT.GET.KV_cotal_records_prod.$KV.cotal_records_prod.svc.auth.{IID}.spec"
                ),
                &format!(
                    "$JS.API.DIRECT.GET.KV_cotal_records_prod.$KV.cotal_records_prod.svc.auth.{IID}.status"
                ),
                "$JS.API.DIRECT.GET.KV_cotal_records_prod.$KV.cotal_records_prod.govern.auth",
                "$JS.API.STREAM.MSG.GET.KV_cotal_records_prod",
                "$JS.API.STREAM.INFO.KV_cotal_auth_prod",
                "$JS.API.STREAM.INFO.KV_cotal_records_prod",
                "$JS.API.STREAM.INFO.EPC_prod",
                "$JS.API.STREAM.MSG.GET.EPC_prod",
            ],
        );
    }

    #[test]
    fn a_wildcard_dotted_or_empty_connection_id_cannot_reach_a_builder() {
        for bad in [
            "",
            ">",
            "*",
            "abcdefgh.>",
            "abcd.efgh",
            "abcdefg*",
            "short",
            "a b c d e f",
        ] {
            let err = ConnId::parse(bad).unwrap_err();
            assert!(
                err.message.contains("connection id"),
                "{bad:?}: {}",
                err.message
            );
        }
    }

    #[test]
    fn labels_name_role_and_space() {
        let labels: Vec<String> = PlaneConnection::ALL
            .iter()
            .map(|c| c.label(&space()))
            .collect();
        assert_eq!(
            labels,
            [
                "cotal:auth-mint:prod",
                "cotal:auth-registration:prod",
                "cotal:auth-reader:prod",
                "cotal:remote-manager-issuer:prod",
                "cotal:auth-barrier:prod",
                "cotal:auth-scan:prod",
                "cotal:records-scan:prod",
                "cotal:auth-admin:prod",
                "cotal:auth-service:prod",
            ]
        );
    }
}
