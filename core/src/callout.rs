//! The auth callout's decisions (reference-auth-service §8.2, callout-operator-mode §4–§6): which
//! authorization requests deserve an answer, what the plane learns from one, and the signed
//! answer itself. Pure: unsealing and sealing (the curve-key box, which draws a nonce) and the
//! clock stay with the adapter, which hands in the opened request and `now`.
//!
//! **Silent drops.** A request that does not prove it comes from a nats-server of this broker
//! gets no answer at all ([`DropReason`]): answering an unauthenticated peer would let anyone
//! who can publish on the auth subject (or relay a sealed request under their own key) have
//! users minted. The server then refuses the connect at its auth timeout. The proof is: a v2
//! `authorization_request` claim signed by its `iss`, which is a server key (`N…`) equal to
//! the claimed `server_id.id`, optionally one of an expected set, and whose signed
//! `server_id.xkey` is the key that sealed it. (Signing with a fresh server key of one's own
//! passes all of that, which is why the expected set exists; without it provenance rests on the
//! broker letting no user publish `$SYS.REQ.USER.AUTH`.)
//!
//! **Answers.** Everything after that is answered, admitted or denied, with an
//! `authorization_response` ([`answer`]) bound to the request's `user_nkey` (`sub`) and server
//! (`aud`) and signed by the callout account's signing key. A deny reason is folded to ASCII
//! ([`fold_reason`]) so any encoder on the way can carry it.

use std::fmt;

use nkeys::{KeyPair, KeyPairType};

use crate::error::EpError;
use crate::jwt::{
    self, AuthToken, AuthorizationVerdict, ClaimType, Nats, NatsLimits, Permissions, RequestClient,
    UnixSeconds, UserNats, Validity,
};

/// The longest deny reason sent (in characters, after folding). The reason reaches only the
/// server's log; a runaway one must not push the response over its size bound, which would
/// turn a prompt refusal into a timeout.
pub const MAX_REASON_CHARS: usize = 256;

/// The reason sent when the authorizer's is empty: the server treats an empty `error` as no
/// verdict at all.
const EMPTY_REASON: &str = "denied";

/// Why a request was dropped unanswered. For logs and metrics only: nothing of it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DropReason {
    /// No `Nats-Server-Xkey` header: the request came unsealed (the account has no xkey, or
    /// someone other than the server published it).
    MissingXkeyHeader,
    /// The header is not a curve public key, or the payload does not open with the callout
    /// xkey and that key.
    Undecryptable,
    /// The opened payload is not a well-formed v2 NATS JWT (the decoder's refusal, which names
    /// fields, never their values' secrets).
    Malformed(String),
    /// A well-formed JWT of another claim type.
    NotARequest(ClaimType),
    /// `server_id.id` is not a server public key (`N…`).
    NotAServerId,
    /// The JWT's `iss` is not the `server_id.id` it claims.
    IssuerNotServer,
    /// The signature does not verify under the issuer.
    BadSignature,
    /// The server id is not in the configured expected set.
    UnexpectedServer,
    /// The signed `server_id.xkey` is not the key that sealed the request.
    XkeyMismatch,
    /// No `nats.user_nkey`: there is no one to answer for.
    MissingUserNkey,
    /// `nats.user_nkey` is not a user public key (`U…`).
    NotAUserNkey,
    /// The request's `exp` has passed: the server has already given up on it.
    Expired,
}

impl DropReason {
    /// A stable label for metrics.
    pub const fn label(&self) -> &'static str {
        match self {
            DropReason::MissingXkeyHeader => "missing-xkey-header",
            DropReason::Undecryptable => "undecryptable",
            DropReason::Malformed(_) => "malformed",
            DropReason::NotARequest(_) => "not-a-request",
            DropReason::NotAServerId => "not-a-server-id",
            DropReason::IssuerNotServer => "issuer-not-server",
            DropReason::BadSignature => "bad-signature",
            DropReason::UnexpectedServer => "unexpected-server",
            DropReason::XkeyMismatch => "xkey-mismatch",
            DropReason::MissingUserNkey => "missing-user-nkey",
            DropReason::NotAUserNkey => "not-a-user-nkey",
            DropReason::Expired => "expired",
        }
    }
}

impl fmt::Display for DropReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::Malformed(why) => write!(f, "malformed: {why}"),
            DropReason::NotARequest(kind) => write!(f, "not-a-request: a {kind} claim"),
            other => f.write_str(other.label()),
        }
    }
}

/// A server's public nkey (`N…`): the id in its `INFO`, the signer of its requests and the
/// audience of the answers to it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerId(String);

impl ServerId {
    /// `None` unless `id` is a well-formed server public key.
    pub fn parse(id: &str) -> Option<Self> {
        is_public_key(id, KeyPairType::Server).then(|| ServerId(id.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The per-connect user nkey (`U…`) the server generated for one connect attempt: the subject
/// of the answer and of the user JWT admitted with it. Fresh on every attempt, so it also keeps
/// an answer from being replayed onto another connect.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UserNkey(String);

impl UserNkey {
    /// `None` unless `key` is a well-formed user public key.
    pub fn parse(key: &str) -> Option<Self> {
        is_public_key(key, KeyPairType::User).then(|| UserNkey(key.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserNkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn is_public_key(s: &str, kind: KeyPairType) -> bool {
    nkeys::from_public_key(s).is_ok_and(|(prefix, _)| KeyPairType::from(prefix) == kind)
}

/// Which servers' requests are answered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TrustedServers {
    /// Any server that proves itself as above (provenance then also rests on the broker's
    /// `$SYS` subject isolation).
    #[default]
    Any,
    /// Only these server ids (the tightest pin, for hardened and multi-server deployments).
    Only(Vec<ServerId>),
}

impl TrustedServers {
    fn admits(&self, id: &ServerId) -> bool {
        match self {
            TrustedServers::Any => true,
            TrustedServers::Only(ids) => ids.contains(id),
        }
    }
}

/// A verified authorization request: what the plane decides a connect on. `Debug` redacts the
/// bearer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The answer's subject.
    pub user_nkey: UserNkey,
    /// The asking server (the answer's audience).
    pub server_id: ServerId,
    /// The server's `server_name`.
    pub server_name: String,
    /// The server's curve key: the request was sealed with it and the answer is sealed to it.
    pub server_xkey: String,
    /// The client-chosen connection nonce, the CONNECT `name`, verbatim (wildcards and dots
    /// included: judging it is the authorizer's business).
    pub nonce: Option<String>,
    /// The bearer the client presented in `auth_token`; `None` when it sent none.
    pub bearer: Option<AuthToken>,
    /// The connection as the server sees it (host, `cid`, the sentinel it authenticated as).
    pub client: RequestClient,
    /// When the server stops waiting for the answer (whole seconds).
    pub expires_at: Option<UnixSeconds>,
}

/// Verifies one opened request: `token` is the payload after unsealing, `sealed_by` the
/// `Nats-Server-Xkey` header it was unsealed with, `now` the wall clock. Every refusal is a
/// [`DropReason`]: the request is not answered.
pub fn verify_request(
    token: &str,
    sealed_by: &str,
    trusted: &TrustedServers,
    now: UnixSeconds,
) -> Result<ConnectRequest, DropReason> {
    let claims = jwt::decode(token).map_err(|e| DropReason::Malformed(e.message))?;
    let Nats::AuthorizationRequest(request) = claims.nats else {
        return Err(DropReason::NotARequest(claims.nats.claim_type()));
    };
    let server_id = ServerId::parse(&request.server_id.id).ok_or(DropReason::NotAServerId)?;
    if claims.iss != server_id.as_str() {
        return Err(DropReason::IssuerNotServer);
    }
    // The cheap checks first: the signature is the one costly step.
    jwt::verify_signature(token, server_id.as_str()).map_err(|_| DropReason::BadSignature)?;
    if !trusted.admits(&server_id) {
        return Err(DropReason::UnexpectedServer);
    }
    // A relay could re-seal someone else's request under its own key; the server signs the key
    // it sealed with, so the two must agree.
    let server_xkey = request
        .server_id
        .xkey
        .filter(|x| x == sealed_by)
        .ok_or(DropReason::XkeyMismatch)?;
    if request.user_nkey.is_empty() {
        return Err(DropReason::MissingUserNkey);
    }
    let user_nkey = UserNkey::parse(&request.user_nkey).ok_or(DropReason::NotAUserNkey)?;
    // The server writes `exp` = `iat` + its auth timeout in whole seconds, so `exp` may equal
    // `iat` under a sub-second timeout: only a request strictly past its `exp` is stale.
    if claims.exp.is_some_and(|exp| now > exp) {
        return Err(DropReason::Expired);
    }
    Ok(ConnectRequest {
        user_nkey,
        server_id,
        server_name: request.server_id.name,
        server_xkey,
        nonce: request.connect_opts.name,
        bearer: request.connect_opts.auth_token,
        client: request.client_info,
        expires_at: claims.exp,
    })
}

/// What the authorizer grants an admitted connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admit {
    /// The user JWT's `name` (the connection's user name on the server).
    pub name: String,
    pub permissions: Permissions,
    /// `owner:<o>`, `actor:<a>`, `principal:<o>.<a>` for the plane's principals.
    pub tags: Vec<String>,
    /// The connection's `subs`/`data`/`payload` limits, from the profile
    /// ([`crate::profiles::CONNECT_LIMITS`]): finite, so no admitted connection holds unbounded
    /// server state.
    pub limits: NatsLimits,
    /// The user JWT's `exp`: the bearer's, so broker access ends with the bearer.
    pub expires_at: UnixSeconds,
}

/// The keys an answer is signed with.
#[derive(Debug, Clone, Copy)]
pub struct AnswerKeys<'k> {
    /// The callout account (`A…`), named as the response's `issuer_account`.
    pub callout_account: &'k str,
    /// The callout account's signing key: signs the response.
    pub callout_signer: &'k KeyPair,
    /// The data account (`A…`) admitted users land in.
    pub data_account: &'k str,
    /// The data account's signing key: signs the admitted user JWT.
    pub data_signer: &'k KeyPair,
}

/// A signed answer, to be sealed to [`ConnectRequest::server_xkey`] and sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Admitted {
        /// The `authorization_response` JWT.
        response: String,
        /// The user JWT inside it.
        user_jwt: String,
        expires_at: UnixSeconds,
    },
    Denied {
        response: String,
        /// The reason as sent (folded).
        reason: String,
    },
}

impl Answer {
    /// The response JWT to seal.
    pub fn response(&self) -> &str {
        match self {
            Answer::Admitted { response, .. } | Answer::Denied { response, .. } => response,
        }
    }
}

/// Signs the answer to `request`: for `Ok(admit)` a user JWT for the request's `user_nkey` in
/// the data account (`iss` = the data signing key, `issuer_account` = the data account, `exp` =
/// [`Admit::expires_at`], `iat` = `now`) inside an admitting response; for `Err(reason)`, or
/// when that user JWT cannot be minted (an expiry not after `now`, a grant over the size
/// bound), a denying one carrying the folded reason. An `Err` here means not even the denial
/// could be signed (the adapter then drops the request).
pub fn answer(
    keys: AnswerKeys<'_>,
    request: &ConnectRequest,
    decision: Result<Admit, String>,
    now: UnixSeconds,
) -> Result<Answer, EpError> {
    let respond = |verdict: &AuthorizationVerdict| {
        jwt::authorization_response_jwt(
            keys.callout_signer,
            keys.callout_account,
            request.user_nkey.as_str(),
            request.server_id.as_str(),
            verdict,
            now,
        )
    };
    let deny = |reason: &str| {
        let reason = fold_reason(reason);
        let response = respond(&AuthorizationVerdict::Error(reason.clone()))?;
        Ok(Answer::Denied { response, reason })
    };
    let admit = match decision {
        Ok(admit) => admit,
        Err(reason) => return deny(&reason),
    };
    let user = UserNats {
        permissions: admit.permissions,
        tags: admit.tags,
        limits: admit.limits,
        ..UserNats::default()
    };
    let minted = jwt::user_jwt(
        keys.data_signer,
        keys.data_account,
        request.user_nkey.as_str(),
        &admit.name,
        &user,
        Validity {
            issued_at: now,
            expires_at: Some(admit.expires_at),
        },
    );
    let user_jwt = match minted {
        Ok(user_jwt) => user_jwt,
        Err(e) => {
            return deny(&format!(
                "cannot mint the connection's credential: {}",
                e.message
            ))
        }
    };
    match respond(&AuthorizationVerdict::Jwt(user_jwt.clone())) {
        Ok(response) => Ok(Answer::Admitted {
            response,
            user_jwt,
            expires_at: admit.expires_at,
        }),
        Err(e) => deny(&format!("cannot sign the admission: {}", e.message)),
    }
}

/// A deny reason as sent: printable ASCII only (dashes, the em dash among them, become `-`;
/// other whitespace and control characters a space; anything else `?`), trimmed, at most
/// [`MAX_REASON_CHARS`], and never empty. Raw UTF-8 reaches nats-server 2.15.1 intact, but an
/// encoder that cannot carry it once left a client hanging until its timeout (reference §8.2),
/// and the JWT writer refuses control characters: a reason must never be the cause of no answer.
pub fn fold_reason(reason: &str) -> String {
    let folded: String = reason
        .chars()
        .map(|c| match c {
            ' '..='~' => c,
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            c if c.is_whitespace() || c.is_control() => ' ',
            _ => '?',
        })
        .take(MAX_REASON_CHARS)
        .collect();
    match folded.trim() {
        "" => EMPTY_REASON.to_owned(),
        trimmed => trimmed.to_owned(),
    }
}

#[cfg(test)]
mod tests;
