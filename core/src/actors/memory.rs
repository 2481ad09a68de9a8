//! In-memory twins of the ledger and broker-durable ports, for tests and the simulator.
//!
//! [`MemoryActors`] keeps each row as the exact bytes a file would hold and runs the same
//! [`super::store::execute`] as the file adapter, so grammar and fail-closed reads are shared.
//! Clones share state: one ledger can serve several worlds, like one ledger directory.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use super::row::{file_name, ActorRow, RowSpace};
use super::store::{execute, RowStore, StoreError};
use super::{
    ActorLedger, ActorsOutcome, ActorsRequest, AliasGuard, DurablesOutcome, DurablesPort,
    DurablesRequest,
};
use crate::names::{LifecycleUid, Principal};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not wedge every later one; the state stays consistent
    // because each critical section is a single map operation.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct Rows {
    files: BTreeMap<(RowSpace, Principal), Vec<u8>>,
    /// Writes (store/remove) still to fail without applying.
    fail_writes: u32,
    /// Writes still to apply and then report a failure (an ambiguous write).
    ambiguous_writes: u32,
    served: u64,
}

impl RowStore for Rows {
    fn load(
        &mut self,
        space: RowSpace,
        principal: &Principal,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.files.get(&(space, principal.clone())).cloned())
    }

    fn store(
        &mut self,
        space: RowSpace,
        principal: &Principal,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        self.fault(|rows| {
            rows.files
                .insert((space, principal.clone()), bytes.to_vec());
        })
        .map(|_| ())
    }

    fn remove(&mut self, space: RowSpace, principal: &Principal) -> Result<bool, StoreError> {
        let mut removed = false;
        self.fault(|rows| removed = rows.files.remove(&(space, principal.clone())).is_some())?;
        Ok(removed)
    }

    fn describe(&self, space: RowSpace, principal: &Principal) -> String {
        format!("memory:{}/{}", space.dir(), file_name(principal))
    }

    fn principals(
        &mut self,
        space: RowSpace,
    ) -> Result<Vec<Result<Principal, String>>, StoreError> {
        let mut principals: Vec<Principal> = self
            .files
            .keys()
            .filter(|(s, _)| *s == space)
            .map(|(_, p)| p.clone())
            .collect();
        principals.sort_by_key(Principal::key);
        Ok(principals.into_iter().map(Ok).collect())
    }
}

impl Rows {
    fn fault(&mut self, apply: impl FnOnce(&mut Rows)) -> Result<(), StoreError> {
        if self.fail_writes > 0 {
            self.fail_writes -= 1;
            return Err(StoreError::Unavailable("injected write failure".into()));
        }
        apply(self);
        if self.ambiguous_writes > 0 {
            self.ambiguous_writes -= 1;
            return Err(StoreError::Unavailable(
                "injected ambiguous write (it was applied)".into(),
            ));
        }
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Shared {
    rows: Mutex<Rows>,
    held: Mutex<BTreeSet<Principal>>,
    freed: Condvar,
}

/// The in-memory actor ledger.
#[derive(Debug, Clone, Default)]
pub struct MemoryActors {
    shared: Arc<Shared>,
}

struct MemoryAliasGuard {
    shared: Arc<Shared>,
    alias: Principal,
}

impl Drop for MemoryAliasGuard {
    fn drop(&mut self) {
        lock(&self.shared.held).remove(&self.alias);
        self.shared.freed.notify_all();
    }
}

impl MemoryActors {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores raw bytes as a row file, bypassing every check (tests of fail-closed reads).
    pub fn put_raw(&self, space: RowSpace, principal: &Principal, bytes: &[u8]) {
        lock(&self.shared.rows)
            .files
            .insert((space, principal.clone()), bytes.to_vec());
    }

    /// The raw bytes of a row, if any.
    pub fn raw(&self, space: RowSpace, principal: &Principal) -> Option<Vec<u8>> {
        lock(&self.shared.rows)
            .files
            .get(&(space, principal.clone()))
            .cloned()
    }

    /// The row of `principal` in `space`, decoded (`None` when absent or unreadable).
    pub fn row(&self, space: RowSpace, principal: &Principal) -> Option<ActorRow> {
        self.raw(space, principal)
            .and_then(|b| ActorRow::from_file_bytes(&b, space).ok())
    }

    /// Fails the next `n` writes without applying them.
    pub fn fail_next_writes(&self, n: u32) {
        lock(&self.shared.rows).fail_writes = n;
    }

    /// Applies the next `n` writes and then reports each as failed (ambiguous writes).
    pub fn ambiguous_next_writes(&self, n: u32) {
        lock(&self.shared.rows).ambiguous_writes = n;
    }

    /// Ledger requests served so far.
    pub fn requests_served(&self) -> u64 {
        lock(&self.shared.rows).served
    }

    /// Whether `alias` is locked right now.
    pub fn is_locked(&self, alias: &Principal) -> bool {
        lock(&self.shared.held).contains(alias)
    }

    fn guard(&self, alias: &Principal) -> AliasGuard {
        AliasGuard::new(
            alias.clone(),
            Box::new(MemoryAliasGuard {
                shared: Arc::clone(&self.shared),
                alias: alias.clone(),
            }),
        )
    }
}

impl ActorLedger for MemoryActors {
    fn execute(&self, request: &ActorsRequest) -> ActorsOutcome {
        let mut rows = lock(&self.shared.rows);
        rows.served += 1;
        execute(&mut *rows, request)
    }

    fn lock_alias(&self, alias: &Principal) -> Result<AliasGuard, String> {
        let mut held = lock(&self.shared.held);
        while held.contains(alias) {
            held = self
                .shared
                .freed
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
        }
        held.insert(alias.clone());
        drop(held);
        Ok(self.guard(alias))
    }

    fn try_lock_alias(&self, alias: &Principal) -> Result<Option<AliasGuard>, String> {
        let mut held = lock(&self.shared.held);
        if !held.insert(alias.clone()) {
            return Ok(None);
        }
        drop(held);
        Ok(Some(self.guard(alias)))
    }
}

/// What a provisioned lifecycle holds on the broker (as the twin records it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footprint {
    pub subscribe: Vec<String>,
    pub allow_subscribe: Vec<String>,
    pub role: Option<String>,
}

#[derive(Debug, Default)]
struct Durables {
    provisioned: BTreeMap<(Principal, LifecycleUid), Footprint>,
    log: Vec<DurablesRequest>,
    fail_next: u32,
}

/// The in-memory broker-durables port: records each lifecycle's footprint.
#[derive(Debug, Clone, Default)]
pub struct MemoryDurables {
    shared: Arc<Mutex<Durables>>,
}

impl MemoryDurables {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fails the next `n` requests (provision or deprovision) without applying them.
    pub fn fail_next(&self, n: u32) {
        lock(&self.shared).fail_next = n;
    }

    /// Every lifecycle with a footprint now.
    pub fn provisioned(&self) -> Vec<(Principal, LifecycleUid)> {
        lock(&self.shared).provisioned.keys().cloned().collect()
    }

    /// The footprint of one lifecycle.
    pub fn footprint(&self, principal: &Principal, uid: &LifecycleUid) -> Option<Footprint> {
        lock(&self.shared)
            .provisioned
            .get(&(principal.clone(), uid.clone()))
            .cloned()
    }

    /// Every request received, in order (failed ones included).
    pub fn requests(&self) -> Vec<DurablesRequest> {
        lock(&self.shared).log.clone()
    }
}

impl DurablesPort for MemoryDurables {
    fn execute(&self, request: &DurablesRequest) -> DurablesOutcome {
        let mut state = lock(&self.shared);
        state.log.push(request.clone());
        if state.fail_next > 0 {
            state.fail_next -= 1;
            return DurablesOutcome::Failed("injected durables failure".into());
        }
        match request {
            DurablesRequest::Provision {
                principal,
                lifecycle_uid,
                subscribe,
                allow_subscribe,
                role,
            } => {
                state.provisioned.insert(
                    (principal.clone(), lifecycle_uid.clone()),
                    Footprint {
                        subscribe: subscribe.clone(),
                        allow_subscribe: allow_subscribe.clone(),
                        role: role.clone(),
                    },
                );
            }
            DurablesRequest::Deprovision {
                principal,
                lifecycle_uid,
                ..
            } => {
                state
                    .provisioned
                    .remove(&(principal.clone(), lifecycle_uid.clone()));
            }
        }
        DurablesOutcome::Done
    }
}
