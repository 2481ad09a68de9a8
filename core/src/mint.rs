//! The fenced mint end to end (issue: credentials, deliverable 4): build the whole credential
//! first, then let the issuance fence decide whether it is released.
//!
//! Nothing fallible may run after a winning gate CAS, or a committed ledger row would have no
//! released credential (reference §7 item 19). So [`prepare_user`] signs the JWT (and creds, if
//! the plane holds the seed) and derives the credential id from the exact text up front; the
//! release machines then only stage, touch and hand the prepared credential back on a win. The
//! prepared text is private to this module: the only way to read it is a machine's winning
//! output.

use nkeys::KeyPair;
use sha2::{Digest as _, Sha256};

use crate::error::EpError;
use crate::issuance::{
    CommitSibling, FinalizeServeMint, GateObservation, GateRef, Release, ServeCredential,
    ServeGrant,
};
use crate::jwt::{self, Creds, UnixSeconds};
use crate::ledger::LedgerRow;
use crate::machine::{Ctx, Halt, Script};
use crate::names::{ActorToken, CredentialId, SourceMember};
use crate::profiles::Profile;

/// Who holds the user key of the credential being minted.
#[derive(Debug, Clone)]
pub enum Holder {
    /// The caller holds the seed; only its public nkey is sent, and only a JWT is issued.
    PublicKey(String),
    /// The plane holds the key pair and issues creds text (JWT + seed).
    KeyPair(Box<KeyPair>),
}

/// A fully built credential awaiting its fence. Its text is readable only from a release
/// machine's winning output.
#[derive(Debug, Clone)]
pub struct Prepared {
    jwt: String,
    creds: Option<Creds>,
    credential_id: CredentialId,
    exp: u64,
}

impl Prepared {
    /// `sha256-<hex>` of the creds (or JWT) text: a byte-identical retry maps to the same row.
    pub fn credential_id(&self) -> &CredentialId {
        &self.credential_id
    }

    /// Expiry, unix seconds.
    pub fn exp(&self) -> u64 {
        self.exp
    }
}

/// A credential the fence released.
#[derive(Debug, Clone)]
pub struct Released {
    pub jwt: String,
    /// Present when the plane held the user key.
    pub creds: Option<Creds>,
    pub credential_id: CredentialId,
    pub release: Release,
}

impl Released {
    fn of(prepared: &Prepared, release: Release) -> Released {
        Released {
            jwt: prepared.jwt.clone(),
            creds: prepared.creds.clone(),
            credential_id: prepared.credential_id.clone(),
            release,
        }
    }
}

/// Signs a user credential for `profile` in `account`, valid from `now` for the profile's TTL.
/// A JWT over [`jwt::MAX_JWT_BYTES`] is refused here, before anything is written.
pub fn prepare_user(
    profile: &Profile,
    signer: &KeyPair,
    account: &str,
    holder: &Holder,
    now: UnixSeconds,
) -> Result<Prepared, EpError> {
    let (nats, validity) = profile.claims(now)?;
    let exp = validity.expires_at.map_or(now.0, |e| e.0);
    let (jwt, creds) = match holder {
        Holder::PublicKey(user) => (
            jwt::user_jwt(signer, account, user, profile.name, &nats, validity)?,
            None,
        ),
        Holder::KeyPair(user) => {
            let creds = jwt::user_creds(signer, account, user, profile.name, &nats, validity)?;
            (creds.jwt.clone(), Some(creds))
        }
    };
    let text = creds.as_ref().map_or_else(|| jwt.clone(), Creds::text);
    let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
    Ok(Prepared {
        jwt,
        creds,
        credential_id: CredentialId::from_sha256_hex(&digest),
        exp,
    })
}

/// Releases a prepared serve credential through the serve-mint fence (F19–F22, F27, F28): the
/// credential comes back only if [`FinalizeServeMint`] wins.
#[derive(Debug, Clone)]
pub struct ReleaseServe {
    gate: GateRef,
    grant: ServeGrant,
    holder_actor: ActorToken,
    source_chain: Vec<SourceMember>,
    prepared: Prepared,
}

impl ReleaseServe {
    pub fn new(
        gate: GateRef,
        grant: ServeGrant,
        holder_actor: ActorToken,
        source_chain: Vec<SourceMember>,
        prepared: Prepared,
    ) -> Self {
        ReleaseServe {
            gate,
            grant,
            holder_actor,
            source_chain,
            prepared,
        }
    }
}

impl Script for ReleaseServe {
    type Output = Released;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Released, Halt> {
        let finalize = FinalizeServeMint {
            gate: self.gate.clone(),
            grant: self.grant.clone(),
            credential: ServeCredential {
                credential_id: self.prepared.credential_id.clone(),
                holder_actor: self.holder_actor.clone(),
                source_chain: self.source_chain.clone(),
                exp: self.prepared.exp,
            },
        };
        let release = finalize.run(cx)?;
        Ok(Released::of(&self.prepared, release))
    }
}

/// Releases a prepared sibling credential (goal-writer, session-ledger, …) through the sibling
/// fence (F43), pinned to the observation the credential was built from.
#[derive(Debug, Clone)]
pub struct ReleaseSibling {
    gate: GateRef,
    observed: GateObservation,
    row: LedgerRow,
    prepared: Prepared,
}

impl ReleaseSibling {
    /// `holder` is the sibling's own principal; the ledger row is built from the prepared
    /// credential so its id and expiry can never disagree with the released text.
    pub fn new(
        gate: GateRef,
        observed: GateObservation,
        holder: crate::names::Principal,
        source_chain: Vec<SourceMember>,
        prepared: Prepared,
    ) -> Result<Self, EpError> {
        let row = LedgerRow::endpoint_active(
            gate.endpoint.clone(),
            &gate.instance,
            prepared.credential_id.clone(),
            holder,
            source_chain,
            prepared.exp,
        )?;
        Ok(ReleaseSibling {
            gate,
            observed,
            row,
            prepared,
        })
    }
}

impl Script for ReleaseSibling {
    type Output = Released;
    fn run(&self, cx: &mut Ctx<'_>) -> Result<Released, Halt> {
        let commit = CommitSibling {
            gate: self.gate.clone(),
            observed: self.observed.clone(),
            row: self.row.clone(),
        };
        let release = commit.run(cx)?;
        Ok(Released::of(&self.prepared, release))
    }
}
