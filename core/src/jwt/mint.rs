//! Minting: the builders of each token kind, their standard claims and `jti`, and the
//! Ed25519 signature over header and claims.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::{KeyPair, KeyPairType};
use sha2::{Digest as _, Sha512_256};

use crate::error::EpError;

use super::claims::{
    AccountNats, AuthorizationVerdict, ClaimType, Claims, OperatorNats, UnixSeconds, UserNats,
    Validity,
};
use super::creds::Creds;
use super::go_json::{
    account_section, base32_nopad, generic_into, operator_section, user_section, GoObject,
};
use super::read::expect_public_key;
use super::{HEADER, SIGNATURE_CHARS};

/// Mints an operator JWT, self-signed by the operator key (the trust root a server in operator
/// mode is configured with).
pub fn operator_jwt(
    operator: &KeyPair,
    name: &str,
    nats: &OperatorNats,
    validity: Validity,
) -> Result<String, EpError> {
    let subject = operator.public_key();
    let section = operator_section(nats)?;
    mint(
        operator,
        ClaimType::Operator,
        &subject,
        None,
        name,
        &section,
        validity,
    )
}

/// Mints an account JWT for the public account nkey `account`, signed by the operator key or
/// one of its signing keys.
pub fn account_jwt(
    signer: &KeyPair,
    account: &str,
    name: &str,
    nats: &AccountNats,
    validity: Validity,
) -> Result<String, EpError> {
    let section = account_section(nats)?;
    mint(
        signer,
        ClaimType::Account,
        account,
        None,
        name,
        &section,
        validity,
    )
}

/// Mints a user JWT for a caller-held public user nkey `user` (the seed never leaves the
/// caller), in account `account`, signed by the account key or one of the account's signing
/// keys — in that case the claim names the account as `issuer_account`, as both reference
/// libraries do. `name` is the profile. Refused before signing when the token would exceed
/// [`MAX_JWT_BYTES`](super::MAX_JWT_BYTES).
pub fn user_jwt(
    signer: &KeyPair,
    account: &str,
    user: &str,
    name: &str,
    nats: &UserNats,
    validity: Validity,
) -> Result<String, EpError> {
    expect_public_key(account, &KeyPairType::Account, "account")?;
    let issuer_account = (signer.public_key() != account).then_some(account);
    let section = user_section(nats, issuer_account)?;
    mint(
        signer,
        ClaimType::User,
        user,
        None,
        name,
        &section,
        validity,
    )
}

/// Mints an authorization response (the auth callout's answer) for the connecting `user` nkey
/// on `server` (its `N…` id, the `aud`), signed by `signer` (a key of the callout account,
/// named as `issuer_account` whichever key signs: nats-server 2.15.1 refuses a plaintext
/// response whose `issuer_account` is another account, callout-operator-mode §5.2). No `exp`:
/// the server acts on the response at once. Refused (`bad-request`) for an empty error — the
/// server treats it as no verdict — and a token over [`MAX_RESPONSE_JWT_BYTES`](super::MAX_RESPONSE_JWT_BYTES).
pub fn authorization_response_jwt(
    signer: &KeyPair,
    callout_account: &str,
    user: &str,
    server: &str,
    verdict: &AuthorizationVerdict,
    issued_at: UnixSeconds,
) -> Result<String, EpError> {
    expect_public_key(callout_account, &KeyPairType::Account, "callout account")?;
    expect_public_key(server, &KeyPairType::Server, "server")?;
    let (jwt, error) = match verdict {
        AuthorizationVerdict::Jwt(jwt) => (jwt.as_str(), ""),
        AuthorizationVerdict::Error(error) => ("", error.as_str()),
    };
    if jwt.is_empty() && error.is_empty() {
        return Err(EpError::bad_request(
            "an authorization response needs a user JWT or a non-empty error",
        ));
    }
    // Go's `AuthorizationResponse` field order.
    let obj = GoObject::new()
        .str_nonempty("jwt", jwt)
        .str_nonempty("error", error)
        .str_nonempty("issuer_account", callout_account);
    let section = generic_into(obj, &[], ClaimType::AuthorizationResponse).finish()?;
    let validity = Validity {
        issued_at,
        expires_at: None,
    };
    mint(
        signer,
        ClaimType::AuthorizationResponse,
        user,
        Some(server),
        "",
        &section,
        validity,
    )
}

/// Mints a user JWT for `user` (a key pair the plane holds) and returns it with the seed, for
/// [`Creds::text`]. Same claims and refusals as [`user_jwt`].
pub fn user_creds(
    signer: &KeyPair,
    account: &str,
    user: &KeyPair,
    name: &str,
    nats: &UserNats,
    validity: Validity,
) -> Result<Creds, EpError> {
    let seed = user
        .seed()
        .map_err(|_| EpError::bad_request("the user key pair has no seed; creds need one"))?;
    let jwt = user_jwt(signer, account, &user.public_key(), name, nats, validity)?;
    Ok(Creds { jwt, seed })
}

/// Serializes, hashes and signs one claim. The size bound is checked on the exact signing
/// input before the signature is made, so an oversize mint costs no signature and leaves no
/// trace.
pub(super) fn mint(
    signer: &KeyPair,
    kind: ClaimType,
    subject: &str,
    aud: Option<&str>,
    name: &str,
    nats_section: &str,
    validity: Validity,
) -> Result<String, EpError> {
    let issuer = signer.public_key();
    let signer_kind = signer.key_pair_type();
    if !kind.issuer_allowed(&signer_kind) {
        return Err(EpError::bad_request(format!(
            "{signer_kind:?} keys cannot sign {kind} JWTs"
        )));
    }
    expect_public_key(subject, &kind.subject_kind(), "subject")?;
    if let Some(exp) = validity.expires_at {
        if exp <= validity.issued_at {
            return Err(EpError::bad_request(format!(
                "JWT expiry {} is not after its issue time {}; mint with a positive lifetime",
                exp.0, validity.issued_at.0
            )));
        }
    }
    let standard = |jti: Option<&str>| {
        standard_claims(
            aud,
            validity.expires_at,
            jti,
            validity.issued_at,
            &issuer,
            name,
            None,
            subject,
        )
    };
    let jti = jti_of(&standard(None).finish()?);
    let payload = standard(Some(jti.as_str()))
        .raw("nats", nats_section)
        .finish()?;

    let mut token = URL_SAFE_NO_PAD.encode(HEADER);
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(payload, &mut token);
    let size = token.len() + 1 + SIGNATURE_CHARS;
    let limit = kind.max_bytes();
    if size > limit {
        return Err(EpError::bad_request(format!(
            "the {kind} JWT would be {size} bytes, over the {limit}-byte bound; \
             narrow the permission set"
        ))
        .with_detail(serde_json::json!({"bytes": size, "limit": limit})));
    }
    let signature = signer
        .sign(token.as_bytes())
        .map_err(|_| EpError::bad_request(format!("the {kind} JWT signer has no seed")))?;
    token.push('.');
    URL_SAFE_NO_PAD.encode_string(signature, &mut token);
    Ok(token)
}

impl Claims {
    /// The `jti` nats-io/jwt v2 (Go) derives from these claims: base32 of SHA-512/256 over the
    /// standard claims with an empty `jti`.
    pub fn recompute_jti(&self) -> Result<String, EpError> {
        let standard = standard_claims(
            self.aud.as_deref(),
            self.exp,
            None,
            self.iat,
            &self.iss,
            &self.name,
            self.nbf,
            &self.sub,
        )
        .finish()?;
        Ok(jti_of(&standard))
    }
}

/// Go's `ClaimsData` in field order; `jti: None` is the empty `jti` the hash is taken over.
#[allow(clippy::too_many_arguments)]
fn standard_claims(
    aud: Option<&str>,
    exp: Option<UnixSeconds>,
    jti: Option<&str>,
    iat: UnixSeconds,
    iss: &str,
    name: &str,
    nbf: Option<UnixSeconds>,
    sub: &str,
) -> GoObject {
    GoObject::new()
        .str_nonempty("aud", aud.unwrap_or(""))
        .seconds("exp", exp)
        .str_nonempty("jti", jti.unwrap_or(""))
        .seconds("iat", Some(iat))
        .str_nonempty("iss", iss)
        .str_nonempty("name", name)
        .seconds("nbf", nbf)
        .str_nonempty("sub", sub)
}

fn jti_of(standard_claims_json: &str) -> String {
    base32_nopad(&Sha512_256::digest(standard_claims_json.as_bytes()))
}
