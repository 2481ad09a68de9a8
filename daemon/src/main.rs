//! `cotal-authd`: the authority plane of a Cotal space.
//!
//! * `up` — come up in a space as its `auth` endpoint instance through the full registration
//!   ceremony (fencing any predecessor), and hold that registration until a signal or a
//!   successor fences this process ([`up`]).
//! * `init` — create a space's trust root, create-only and idempotent ([`trust_cmd`]).
//! * `broker-config` — print the space's operator-mode nats-server configuration ([`trust_cmd`]).
//! * `status` — where the space's plane is, from its discovery file ([`status`]).
//! * `gate ls|show` — read-only tables of a space's issuance gates ([`gate_cmd`]).
//! * `gate reconcile` — reopen one frozen registration gate whose holder is verifiably gone
//!   ([`gate_cmd`]).
//! * `actor grant|ls|revoke`, `owner` — the space's actor grants and the owner an IdP subject
//!   derives ([`actor_cmd`]).
//! * `dev-idp [token]` — a labelled development IdP for walk-throughs ([`dev_idp_cmd`]).
//! * `login` — sign in: the exchange, and a bundle a NATS client connects with ([`login_cmd`]).
//!
//! The gate fence walked through on the in-memory KV model is a core example, not a command:
//! `cargo run -p cotal-core --example fence_demo`.

use cotal_authd::{actor_cmd, dev_idp_cmd, gate_cmd, issuer_cmd, login_cmd, status, trust_cmd, up};

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::{Args, CommandFactory, Parser, Subcommand};
use cotal_core::names::{EndpointName, InstanceId, SpaceName};
use cotal_io_http::face::{check_public_face, PublicFaceFlags};
use cotal_io_nats::{Dial, Replicas, TlsSettings};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::EnvFilter;

/// A usage error: a flag, value or command the CLI refuses (one sentence on stderr).
const EXIT_USAGE: u8 = 2;
/// `status`: the plane is not up (said on stdout).
const EXIT_NOT_UP: u8 = 4;
/// `gate reconcile`: the gate stays frozen (its holder is live, its liveness unknown, or an
/// eviction unverified).
const EXIT_LEFT_FROZEN: u8 = 5;

const EXIT_CODES: &str = "\
Exit status:
  0  stopped on SIGINT or SIGTERM (up), or the command succeeded
  1  failure (one sentence on stderr)
  2  usage error (one sentence on stderr)
  3  fenced: a successor registered this instance or a barrier took its gate (up)
  4  the plane is not up (status)
  5  the gate stays frozen: its holder is live or cannot be shown gone (gate reconcile)

Environment:
  NATS_URL           default for --server
  NATS_CREDS         default for --creds (gate ls, gate show)
  NATS_CA            default for --tlsca
  NATS_CERT          default for --tlscert
  NATS_KEY           default for --tlskey
  COTAL_IDP_TOKEN    default for --idp-token (login)
  RUST_LOG           log filter for stderr (default: info for up, warn for gate)
  COTAL_NATS_SERVER  the nats-server binary the embedded server runs (up without --server)";

/// The authority plane of a Cotal space on NATS.
#[derive(Debug, Parser)]
#[command(
    name = "cotal-authd",
    version,
    subcommand_required = true,
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// How log lines are written to stderr: human-readable text, or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// The stderr log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Register this plane as the space's auth instance and serve until a signal or a successor
    /// fences it.
    ///
    /// Without --server it runs an embedded nats-server under the state dir. A fenced plane
    /// exits 3 and leaves that server to its successor.
    #[command(after_help = EXIT_CODES)]
    Up(UpCommand),
    /// Create the space's trust root (operator, accounts, callout, issuer keys, owner secret,
    /// IdP pin) under the state dir; a second run changes nothing and says what it kept.
    #[command(after_help = EXIT_CODES)]
    Init(InitCommand),
    /// Print the space's nats-server configuration (operator mode, the space's accounts
    /// preloaded, JetStream, the auth callout).
    #[command(after_help = EXIT_CODES)]
    BrokerConfig(BrokerConfigCommand),
    /// Say where the space's plane is (pid, server, epoch, generation), or that it is not up.
    #[command(after_help = EXIT_CODES)]
    Status(StatusCommand),
    /// The space's issuance gates: read-only views, and the repair of a frozen one.
    #[command(subcommand, subcommand_required = true)]
    Gate(GateCommand),
    /// The space's actor grants: who may sign in as which actor, with what.
    #[command(subcommand, subcommand_required = true)]
    Actor(ActorCommand),
    /// Rotate or prune the space's bearer-issuer keys.
    #[command(subcommand, subcommand_required = true)]
    Issuer(IssuerCommand),
    /// Print the owner an IdP subject derives in the space (what `actor grant --owner` takes).
    #[command(after_help = EXIT_CODES)]
    Owner(OwnerCommand),
    /// Sign in: exchange an IdP token (or a development IdP subject) for a bearer and write a
    /// 0600 bundle a standard NATS client connects with (sentinel creds + the bearer).
    #[command(after_help = EXIT_CODES)]
    Login(LoginCommand),
    /// A DEVELOPMENT identity provider on loopback that signs in anyone: for walk-throughs and
    /// tests, never production. `dev-idp --port N` serves it; `dev-idp token` mints a token.
    #[command(args_conflicts_with_subcommands = true, after_help = EXIT_CODES)]
    DevIdp(DevIdpCommand),
}

#[derive(Debug, Args)]
struct LoginCommand {
    /// The interactive actor to sign in as (granted with `actor grant`).
    #[arg(long, value_name = "ACTOR")]
    actor: String,
    #[command(flatten)]
    proof: LoginProof,
    /// The bearer's lifetime in seconds (at most 900, and never past the IdP token's).
    #[arg(long, value_name = "SECS")]
    ttl: Option<u64>,
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
    #[command(flatten)]
    tls: ClientTls,
}

/// How the human proves who they are.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct LoginProof {
    /// An ID token from the space's pinned IdP.
    #[arg(
        long,
        value_name = "JWT",
        env = "COTAL_IDP_TOKEN",
        hide_env_values = true
    )]
    idp_token: Option<String>,
    /// Sign in at this state root's DEVELOPMENT IdP as this subject (`dev-idp` must be the
    /// space's pinned IdP).
    #[arg(long, value_name = "SUB")]
    dev_subject: Option<String>,
}

#[derive(Debug, Args)]
struct DevIdpCommand {
    #[command(subcommand)]
    token: Option<DevIdpToken>,
    /// The loopback port to serve on (fixed once chosen: the space pins the IdP's origin).
    #[arg(long, value_name = "PORT")]
    port: Option<u16>,
    #[command(flatten)]
    root: StateRoot,
}

#[derive(Debug, Subcommand)]
enum DevIdpToken {
    /// Print an ID token of the development IdP for a subject.
    #[command(after_help = EXIT_CODES)]
    Token(DevIdpTokenArgs),
}

#[derive(Debug, Args)]
struct DevIdpTokenArgs {
    /// The subject (`sub`) to sign in as.
    #[arg(long, value_name = "SUB")]
    subject: String,
    /// The token's lifetime in seconds (at most 3600).
    #[arg(long, value_name = "SECS", default_value = "600")]
    ttl: u64,
    #[command(flatten)]
    root: StateRoot,
}

#[derive(Debug, Subcommand)]
enum ActorCommand {
    /// Grant (or re-grant) an interactive actor to an owner; a re-grant rotates its lifecycle
    /// and retires the previous one through the running plane (its live connections closed).
    #[command(after_help = EXIT_CODES)]
    Grant(ActorGrant),
    /// List the space's grants, interactive and managed.
    #[command(after_help = EXIT_CODES)]
    Ls(ActorLs),
    /// Revoke an interactive grant: its incarnation is retired through the running plane (its
    /// live connections closed), and its bearers are refused at their next connect.
    #[command(after_help = EXIT_CODES)]
    Revoke(ActorRevoke),
    /// Retire the incarnation an interactive grant names (or --lifecycle-uid names), through the
    /// running plane: its credentials revoked, its connections closed.
    #[command(after_help = EXIT_CODES)]
    Retire(ActorRetire),
}

#[derive(Debug, Args)]
struct ActorRetire {
    /// The actor name.
    #[arg(value_name = "ACTOR")]
    actor: String,
    /// Retire this lifecycle instead of the grant's: a predecessor a revoke or re-grant left
    /// live while the plane was down (their sentences name it).
    #[arg(long, value_name = "UID")]
    lifecycle_uid: Option<String>,
    #[command(flatten)]
    owner: ActorOwner,
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
    #[command(flatten)]
    server: VerbServer,
}

/// Whose actor: an owner token, or the IdP subject that derives it.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct ActorOwner {
    /// The owner (u_ + 26 base32 chars), as `cotal-authd owner` prints it.
    #[arg(long, value_name = "OWNER")]
    owner: Option<String>,
    /// The subject (`sub`) the space's pinned IdP signs the human in as.
    #[arg(long, value_name = "SUB")]
    idp_subject: Option<String>,
}

impl ActorOwner {
    fn into_arg(self) -> actor_cmd::OwnerArg {
        match (self.owner, self.idp_subject) {
            (Some(owner), _) => actor_cmd::OwnerArg::Owner(owner),
            (None, sub) => actor_cmd::OwnerArg::IdpSubject(sub.unwrap_or_default()),
        }
    }
}

#[derive(Debug, Args)]
struct ActorGrant {
    /// The actor name (one NATS-safe token).
    #[arg(value_name = "ACTOR")]
    actor: String,
    #[command(flatten)]
    owner: ActorOwner,
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
    /// Capabilities, comma-separated (admin, spawn, supervise, role:<r>; '' for none).
    #[arg(long, value_name = "LIST", value_delimiter = ',', num_args = 0..)]
    scope: Option<Vec<String>>,
    /// Subjects the actor may subscribe to, comma-separated ('' for none).
    #[arg(long, value_name = "LIST", value_delimiter = ',', num_args = 0..)]
    allow_subscribe: Option<Vec<String>>,
    /// Subjects the actor may publish to, comma-separated ('' for none).
    #[arg(long, value_name = "LIST", value_delimiter = ',', num_args = 0..)]
    allow_publish: Option<Vec<String>>,
    /// Grant every capability and every subject both ways.
    #[arg(long)]
    full: bool,
    /// The actor's role (a plain token).
    #[arg(long, value_name = "ROLE")]
    role: Option<String>,
    /// A free-form label kept on the row.
    #[arg(long, value_name = "TEXT")]
    label: Option<String>,
    #[command(flatten)]
    server: VerbServer,
}

#[derive(Debug, Args)]
struct ActorLs {
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: VerbServer,
}

#[derive(Debug, Args)]
struct ActorRevoke {
    /// The actor name.
    #[arg(value_name = "ACTOR")]
    actor: String,
    #[command(flatten)]
    owner: ActorOwner,
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
    /// Revoke the incarnation's root credential on the server instead of the grant: every
    /// bearer of it is refused at its next connect.
    #[arg(long)]
    credential: bool,
    #[command(flatten)]
    server: VerbServer,
}

/// The server an `actor` verb reaches the space on.
#[derive(Debug, Args)]
struct VerbServer {
    /// The server a replicated actor ledger (`init --ledger kv`) and `revoke --credential`
    /// reach [default: the running plane's, from its discovery file].
    #[arg(
        short = 's',
        long,
        env = "NATS_URL",
        hide_env_values = true,
        value_name = "URL",
        value_parser = parse_server
    )]
    server: Option<String>,
    #[command(flatten)]
    tls: ClientTls,
}

#[derive(Debug, Subcommand)]
enum IssuerCommand {
    /// Add a fresh issuer key and make it the signer; the previous keys stay published and
    /// accepted until `issuer prune`. A running plane adopts it within seconds.
    #[command(after_help = EXIT_CODES)]
    Rotate(IssuerRotate),
    /// Remove every issuer key but the signer, once no bearer they signed can be live (1,200 s
    /// after the last rotation), or at once with --force.
    #[command(after_help = EXIT_CODES)]
    Prune(IssuerPrune),
}

#[derive(Debug, Args)]
struct IssuerRotate {
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
}

#[derive(Debug, Args)]
struct IssuerPrune {
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
    /// Prune now: bearers the pruned keys signed are refused at once.
    #[arg(long)]
    force: bool,
}

#[derive(Debug, Args)]
struct OwnerCommand {
    /// The subject (`sub`) the space's pinned IdP signs the human in as.
    #[arg(long, value_name = "SUB")]
    idp_subject: String,
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    root: StateRoot,
}

/// A comma list as given: `''` is the empty list, blanks around entries are dropped.
fn list(given: Option<Vec<String>>) -> Option<Vec<String>> {
    given.map(|l| {
        l.into_iter()
            .map(|e| e.trim().to_owned())
            .filter(|e| !e.is_empty())
            .collect()
    })
}

#[derive(Debug, Subcommand)]
enum GateCommand {
    /// List the space's issuance gates (an unreadable gate is reported on stderr).
    #[command(after_help = EXIT_CODES)]
    Ls(GateLs),
    /// Show one gate.
    #[command(after_help = EXIT_CODES)]
    Show(GateShow),
    /// Reopen a registration gate left frozen by a holder that is gone.
    ///
    /// The holder's liveness comes from the servers' own connection listing (every server of
    /// the cluster must answer); its connections are kicked and a fresh listing must show none.
    /// A live holder, or one whose liveness cannot be established, leaves the gate frozen
    /// (exit 5): silence is never taken for death.
    #[command(after_help = EXIT_CODES)]
    Reconcile(GateReconcile),
}

/// The space a view acts in; it accepts the stores at whatever replica count they were made.
#[derive(Debug, Args)]
struct ViewSpace {
    /// The space to act in.
    #[arg(long, value_name = "SPACE", value_parser = parse_space)]
    space: SpaceName,
}

/// The space and the shape of its stores, for the command that creates them (`up`).
#[derive(Debug, Args)]
struct SpaceArgs {
    /// The space to act in.
    #[arg(long, value_name = "SPACE", value_parser = parse_space)]
    space: SpaceName,
    /// Replicas of every store of the space (1 or 3); the stores' shape is verified at bind.
    #[arg(long, value_name = "1|3", default_value = "1", value_parser = parse_replicas)]
    replicas: Replicas,
}

#[derive(Debug, Args)]
struct UpCommand {
    #[command(flatten)]
    space: SpaceArgs,
    /// NATS server URL(s), comma-separated; without it an embedded nats-server runs.
    #[arg(
        short = 's',
        long,
        env = "NATS_URL",
        hide_env_values = true,
        value_name = "URL",
        value_parser = parse_server
    )]
    server: Option<String>,
    #[command(flatten)]
    tls: UpTls,
    #[command(flatten)]
    root: StateRoot,
    /// Stand by while another plane serves the space: wait on its plane claim and take over
    /// when it dies or stops (instead of refusing a live peer).
    #[arg(long)]
    standby: bool,
    /// Serve the actor ledger of this state dir (the active plane's --state-dir, on this host)
    /// instead of this plane's own: a standby reads the very ledger the active writes.
    #[arg(long, value_name = "DIR")]
    ledger_dir: Option<PathBuf>,
    /// The loopback face's port on 127.0.0.1 (0: a free one, named in the discovery file).
    #[arg(long, value_name = "PORT", default_value = "0")]
    port: u16,
    /// Open the public face on 127.0.0.1:PORT (0: a free one), behind a TLS reverse proxy.
    #[arg(long, value_name = "PORT")]
    exchange_public_port: Option<String>,
    /// The https:// URL the reverse proxy serves the public face at.
    #[arg(long, value_name = "URL")]
    exchange_public_url: Option<String>,
    /// Take the last X-Forwarded-For hop as the public face's peer (only behind your proxy).
    #[arg(long)]
    exchange_trusted_proxy: bool,
    /// The NATS address the discovery bundle advertises (nats:, tls:, ws: or wss:).
    #[arg(long, value_name = "URL")]
    advertised_server: Option<String>,
    /// The https: agent-provisioning endpoint the discovery bundle names.
    #[arg(long, value_name = "URL")]
    agent_provisioning_url: Option<String>,
    /// The async runtime's worker threads (1 to 64). One serves best unless the plane's load
    /// needs more than a core: each request hops between the HTTP face's and the NATS
    /// connections' tasks, and with more workers each hop may be a thread switch.
    #[arg(
        long,
        value_name = "N",
        default_value = "1",
        value_parser = clap::value_parser!(u8).range(1..=64)
    )]
    workers: u8,
}

/// Where the spaces' state lives: trust roots, instance identities, discovery files, the
/// embedded server.
#[derive(Debug, Args)]
struct StateRoot {
    /// The state root (trust material under DIR/auth/space.<hex>/, 0700).
    #[arg(long = "state-dir", value_name = "DIR", default_value = DEFAULT_STATE_ROOT)]
    dir: PathBuf,
}

/// The state root when `--state-dir` is not given, relative to the working directory.
const DEFAULT_STATE_ROOT: &str = ".cotal";

#[derive(Debug, Args)]
struct InitCommand {
    /// The space to create the trust root of.
    #[arg(long, value_name = "SPACE", value_parser = parse_space)]
    space: SpaceName,
    /// The IdP the space's users sign in at: https, or http on a loopback address; pinned
    /// for good (re-pointing it would re-key every owner).
    #[arg(long, value_name = "URL")]
    idp: String,
    /// Where the space's actor ledger lives: the files of the active plane's state dir, or a
    /// replicated JetStream KV bucket every plane of the space serves (a standby on another
    /// host takes over with every grant and revoke). Chosen once.
    #[arg(long, value_enum, default_value = "files")]
    ledger: LedgerKind,
    #[command(flatten)]
    root: StateRoot,
}

/// `init --ledger`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LedgerKind {
    Files,
    Kv,
}

#[derive(Debug, Args)]
struct BrokerConfigCommand {
    /// The space whose server configuration to print.
    #[arg(long, value_name = "SPACE", value_parser = parse_space)]
    space: SpaceName,
    /// The client address the server listens on.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:4222")]
    listen: String,
    /// The server's JetStream store dir [default: DIR/nats/space.<hex>/store].
    #[arg(long, value_name = "DIR")]
    store_dir: Option<PathBuf>,
    /// Serve clients over TLS with this PEM certificate (with --tlskey).
    #[arg(long, value_name = "FILE", requires = "tlskey")]
    tlscert: Option<PathBuf>,
    /// The PEM private key of --tlscert.
    #[arg(long, value_name = "FILE", requires = "tlscert")]
    tlskey: Option<PathBuf>,
    /// The PEM CA client certificates (and, in a cluster, the other nodes) are verified
    /// against.
    #[arg(long, value_name = "FILE", requires = "tlscert")]
    tlscacert: Option<PathBuf>,
    /// Require and verify client certificates (against --tlscacert).
    #[arg(long, requires = "tlscacert")]
    tlsverify: bool,
    /// The cluster route listener, HOST:PORT (with --cluster_name and --routes); routes use
    /// TLS too when --tlscert is given, verified against --tlscacert.
    #[arg(long, value_name = "HOST:PORT", requires_all = ["cluster_name", "routes"])]
    cluster: Option<String>,
    /// The cluster's name, the same on every node.
    #[arg(long = "cluster_name", value_name = "NAME", requires = "cluster")]
    cluster_name: Option<String>,
    /// The other nodes' route URLs, comma-separated (nats-route://HOST:PORT).
    #[arg(long, value_name = "URLS", value_delimiter = ',', requires = "cluster")]
    routes: Vec<String>,
    #[command(flatten)]
    root: StateRoot,
}

impl BrokerConfigCommand {
    /// The TLS and routes the configuration serves; paths as given, made absolute, since the
    /// server reads them from wherever its config is.
    fn serving(&self) -> cotal_core::trust::Serving {
        let path = |p: &PathBuf| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .to_string_lossy()
                .into_owned()
        };
        cotal_core::trust::Serving {
            tls: match (&self.tlscert, &self.tlskey) {
                (Some(cert), Some(key)) => Some(cotal_core::trust::ServerTls {
                    cert: path(cert),
                    key: path(key),
                    ca: self.tlscacert.as_ref().map(path),
                    verify: self.tlsverify,
                }),
                _ => None,
            },
            cluster: self
                .cluster
                .as_ref()
                .map(|listen| cotal_core::trust::ClusterRoutes {
                    name: self.cluster_name.clone().unwrap_or_default(),
                    listen: listen.clone(),
                    routes: self.routes.iter().map(|r| r.trim().to_owned()).collect(),
                }),
        }
    }
}

#[derive(Debug, Args)]
struct StatusCommand {
    /// The space to report on [default: every space under the state root].
    #[arg(long, value_name = "SPACE", value_parser = parse_space)]
    space: Option<SpaceName>,
    #[command(flatten)]
    root: StateRoot,
    /// Print JSON (an array, one object per space) instead of lines.
    #[arg(long)]
    json: bool,
}

/// The server a read-only view connects to (required: a view never starts one).
#[derive(Debug, Args)]
struct ViewServer {
    /// NATS server URL(s), comma-separated.
    #[arg(
        short = 's',
        long,
        env = "NATS_URL",
        hide_env_values = true,
        value_name = "URL",
        value_parser = parse_server
    )]
    server: String,
    #[command(flatten)]
    tls: ClientTls,
}

impl ViewServer {
    /// The server and its TLS, checked.
    fn dial(&self) -> Result<Dial, String> {
        Dial::new(&self.server, self.tls.settings())
    }
}

/// The TLS a client dials with: the nats CLI's flags and variables. Any of them makes TLS
/// required.
#[derive(Debug, Args)]
struct ClientTls {
    /// The PEM CA the server's certificate must chain to (makes TLS required).
    #[arg(long, env = "NATS_CA", value_name = "FILE")]
    tlsca: Option<PathBuf>,
    /// A PEM client certificate, for a server that verifies its clients (with --tlskey).
    #[arg(long, env = "NATS_CERT", value_name = "FILE")]
    tlscert: Option<PathBuf>,
    /// The PEM private key of --tlscert.
    #[arg(long, env = "NATS_KEY", value_name = "FILE")]
    tlskey: Option<PathBuf>,
}

impl ClientTls {
    fn settings(&self) -> TlsSettings {
        TlsSettings {
            ca: self.tlsca.clone(),
            cert: self.tlscert.clone(),
            key: self.tlskey.clone(),
        }
    }
}

/// `up`'s TLS: with --server, the client's (as [`ClientTls`]); without it, --tlscert/--tlskey
/// are the embedded server's own certificate (nats-server's flag names) and --tlsca the CA the
/// plane verifies it against.
#[derive(Debug, Args)]
struct UpTls {
    /// The PEM CA the server's certificate must chain to (makes TLS required).
    #[arg(long, env = "NATS_CA", value_name = "FILE")]
    tlsca: Option<PathBuf>,
    /// With --server: a PEM client certificate (with --tlskey). Without it: the embedded
    /// server's certificate, served to clients over TLS (needs --tlsca).
    #[arg(long, env = "NATS_CERT", value_name = "FILE")]
    tlscert: Option<PathBuf>,
    /// The PEM private key of --tlscert.
    #[arg(long, env = "NATS_KEY", value_name = "FILE")]
    tlskey: Option<PathBuf>,
}

/// How a read-only view authenticates.
#[derive(Debug, Args)]
struct ViewCreds {
    /// Connect with this creds file (a read-only user of the space's data account) instead of
    /// minting a short reader JWT from the trust root under --state-dir.
    #[arg(long, env = "NATS_CREDS", value_name = "FILE")]
    creds: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct GateLs {
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    server: ViewServer,
    #[command(flatten)]
    creds: ViewCreds,
    #[command(flatten)]
    root: StateRoot,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct GateShow {
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    server: ViewServer,
    #[command(flatten)]
    creds: ViewCreds,
    #[command(flatten)]
    root: StateRoot,
    /// The gate's endpoint name.
    #[arg(long, value_name = "ENDPOINT", value_parser = parse_endpoint)]
    endpoint: EndpointName,
    /// The gate's instance id.
    #[arg(long, value_name = "INSTANCE", value_parser = parse_instance)]
    instance: InstanceId,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct GateReconcile {
    #[command(flatten)]
    space: ViewSpace,
    #[command(flatten)]
    server: ViewServer,
    #[command(flatten)]
    root: StateRoot,
    /// The frozen gate's endpoint name.
    #[arg(long, value_name = "ENDPOINT", value_parser = parse_endpoint)]
    endpoint: EndpointName,
    /// The frozen gate's instance id.
    #[arg(long, value_name = "INSTANCE", value_parser = parse_instance)]
    instance: InstanceId,
    /// Print JSON instead of lines.
    #[arg(long)]
    json: bool,
}

fn parse_space(s: &str) -> Result<SpaceName, String> {
    SpaceName::parse(s).map_err(|e| e.message)
}

fn parse_endpoint(s: &str) -> Result<EndpointName, String> {
    EndpointName::parse(s).map_err(|e| e.message)
}

fn parse_instance(s: &str) -> Result<InstanceId, String> {
    InstanceId::parse(s).map_err(|e| e.message)
}

fn parse_replicas(s: &str) -> Result<Replicas, String> {
    match s {
        "1" => Ok(Replicas::One),
        "3" => Ok(Replicas::Three),
        _ => Err("must be 1 or 3".to_owned()),
    }
}

/// A server list the clients dial: nats:// or tls:// URLs (or bare HOST:PORT), comma-separated.
fn parse_server(s: &str) -> Result<String, String> {
    Dial::new(s, TlsSettings::default()).map(|_| s.to_owned())
}

impl UpCommand {
    /// The validated flags and the runtime's workers; a bad public-face setting is one
    /// sentence naming the flag.
    fn into_args(self) -> Result<(up::UpArgs, u8), String> {
        let public = check_public_face(&PublicFaceFlags {
            port: self.exchange_public_port,
            url: self.exchange_public_url,
            trusted_proxy: self.exchange_trusted_proxy,
            advertised_server: self.advertised_server,
            agent_provisioning_url: self.agent_provisioning_url,
        })
        .map_err(|e| e.message().to_owned())?;
        let tls = TlsSettings {
            ca: self.tls.tlsca,
            cert: self.tls.tlscert,
            key: self.tls.tlskey,
        };
        if self.server.is_none() && tls.cert.is_some() && tls.ca.is_none() {
            return Err(
                "up without --server serves the embedded server's TLS with --tlscert and \
                 --tlskey, and needs --tlsca (NATS_CA), the CA the plane verifies it against"
                    .to_owned(),
            );
        }
        let args = up::UpArgs {
            server: self.server,
            tls,
            replicas: self.space.replicas,
            root: self.root.dir,
            space: self.space.space,
            standby: self.standby,
            ledger_dir: self.ledger_dir,
            port: self.port,
            public,
        };
        Ok((args, self.workers))
    }
}

impl GateCommand {
    fn name(&self) -> &'static str {
        match self {
            GateCommand::Ls(_) => "gate ls",
            GateCommand::Show(_) => "gate show",
            GateCommand::Reconcile(_) => "gate reconcile",
        }
    }

    fn into_run(self) -> Result<GateRun, String> {
        Ok(match self {
            GateCommand::Ls(ls) => GateRun::View(gate_cmd::GateArgs {
                space: ls.space.space,
                server: ls.server.dial()?,
                root: ls.root.dir,
                json: ls.json,
                one: None,
                creds: ls.creds.creds,
            }),
            GateCommand::Show(show) => GateRun::View(gate_cmd::GateArgs {
                space: show.space.space,
                server: show.server.dial()?,
                root: show.root.dir,
                json: show.json,
                one: Some((show.endpoint, show.instance)),
                creds: show.creds.creds,
            }),
            GateCommand::Reconcile(r) => GateRun::Reconcile(gate_cmd::ReconcileArgs {
                space: r.space.space,
                server: r.server.dial()?,
                root: r.root.dir,
                endpoint: r.endpoint,
                instance: r.instance,
                json: r.json,
            }),
        })
    }
}

/// What a `gate` command runs.
enum GateRun {
    View(gate_cmd::GateArgs),
    Reconcile(gate_cmd::ReconcileArgs),
}

/// The words `words` starts with, as far as they name subcommands of the CLI, and the command
/// they name: `gate ls --json` gives `(["gate", "ls"], <gate ls>)`. Read from clap's own tree,
/// so a new subcommand needs no second list.
fn named_command<'a>(words: impl IntoIterator<Item = &'a str>) -> (Vec<&'a str>, clap::Command) {
    let mut command = Cli::command();
    let mut named = Vec::new();
    for word in words {
        let Some(sub) = command.find_subcommand(word).cloned() else {
            break;
        };
        named.push(word);
        command = sub;
    }
    (named, command)
}

/// The command words of `args` (after the program name), for the prefix of a usage error:
/// `up`, `gate ls`, `gate show`, or none.
fn command_words(args: &[String]) -> Option<String> {
    let (named, _) = named_command(args.get(1..).unwrap_or_default().iter().map(String::as_str));
    (!named.is_empty()).then(|| named.join(" "))
}

/// A clap refusal as one sentence: the first paragraph of its message (clap's tips, usage and
/// help pointer follow a blank line), on one line. A missing subcommand, which clap answers
/// with the whole help, names the subcommands instead.
fn one_sentence(error: &clap::Error, command: Option<&str>) -> String {
    if matches!(
        error.kind(),
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return format!(
            "a subcommand is required: {}",
            subcommands(command).join(" or ")
        );
    }
    let rendered = error.render().to_string();
    let first = rendered.split("\n\n").next().unwrap_or_default();
    let sentence = first
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    sentence
        .strip_prefix("error: ")
        .unwrap_or(&sentence)
        .to_owned()
}

/// The subcommands of `command` (the top level when `None`), `help` aside.
fn subcommands(command: Option<&str>) -> Vec<String> {
    let (_, command) = named_command(command.iter().flat_map(|c| c.split(' ')));
    command
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .filter(|name| name != "help")
        .collect()
}

/// Parses the command line; `Err` is the exit status of a refusal or of `--help`/`--version`,
/// already reported.
fn parse() -> Result<Cli, ExitCode> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() <= 1 {
        // No command at all: the overview, as `help` prints it.
        let _ = Cli::command().print_help();
        println!();
        return Err(ExitCode::SUCCESS);
    }
    match Cli::try_parse_from(&args) {
        Ok(cli) => Ok(cli),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            Err(ExitCode::SUCCESS)
        }
        Err(e) => {
            let command = command_words(&args);
            let command = command.as_deref();
            let help = command.map_or_else(|| "--help".to_owned(), |c| format!("{c} --help"));
            let prefix =
                command.map_or_else(|| "cotal-authd".to_owned(), |c| format!("cotal-authd {c}"));
            eprintln!(
                "{prefix}: {} (see cotal-authd {help})",
                one_sentence(&e, command)
            );
            Err(ExitCode::from(EXIT_USAGE))
        }
    }
}

/// Logs go to stderr through `tracing`, filtered by `RUST_LOG`, else at `default`; stdout keeps
/// what a command prints (`up`'s ready banner, the `gate` views). Nothing logged carries a
/// secret: the serve seed never leaves the state dir, and no log line names the server URL,
/// which may carry credentials.
fn init_logs(default: LevelFilter, format: LogFormat) {
    let filter = EnvFilter::builder()
        .with_default_directive(default.into())
        .from_env_lossy();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
}

/// Runs a one-shot command's future to its end on a fresh one-worker runtime.
fn block<T>(command: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    block_on(1, command)
}

/// Runs a command's future to its end on a fresh runtime of `workers` worker threads.
fn block_on<T>(
    workers: u8,
    command: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(workers))
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?
        .block_on(command)
}

/// Prints a command's output, or its failure as one sentence.
fn printed(command: &str, out: Result<String, String>) -> ExitCode {
    match out {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(why) => fail(command, &why, 1),
    }
}

/// Prints `why` as the one-sentence failure of `command`.
fn fail(command: &str, why: &str, code: u8) -> ExitCode {
    eprintln!("cotal-authd {command}: {why}");
    ExitCode::from(code)
}

fn main() -> ExitCode {
    let Cli {
        command,
        log_format,
    } = match parse() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // A daemon logs its life at `info` (the client's connection events included); a one-shot
    // view keeps stderr for problems.
    init_logs(
        match command {
            Command::Up(_) | Command::DevIdp(_) => LevelFilter::INFO,
            Command::Init(_)
            | Command::BrokerConfig(_)
            | Command::Status(_)
            | Command::Gate(_)
            | Command::Actor(_)
            | Command::Owner(_)
            | Command::Issuer(_)
            | Command::Login(_) => LevelFilter::WARN,
        },
        log_format,
    );
    match command {
        Command::Up(up) => match up.into_args() {
            Err(why) => fail("up", &why, EXIT_USAGE),
            Ok((args, workers)) => match block_on(workers, up::up(args)) {
                Ok(code) => code,
                Err(why) => fail("up", &why, 1),
            },
        },
        Command::Init(init) => printed(
            "init",
            trust_cmd::init(
                &init.root.dir,
                &init.space,
                &init.idp,
                init.ledger == LedgerKind::Kv,
            ),
        ),
        Command::BrokerConfig(config) => printed(
            "broker-config",
            trust_cmd::broker_config(
                &config.root.dir,
                &config.space,
                &config.listen,
                config.store_dir.as_deref(),
                &config.serving(),
            ),
        ),
        Command::Status(status) => match block(status::status(
            &status.root.dir,
            status.space.as_ref(),
            status.json,
        )) {
            Ok((text, up)) => {
                println!("{text}");
                if up {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_NOT_UP)
                }
            }
            Err(why) => fail("status", &why, 1),
        },
        Command::DevIdp(DevIdpCommand {
            token: Some(DevIdpToken::Token(t)),
            ..
        }) => printed(
            "dev-idp token",
            dev_idp_cmd::token(&t.root.dir, &t.subject, t.ttl),
        ),
        Command::DevIdp(DevIdpCommand {
            token: None,
            port,
            root,
        }) => match port {
            None => fail(
                "dev-idp",
                "--port is required to serve the development IdP",
                EXIT_USAGE,
            ),
            Some(port) => match block(dev_idp_cmd::serve(&root.dir, port)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(why) => fail("dev-idp", &why, 1),
            },
        },
        Command::Login(l) => {
            let proof = match (l.proof.idp_token, l.proof.dev_subject) {
                (Some(token), _) => login_cmd::Proof::IdpToken(token),
                (None, subject) => login_cmd::Proof::DevSubject(subject.unwrap_or_default()),
            };
            let args = login_cmd::LoginArgs {
                root: l.root.dir,
                space: l.space.space,
                actor: l.actor,
                proof,
                ttl_secs: l.ttl,
                tls: l.tls.settings(),
            };
            printed("login", block(login_cmd::login(args)))
        }
        Command::Issuer(IssuerCommand::Rotate(r)) => printed(
            "issuer rotate",
            issuer_cmd::rotate(&r.root.dir, &r.space.space, cotal_authd::clock::now_secs()),
        ),
        Command::Issuer(IssuerCommand::Prune(p)) => printed(
            "issuer prune",
            issuer_cmd::prune(
                &p.root.dir,
                &p.space.space,
                cotal_authd::clock::now_secs(),
                p.force,
            ),
        ),
        Command::Owner(o) => printed(
            "owner",
            actor_cmd::owner(&o.root.dir, &o.space.space, &o.idp_subject),
        ),
        Command::Actor(ActorCommand::Grant(g)) => printed(
            "actor grant",
            block(actor_cmd::grant(actor_cmd::GrantArgs {
                root: g.root.dir,
                server: g.server.server,
                tls: g.server.tls.settings(),
                space: g.space.space,
                actor: g.actor,
                owner: g.owner.into_arg(),
                lists: actor_cmd::GrantLists {
                    scope: list(g.scope),
                    allow_subscribe: list(g.allow_subscribe),
                    allow_publish: list(g.allow_publish),
                    full: g.full,
                },
                role: g.role,
                label: g.label,
            })),
        ),
        Command::Actor(ActorCommand::Ls(ls)) => {
            let listed = block(actor_cmd::ls(
                &ls.root.dir,
                &ls.space.space,
                ls.json,
                ls.server.server,
                ls.server.tls.settings(),
            ));
            match listed {
                Ok(listing) => {
                    println!("{}", listing.out);
                    match listing.unreadable {
                        Some(why) => fail("actor ls", &why, 1),
                        None => ExitCode::SUCCESS,
                    }
                }
                Err(why) => fail("actor ls", &why, 1),
            }
        }
        Command::Actor(ActorCommand::Retire(r)) => printed(
            "actor retire",
            block(actor_cmd::retire(
                &r.root.dir,
                &r.space.space,
                &r.actor,
                &r.owner.into_arg(),
                r.lifecycle_uid,
                r.server.server,
                r.server.tls.settings(),
            )),
        ),
        Command::Actor(ActorCommand::Revoke(r)) => printed(
            "actor revoke",
            block(async {
                let (root, space, owner) = (&r.root.dir, &r.space.space, &r.owner.into_arg());
                let (server, tls) = (r.server.server, r.server.tls.settings());
                match r.credential {
                    true => {
                        actor_cmd::revoke_credential(root, space, &r.actor, owner, server, tls)
                            .await
                    }
                    false => actor_cmd::revoke(root, space, &r.actor, owner, server, tls).await,
                }
            }),
        ),
        Command::Gate(gate) => {
            let name = gate.name();
            let run = match gate.into_run() {
                Ok(run) => run,
                Err(why) => return fail(name, &why, EXIT_USAGE),
            };
            match run {
                GateRun::View(args) => match block(gate_cmd::gate(args)) {
                    Ok(out) => {
                        println!("{out}");
                        ExitCode::SUCCESS
                    }
                    Err(why) => fail(name, &why, 1),
                },
                GateRun::Reconcile(args) => match block(gate_cmd::reconcile(args)) {
                    Ok(gate_cmd::Reconciled::Reopened(out)) => {
                        println!("{out}");
                        ExitCode::SUCCESS
                    }
                    Ok(gate_cmd::Reconciled::LeftFrozen { found, why }) => {
                        println!("{found}");
                        fail(name, &why, EXIT_LEFT_FROZEN)
                    }
                    Err(why) => fail(name, &why, 1),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn usage_errors_name_the_command_words_clap_knows() {
        let words = |args: &[&str]| {
            let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            command_words(&args)
        };
        assert_eq!(
            words(&["x", "gate", "ls", "--json"]).as_deref(),
            Some("gate ls")
        );
        assert_eq!(words(&["x", "gate", "bogus"]).as_deref(), Some("gate"));
        assert_eq!(
            words(&["x", "dev-idp", "token"]).as_deref(),
            Some("dev-idp token")
        );
        assert_eq!(words(&["x", "--state-dir", "up"]), None);
        assert_eq!(subcommands(Some("gate")), ["ls", "show", "reconcile"]);
        assert!(subcommands(None).contains(&"up".to_owned()));
    }

    #[test]
    fn the_help_documents_the_exit_codes_the_binary_uses() {
        assert!(EXIT_CODES.contains(&format!("  {EXIT_USAGE}  usage error")));
        assert!(EXIT_CODES.contains(&format!("  {}  fenced", up::EXIT_FENCED)));
        assert!(EXIT_CODES.contains(&format!("  {EXIT_NOT_UP}  the plane is not up")));
        assert!(EXIT_CODES.contains(&format!("  {EXIT_LEFT_FROZEN}  the gate stays frozen")));
    }
}
