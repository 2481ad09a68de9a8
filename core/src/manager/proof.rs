//! The manager's two registration proofs.

use std::fmt;

use crate::canon::Digest;
use crate::error::EpError;
use crate::gate::{ProcessEpoch, RegistrationRevision};
pub use crate::mac::{constant_time_eq, hmac_sha256};
use crate::names::OwnerToken;
use crate::wire::{self, ObjectWriter};

use super::envelope::{ManagerActors, ManagerEnvelope};
use super::request::ManagerAuthorityRequest;
use super::tokens::RegistrationProof;

/// The host secret keying the current-registration proof: the data account's signing seed as
/// its UTF-8 text. Never printed.
#[derive(Clone)]
pub struct ProofSecret(Vec<u8>);

impl ProofSecret {
    pub fn new(secret: impl Into<Vec<u8>>) -> ProofSecret {
        ProofSecret(secret.into())
    }
}

impl fmt::Debug for ProofSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProofSecret(<redacted>)")
    }
}

// ---- Proofs ----------------------------------------------------------------------------------

/// The domain-separation prefix of the current-registration HMAC (with its trailing NUL).
pub const CURRENT_REGISTRATION_DOMAIN: &[u8] = b"cotal/manager-current-registration/v1\0";

/// The deterministic registration proof (no secret): `sha256:` + hex SHA-256 of
/// `{"v":1,"space","owner","instanceId","lifecycleUid","actors","identities","artifactDigests"}`,
/// where `artifactDigests` lists the raw digest of each contract artifact's `JSON.stringify`
/// (empty for `session`). Used by `activate`, `session` and `retire`.
pub fn registration_proof(
    owner: &OwnerToken,
    request: &ManagerAuthorityRequest,
) -> Result<RegistrationProof, EpError> {
    let mut digests = Vec::new();
    for artifact in request.contract_artifacts() {
        let mut text = String::new();
        wire::js_stringify(&mut text, artifact)?;
        digests.push(Digest::of(text.as_bytes()).to_prefixed());
    }
    let e = &request.envelope;
    let json = ObjectWriter::new()
        .uint("v", 1)
        .string("space", e.space.as_str())
        .string("owner", owner.as_str())
        .string("instanceId", e.instance_id.as_str())
        .string("lifecycleUid", e.manager_lifecycle_uid.as_str())
        .raw(
            "actors",
            &ManagerActors::for_instance(&e.instance_id).to_json(),
        )
        .raw("identities", &e.identities.to_json())
        .strings("artifactDigests", digests.iter().map(String::as_str))
        .finish();
    Ok(RegistrationProof::computed(
        Digest::of(json.as_bytes()).to_prefixed(),
    ))
}

/// The current-registration proof: `sha256:` + hex HMAC-SHA256 keyed by the host secret over
/// [`CURRENT_REGISTRATION_DOMAIN`] followed by
/// `{"v":1,"kind":"manager-current-registration","space","owner","actor","instanceId",
/// "lifecycleUid","actors","identities","registrationRevision","processEpoch"}`. It binds the
/// held nkeys and the lifecycle to one gate registration, so a swapped nkey, another owner or a
/// superseded registration fails it.
pub fn current_registration_proof(
    secret: &ProofSecret,
    owner: &OwnerToken,
    envelope: &ManagerEnvelope,
    registration_revision: RegistrationRevision,
    process_epoch: ProcessEpoch,
) -> RegistrationProof {
    let json = ObjectWriter::new()
        .uint("v", 1)
        .string("kind", "manager-current-registration")
        .string("space", envelope.space.as_str())
        .string("owner", owner.as_str())
        .string("actor", envelope.actor.as_str())
        .string("instanceId", envelope.instance_id.as_str())
        .string("lifecycleUid", envelope.manager_lifecycle_uid.as_str())
        .raw(
            "actors",
            &ManagerActors::for_instance(&envelope.instance_id).to_json(),
        )
        .raw("identities", &envelope.identities.to_json())
        .uint("registrationRevision", registration_revision.0)
        .uint("processEpoch", process_epoch.0)
        .finish();
    let mac = hmac_sha256(&secret.0, &[CURRENT_REGISTRATION_DOMAIN, json.as_bytes()]);
    RegistrationProof::computed(Digest::from_bytes(mac).to_prefixed())
}
