//! The replicated actor ledger ([`KvActors`]): the ledger's rows in the space's
//! `cotal_actors_<space>` bucket, so that every plane of the space — the active one and a
//! standby on another host — serves the same grants, fresh per call (issue 27).
//!
//! The ledger's semantics are core's one implementation ([`cotal_core::actors::store`]) run
//! over [`KvRows`]; this adapter only carries its KV requests to JetStream, each a
//! leader-served read or a revision-pinned write on the bound [`Space`]. Core's ledger is
//! synchronous, so a request blocks on this process's runtime until its round trips are done:
//! [`ActorLedger::blocks`] says so, and the driver asks it from the blocking pool.
//!
//! The alias lock (reference §6.6) is held in this process. One plane writes the rows at a
//! time — the one holding the plane claim — and the operator's verbs write single rows with
//! revision-pinned writes, so a cross-process lock has nothing left to order.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use cotal_core::actors::kv_rows::{KvPort, KvRows};
use cotal_core::actors::store::execute;
use cotal_core::actors::{ActorLedger, ActorsOutcome, ActorsRequest, AliasGuard};
use cotal_core::kv::{KvOutcome, KvRequest, Store};
use cotal_core::names::{actors_bucket, Principal, SpaceName};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_core::profiles::host_user;
use cotal_core::EpError;
use tokio::runtime::Handle;

use crate::space::Space;

/// Where a request finds the current binding of the ledger's store: a renewed connection's
/// binding replaces the one before it, so each request asks anew (as
/// [`crate::AuthorityClient::space`] is meant to be asked).
pub type CurrentSpace = Arc<dyn Fn() -> Result<Arc<Space>, EpError> + Send + Sync>;

/// The actor ledger in the space's replicated bucket.
#[derive(Clone)]
pub struct KvActors {
    current: CurrentSpace,
    bucket: String,
    runtime: Handle,
    locks: Arc<AliasLocks>,
}

impl fmt::Debug for KvActors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KvActors({})", self.bucket)
    }
}

impl KvActors {
    /// The ledger of `space` on the bindings `current` returns, which must bind
    /// [`cotal_core::kv::Store::Actors`]; its requests run on `runtime` (the one those
    /// bindings' connections live on).
    pub fn new(space: &SpaceName, current: CurrentSpace, runtime: Handle) -> KvActors {
        KvActors {
            current,
            bucket: actors_bucket(space),
            runtime,
            locks: Arc::default(),
        }
    }

    /// The replicated ledger of `space` over a short connection of its own
    /// (`cotal:actor-ledger:<space>`, minted from `signer` for a minute: an operator's verb needs
    /// seconds), bound to the ledger's store as it was created (its replicas as found; a missing
    /// store is the plane's to create), its round trips on this runtime. Dropping the returned
    /// client ends the connection, after which the ledger answers `unavailable`.
    pub async fn connect(
        server: crate::Dial,
        space: &SpaceName,
        signer: crate::DataAccountSigner,
    ) -> Result<(Arc<crate::AuthorityClient>, KvActors), String> {
        let grant_space = space.clone();
        let client = crate::AuthorityClient::open(
            server,
            PlaneConnection::ActorLedger.label(space),
            signer,
            move |conn| plane_grants::actor_ledger(&grant_space, conn).map(host_user),
            std::time::Duration::from_secs(60),
            space.clone(),
            crate::SpaceOptions::existing(&[Store::Actors]),
        )
        .await
        .map_err(|e| e.message)?;
        let client = Arc::new(client);
        let weak = Arc::downgrade(&client);
        let current: CurrentSpace = Arc::new(move || {
            weak.upgrade()
                .ok_or_else(|| EpError::unavailable("the verb's ledger connection is closed"))?
                .space()
        });
        Ok((client, KvActors::new(space, current, Handle::current())))
    }

    /// The bucket's name, for messages.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
}

/// Carries one request's KV round trips to the space, blocking this (non-async) thread.
struct Blocking<'a> {
    space: &'a Space,
    runtime: &'a Handle,
}

impl KvPort for Blocking<'_> {
    fn execute(&mut self, request: &KvRequest) -> KvOutcome {
        self.runtime.block_on(self.space.execute(request))
    }
}

impl ActorLedger for KvActors {
    fn execute(&self, request: &ActorsRequest) -> ActorsOutcome {
        let space = match (self.current)() {
            Ok(space) => space,
            Err(e) => {
                return ActorsOutcome::Unavailable(format!(
                    "the actor ledger {} cannot be reached: {}",
                    self.bucket, e.message
                ))
            }
        };
        let port = Blocking {
            space: &space,
            runtime: &self.runtime,
        };
        execute(&mut KvRows::new(port, self.bucket()), request)
    }

    fn lock_alias(&self, alias: &Principal) -> Result<AliasGuard, String> {
        let mut held = self.locks.held();
        while held.contains(alias) {
            held = self
                .locks
                .freed
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(alias.clone());
        Ok(self.locks.guard(alias))
    }

    fn try_lock_alias(&self, alias: &Principal) -> Result<Option<AliasGuard>, String> {
        if !self.locks.held().insert(alias.clone()) {
            return Ok(None);
        }
        Ok(Some(self.locks.guard(alias)))
    }

    fn blocks(&self) -> bool {
        true
    }
}

/// The aliases locked in this process, and the wake-up of their waiters.
#[derive(Debug, Default)]
struct AliasLocks {
    held: Mutex<HashSet<Principal>>,
    freed: Condvar,
}

impl AliasLocks {
    fn held(&self) -> MutexGuard<'_, HashSet<Principal>> {
        // The set stays consistent at every step: a panic elsewhere leaves nothing to repair.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The guard of an alias just inserted: removing it on drop wakes the waiters.
    fn guard(self: &Arc<AliasLocks>, alias: &Principal) -> AliasGuard {
        AliasGuard::new(
            alias.clone(),
            Box::new(Unlock {
                locks: Arc::clone(self),
                alias: alias.clone(),
            }),
        )
    }
}

struct Unlock {
    locks: Arc<AliasLocks>,
    alias: Principal,
}

impl Drop for Unlock {
    fn drop(&mut self) {
        self.locks.held().remove(&self.alias);
        self.locks.freed.notify_all();
    }
}
