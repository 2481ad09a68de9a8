//! The one registered-manager door (reference §4.1): every operation a registered manager asks
//! for (renewals, activation, retirement, runs, managed agents) passes this single check of its
//! current registration before it issues anything, the way raft-rs checks the term once in
//! `Raft::step` before dispatching. The doors differ only in what they present (the HMAC
//! current-registration proof, or a deterministic proof the operation verified first), in
//! whether they pin a process epoch, and in the reference's wording of each refusal, which is
//! kept as data ([`DoorWording`]) so every sentence stays exactly the reference's.

use std::fmt::Display;

use crate::error::EpError;
use crate::gate::{GateState, ProcessEpoch};
use crate::issuance::{observe_gate, GateObservation, GateRef};
use crate::machine::{Ctx, Halt};
use crate::names::{OwnerToken, Principal};

use super::envelope::ManagerEnvelope;
use super::host::ManagerHost;
use super::proof::current_registration_proof;
use super::tokens::{AccountKey, RegistrationProof};

/// How a door words its refusals. Each template may name `{door}` (the door's name),
/// `{instance}`, `{principal}` (what the gate records), `{serve}` (the server-derived serve
/// principal), `{epoch}` (the presented process epoch) and `{current}` (the gate's).
#[derive(Debug)]
pub struct DoorWording {
    /// `permission-denied`: the request's space or account is not the host's.
    pub host_binding: &'static str,
    /// `failed-precondition`: no gate, or (for [`GateRule::Open`]) a gate that is not open.
    pub no_gate: &'static str,
    /// `permission-denied`: the gate records another principal.
    pub foreign_gate: &'static str,
    /// `conflict`: the gate sits at another process epoch.
    pub stale_epoch: &'static str,
    /// `permission-denied`: the presented current-registration proof does not match.
    pub bad_proof: &'static str,
}

/// Which gate a door accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateRule {
    /// Present and `open`: every door that issues against a settled registration.
    Open,
    /// Present in any state: activation, whose fenced release refuses a gate that is not open
    /// on its own (F19–F21), so the door only establishes whose gate it is (F28).
    Present,
    /// Present and not retired: the auth control rail, which a manager mid-restart (its gate
    /// frozen) may still call, but a retired registration never may (F94).
    NotRetired,
}

impl GateRule {
    fn admits(self, state: GateState) -> bool {
        match self {
            GateRule::Open => state == GateState::Open,
            GateRule::Present => true,
            GateRule::NotRetired => state != GateState::Retired,
        }
    }
}

/// One registered-manager door: its name, its gate rule and its wording.
#[derive(Debug)]
pub struct Door {
    /// Leads every refusal ("manager-service renew").
    pub name: &'static str,
    pub gate: GateRule,
    pub wording: &'static DoorWording,
}

/// What the caller presents at the door besides the envelope.
#[derive(Debug, Clone, Copy)]
pub enum Presented<'a> {
    /// The HMAC current-registration proof, checked here at the gate's registration revision
    /// and process epoch.
    Current(&'a RegistrationProof),
    /// A deterministic registration proof the operation already verified against the owner and
    /// its artifacts; the door checks no proof.
    Verified,
}

/// One knock on a door.
#[derive(Debug, Clone, Copy)]
pub struct Knock<'a> {
    pub envelope: &'a ManagerEnvelope,
    /// The authenticated holder's owner (never taken from the request).
    pub owner: &'a OwnerToken,
    /// The data account the request names: checked with the space against the host's
    /// assignment first; `None` for doors whose requests name no account.
    pub account: Option<&'a AccountKey>,
    /// The process epoch the gate must sit at; `None` when the proof alone binds it (`renew`).
    pub epoch: Option<ProcessEpoch>,
    pub proof: Presented<'a>,
}

/// One knock on a gate: the gate, whom it must record, and the epoch it must sit at.
#[derive(Clone, Copy)]
pub struct GateKnock<'a> {
    pub gate: &'a GateRef,
    /// The principal the gate must record.
    pub principal: &'a Principal,
    /// The process epoch the gate must sit at; `None` when something else binds it.
    pub epoch: Option<ProcessEpoch>,
    /// What the door's wording names besides `{door}`, `{instance}`, `{state}`, `{principal}`,
    /// `{serve}`, `{epoch}` and `{current}`.
    pub says: &'a [(&'a str, &'a dyn Display)],
}

impl std::fmt::Debug for GateKnock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GateKnock")
            .field("gate", self.gate)
            .field("principal", self.principal)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

/// The gate steps every door shares, in order: the gate is present and admitted by the door's
/// [`GateRule`] (`failed-precondition`; `{state}` is `unregistered` or the gate's state), records
/// `knock.principal` (`permission-denied`; F28), and sits at the knock's epoch (`conflict`;
/// F94). Returns the observation it decided on. KV round trips: 1.
pub fn check_gate(
    cx: &mut Ctx<'_>,
    door: &Door,
    knock: &GateKnock<'_>,
) -> Result<GateObservation, Halt> {
    let w = door.wording;
    let instance = &knock.gate.instance;
    let say = |template: &str, values: &[(&str, &dyn Display)]| {
        render(
            template,
            door.name,
            instance,
            &[values, knock.says].concat(),
        )
    };
    let observed = observe_gate(cx, knock.gate)?;
    let state = observed
        .as_ref()
        .map_or("unregistered", |o| o.gate.state().as_str());
    let observed = observed
        .filter(|o| door.gate.admits(o.gate.state()))
        .ok_or_else(|| EpError::failed_precondition(say(w.no_gate, &[("state", &state)])))?;
    let gate = &observed.gate;
    if gate.principal() != knock.principal {
        let principal = gate.principal();
        return Err(EpError::permission_denied(say(
            w.foreign_gate,
            &[("principal", principal), ("serve", knock.principal)],
        ))
        .into());
    }
    if let Some(epoch) = knock.epoch {
        let current = gate.process_epoch();
        if current != epoch {
            return Err(EpError::conflict(say(
                w.stale_epoch,
                &[("epoch", &epoch), ("current", &current)],
            ))
            .into());
        }
    }
    Ok(observed)
}

/// The registered-manager check, in the reference's order:
/// 1. with an account presented, the request's space and account are the host's
///    (`permission-denied`);
/// 2. the manager gate `epgate.manager.<iid>` is present and, for [`GateRule::Open`], open
///    (`failed-precondition`);
/// 3. it records `<owner>.manager_serve_<iid>` (`permission-denied`; F28);
/// 4. with an epoch presented, the gate's process epoch equals it (`conflict`);
/// 5. a presented current-registration proof equals the HMAC proof at the gate's registration
///    revision and epoch, compared in constant time (`permission-denied`).
///
/// Keeps F91 (every registered-manager request re-checks owner, actor, lifecycle, instance and
/// the current gate registration) and F94 (authorized against the caller instance's current open
/// gate, principal and epoch). Returns the observation it decided on. KV round trips: 1 (none
/// when step 1 refuses).
pub fn check_registered(
    cx: &mut Ctx<'_>,
    door: &Door,
    host: &ManagerHost,
    knock: &Knock<'_>,
) -> Result<GateObservation, Halt> {
    let (w, e) = (door.wording, knock.envelope);
    let say = |template: &str, values: &[(&str, &dyn Display)]| {
        render(template, door.name, &e.instance_id, values)
    };
    if let Some(account) = knock.account {
        if e.space != host.space || *account != host.account {
            return Err(EpError::permission_denied(say(w.host_binding, &[])).into());
        }
    }
    let serve = e.serve_principal(knock.owner)?;
    let observed = check_gate(
        cx,
        door,
        &GateKnock {
            gate: &e.gate()?,
            principal: &serve,
            epoch: knock.epoch,
            says: &[],
        },
    )?;
    let gate = &observed.gate;
    if let Presented::Current(proof) = knock.proof {
        let expected = current_registration_proof(
            &host.proof_secret,
            knock.owner,
            e,
            gate.registration_revision(),
            gate.process_epoch(),
        );
        if !proof.matches(&expected) {
            return Err(EpError::permission_denied(say(w.bad_proof, &[])).into());
        }
    }
    Ok(observed)
}

/// Fills a wording template: `{door}`, `{instance}` and the door's `values`.
fn render(
    template: &str,
    door: &str,
    instance: &dyn Display,
    values: &[(&str, &dyn Display)],
) -> String {
    let mut out = template
        .replace("{door}", door)
        .replace("{instance}", &instance.to_string());
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), &value.to_string());
    }
    out
}

// ---- The doors -------------------------------------------------------------------------------

/// The wording of the manager-service `renew` door and the managed-agent doors.
pub const CURRENT_REGISTRATION: DoorWording = DoorWording {
    host_binding: "{door} is bound to the host-assigned space and account",
    no_gate: "{door} found no current open manager gate for instance {instance}",
    foreign_gate:
        "{door} gate belongs to another owner: {principal} is not serve principal {serve}",
    stale_epoch: "{door} serve epoch {epoch} is stale; current is {current}",
    bad_proof: "{door} proof does not match current host registration",
};

/// The wording of the two manager-service renewals.
pub const RENEWAL: DoorWording = DoorWording {
    host_binding: "{door} is bound to the host-assigned space and account",
    no_gate: "{door} has no open registration gate",
    foreign_gate: "{door} gate belongs to another owner",
    stale_epoch:
        "{door} processEpoch is stale: the request names {epoch}, the gate is at {current}",
    bad_proof: "{door} proof does not match the current registration",
};

/// The wording of the run doors (admission, attempts).
pub const RUN: DoorWording = DoorWording {
    stale_epoch: "{door} processEpoch is stale",
    ..RENEWAL
};

/// The wording of the manager-service `retire` door.
pub const RETIREMENT: DoorWording = DoorWording {
    foreign_gate:
        "{door} gate belongs to {principal}, not the server-derived serve principal {serve}",
    ..CURRENT_REGISTRATION
};

/// The wording of the manager-service `activate` door.
pub const ACTIVATION: DoorWording = DoorWording {
    no_gate: "{door} found no issuance gate",
    foreign_gate:
        "serve credentials of this gate are minted only for {principal}, not {serve} (F28)",
    ..CURRENT_REGISTRATION
};

/// The wording of the admin-authorization door, which the reference words apart from the
/// shared current-registration check.
pub const ADMIN: DoorWording = DoorWording {
    foreign_gate: "{door} gate belongs to {principal}, not {serve}",
    bad_proof: "{door} proof does not match the current host registration",
    ..CURRENT_REGISTRATION
};

/// `renew`.
pub const RENEW: Door = Door {
    name: "manager-service renew",
    gate: GateRule::Open,
    wording: &CURRENT_REGISTRATION,
};
/// `renewStandingBundle` and `renewRunDriver`.
pub const RENEWAL_DOOR: Door = Door {
    name: "manager-service renewal",
    gate: GateRule::Open,
    wording: &RENEWAL,
};
/// `activate`.
pub const ACTIVATE: Door = Door {
    name: "manager-service activation",
    gate: GateRule::Present,
    wording: &ACTIVATION,
};
/// `retire`.
pub const RETIRE: Door = Door {
    name: "manager-service retirement",
    gate: GateRule::Open,
    wording: &RETIREMENT,
};
/// Run admission.
pub const RUN_ADMISSION: Door = Door {
    name: "manager-service run admission",
    gate: GateRule::Open,
    wording: &RUN,
};
/// Run attempts and operators.
pub const RUN_ATTEMPT: Door = Door {
    name: "manager-service run attempt",
    gate: GateRule::Open,
    wording: &RUN,
};
/// Managed-agent enrollment.
pub const ENROLLMENT: Door = Door {
    name: "manager enrollment",
    gate: GateRule::Open,
    wording: &CURRENT_REGISTRATION,
};
/// Managed-agent retirement preparation.
pub const PREPARE_RETIREMENT: Door = Door {
    name: "manager prepare-retirement",
    gate: GateRule::Open,
    wording: &CURRENT_REGISTRATION,
};
/// A host platform's managed-agent runtime create, verified at the loopback door.
pub const RUNTIME_CREATE: Door = Door {
    name: "managed agent runtime-create",
    gate: GateRule::Open,
    wording: &CURRENT_REGISTRATION,
};
/// A host platform's managed-agent runtime status, verified at the loopback door.
pub const RUNTIME_STATUS: Door = Door {
    name: "managed agent runtime-status",
    gate: GateRule::Open,
    wording: &CURRENT_REGISTRATION,
};
/// Retained-agent validation (`manager-retained-agent-validation`).
pub const RETAINED_VALIDATION: Door = Door {
    name: "manager retained-agent validation",
    gate: GateRule::Open,
    wording: &CURRENT_REGISTRATION,
};
/// The goal-index scan (`manager-goal-index-scan`).
pub const GOAL_INDEX_SCAN: Door = Door {
    name: "manager goal-index scan",
    gate: GateRule::Open,
    wording: &CURRENT_REGISTRATION,
};
/// Admin authorization (`manager-admin-authorization`).
pub const ADMIN_AUTHORIZATION: Door = Door {
    name: "manager admin authorization",
    gate: GateRule::Open,
    wording: &ADMIN,
};
