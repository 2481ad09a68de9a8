//! Fixtures for the registration-ceremony tests: a table name authority, published closures,
//! specs and registrars for the fixture gate (space `s1`, instance [`IID`], owner `u_c…c`).

use std::sync::Arc;

use cotal_core::authority::{NameAuthority, NameAuthorization};
use cotal_core::canon::Digest;
use cotal_core::contract::publish_cluster;
use cotal_core::driver::ModelWorld;
use cotal_core::gate::NameAuthorityRevision;
use cotal_core::issuance::{GateRef, ProvisionGate};
use cotal_core::kv::model::{Fault, Trigger};
use cotal_core::kv::{KvOp, Store};
use cotal_core::machine::{Ctx, Halt};
use cotal_core::names::{EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName};
use cotal_core::registration::{RegisterInstance, EVICT_PRINCIPALS_MAX};
use cotal_core::service::ServiceSpec;
use serde_json::{json, Value};

use super::{run, Proc, IID};

pub const OWNER: &str = "u_cccccccccccccccccccccccccc";
pub const VOID: &str = "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";

/// Name authority from a fixed table of (name, owner, revision); everything else unauthorized.
#[derive(Debug, Clone, Default)]
pub struct TableAuthority(pub Vec<(String, String, u64)>);

impl TableAuthority {
    pub fn with(name: &str, owner: &str, revision: u64) -> Arc<dyn NameAuthority> {
        Arc::new(TableAuthority(vec![(name.into(), owner.into(), revision)]))
    }
}

impl NameAuthority for TableAuthority {
    fn authorize(
        &self,
        _cx: &mut Ctx<'_>,
        name: &EndpointName,
        owner: &OwnerToken,
    ) -> Result<NameAuthorization, Halt> {
        let hit = self
            .0
            .iter()
            .find(|(n, o, _)| n == name.as_str() && o == owner.as_str());
        Ok(NameAuthorization {
            authorized: hit.is_some(),
            revision: NameAuthorityRevision(hit.map_or(0, |(_, _, r)| *r)),
        })
    }
}

/// One command of a cluster document.
pub fn command(name: &str, class: &str, traits: &[&str]) -> Value {
    let mut c = json!({
        "name": name, "class": class, "targeted": false, "capability": format!("x.{name}"),
        "inputDigest": VOID, "outputDigest": VOID, "traits": traits,
    });
    if class == "journal" {
        c["admissionCeiling"] = json!({"maxBytes": 65536, "maxDepth": 16, "maxItems": 256});
    }
    c
}

/// A cluster document declaring `commands`.
pub fn document(urn: &str, commands: Vec<Value>) -> Value {
    json!({"urn": urn, "revision": 1, "attributes": [], "events": [], "commands": commands})
}

/// Publishes a cluster (document + manifest) and returns its closure digest.
pub fn publish(world: &mut ModelWorld, doc: Value) -> Digest {
    run(
        world,
        Proc(move |cx: &mut Ctx<'_>| publish_cluster(cx, &doc)),
    )
    .unwrap()
}

/// The default surface: `ping` (governed: guarded) and `pong`.
pub fn default_closure(world: &mut ModelWorld) -> Digest {
    publish(
        world,
        document(
            "com.acme.ping",
            vec![
                command("ping", "ephemeral", &["ai.cotal.guarded"]),
                command("pong", "ephemeral", &[]),
            ],
        ),
    )
}

pub fn spec_for(endpoint: &str, owner: &str, closures: &[Digest]) -> ServiceSpec {
    let digests: Vec<String> = closures.iter().map(Digest::to_prefixed).collect();
    let value = json!({
        "endpoint": endpoint, "owner": owner, "clusterDigests": digests, "protocol": {"v": 1},
    });
    ServiceSpec::from_value(value, &EndpointName::parse(endpoint).unwrap()).unwrap()
}

pub fn gate_for(endpoint: &str, instance: &str) -> GateRef {
    GateRef::new(
        SpaceName::parse("s1").unwrap(),
        EndpointName::parse(endpoint).unwrap(),
        InstanceId::parse(instance).unwrap(),
    )
}

/// Provisions the gate of `instance` for `OWNER.term`.
pub fn provision_for(world: &mut ModelWorld, endpoint: &str, instance: &str) {
    run(
        world,
        ProvisionGate {
            gate: gate_for(endpoint, instance),
            principal: Principal::parse(&format!("{OWNER}.term")).unwrap(),
        },
    )
    .unwrap();
}

/// A registrar for `instance` of `spec` under `authority`, with op id `op`.
pub fn registrar(
    spec: ServiceSpec,
    instance: &str,
    authority: Arc<dyn NameAuthority>,
    op: OpId,
) -> RegisterInstance {
    RegisterInstance {
        space: SpaceName::parse("s1").unwrap(),
        registrant: spec.owner().clone(),
        spec,
        instance: InstanceId::parse(instance).unwrap(),
        authority,
        op_id: op,
        evict_max: EVICT_PRINCIPALS_MAX,
    }
}

/// A world with `throwaway` provisioned at [`IID`] and the default closure published; returns
/// the world and a registrar for it (op 1).
pub fn ceremony() -> (ModelWorld, RegisterInstance) {
    let mut world = ModelWorld::default();
    world.set_evictor(Box::new(|holders| vec![true; holders.len()]));
    provision_for(&mut world, "throwaway", IID);
    let closure = default_closure(&mut world);
    let spec = spec_for("throwaway", OWNER, &[closure]);
    let authority = TableAuthority::with("throwaway", OWNER, 0);
    (world, registrar(spec, IID, authority, super::op(1)))
}

/// Lets the fixture gate's next update (a registration's freeze) through, then applies `fault`
/// to the one after it (that registration's completing reopen).
pub fn fault_the_completing_reopen(world: &mut ModelWorld, fault: Fault) {
    let key = super::gate_ref().key();
    world.kv.inject(
        Trigger::new(Store::Auth, KvOp::Update, key.clone()),
        Fault::After(Box::new(|_| {})),
    );
    world
        .kv
        .inject(Trigger::new(Store::Auth, KvOp::Update, key), fault);
}
