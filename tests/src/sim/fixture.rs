//! The simulated space: one reverse-DNS endpoint with up to [`MAX_INSTANCES`] provisioned
//! instances sharing its governance slot, three published surfaces, and the plane's static
//! name authority. Built once per process; every seed starts from a fresh KV model that
//! replays the recorded setup writes, so setup costs one pass over a few requests per seed.
//!
//! The setup also registers each instance once, in order, recording where each registration's
//! writes end: a seed may start with its first `k` instances already registered (so most of its
//! registrations are re-registrations, the path that advances the epoch) and their serve
//! grants in hand.
//!
//! The same space also has [`PLANES`] planes, each registering its own instance of the `auth`
//! endpoint through the self-authorized ceremony ([`auth_instance`]); their instances share the
//! `auth` endpoint's governance head. Nothing of theirs is in the setup: a seed's first plane
//! start publishes the contract and provisions its gate on first sight, as a real first start
//! does.

use std::sync::{Arc, OnceLock};

use cotal_core::authority::{NameAuthority, SelfAuthority};
use cotal_core::canon::{self, Digest};
use cotal_core::contract::publish_cluster;
use cotal_core::driver::{drive, ModelWorld};
use cotal_core::host::{auth_instance, SelfAuthorizedInstance};
use cotal_core::issuance::{GateRef, ProvisionGate, ServeGrant};
use cotal_core::kv::model::KvModel;
use cotal_core::kv::KvRequest;
use cotal_core::machine::{Ctx, Effect, Halt, Replay, Script};
use cotal_core::names::{
    ActorToken, EndpointName, InstanceId, OpId, OwnerToken, Principal, SpaceName,
};
use cotal_core::registration::{RegisterInstance, EVICT_PRINCIPALS_MAX};
use cotal_core::service::ServiceSpec;
use cotal_core::serving::AuthorizeServeGrant;
use cotal_core::EpError;
use nkeys::{KeyPair, KeyPairType};

use crate::fence::Violation;

pub const SPACE: &str = "s1";
/// Reverse-DNS, so every key exercises the `.` → `_` tokenization.
pub const ENDPOINT: &str = "com.acme.sim";
pub const OWNER: &str = "u_abcdefghijklmnopqrstuvwxyz";
/// Most instances a seed runs; the seed picks 2 or 3.
pub const MAX_INSTANCES: usize = 3;
/// Expiry of every minted credential, unix seconds.
pub const EXP: u64 = 1_900_000_000;
/// Most planes a seed runs (each with its own `auth` instance).
pub const PLANES: usize = 2;

/// The surfaces a registration may publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Surface {
    /// `ping` (guarded).
    Default,
    /// `ping` (guarded, priced) and `pang` (guarded): a superset of every governed trait the
    /// other surfaces declare, so it always passes continuity (F65).
    Extended,
    /// `ping` without its governed trait: refused once `ping` is bound (F65).
    Stripped,
}

impl Surface {
    pub const ALL: [Surface; 3] = [Surface::Default, Surface::Extended, Surface::Stripped];

    const fn index(self) -> usize {
        match self {
            Surface::Default => 0,
            Surface::Extended => 1,
            Surface::Stripped => 2,
        }
    }

    fn commands(self) -> &'static [(&'static str, &'static [&'static str])] {
        const G: &str = "ai.cotal.guarded";
        const P: &str = "ai.cotal.priced";
        // Kept small on purpose: every replay of a registration past Phase 1 re-verifies the
        // closure, which dominates the simulator's cost in debug builds.
        match self {
            Surface::Default => &[("ping", &[G])],
            Surface::Extended => &[("ping", &[G, P]), ("pang", &[G])],
            Surface::Stripped => &[("ping", &[])],
        }
    }

    /// The cluster document declaring this surface.
    fn document(self) -> String {
        const VOID: &str =
            "sha256:1db0472aaee8e6b9d8d3d430ee021a1b6efc559ab7c0b99186898c972c53dd2d";
        let commands: Vec<String> = self
            .commands()
            .iter()
            .map(|(name, traits)| {
                let traits: Vec<String> = traits.iter().map(|t| format!("\"{t}\"")).collect();
                format!(
                    r#"{{"name":"{name}","class":"ephemeral","targeted":false,"capability":"x.{name}","inputDigest":"{VOID}","outputDigest":"{VOID}","traits":[{}]}}"#,
                    traits.join(",")
                )
            })
            .collect();
        format!(
            r#"{{"urn":"com.acme.sim","revision":{},"attributes":[],"events":[],"commands":[{}]}}"#,
            self.index() + 1,
            commands.join(",")
        )
    }
}

/// One provisioned instance: its gate, its serving principal (the gate's principal) and the
/// principal its sibling credentials are held by.
#[derive(Debug, Clone)]
pub struct Instance {
    pub gate: GateRef,
    pub serve: Principal,
    pub sibling: Principal,
}

/// Everything a seed starts from.
#[derive(Debug)]
pub struct Fixture {
    pub endpoint: EndpointName,
    pub owner: OwnerToken,
    pub instances: Vec<Instance>,
    specs: Vec<ServiceSpec>,
    pub authority: Arc<dyn NameAuthority>,
    /// The setup's KV writes, replayed onto a fresh model per seed.
    setup: Vec<KvRequest>,
    /// `setup[..ends[k]]` is the setup with the first `k` instances registered.
    ends: Vec<usize>,
    /// The serve grant each instance's setup registration was authorized at.
    grants: Vec<ServeGrant>,
    /// Each plane's `auth` ceremony; a start replaces its op id.
    pub planes: Vec<SelfAuthorizedInstance>,
}

static FIXTURE: OnceLock<Result<Fixture, String>> = OnceLock::new();

impl Fixture {
    /// The process-wide fixture, built on first use.
    pub fn get() -> Result<&'static Fixture, Violation> {
        FIXTURE
            .get_or_init(|| Fixture::build().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| Violation::new("setup", e.clone()))
    }

    fn build() -> Result<Fixture, EpError> {
        let space = SpaceName::parse(SPACE)?;
        let endpoint = EndpointName::parse(ENDPOINT)?;
        let owner = OwnerToken::parse(OWNER)?;
        let mut world = ModelWorld::default();
        let mut instances = Vec::with_capacity(MAX_INSTANCES);
        for i in 0..MAX_INSTANCES {
            let id = InstanceId::parse(&format!("sim{i}{}", "x".repeat(22)))?;
            let gate = GateRef::new(space.clone(), endpoint.clone(), id);
            let serve = Principal::new(owner.clone(), ActorToken::parse(&format!("srv{i}"))?);
            let sibling = Principal::new(owner.clone(), ActorToken::parse(&format!("gw{i}"))?);
            drive(
                &mut ProvisionGate::machine(gate.clone(), serve.clone()),
                &mut world,
            )?;
            instances.push(Instance {
                gate,
                serve,
                sibling,
            });
        }
        let mut specs = Vec::with_capacity(Surface::ALL.len());
        for surface in Surface::ALL {
            let closure = drive(&mut Replay::new(Publish(surface.document())), &mut world)?;
            let spec = canon::parse_strict(&format!(
                r#"{{"endpoint":"{ENDPOINT}","owner":"{OWNER}","clusterDigests":["{}"],"protocol":{{"v":1}}}}"#,
                closure.to_prefixed()
            ))?;
            specs.push(ServiceSpec::from_value(spec, &endpoint)?);
        }
        let authority: Arc<dyn NameAuthority> = Arc::new(SelfAuthority {
            name: endpoint.clone(),
            owner: owner.clone(),
        });
        let writes = |world: &ModelWorld| -> Vec<KvRequest> {
            world
                .log
                .iter()
                .filter_map(|effect| match effect {
                    Effect::Kv(request) if request.is_write() => Some(request.clone()),
                    _ => None,
                })
                .collect()
        };
        let mut ends = vec![writes(&world).len()];
        let mut grants = Vec::with_capacity(instances.len());
        let spec = specs
            .first()
            .cloned()
            .ok_or_else(|| EpError::internal("no default surface"))?;
        for (n, inst) in (1u8..).zip(&instances) {
            let registered = drive(
                &mut Replay::new(RegisterInstance {
                    space: space.clone(),
                    registrant: owner.clone(),
                    spec: spec.clone(),
                    instance: inst.gate.instance.clone(),
                    authority: authority.clone(),
                    op_id: OpId::mint([n; 20]),
                    evict_max: EVICT_PRINCIPALS_MAX,
                }),
                &mut world,
            )?;
            let serve = drive(
                &mut Replay::new(AuthorizeServeGrant {
                    gate: inst.gate.clone(),
                    epoch: registered.process_epoch,
                    holder: owner.clone(),
                    authority: authority.clone(),
                }),
                &mut world,
            )?;
            grants.push(serve.grant);
            ends.push(writes(&world).len());
        }
        let mut planes = Vec::with_capacity(PLANES);
        for (p, seed) in (0..PLANES).zip(0x50u8..) {
            let id = InstanceId::parse(&format!("plane{p}{}", "p".repeat(20)))?;
            let serve_key = KeyPair::new_from_raw(KeyPairType::User, [seed; 32])
                .map_err(|e| EpError::internal(format!("plane {p}'s serve key: {e}")))?
                .public_key();
            planes.push(auth_instance(&space, &id, &serve_key, OpId::mint([0; 20]))?);
        }
        Ok(Fixture {
            planes,
            authority,
            endpoint,
            owner,
            instances,
            specs,
            setup: writes(&world),
            ends,
            grants,
        })
    }

    /// A fresh world holding the provisioned gates and published surfaces, with the first
    /// `registered` instances registered once.
    pub fn world(&self, registered: usize) -> ModelWorld {
        let end = self
            .ends
            .get(registered)
            .or(self.ends.last())
            .copied()
            .unwrap_or(0);
        let mut kv = KvModel::new();
        for request in self.setup.iter().take(end) {
            kv.apply(request);
        }
        ModelWorld::new(kv)
    }

    /// The serve grant instance `i`'s setup registration was authorized at.
    pub fn setup_grant(&self, i: usize) -> Option<&ServeGrant> {
        self.grants.get(i)
    }

    pub fn spec(&self, surface: Surface) -> Option<&ServiceSpec> {
        self.specs.get(surface.index())
    }

    pub fn instance(&self, i: usize) -> Option<&Instance> {
        self.instances.get(i)
    }

    /// Plane `p`'s ceremony under `op_id`.
    pub fn plane(&self, p: usize, op_id: OpId) -> Option<SelfAuthorizedInstance> {
        self.planes.get(p).map(|proto| SelfAuthorizedInstance {
            op_id,
            ..proto.clone()
        })
    }
}

/// Publishes one cluster document given as JSON text (setup only; the tests crate does not
/// name `serde_json`, so documents travel as text and are parsed by the core).
struct Publish(String);

impl Script for Publish {
    type Output = Digest;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Digest, Halt> {
        publish_cluster(cx, &canon::parse_strict(&self.0)?)
    }
}
