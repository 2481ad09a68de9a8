//! The simulator's invariants, each named after the rule it keeps. Some are about one moment and
//! run right at that effect; the rest run after every scheduler step.
//!
//! At the effect:
//! * **F19/F22** at a mint's winning touch: the gate it replaced was `open` and is rewritten
//!   byte for byte, and the mint's row is staged; **F19/F20** and still `active`;
//! * **F27** at a serve mint's winning touch: the gate sits at the grant's epoch, registration
//!   revision and name-authority revision;
//! * **F64** at a committed spec write: the instance's gate stands at the very freeze the writer
//!   executes (its own, or the one it resumed), not merely one under the same op id;
//! * **F68** at a committed spec write: every released credential of the instance is `revoked`
//!   and its holder was verified evicted under the current freeze;
//! * **F22/F23/F68** right before a reopen at a coordinate: every credential released under
//!   another coordinate is `revoked` and its holder was verified evicted under a freeze since;
//! * **F52** right before a reconciler's reopen: its probe said `gone` and the holder is dead;
//!   and before any reconciler ledger write: the freeze it read still stands;
//! * **F42** at a committed status write: the writer's fresh gate read found the gate open; a
//!   READY status carries the gate's current epoch (unless that read saw the gate open at the
//!   writing epoch and a whole successor barrier ran in between — a window no records-bucket
//!   CAS can close); and no status epoch falls below the stored one;
//! * **F26** at a committed ledger write: rows never lose `revoked`, never carry markers.
//!
//! After every step:
//! * **Q-13** the generation changes only on a reopen, by exactly 1; **F13/F14** a frozen gate
//!   is never rewritten frozen; **E1** a freeze keeps the coordinates;
//! * **F69** the epoch never decreases and rises by exactly 1 on each reopen that completes a
//!   re-registration (a spec or tombstone existed before), and on nothing else;
//!   **F63** a completing reopen's registration revision is the live spec's store revision;
//!   **E2/F63** a reopen that keeps the registration revision never follows a spec published
//!   under the same freeze;
//! * **F65** no governance head (the endpoint's, the `auth` one the planes share) is ever
//!   deleted and no governed trait leaves its binding map;
//! * **F14** a plane's gate frozen by a registration is frozen under the op id its durable record
//!   names (else no restart of that plane could ever resume it).
//!
//! At the end of a flight:
//! * **F22** a release names the row it staged and the touch that committed;
//!   **F20** a refused mint's row is absent, `revoked`, or named in the refusal;
//! * **E4** a registration that froze the gate and failed before Phase 2 did not leave the gate
//!   at its freeze (it abort-reopens, E2) unless a request on its gate failed after the freeze;
//! * **E4/F52** a reconcile told `gone` while the gate still stood as it first read it, whose
//!   evictions all verified and whose path saw no fault, reopened the gate;
//! * **F69** a completed registration's reported coordinates are the gate's, and a plane's
//!   completed ceremony commits an epoch above every one the plane committed before;
//! * **F14** a plane start resumes its recorded op exactly when its observation found the gate
//!   frozen by that very registration.
//!
//! At the end of a seed: **F22/F26** every released credential has its row, every row is as the
//! tracker last saw it; and (in `settle`) **E4/F52** a clean reconcile reopens every frozen gate,
//! **F14/F69** every plane's restart registers at an epoch above every one it committed before
//! and leaves its gate open, **F64** the endpoint still registers, **F27** and still mints with
//! the new grant.

use std::collections::BTreeSet;

use cotal_core::gate::{EndpointGate, GateState, OpKind};
use cotal_core::govern::GovernanceHead;
use cotal_core::kv::{Entry, KvRequest, Revision, Store};
use cotal_core::ledger::{CredState, LedgerRow};
use cotal_core::machine::Liveness;
use cotal_core::service::{ServiceStatus, SERVICE_READY};
use cotal_core::EpError;

use cotal_core::host::resumed_op;
use cotal_core::issuance::ServeGrant;
use cotal_core::names::OpId;
use cotal_core::registration::Registered;

use super::{Broken, Credential, Flight, Job, KeyKind, Outcome, Sim, GRANT_HISTORY};
use crate::fence::Violation;

impl Sim<'_> {
    // ---- at the effect ------------------------------------------------------------------------

    /// The checks due right before `request` is executed.
    pub(super) fn before_kv(
        &mut self,
        flight: &Flight,
        request: &KvRequest,
        target: Option<(usize, KeyKind)>,
    ) -> Result<(), Violation> {
        match (target, request) {
            (Some((j, KeyKind::Family)), _) if request.is_write() => {
                self.check_reconcile_write(j, flight, request.key())
            }
            (
                Some((j, KeyKind::Gate)),
                KvRequest::Update {
                    value, expected, ..
                },
            ) if !flight.job.is_mint() => {
                let Some(inst) = self.instances.get(j) else {
                    return Ok(());
                };
                let successor = EndpointGate::parse(value)
                    .ok()
                    .filter(|g| g.state() == GateState::Open);
                match successor {
                    Some(successor)
                        if inst.gate.state() == GateState::Frozen
                            && inst.gate_revision == *expected =>
                    {
                        self.check_reopen(j, &successor, flight)
                    }
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// F22/F23/F68 and F52, right before a reopen of instance `j` at `successor` is sent.
    fn check_reopen(
        &self,
        j: usize,
        successor: &EndpointGate,
        flight: &Flight,
    ) -> Result<(), Violation> {
        let Some(inst) = self.instances.get(j) else {
            return Ok(());
        };
        let s = successor.coordinates();
        let at = (
            s.process_epoch,
            s.registration_revision,
            s.name_authority_revision,
        );
        for c in inst.credentials.iter().filter(|c| c.coords != at) {
            let state = self.read_row(&c.row_key)?;
            if state != CredState::Revoked || !c.evicted {
                return Err(Violation::new(
                    "F22/F23/F68",
                    format!(
                        "instance {j}: {}#{} reopens the gate at epoch {} registration revision {} \
                         while credential {} (released at epoch {} registration revision {}) is \
                         {} and its holder {} was {}verified evicted since",
                        flight.job.label(),
                        flight.id,
                        s.process_epoch,
                        s.registration_revision,
                        c.row_key,
                        c.coords.0,
                        c.coords.1,
                        state.as_str(),
                        c.holder,
                        if c.evicted { "" } else { "NOT " }
                    ),
                ));
            }
        }
        if matches!(flight.job, Job::Reconcile)
            && (flight.notes.probe != Some(Liveness::Gone) || !self.holder_dead(j))
        {
            return Err(Violation::new(
                "F52",
                format!(
                    "instance {j}: reconcile#{} reopens the gate although its probe said {:?} \
                     and the holder is {}",
                    flight.id,
                    flight.notes.probe,
                    if self.holder_dead(j) { "dead" } else { "alive" }
                ),
            ));
        }
        Ok(())
    }

    /// F52: a reconcile writes the ledger only under the very freeze it read and proved dead.
    fn check_reconcile_write(&self, j: usize, flight: &Flight, key: &str) -> Result<(), Violation> {
        let stale = matches!(flight.job, Job::Reconcile)
            && self
                .instances
                .get(j)
                .is_some_and(|s| Some(s.gate_revision) != flight.notes.first_gate_read);
        if !stale {
            return Ok(());
        }
        let gate = self
            .instances
            .get(j)
            .map(|s| (s.gate.state(), s.gate.coordinates()));
        Err(Violation::new(
            "F52",
            format!(
                "instance {j}: reconcile#{} writes {key} although the freeze it read (gate \
                 revision {:?}) no longer stands: the gate is now {gate:?}; a reconcile finishes \
                 only the dead operation's own freeze",
                flight.id, flight.notes.first_gate_read
            ),
        ))
    }

    /// F64 and F68 at a committed spec write of instance `j` (the write does not move the gate or
    /// the ledger, so their state is what it was when the write was sent; a write the KV refused
    /// published nothing and is not judged).
    fn check_spec_write(&self, j: usize, flight: &Flight) -> Result<(), Violation> {
        let Some(inst) = self.instances.get(j) else {
            return Ok(());
        };
        let ours =
            flight.job.registers_as().is_some() && flight.notes.freeze == Some(inst.gate_revision);
        if inst.gate.state() != GateState::Frozen || !ours {
            return Err(Violation::new(
                "F64",
                format!(
                    "instance {j}: {}#{} writes the spec while the gate is {} under {:?} at \
                     revision {}, its own freeze being at {:?}; a registration publishes its \
                     spec only under its own standing freeze",
                    flight.job.label(),
                    flight.id,
                    inst.gate.state().as_str(),
                    inst.gate.op().map(|op| op.op_id().to_string()),
                    inst.gate_revision,
                    flight.notes.freeze
                ),
            ));
        }
        for c in &inst.credentials {
            let state = self.read_row(&c.row_key)?;
            let evicted = inst.evicted.contains(&c.holder);
            if state != CredState::Revoked || !evicted {
                return Err(Violation::new(
                    "F68",
                    format!(
                        "instance {j}: {}#{} writes the new spec while credential {} is {} and \
                         its holder {} was {}verified evicted under this freeze; the whole \
                         family is revoked and evicted before the spec",
                        flight.job.label(),
                        flight.id,
                        c.row_key,
                        state.as_str(),
                        c.holder,
                        if evicted { "" } else { "NOT " }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The checks due right after `request` committed.
    pub(super) fn after_commit(
        &mut self,
        flight: &mut Flight,
        request: &KvRequest,
        target: Option<(usize, KeyKind)>,
        gate_before: Option<Entry>,
    ) -> Result<(), Violation> {
        match (target, request) {
            (Some((j, KeyKind::Gate)), KvRequest::Update { value, .. }) => {
                if flight.job.is_mint() {
                    self.record_touch(j, flight, gate_before, value)
                } else {
                    let frozen =
                        EndpointGate::parse(value).is_ok_and(|g| g.state() == GateState::Frozen);
                    if frozen && j == flight.instance {
                        flight.notes.froze = true;
                        flight.notes.freeze = self
                            .world
                            .kv
                            .get(Store::Auth, request.key())
                            .map(|e| e.revision);
                    }
                    Ok(())
                }
            }
            (Some((_, KeyKind::Family)), _) => self.track_row(request.key()),
            (Some((j, KeyKind::Spec)), KvRequest::Delete { .. }) => {
                if let Some(inst) = self.instances.get_mut(j) {
                    inst.spec_published_under = None;
                }
                Ok(())
            }
            (Some((j, KeyKind::Spec)), _) => {
                self.check_spec_write(j, flight)?;
                if let Some(inst) = self.instances.get_mut(j) {
                    inst.spec_published_under =
                        (inst.gate.state() == GateState::Frozen).then_some(inst.gate_revision);
                }
                Ok(())
            }
            (Some((j, KeyKind::Status)), _) => self.check_status_write(j, flight, request),
            _ => Ok(()),
        }
    }

    /// F19/F22/F27 at the linearization point of a mint: its touch committed.
    fn record_touch(
        &mut self,
        j: usize,
        flight: &mut Flight,
        before: Option<Entry>,
        written: &[u8],
    ) -> Result<(), Violation> {
        let (row_key, grant) = match &flight.job {
            Job::ServeMint { row_key, grant, .. } => (row_key.clone(), Some(grant.clone())),
            Job::SiblingMint { row_key, .. } => (row_key.clone(), None),
            _ => return Ok(()),
        };
        let what = format!("instance {j}: {}#{}", flight.job.label(), flight.id);
        let predecessor = before.filter(Entry::is_put).and_then(|e| {
            EndpointGate::parse(&e.value)
                .ok()
                .map(|g| (g, e.value == written))
        });
        let gate = match predecessor {
            Some((gate, true)) if gate.state() == GateState::Open => gate,
            other => {
                return Err(Violation::new(
                    "F19/F22",
                    format!(
                        "{what} committed a gate write over a gate that was {}; a credential is \
                         released only by an identical-bytes touch of an open gate",
                        match other {
                            Some((g, true)) => g.state().as_str(),
                            Some((_, false)) => "rewritten with other bytes",
                            None => "unreadable",
                        }
                    ),
                ))
            }
        };
        let row = self
            .world
            .kv
            .get(Store::Auth, &row_key)
            .filter(Entry::is_put)
            .and_then(|e| LedgerRow::parse(&e.value, &row_key).ok());
        let Some(row) = row else {
            return Err(Violation::new(
                "F19/F22",
                format!("{what} won its touch but its row {row_key} is not staged"),
            ));
        };
        if row.state() != CredState::Active {
            return Err(Violation::new(
                "F19/F20",
                format!(
                    "{what} won its touch but its row {row_key} is {}; a credential is released \
                     only over its active row",
                    row.state().as_str()
                ),
            ));
        }
        let at = (
            gate.process_epoch(),
            gate.registration_revision(),
            gate.name_authority_revision(),
        );
        if let Some(grant) = &grant {
            let granted = (
                grant.epoch,
                grant.registration_revision,
                grant.name_authority_revision,
            );
            if at != granted {
                return Err(Violation::new(
                    "F27",
                    format!(
                        "{what} won its touch at epoch {} registration revision {} nar {} with a \
                         grant for {} / {} / {}",
                        at.0, at.1, at.2, granted.0, granted.1, granted.2
                    ),
                ));
            }
        }
        let revision = self
            .instances
            .get(j)
            .and_then(|s| self.world.kv.get(Store::Auth, &s.gate_key))
            .map(|e| e.revision);
        flight.notes.touch = revision;
        if let Some(inst) = self.instances.get_mut(j) {
            inst.credentials.push(Credential {
                row_key,
                coords: at,
                holder: row.holder_principal().clone(),
                evicted: false,
            });
        }
        Ok(())
    }

    /// F42 at a committed status write of instance `j`.
    ///
    /// A READY status must carry the gate's current epoch. The one exception is the window no
    /// cross-bucket protocol can close: the writer's fresh read saw the gate OPEN at the writing
    /// epoch, and a successor's whole barrier ran between that read and the write (counted in
    /// `stale_ready_races`). A writer whose fresh read found the gate FROZEN (by a successor's
    /// barrier or any other) must have been refused, whatever the epoch: instance-side writes
    /// need an open gate.
    fn check_status_write(
        &mut self,
        j: usize,
        flight: &Flight,
        request: &KvRequest,
    ) -> Result<(), Violation> {
        let Some(inst) = self.instances.get_mut(j) else {
            return Ok(());
        };
        let value = match request {
            KvRequest::Create { value, .. }
            | KvRequest::CreateStrict { value, .. }
            | KvRequest::Update { value, .. } => value,
            _ => {
                inst.status_epoch = None;
                return Ok(());
            }
        };
        let status = ServiceStatus::parse(value)
            .map_err(|e| Violation::new("F42", format!("instance {j}: status row: {e}")))?;
        // Every status writer here is instance-side.
        if let Some((state, e)) = flight.notes.last_gate_read {
            if state != GateState::Open {
                return Err(Violation::new(
                    "F42",
                    format!(
                        "instance {j}: {}#{} committed a status at epoch {} although its fresh \
                         gate read found the gate {} at epoch {e}; an instance-side write waits \
                         for the barrier to reopen",
                        flight.job.label(),
                        flight.id,
                        status.epoch(),
                        state.as_str()
                    ),
                ));
            }
        }
        let current = inst.gate.process_epoch();
        if status.state() == SERVICE_READY && status.epoch() != current {
            let fenced_on = flight.notes.last_gate_read;
            match fenced_on {
                Some((GateState::Open, e)) if e == status.epoch() => {
                    self.stats.stale_ready_races += 1;
                }
                _ => {
                    return Err(Violation::new(
                        "F42",
                        format!(
                            "instance {j}: {}#{} wrote READY at epoch {} after the successor's \
                             reopen (the gate is at epoch {current}); its fresh gate read saw \
                             {fenced_on:?}",
                            flight.job.label(),
                            flight.id,
                            status.epoch()
                        ),
                    ));
                }
            }
        }
        let Some(inst) = self.instances.get_mut(j) else {
            return Ok(());
        };
        if inst
            .status_epoch
            .is_some_and(|stored| status.epoch() < stored)
        {
            return Err(Violation::new(
                "F42",
                format!(
                    "instance {j}: a status at epoch {} replaced one at epoch {:?}",
                    status.epoch(),
                    inst.status_epoch
                ),
            ));
        }
        inst.status_epoch = Some(status.epoch());
        Ok(())
    }

    /// F26 after a committed write in a credential family.
    fn track_row(&mut self, key: &str) -> Result<(), Violation> {
        crate::fence::track_ledger_row(&mut self.rows, &self.world.kv, key)
    }

    fn read_row(&self, key: &str) -> Result<CredState, Violation> {
        crate::fence::read_ledger_state(&self.world.kv, key)
    }

    // ---- after every step ---------------------------------------------------------------------

    pub(super) fn after_step(&mut self) -> Result<(), Violation> {
        for j in 0..self.instances.len() {
            self.track_spec(j);
            self.track_gate(j)?;
        }
        for p in 0..self.planes.len() {
            self.check_plane_record(p)?;
        }
        for h in 0..self.heads.len() {
            self.check_governance(h)?;
        }
        Ok(())
    }

    /// F14: a plane's frozen gate stands under the registration its durable record names. The
    /// record is written before any freeze and kept until the run completed, and only the plane
    /// writes its gate, so a freeze under any other op id is one no restart will ever resume.
    fn check_plane_record(&self, p: usize) -> Result<(), Violation> {
        let (Some(inst), Some(plane)) = (
            self.instances.get(self.plane_instance(p)),
            self.planes.get(p),
        ) else {
            return Ok(());
        };
        if inst.gate.state() != GateState::Frozen {
            return Ok(());
        }
        let op = inst.gate.op();
        let resumable = op.is_some_and(|o| {
            o.kind() == OpKind::Registration && Some(o.op_id()) == plane.record.as_ref()
        });
        if resumable {
            return Ok(());
        }
        Err(Violation::new(
            "F14",
            format!(
                "plane {p}'s gate is frozen by {:?} {:?} while its durable record names {:?}; \
                 no restart can resume that freeze",
                op.map(|o| o.kind()),
                op.map(|o| o.op_id().to_string()),
                plane.record.as_ref().map(ToString::to_string)
            ),
        ))
    }

    fn track_spec(&mut self, j: usize) {
        let Some(inst) = self.instances.get_mut(j) else {
            return;
        };
        if inst.spec_first.is_none() {
            inst.spec_first = self
                .world
                .kv
                .get(Store::Records, &inst.spec_key)
                .map(|e| e.revision);
        }
    }

    /// Q-13, F13/F14, E1, F63, F69 across one step.
    fn track_gate(&mut self, j: usize) -> Result<(), Violation> {
        let Some(inst) = self.instances.get(j) else {
            return Ok(());
        };
        let entry = match self.world.kv.get(Store::Auth, &inst.gate_key) {
            Some(entry) if entry.is_put() => entry,
            None if !inst.provisioned => return Ok(()),
            other => {
                return Err(Violation::new(
                    "F9",
                    format!(
                        "gate {} is {}; gates are never deleted",
                        inst.gate_key,
                        other.map_or("gone", |e| e.operation.as_str())
                    ),
                ))
            }
        };
        if entry.revision == inst.gate_revision {
            return Ok(());
        }
        let now = EndpointGate::parse(&entry.value).map_err(|e| {
            Violation::new("F9", format!("gate {} does not parse: {e}", inst.gate_key))
        })?;
        if !inst.provisioned {
            // A plane's first start provisioned it: exactly the open row it was to create.
            if now != inst.gate {
                return Err(Violation::new(
                    "Q-3",
                    format!(
                        "instance {j}: the gate was provisioned as {}, not open at the origin \
                         for its principal",
                        now.to_json()
                    ),
                ));
            }
            if let Some(inst) = self.instances.get_mut(j) {
                inst.provisioned = true;
                inst.gate_revision = entry.revision;
            }
            return Ok(());
        }
        let was = inst.gate.clone();
        let (p, n) = (was.coordinates(), now.coordinates());
        let moved = |rule: &'static str, why: &str| {
            Violation::new(
                rule,
                format!(
                    "instance {j}: the gate went from {} {p:?} to {} {n:?}: {why}",
                    was.state().as_str(),
                    now.state().as_str()
                ),
            )
        };
        match (was.state(), now.state()) {
            (GateState::Open, GateState::Open) if now != was => {
                return Err(moved(
                    "Q-13/F69",
                    "an open gate changed without a barrier (only a touch rewrites it open)",
                ))
            }
            (GateState::Open, GateState::Open) => {}
            (GateState::Open, GateState::Frozen) if n != p => {
                return Err(moved("E1", "a freeze keeps every coordinate"))
            }
            (GateState::Open, GateState::Frozen) => {
                if let Some(inst) = self.instances.get_mut(j) {
                    inst.evicted.clear();
                }
            }
            (GateState::Frozen, GateState::Open) => {
                self.check_reopened(j, &was, &now)?;
                let completed = now.registration_revision() != was.registration_revision();
                if let (Some(p), true) = (self.plane_of(j), completed) {
                    if let Some(plane) = self.planes.get_mut(p) {
                        plane.committed = plane.committed.max(Some(now.process_epoch()));
                    }
                }
            }
            (GateState::Frozen, GateState::Frozen) => {
                return Err(moved(
                    "F13/F14",
                    "a frozen gate is only ever reopened by its own operation",
                ))
            }
            _ => return Err(moved("F15", "nothing in this simulation retires a gate")),
        }
        if let Some(inst) = self.instances.get_mut(j) {
            inst.gate = now;
            inst.gate_revision = entry.revision;
        }
        Ok(())
    }

    /// Q-13, F63 and F69 for a frozen → open transition of instance `j`.
    fn check_reopened(
        &mut self,
        j: usize,
        was: &EndpointGate,
        now: &EndpointGate,
    ) -> Result<(), Violation> {
        let (p, n) = (was.coordinates(), now.coordinates());
        let fail = |rule: &'static str, why: String| {
            Violation::new(
                rule,
                format!("instance {j}: reopen from {p:?} to {n:?}: {why}"),
            )
        };
        if n.generation.0 != p.generation.0 + 1 {
            return Err(fail(
                "Q-13",
                "every reopen advances the generation by exactly 1".into(),
            ));
        }
        if n.name_authority_revision != p.name_authority_revision {
            return Err(fail(
                "F67",
                "no name transfer happens here, so the name-authority revision stays".into(),
            ));
        }
        let Some(inst) = self.instances.get(j) else {
            return Ok(());
        };
        if n.registration_revision == p.registration_revision {
            if n.process_epoch != p.process_epoch {
                return Err(fail(
                    "F69",
                    "the epoch moved on a reopen that completed no registration".into(),
                ));
            }
            if inst.spec_published_under == Some(inst.gate_revision) {
                return Err(fail(
                    "E2/F63",
                    "a spec was published under this very freeze, yet the gate reopened at the \
                     old registration revision; reopening the old coordinate after the spec \
                     advanced serves stale-surface credentials (reference §7 item 9)"
                        .into(),
                ));
            }
        } else {
            let spec = self.world.kv.get(Store::Records, &inst.spec_key);
            if !spec
                .as_ref()
                .is_some_and(|e| e.is_put() && e.revision.0 == n.registration_revision.0)
            {
                return Err(fail(
                    "F63",
                    format!(
                        "the registration revision must be the live spec's store revision, but \
                         the spec key holds {:?}",
                        spec.map(|e| (e.revision, e.operation))
                    ),
                ));
            }
            let re_registration = inst
                .spec_first
                .is_some_and(|first| first.0 < n.registration_revision.0);
            let want = p.process_epoch.0 + u64::from(re_registration);
            if n.process_epoch.0 != want {
                return Err(fail(
                    "F69",
                    format!(
                        "a completed {} must reopen at epoch {want}",
                        if re_registration {
                            "re-registration (a spec or tombstone existed)"
                        } else {
                            "first registration"
                        }
                    ),
                ));
            }
            if re_registration {
                self.stats.epoch_advances += 1;
            }
        }
        self.stats.reopens += 1;
        Ok(())
    }

    /// F65: head `h` is never deleted, and each bound URN stays bound.
    fn check_governance(&mut self, h: usize) -> Result<(), Violation> {
        let Some(tracker) = self.heads.get(h) else {
            return Ok(());
        };
        let key = &tracker.key;
        let Some(entry) = self.world.kv.get(Store::Records, key) else {
            if tracker.revision != Revision(0) {
                return Err(Violation::new("F65", format!("{key} vanished")));
            }
            return Ok(());
        };
        if entry.revision == tracker.revision {
            return Ok(());
        }
        if !entry.is_put() {
            return Err(Violation::new(
                "F65",
                format!("{key} carries a {} marker", entry.operation.as_str()),
            ));
        }
        let head = GovernanceHead::parse(&entry.value)
            .map_err(|e| Violation::new("F65", format!("{key} does not parse: {e}")))?;
        let now: Vec<(String, BTreeSet<String>)> = head
            .commands
            .iter()
            .map(|(c, urns)| (c.as_str().to_owned(), urns.clone()))
            .collect();
        for (command, bound) in &tracker.binding {
            let kept = now
                .iter()
                .find(|(c, _)| c == command)
                .is_some_and(|(_, urns)| bound.is_subset(urns));
            if !kept {
                return Err(Violation::new(
                    "F65",
                    format!(
                        "the binding of command {command} was {bound:?} and is now {:?}; a \
                         governed trait never leaves the binding map",
                        now.iter().find(|(c, _)| c == command).map(|(_, u)| u)
                    ),
                ));
            }
        }
        if let Some(tracker) = self.heads.get_mut(h) {
            tracker.binding = now;
            tracker.revision = entry.revision;
        }
        Ok(())
    }

    // ---- at the end of a flight ---------------------------------------------------------------

    /// F69: a completed registration's reported coordinates are the gate's, unless the gate
    /// has since moved on (a later freeze keeps them; only a later reopen changes them).
    fn check_registered(&self, what: &str, j: usize, r: &Registered) -> Result<(), Violation> {
        let Some(g) = self.instances.get(j).map(|s| &s.gate) else {
            return Ok(());
        };
        let agrees = g.process_epoch() == r.process_epoch
            && g.registration_revision() == r.registration_revision;
        if g.generation() < r.generation || (g.generation() == r.generation && !agrees) {
            return Err(Violation::new(
                "F69",
                format!(
                    "{what} reported generation {} epoch {} registration revision {} but the gate \
                     is {} at {:?}",
                    r.generation,
                    r.process_epoch,
                    r.registration_revision,
                    g.state().as_str(),
                    g.coordinates()
                ),
            ));
        }
        Ok(())
    }

    fn remember_grant(&mut self, j: usize, grant: ServeGrant) {
        if let Some(inst) = self.instances.get_mut(j) {
            if inst.grants.len() >= GRANT_HISTORY {
                inst.grants.remove(0);
            }
            inst.grants.push(grant);
        }
    }

    /// Judges how `flight` ended and updates the model; returns the job the same actor chains
    /// next, if any.
    pub(super) fn judge(
        &mut self,
        flight: &Flight,
        result: Result<Outcome, EpError>,
    ) -> Result<Option<Job>, Violation> {
        let j = flight.instance;
        let what = format!("instance {j}: {}#{}", flight.job.label(), flight.id);
        match (&flight.job, result) {
            (Job::Register { .. }, Ok(Outcome::Serving(serving))) => {
                self.stats.registrations += 1;
                self.check_registered(&what, j, &serving.registered)?;
                self.remember_grant(j, serving.serve.grant);
                self.stats.ready_writes += 1;
            }
            (Job::Register { .. }, Ok(Outcome::Registered(r))) => {
                self.stats.registrations += 1;
                self.check_registered(&what, j, &r)?;
                return Ok(Some(Job::Grant {
                    epoch: r.process_epoch,
                }));
            }
            (Job::Grant { .. }, Ok(Outcome::Grant(serve))) => {
                self.remember_grant(j, serve.grant.clone());
                return Ok(Some(Job::Status { grant: serve.grant }));
            }
            (Job::Grant { .. }, Err(_)) => self.stats.status_refusals += 1,
            (Job::Register { resumed, .. }, Err(e)) => {
                self.stats.registration_refusals += 1;
                let exits = self.rng.chance(500);
                if let Some(inst) = self.instances.get_mut(j) {
                    inst.down = exits;
                }
                self.check_refused_registration(&what, flight, *resumed, &e)?;
            }
            (Job::PlaneObserve, Ok(Outcome::Observed(observed))) => {
                return self.plane_decides(flight, observed.as_deref()).map(Some);
            }
            // The daemon exits when its gate read fails; a later start reads again.
            (Job::PlaneObserve, Err(_)) => {}
            (Job::PlaneRecord { op_id }, Ok(Outcome::Local)) => {
                if let Some(plane) = self.plane_of(j).and_then(|p| self.planes.get_mut(p)) {
                    plane.record = Some(op_id.clone());
                }
                return Ok(Some(Job::Plane {
                    op_id: op_id.clone(),
                    resumed: false,
                }));
            }
            (Job::Plane { .. }, Ok(Outcome::Registered(r))) => {
                self.stats.plane_registrations += 1;
                self.check_registered(&what, j, &r)?;
                let Some(plane) = self.plane_of(j).and_then(|p| self.planes.get_mut(p)) else {
                    return Ok(None);
                };
                // The step tracker already raised `committed` to this reopen; every earlier one
                // committed a lower epoch (F69 advances it by one per completed registration).
                let earlier = plane.registered.as_ref().map(|r| r.process_epoch);
                if earlier.is_some_and(|e| r.process_epoch <= e)
                    || plane.committed != Some(r.process_epoch)
                {
                    return Err(Violation::new(
                        "F69",
                        format!(
                            "{what} committed epoch {} after an earlier run committed {earlier:?}; \
                             the highest epoch the plane's gate reopened at is {:?}",
                            r.process_epoch, plane.committed
                        ),
                    ));
                }
                plane.registered = Some(r);
                return Ok(Some(Job::PlaneClear));
            }
            // The process exits with the error, keeping its record; a later start decides anew.
            (Job::Plane { resumed, .. }, Err(e)) => {
                self.stats.plane_refusals += 1;
                self.check_refused_registration(&what, flight, *resumed, &e)?;
            }
            (Job::PlaneClear, Ok(Outcome::Local)) => {
                if let Some(plane) = self.plane_of(j).and_then(|p| self.planes.get_mut(p)) {
                    plane.record = None;
                }
            }
            (Job::PlaneRecord { .. } | Job::PlaneClear, Err(e)) => {
                return Err(Violation::new("sim", format!("{what} failed: {e}")));
            }
            (Job::BrokenBarrier, _) => {}
            (Job::ServeMint { row_key, .. } | Job::SiblingMint { row_key, .. }, Ok(out)) => {
                let Outcome::Release(release) = out else {
                    return Err(Violation::new("sim", format!("{what} ended with {out:?}")));
                };
                let ledgered = self
                    .world
                    .kv
                    .get(Store::Auth, &release.row_key)
                    .is_some_and(|e| e.is_put());
                if release.row_key != *row_key
                    || flight.notes.touch != Some(release.gate_revision)
                    || !ledgered
                {
                    return Err(Violation::new(
                        "F22",
                        format!(
                            "{what} released {} at gate revision {} but staged {row_key}, its \
                             committed touch is {:?}, and the row is {}ledgered",
                            release.row_key,
                            release.gate_revision,
                            flight.notes.touch,
                            if ledgered { "" } else { "NOT " }
                        ),
                    ));
                }
                if matches!(flight.job, Job::ServeMint { .. }) {
                    self.stats.serve_releases += 1;
                } else {
                    self.stats.sibling_releases += 1;
                }
            }
            (Job::ServeMint { row_key, .. } | Job::SiblingMint { row_key, .. }, Err(e)) => {
                self.stats.mint_refusals += 1;
                let state = self
                    .world
                    .kv
                    .get(Store::Auth, row_key)
                    .filter(Entry::is_put)
                    .and_then(|e| LedgerRow::parse(&e.value, row_key).ok())
                    .map(|r| r.state());
                if state == Some(CredState::Active) && !e.message.contains(row_key.as_str()) {
                    return Err(Violation::new(
                        "F20",
                        format!(
                            "{what} refused ({}) but left its row {row_key} active without \
                             reporting it: {}",
                            e.code, e.message
                        ),
                    ));
                }
            }
            (Job::Deregister, Ok(Outcome::Deregistration(d))) => {
                if matches!(
                    d,
                    cotal_core::deregistration::Deregistration::Removed { .. }
                ) {
                    self.stats.deregistrations += 1;
                }
            }
            (Job::Deregister, Err(_)) => {}
            (Job::Reconcile, Ok(Outcome::Reconciled(report))) => {
                self.stats.reconciles += 1;
                let Some(inst) = self.instances.get_mut(j) else {
                    return Ok(None);
                };
                inst.reconciling = false;
                let g = &inst.gate;
                if report.liveness != Liveness::Gone
                    || g.generation() < report.after.generation
                    || (g.generation() == report.after.generation && g.state() != GateState::Open)
                {
                    return Err(Violation::new(
                        "F52",
                        format!(
                            "{what} reported a repair to {:?} with liveness {:?}, but the gate is \
                             {} at {:?}",
                            report.after,
                            report.liveness,
                            g.state().as_str(),
                            g.coordinates()
                        ),
                    ));
                }
            }
            (Job::Reconcile, Err(e)) => {
                self.stats.reconcile_refusals += 1;
                if let Some(inst) = self.instances.get_mut(j) {
                    inst.reconciling = false;
                }
                let n = &flight.notes;
                let clean = n.probe == Some(Liveness::Gone)
                    && !n.stale_at_probe
                    && !n.evict_failed
                    && !n.saw_fault;
                if clean {
                    return Err(Violation::new(
                        "E4/F52",
                        format!(
                            "{what} was told the holder is gone, every eviction verified and no \
                             fault hit its path, yet it did not reopen the gate: {e}"
                        ),
                    ));
                }
            }
            (Job::Status { .. }, Ok(_)) => self.stats.ready_writes += 1,
            (Job::Status { .. }, Err(_)) => self.stats.status_refusals += 1,
            (_, Ok(out)) => {
                return Err(Violation::new("sim", format!("{what} ended with {out:?}")));
            }
        }
        Ok(None)
    }

    /// E4 for a refused registration (an instance's or a plane's).
    fn check_refused_registration(
        &mut self,
        what: &str,
        flight: &Flight,
        resumed: bool,
        e: &EpError,
    ) -> Result<(), Violation> {
        let Some(inst) = self.instances.get(flight.instance) else {
            return Ok(());
        };
        let n = &flight.notes;
        // At this flight's freeze, not merely one of its op id: the other executor of a resumed
        // op id may hold a freeze of its own.
        let frozen_by_us =
            inst.gate.state() == GateState::Frozen && n.freeze == Some(inst.gate_revision);
        if frozen_by_us {
            self.stats.left_frozen += 1;
        }
        if frozen_by_us && n.froze && !resumed && !n.phase2 && !n.gate_fault_after_freeze {
            return Err(Violation::new(
                "E4",
                format!(
                    "{what} froze the gate and failed before Phase 2, and no request on its gate \
                     failed after the freeze, yet it left the gate frozen; a Phase-1 failure \
                     abort-reopens (E2): {e}"
                ),
            ));
        }
        Ok(())
    }

    /// A plane start's decision (F14), from the gate it observed and its durable record: resume
    /// the recorded op exactly when the gate is still frozen by that registration ([`resumed_op`];
    /// the record then already names it), else take a fresh op and record it first.
    fn plane_decides(
        &mut self,
        flight: &Flight,
        observed: Option<&EndpointGate>,
    ) -> Result<Job, Violation> {
        let j = flight.instance;
        let p = self
            .plane_of(j)
            .ok_or_else(|| Violation::new("sim", format!("instance {j} is no plane's")))?;
        let record = self.planes.get(p).and_then(|s| s.record.clone());
        let resumed = if self.config.broken == Some(Broken::PlaneNeverResumes) {
            None
        } else {
            resumed_op(observed, record.as_ref())
        };
        let frozen_by_record = observed.is_some_and(|g| {
            g.state() == GateState::Frozen
                && g.op().is_some_and(|o| {
                    o.kind() == OpKind::Registration && Some(o.op_id()) == record.as_ref()
                })
        });
        if resumed.is_some() != frozen_by_record || (resumed.is_some() && resumed != record) {
            return Err(Violation::new(
                "F14",
                format!(
                    "plane {p}'s start #{} observed its gate {} with its record naming {:?} and \
                     decided to {}; a restart resumes its recorded op exactly when the gate is \
                     still frozen by that registration",
                    flight.id,
                    observed.map_or_else(|| "absent".to_owned(), EndpointGate::to_json),
                    record.as_ref().map(ToString::to_string),
                    resumed
                        .as_ref()
                        .map_or_else(|| "take a fresh op".to_owned(), |op| format!("resume {op}"))
                ),
            ));
        }
        Ok(match resumed {
            Some(op_id) => Job::Plane {
                op_id,
                resumed: true,
            },
            None => Job::PlaneRecord {
                op_id: OpId::mint(self.rng.entropy20()),
            },
        })
    }

    // ---- at the end of the seed ---------------------------------------------------------------

    /// F22/F26 over the whole ledger: every released credential resolves to a row, every row is
    /// where the tracker saw it last, and no tracked row disappeared.
    pub(super) fn final_check(&mut self) -> Result<(), Violation> {
        self.after_step()?;
        for inst in &self.instances {
            let listed = self.world.kv.keys(Store::Auth, &inst.family_prefix);
            for key in &listed {
                let state = self.read_row(key)?;
                if self.rows.get(key).is_some_and(|&seen| seen != state) {
                    return Err(Violation::new(
                        "F26",
                        format!(
                            "row {key} is {} but the tracker saw {:?}: a write went unobserved",
                            state.as_str(),
                            self.rows.get(key)
                        ),
                    ));
                }
            }
            for c in &inst.credentials {
                if !listed.contains(&c.row_key) {
                    return Err(Violation::new(
                        "F22",
                        format!("released credential {} has no ledger row", c.row_key),
                    ));
                }
            }
        }
        if let Some(missing) = self
            .rows
            .keys()
            .find(|k| self.world.kv.get(Store::Auth, k).is_none())
        {
            return Err(Violation::new(
                "F26",
                format!("row {missing} was written but is gone"),
            ));
        }
        Ok(())
    }
}
