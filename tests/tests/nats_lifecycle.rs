//! The lifecycle machines on a real `nats-server` (mirroring `core/tests/lifecycle_registry.rs`
//! on the KV model): activation, the root credential (created once, the same id after), the
//! connect check, the operator's revoke and the refusals that follow (the deny-new cells of
//! reference-auth-service §11.2); and the bytes, revisions and operations left on the server
//! equal what the same run leaves in the model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::Duration;

use cotal_core::driver::{drive, ModelWorld};
use cotal_core::kv::model::KvModel;
use cotal_core::kv::{Entry, KvOutcome, KvRequest, Store};
use cotal_core::ledger::Revocation;
use cotal_core::lifecycle::{
    ActivateLifecycle, ActivationRun, AuthorizeConnectCredential, EnsureRootCredential,
    RevokeCredential, RootCredential, RootEntropy,
};
use cotal_core::machine::{Replay, Script};
use cotal_core::names::{
    keys, ActorToken, CredentialId, LifecycleUid, ManagerInstance, OwnerToken, Principal, SpaceName,
};
use cotal_core::{EpError, ErrorCode};
use cotal_io_nats::{NatsWorld, Space, SpaceOptions};
use cotal_tests::nats::{NatsServer, ServerOptions};

const OWNER: &str = "u_aaaaaaaaaaaaaaaaaaaaaaaaaa";
const ACTOR: &str = "agent";
const UID: &str = "uuuuuuuuuuuuuuuuuuuuuuuuuu";
const UID2: &str = "vvvvvvvvvvvvvvvvvvvvvvvvvv";
const NOW: u64 = 1_780_000_000_000;

fn uid(s: &str) -> LifecycleUid {
    LifecycleUid::parse(s).unwrap()
}
fn owner() -> OwnerToken {
    OwnerToken::parse(OWNER).unwrap()
}
fn actor() -> ActorToken {
    ActorToken::parse(ACTOR).unwrap()
}
fn holder() -> Principal {
    Principal::new(owner(), actor())
}
fn manager() -> ManagerInstance {
    ManagerInstance::parse("auth-service:life").unwrap()
}

fn ensure(at: &str, entropy: u8) -> EnsureRootCredential {
    EnsureRootCredential {
        owner: owner(),
        actor: actor(),
        lifecycle_uid: uid(at),
        manager_instance: manager(),
        now_ms: NOW,
        entropy: RootEntropy {
            op: [entropy; 20],
            credentials: [[entropy; 20], [entropy + 1; 20], [entropy + 2; 20]],
        },
        known: None,
    }
}

fn connect(id: &CredentialId) -> AuthorizeConnectCredential {
    AuthorizeConnectCredential {
        holder: holder(),
        lifecycle_uid: uid(UID),
        credential_id: id.clone(),
        now_ms: NOW,
    }
}

/// Where one run of the scenario executes its machines.
trait Runner {
    fn go<S: Script>(&mut self, script: S) -> Result<S::Output, EpError>;
}

struct OnModel(ModelWorld);
impl Runner for OnModel {
    fn go<S: Script>(&mut self, script: S) -> Result<S::Output, EpError> {
        drive(&mut Replay::new(script), &mut self.0)
    }
}

struct OnServer<'s> {
    rt: &'s tokio::runtime::Runtime,
    world: NatsWorld<'s>,
}
impl Runner for OnServer<'_> {
    fn go<S: Script>(&mut self, script: S) -> Result<S::Output, EpError> {
        self.rt.block_on(self.world.run(&mut Replay::new(script)))
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, EpError>, code: ErrorCode, word: &str) {
    let e = r.unwrap_err();
    assert_eq!(e.code, code, "{e}");
    assert!(e.message.contains(word), "{word:?} missing from {e}");
}

/// The scenario, asserting each outcome; returns the root credential id.
fn scenario(r: &mut impl Runner) -> CredentialId {
    let activated = r
        .go(ActivateLifecycle {
            owner: owner(),
            actor: actor(),
            lifecycle_uid: uid(UID),
            manager_instance: manager(),
            op_entropy: [1; 20],
        })
        .unwrap();
    assert!(matches!(activated.run, ActivationRun::Completed(_)));
    let root = r.go(ensure(UID, 2)).unwrap();
    assert!(root.minted);
    let id = root.credential_id;
    assert_eq!(
        r.go(ensure(UID, 9)).unwrap(),
        RootCredential {
            credential_id: id.clone(),
            minted: false
        },
        "root_credential_idempotent"
    );
    assert!(r.go(connect(&id)).unwrap().root);
    refused(
        r.go(connect(&CredentialId::mint([77; 20]))),
        ErrorCode::PermissionDenied,
        "not in the ledger",
    );
    refused(r.go(ensure(UID2, 5)), ErrorCode::AlreadyExists, "takeover");
    let revoke = RevokeCredential {
        lifecycle_uid: uid(UID),
        credential_id: id.clone(),
    };
    assert_eq!(r.go(revoke.clone()).unwrap(), Revocation::Revoked);
    assert_eq!(r.go(revoke).unwrap(), Revocation::AlreadyRevoked);
    refused(r.go(connect(&id)), ErrorCode::PermissionDenied, "revoked");
    refused(r.go(ensure(UID, 3)), ErrorCode::PermissionDenied, "barrier");
    id
}

fn touched(id: &CredentialId) -> Vec<(Store, String)> {
    vec![
        (Store::Records, keys::lifecycle_head(&owner(), &actor())),
        (Store::Records, keys::uid_reservation(&uid(UID))),
        (Store::Auth, keys::agent_gate(&uid(UID))),
        (Store::Auth, keys::cred(&uid(UID), id)),
    ]
}

fn model_entry(kv: &KvModel, store: Store, key: &str) -> Option<Entry> {
    kv.get(store, key)
}

#[test]
fn lifecycle_root_credential_connect_and_revoke_on_a_real_server_match_the_model() {
    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = SpaceOptions {
        request_timeout: Duration::from_secs(5),
        ..SpaceOptions::default()
    };
    let space = rt
        .block_on(Space::connect(
            &server.url(),
            SpaceName::parse("life").unwrap(),
            options,
        ))
        .unwrap();

    let mut model = OnModel(ModelWorld::default());
    let model_id = scenario(&mut model);
    let mut real = OnServer {
        rt: &rt,
        world: NatsWorld::new(&space),
    };
    let real_id = scenario(&mut real);
    assert_eq!(model_id, real_id, "the same entropy mints the same id");

    for (store, key) in touched(&real_id) {
        let on_server = match rt.block_on(space.execute(&KvRequest::Get {
            store,
            key: key.clone(),
        })) {
            KvOutcome::Entry(entry) => entry,
            other => panic!("leader read of {key}: {other:?}"),
        };
        let in_model = model_entry(&model.0.kv, store, &key);
        assert!(on_server.is_some(), "{key} was written");
        assert_eq!(on_server, in_model, "{key}: server and model disagree");
    }
    let head = rt.block_on(space.execute(&KvRequest::Get {
        store: Store::Records,
        key: keys::lifecycle_head(&owner(), &actor()),
    }));
    let KvOutcome::Entry(Some(head)) = head else {
        panic!("the head is there")
    };
    assert_eq!(
        String::from_utf8(head.value).unwrap(),
        format!(
            r#"{{"owner":"{OWNER}","actor":"{ACTOR}","lifecycleUid":"{UID}","managerInstance":"auth-service:life","processEpoch":1,"state":"active","currentCredentialId":"{real_id}"}}"#
        )
    );
}

/// F56 on a real server: an activation paused right before its head CAS loses it to another
/// incarnation of the alias, retires its own orphan gate (G2) and leaves its uid reserved.
#[test]
fn f56_the_head_cas_loser_retires_its_orphan_gate_on_a_real_server() {
    use cotal_core::gate::GateState;
    use cotal_core::lifecycle::AgentGate;
    use cotal_core::machine::{Effect, Machine, Step};

    let server = NatsServer::start(ServerOptions::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let space = rt
        .block_on(Space::connect(
            &server.url(),
            SpaceName::parse("loser").unwrap(),
            SpaceOptions::default(),
        ))
        .unwrap();
    let mut world = NatsWorld::new(&space);
    let activation = |at: &str, n: u8| ActivateLifecycle {
        owner: owner(),
        actor: actor(),
        lifecycle_uid: uid(at),
        manager_instance: manager(),
        op_entropy: [n; 20],
    };
    let mut loser = Replay::new(activation(UID, 1));
    let mut step = loser.step(None);
    let pending = loop {
        match step {
            Step::Effect(Effect::Kv(ref r))
                if r.is_write() && r.key().starts_with("lifecycle.") =>
            {
                break step
            }
            Step::Effect(effect) => {
                let seen = rt.block_on(world.perform(&effect));
                step = loser.step(Some(seen));
            }
            Step::Done(result) => panic!("finished early: {:?}", result.err()),
        }
    };
    rt.block_on(world.run(&mut Replay::new(activation(UID2, 2))))
        .unwrap();
    let mut step = pending;
    let ended = loop {
        match step {
            Step::Effect(effect) => {
                let seen = rt.block_on(world.perform(&effect));
                step = loser.step(Some(seen));
            }
            Step::Done(result) => break result,
        }
    };
    refused(ended, ErrorCode::Conflict, "F56");
    let gate_key = keys::agent_gate(&uid(UID));
    let KvOutcome::Entry(Some(gate)) = rt.block_on(space.execute(&KvRequest::Get {
        store: Store::Auth,
        key: gate_key,
    })) else {
        panic!("the orphan gate is there")
    };
    assert_eq!(
        AgentGate::parse(&gate.value, &uid(UID)).unwrap().state(),
        GateState::Retired
    );
    let KvOutcome::Entry(reservation) = rt.block_on(space.execute(&KvRequest::Get {
        store: Store::Records,
        key: keys::uid_reservation(&uid(UID)),
    })) else {
        panic!("the reservation read is served")
    };
    assert!(reservation.is_some(), "the loser's uid stays burned");
}
