//! The actor ledger a plane serves and the operator's verbs write: the files of a state dir,
//! or the space's replicated `cotal_actors_<space>` bucket ([`cotal_io_fs::ledger_home`]).
//! One type for both, so a door, the callout and a verb ask the ledger the same way whichever
//! it is, and a replicated ledger's blocking round trips never run on an async task.

use std::path::Path;
use std::sync::Arc;

use cotal_core::actors::{ActorLedger, ActorsOutcome, ActorsRequest};
use cotal_core::names::SpaceName;
use cotal_core::EpError;
use cotal_io_fs::ledger_home::{self, LedgerHome};
use cotal_io_fs::{discovery, trust, FileActors};
use cotal_io_nats::driver::ask_ledger;
use cotal_io_nats::ledger::CurrentSpace;
use cotal_io_nats::{AuthorityClient, DataAccountSigner, Dial, KvActors, TlsSettings};

/// The actor ledger, on this host's files or replicated.
#[derive(Debug, Clone)]
pub enum Ledger {
    Files(FileActors),
    Replicated(KvActors),
}

impl Ledger {
    /// The replicated ledger of `space` on the bindings `current` returns, its round trips on
    /// this runtime.
    pub fn replicated(space: &SpaceName, current: CurrentSpace) -> Ledger {
        Ledger::Replicated(KvActors::new(
            space,
            current,
            tokio::runtime::Handle::current(),
        ))
    }

    /// The ledger as the core drivers take it.
    pub fn port(&self) -> Arc<dyn ActorLedger> {
        match self {
            Ledger::Files(files) => Arc::new(files.clone()),
            Ledger::Replicated(kv) => Arc::new(kv.clone()),
        }
    }

    /// One request, from an async task.
    pub async fn ask(&self, request: ActorsRequest) -> ActorsOutcome {
        ask_ledger(&self.port(), &request).await
    }

    /// Runs `question` against the ledger from an async task: inline on files, on the blocking
    /// pool for the replicated ledger (whose requests wait on this runtime).
    pub async fn run<T: Send + 'static>(
        &self,
        question: impl FnOnce(&dyn ActorLedger) -> T + Send + 'static,
    ) -> Result<T, EpError> {
        let port = self.port();
        if !port.blocks() {
            return Ok(question(&*port));
        }
        tokio::task::spawn_blocking(move || question(&*port))
            .await
            .map_err(|e| EpError::internal(format!("a ledger request died: {e}")))
    }

    /// Where the ledger is, for the operator: a directory or a bucket.
    pub fn describe(&self) -> String {
        match self {
            Ledger::Files(files) => files.root().display().to_string(),
            Ledger::Replicated(kv) => format!("bucket {}", kv.bucket()),
        }
    }
}

/// The ledger one operator verb writes, open for the verb's length: its files, or the
/// replicated bucket over the verb's own short connection, which dropping it ends (a verb's
/// process ends right after).
#[derive(Debug)]
pub struct VerbLedger {
    ledger: Ledger,
    /// The replicated ledger's short connection, held while the verb runs.
    _client: Option<Arc<AuthorityClient>>,
}

impl VerbLedger {
    /// The ledger of `space` under the state root (the directory its trust root lives in):
    /// its files, refused when that root's plane serves another state root's
    /// ([`ledger_home::for_verbs`]); or the replicated bucket, over a short operator connection
    /// to `server` (default: the running plane's, from its discovery file):
    /// `cotal:actor-ledger:<space>`, minted from the trust root's data account for a minute
    /// (the verbs need seconds), over the ledger's store as it was created
    /// ([`KvActors::connect`]).
    pub async fn open(
        root: &Path,
        space: &SpaceName,
        server: Option<String>,
        tls: TlsSettings,
    ) -> Result<VerbLedger, String> {
        match ledger_home::for_verbs(root, space)? {
            LedgerHome::Files(files) => Ok(VerbLedger {
                ledger: Ledger::Files(files),
                _client: None,
            }),
            LedgerHome::Replicated => {
                let server = Dial::new(&discovery::server_or_plane(root, space, server)?, tls)?;
                let signer = DataAccountSigner::of(&trust::load_daemon(root, space)?);
                let (client, kv) = KvActors::connect(server, space, signer).await?;
                Ok(VerbLedger {
                    ledger: Ledger::Replicated(kv),
                    _client: Some(client),
                })
            }
        }
    }

    /// One request, from the verb's task.
    pub async fn ask(&self, request: ActorsRequest) -> ActorsOutcome {
        self.ledger.ask(request).await
    }
}
