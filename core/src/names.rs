//! Names, tokens, principals, bucket names and key builders.
//!
//! Every value that becomes part of a NATS subject, a KV key or a bucket name enters the plane
//! through a constructor here, and every constructor validates: a value that breaks its grammar
//! is refused with `bad-request` (callers reading *stored* bytes re-label with
//! [`EpError::stored`]). Fields are private so a held value is always a valid one, and only the
//! builders in [`keys`] tokenize, exactly once (the reference once double-tokenized a key).

use std::fmt;

use sha2::Digest as _;

use crate::error::EpError;

/// Longest prefix of an offending value quoted in a refusal, so a hostile megabyte input cannot
/// bloat logs or replies.
const QUOTE_MAX: usize = 80;

/// Quotes `value` for a refusal message, truncated to [`QUOTE_MAX`] chars.
fn quote(value: &str) -> String {
    let n = value.chars().count();
    if n <= QUOTE_MAX {
        return format!("{value:?}");
    }
    let head: String = value.chars().take(QUOTE_MAX).collect();
    format!("{head:?}… ({n} chars)")
}

/// The one refusal shape: what was refused, the quoted value, and the grammar it broke.
pub(crate) fn refuse(what: &str, value: &str, grammar: &str) -> EpError {
    EpError::bad_request(format!(
        "{what} {} is refused: it must match {grammar}",
        quote(value)
    ))
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[A-Za-z0-9_-]`: the subject-safe alphabet of spaces, credential segments and source ids.
fn is_subject_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `[A-Za-z0-9_-]+`.
fn is_subject_segment(s: &str) -> bool {
    !s.is_empty() && s.chars().all(is_subject_char)
}

/// Defines a string newtype with `as_str` and `Display`; with a predicate, also a validating
/// `parse` that refuses with the grammar named. The crate's one string-newtype macro.
macro_rules! str_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
    ($(#[$meta:meta])* $name:ident, $what:literal, $grammar:expr, $valid:expr) => {
        $crate::names::str_newtype! { $(#[$meta])* $name }

        impl $name {
            pub fn parse(s: &str) -> Result<Self, $crate::error::EpError> {
                if ($valid)(s) {
                    Ok($name(s.to_owned()))
                } else {
                    Err($crate::names::refuse($what, s, $grammar))
                }
            }
        }
    };
}
pub(crate) use str_newtype;

// ---- Endpoint names -------------------------------------------------------------------------

/// Labels are `[a-z0-9]([a-z0-9-]*[a-z0-9])?`; the token has the same length as the name, so
/// bounding the name bounds the token to 64.
fn is_endpoint_name(s: &str) -> bool {
    let label = |l: &str| {
        l.chars().all(|c| is_lower_alnum(c) || c == '-')
            && l.chars().next().is_some_and(is_lower_alnum)
            && l.chars().next_back().is_some_and(is_lower_alnum)
    };
    s.len() <= 64 && s.split('.').all(label)
}

str_newtype! {
    /// An endpoint name such as `com.acme.deploy`. Labels never contain `_`, which is what makes
    /// the name ↔ token mapping (`.` ↔ `_`) a bijection.
    EndpointName, "endpoint name",
    "dot-separated labels [a-z0-9]([a-z0-9-]*[a-z0-9])?, token <= 64 chars", is_endpoint_name
}

str_newtype! {
    /// The subject/key form of an [`EndpointName`]: every `.` replaced by `_`. A `.` inside a
    /// token is refused outright: it would slip through the `_` → `.` mapping and split a key.
    EndpointToken, "endpoint token",
    "underscore-separated labels [a-z0-9]([a-z0-9-]*[a-z0-9])?, <= 64 chars",
    |s: &str| !s.contains('.') && is_endpoint_name(&s.replace('_', "."))
}

impl EndpointName {
    pub fn token(&self) -> EndpointToken {
        EndpointToken(self.0.replace('.', "_"))
    }

    /// Reverse-DNS names (`com.acme.x`) have at least two labels.
    pub fn is_reverse_dns(&self) -> bool {
        self.0.contains('.')
    }

    pub fn labels(&self) -> impl Iterator<Item = &str> {
        self.0.split('.')
    }
}

impl EndpointToken {
    /// The inverse of [`EndpointName::token`]; total because labels cannot contain `_`.
    pub fn name(&self) -> EndpointName {
        EndpointName(self.0.replace('_', "."))
    }
}

// ---- Lifecycle tokens (F1) ------------------------------------------------------------------

const LIFECYCLE_MIN: usize = 26;

/// F1: lifecycle tokens are `[a-z0-9]{26,32}`, refused at every boundary.
fn is_lifecycle(s: &str) -> bool {
    (LIFECYCLE_MIN..=32).contains(&s.len()) && s.chars().all(is_lower_alnum)
}

/// Renders 160 bits of entropy as base 36, left-padded to 26 digits. 36^31 > 2^160, so the
/// result is 26..=31 chars and always keeps F1; positional notation is injective, so distinct
/// entropy never collides.
fn mint_base36(entropy: [u8; 20]) -> String {
    let mut n = entropy;
    let mut digits: Vec<char> = Vec::with_capacity(32);
    while n.iter().any(|&b| b != 0) {
        // Long division of the big-endian byte array by 36; `rem` < 36 throughout, so
        // `acc / 36` < 256 fits a byte and `from_digit` always succeeds.
        let mut rem: u32 = 0;
        for b in n.iter_mut() {
            let acc = rem * 256 + u32::from(*b);
            *b = (acc / 36) as u8;
            rem = acc % 36;
        }
        digits.push(char::from_digit(rem, 36).unwrap_or('0'));
    }
    digits.resize(digits.len().max(LIFECYCLE_MIN), '0');
    digits.iter().rev().collect()
}

/// Defines one F1 lifecycle-token newtype; the three share a grammar but must not be mixed up.
macro_rules! lifecycle_token {
    ($(#[$meta:meta])* $name:ident, $what:literal) => {
        str_newtype! { $(#[$meta])* $name, $what, "^[a-z0-9]{26,32}$", is_lifecycle }

        impl $name {
            /// Mints from caller-supplied entropy (the core draws no randomness).
            pub fn mint(entropy: [u8; 20]) -> Self {
                $name(mint_base36(entropy))
            }
        }
    };
}

lifecycle_token! {
    /// The lifecycle uid of a ledger row.
    LifecycleUid, "lifecycle uid"
}
lifecycle_token! {
    /// An endpoint instance id.
    InstanceId, "instance id"
}
lifecycle_token! {
    /// An operation id.
    OpId, "op id"
}

impl InstanceId {
    /// In the endpoint family the ledger row's lifecycleUid equals the instanceId.
    pub fn as_lifecycle_uid(&self) -> LifecycleUid {
        LifecycleUid(self.0.clone())
    }
}

impl LifecycleUid {
    /// The inverse of [`InstanceId::as_lifecycle_uid`]: an endpoint ledger row's lifecycleUid
    /// names the instance whose family it belongs to.
    pub fn as_instance_id(&self) -> InstanceId {
        InstanceId(self.0.clone())
    }
}

// ---- Owners, actors, principals -------------------------------------------------------------

const WORD_GRAMMAR: &str = "^[A-Za-z0-9_]+$ of <= 64 chars";

fn is_word(s: &str) -> bool {
    (1..=64).contains(&s.len()) && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

str_newtype! {
    /// An owner token. Any `[A-Za-z0-9_]{1,64}` is well-formed; only some are real owners.
    OwnerToken, "owner token", WORD_GRAMMAR, is_word
}
str_newtype! {
    /// An actor token: `[A-Za-z0-9_]{1,64}`.
    ActorToken, "actor token", WORD_GRAMMAR, is_word
}

impl OwnerToken {
    /// The single-tenant owner.
    pub fn local() -> Self {
        OwnerToken("local".to_owned())
    }

    /// Real owners are `local`, a user `u_<26 base32>` or a platform owner `p_<26 base32>`
    /// (base32 = `[a-z2-7]`); anything else is well-formed but was issued by no authority.
    pub fn is_real_owner(&self) -> bool {
        let s = self.0.as_str();
        s == "local" || DerivedOwner::is_derived(s) || is_platform_owner(s)
    }

    /// This owner as a derived user owner, when it is one.
    pub fn as_derived(&self) -> Option<DerivedOwner> {
        DerivedOwner::is_derived(&self.0).then(|| DerivedOwner(self.clone()))
    }
}

const USER_OWNER_PREFIX: &str = "u_";
const PLATFORM_OWNER_PREFIX: &str = "p_";
/// The versioned domain prefix of the IdP-subject owner derivation.
const IDP_OWNER_CONTEXT: &str = "cotal-owner-v1:";
/// Base32 digits of the key digest an owner token carries after its prefix.
const OWNER_DIGEST_LEN: usize = 26;

/// `prefix` followed by exactly [`OWNER_DIGEST_LEN`] lower-case RFC 4648 base32 digits.
fn has_owner_digest(s: &str, prefix: &str) -> bool {
    s.strip_prefix(prefix).is_some_and(|digest| {
        digest.len() == OWNER_DIGEST_LEN
            && digest
                .bytes()
                .all(|c| c.is_ascii_lowercase() || (b'2'..=b'7').contains(&c))
    })
}

/// Whether `owner` has the platform-owner shape `p_<26 base32>`.
pub fn is_platform_owner(owner: &str) -> bool {
    has_owner_digest(owner, PLATFORM_OWNER_PREFIX)
}

/// The versioned domain prefix of the platform control owner derivation.
const PLATFORM_OWNER_CONTEXT: &str = "cotal/platform-control-owner/v1\0";

/// The owner of a platform's control manager for one account in one space (reference §7.3):
/// `p_` + the first 26 lower-case base32 digits of HMAC-SHA256 under the space's owner secret
/// over `cotal/platform-control-owner/v1\0<space>\0<accountPublicKey>`. Derived, never read from
/// a request; stable across instance replacement, and a recreated account of the same name gets
/// another owner. Disjoint from user owners (`u_`), so a proof from one door never validates on
/// the other. Frozen: changing any byte re-keys every platform manager.
pub fn platform_control_owner(
    owner_secret: &[u8; 32],
    space: &SpaceName,
    account_public_key: &str,
) -> OwnerToken {
    let mac = crate::mac::hmac_sha256(
        owner_secret,
        &[
            PLATFORM_OWNER_CONTEXT.as_bytes(),
            space.as_str().as_bytes(),
            b"\0",
            account_public_key.as_bytes(),
        ],
    );
    let mut b32 = data_encoding::BASE32_NOPAD.encode(&mac);
    b32.truncate(OWNER_DIGEST_LEN);
    b32.make_ascii_lowercase();
    OwnerToken(format!("{PLATFORM_OWNER_PREFIX}{b32}"))
}

/// A derived user owner: `u_` + the first 26 lower-case RFC 4648 base32 digits of SHA-256 over
/// the user's public key. Ledger rows, bearers and run callers belong to such owners only, and
/// this is the one place that derives or recognizes one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DerivedOwner(OwnerToken);

impl DerivedOwner {
    /// The owner a user public key (an nkey's text) derives.
    pub fn derive_from_user_key(public_key: &str) -> DerivedOwner {
        let digest = sha2::Sha256::digest(public_key.as_bytes());
        let mut b32 = data_encoding::BASE32_NOPAD.encode(&digest);
        b32.truncate(OWNER_DIGEST_LEN);
        b32.make_ascii_lowercase();
        DerivedOwner(OwnerToken(format!("{USER_OWNER_PREFIX}{b32}")))
    }

    /// The owner an IdP-authenticated subject derives in a space (reference §10.3): `u_` + the
    /// first 16 bytes, base32, of HMAC-SHA256 under the space's owner secret over
    /// `cotal-owner-v1:` + the JSON array `[issuer, subject]`. The array, not a delimiter, keeps
    /// the encoding injective; the secret makes the owner opaque and unlinkable across spaces.
    /// Frozen: changing any byte of it re-keys every owner of every space. Refuses an empty
    /// issuer or subject (`bad-request`).
    pub fn for_idp_subject(
        owner_secret: &[u8; 32],
        issuer: &str,
        subject: &str,
    ) -> Result<DerivedOwner, EpError> {
        if issuer.is_empty() || subject.is_empty() {
            return Err(EpError::bad_request(
                "an owner derives only from a non-empty IdP issuer and subject",
            ));
        }
        let input = serde_json::Value::from(vec![issuer, subject]).to_string();
        let mac = crate::mac::hmac_sha256(
            owner_secret,
            &[IDP_OWNER_CONTEXT.as_bytes(), input.as_bytes()],
        );
        let mut b32 = data_encoding::BASE32_NOPAD.encode(mac.get(..16).unwrap_or(&mac));
        b32.make_ascii_lowercase();
        Ok(DerivedOwner(OwnerToken(format!(
            "{USER_OWNER_PREFIX}{b32}"
        ))))
    }

    /// Parses a derived owner token, refusing any other owner.
    pub fn parse(s: &str) -> Result<DerivedOwner, EpError> {
        if Self::is_derived(s) {
            Ok(DerivedOwner(OwnerToken(s.to_owned())))
        } else {
            Err(refuse("derived owner", s, "u_ + 26 base32 chars [a-z2-7]"))
        }
    }

    /// Whether `owner` has the derived-owner shape `u_<26 base32>`.
    pub fn is_derived(owner: &str) -> bool {
        has_owner_digest(owner, USER_OWNER_PREFIX)
    }

    pub fn owner(&self) -> &OwnerToken {
        &self.0
    }

    pub fn into_owner(self) -> OwnerToken {
        self.0
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl fmt::Display for DerivedOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An `(owner, actor)` pair. Rows carry the dot form `<owner>.<actor>`; names the dash form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Principal {
    owner: OwnerToken,
    actor: ActorToken,
}

impl Principal {
    pub fn new(owner: OwnerToken, actor: ActorToken) -> Self {
        Principal { owner, actor }
    }

    pub fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    pub fn actor(&self) -> &ActorToken {
        &self.actor
    }

    /// Dot form, used in rows.
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// Dash form.
    pub fn name(&self) -> String {
        format!("{}-{}", self.owner, self.actor)
    }

    /// Parses the dot form, splitting at the first `.`; a second `.` lands in the actor half and
    /// is refused there because `.` is outside the token grammar.
    pub fn parse(s: &str) -> Result<Self, EpError> {
        const GRAMMAR: &str = "<owner>.<actor>, each ^[A-Za-z0-9_]+$ of <= 64 chars";
        Principal::split(s, '.').ok_or_else(|| refuse("principal", s, GRAMMAR))
    }

    /// Parses the dash form ([`Principal::name`]), the `name` of every user JWT the auth
    /// callout mints. Neither half's grammar admits `-` or `.`, so the two forms never read
    /// one string two ways.
    pub fn parse_name(s: &str) -> Result<Self, EpError> {
        const GRAMMAR: &str = "<owner>-<actor>, each ^[A-Za-z0-9_]+$ of <= 64 chars";
        Principal::split(s, '-').ok_or_else(|| refuse("principal name", s, GRAMMAR))
    }

    fn split(s: &str, separator: char) -> Option<Principal> {
        let (owner, actor) = s
            .split_once(separator)
            .filter(|(o, a)| is_word(o) && is_word(a))?;
        Some(Principal {
            owner: OwnerToken(owner.to_owned()),
            actor: ActorToken(actor.to_owned()),
        })
    }

    /// [`Principal::parse`] plus the requirement that the owner is a real owner.
    pub fn parse_real(s: &str) -> Result<Self, EpError> {
        let p = Principal::parse(s)?;
        if !p.owner.is_real_owner() {
            return Err(EpError::bad_request(format!(
                "principal {} is refused: owner {} is not a real owner \
                 (`local`, or `u_`/`p_` + 26 base32 chars [a-z2-7])",
                quote(s),
                quote(p.owner.as_str())
            )));
        }
        Ok(p)
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.owner, self.actor)
    }
}

// ---- Spaces and buckets ---------------------------------------------------------------------

str_newtype! {
    /// A space as given by an operator, trimmed. Strict at our boundary: the trimmed input must
    /// already be its own subject token, so two spaces can never collapse onto one subject.
    SpaceName
}

impl SpaceName {
    pub fn parse(s: &str) -> Result<Self, EpError> {
        let t = s.trim();
        if t.len() > 128 || !is_subject_segment(t) {
            return Err(refuse(
                "space",
                s,
                "^[A-Za-z0-9_-]{1,128}$ (after trimming)",
            ));
        }
        Ok(SpaceName(t.to_owned()))
    }

    /// The subject token; equal to the name by construction.
    pub fn token(&self) -> &str {
        &self.0
    }
}

/// The reference's lenient `token(s)`: trim, replace every char outside `[A-Za-z0-9_-]` with
/// `_`, map an empty result to `_`. This is what the reference does with foreign inputs; it is
/// not injective, so our own boundaries use the strict [`SpaceName`].
pub fn subject_token(s: &str) -> String {
    let t: String = s
        .trim()
        .chars()
        .map(|c| if is_subject_char(c) { c } else { '_' })
        .collect();
    if t.is_empty() {
        "_".to_owned()
    } else {
        t
    }
}

str_newtype! {
    /// A session id: the `eps.<e>.<sessionId>` token of one session's rails (SPEC §13.6).
    SessionId, "session id", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

str_newtype! {
    /// A goal id: the last token of a goal's record keys (`goal.…`, `goalidx.…`), as the
    /// endpoint grammar bounds ids (SPEC §13.2).
    GoalId, "goal id", "[A-Za-z0-9_-]{1,64}",
    |s: &str| (1..=64).contains(&s.len())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub fn space_prefix(space: &SpaceName) -> String {
    format!("cotal.{}", space.token())
}

pub fn auth_bucket(space: &SpaceName) -> String {
    format!("cotal_auth_{}", space.token())
}

pub fn records_bucket(space: &SpaceName) -> String {
    format!("cotal_records_{}", space.token())
}

pub fn admission_bucket(space: &SpaceName) -> String {
    format!("cotal_admission_{}", space.token())
}

pub fn contract_stream(space: &SpaceName) -> String {
    format!("EPC_{}", space.token())
}

/// The JetStream stream backing a KV bucket.
/// The issued-authority evidence store (SPEC §13.15).
pub fn issued_bucket(space: &SpaceName) -> String {
    format!("cotal_issued_{}", space.token())
}

/// The accepted-row store a connected client reads its issued generation from (SPEC §13.15).
pub fn accepted_bucket(space: &SpaceName) -> String {
    format!("cotal_accepted_{}", space.token())
}

/// The actor ledger's replicated store (`init --ledger kv`).
pub fn actors_bucket(space: &SpaceName) -> String {
    format!("cotal_actors_{}", space.token())
}

/// The sessions store the serving managers' redemptions write and this plane reads (SPEC §13.6).
pub fn sessions_bucket(space: &SpaceName) -> String {
    format!("cotal_sessions_{}", space.token())
}

pub fn kv_stream(bucket: &str) -> String {
    format!("KV_{bucket}")
}

// ---- Credential ids, source members, commands -----------------------------------------------

str_newtype! {
    /// A credential-id tail: 1..=256 chars of `.`-separated `[A-Za-z0-9_-]+` segments
    /// (`sha256-<hex>`, `<sessionId>.s`). Never `:`, never an empty segment.
    CredentialId, "credential id", "dot-separated [A-Za-z0-9_-]+ segments, 1..=256 chars",
    |s: &str| s.len() <= 256 && s.split('.').all(is_subject_segment)
}

impl CredentialId {
    /// A fresh credential id in the lifecycle-token form the reference mints root credentials
    /// in (`mintLifecycleUid()`): 160 bits of caller-supplied entropy as base 36.
    pub fn mint(entropy: [u8; 20]) -> Self {
        CredentialId(mint_base36(entropy))
    }

    /// `sha256-<64 lowercase hex>`.
    pub fn from_sha256_hex(digest: &[u8; 32]) -> Self {
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        CredentialId(format!("sha256-{hex}"))
    }
}

str_newtype! {
    /// The minting authority a lifecycle head and a uid reservation name (`managerInstance`,
    /// `mintedBy`; the plane passes `auth-service:<space>`). Audit only, never a key segment, so
    /// its one rule is the reference's: a non-empty string.
    ManagerInstance, "manager instance", "a non-empty string", |s: &str| !s.is_empty()
}

str_newtype! {
    /// A command name: `[a-z0-9-]{1,32}`.
    CommandToken, "command", "^[a-z0-9-]{1,32}$",
    |s: &str| (1..=32).contains(&s.len()) && s.chars().all(|c| is_lower_alnum(c) || c == '-')
}

/// Where a credential came from: `root`, `handle.<issuerKeyId>.<id>` or `session.<sessionId>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceMember {
    Root,
    Handle { issuer_key_id: String, id: String },
    Session { session_id: String },
}

impl SourceMember {
    /// Exactly those arities, every id segment `[A-Za-z0-9_-]+`.
    pub fn parse(s: &str) -> Result<Self, EpError> {
        let ok = is_subject_segment;
        match s.split('.').collect::<Vec<_>>().as_slice() {
            ["root"] => Ok(SourceMember::Root),
            ["handle", k, id] if ok(k) && ok(id) => Ok(SourceMember::Handle {
                issuer_key_id: (*k).to_owned(),
                id: (*id).to_owned(),
            }),
            ["session", sid] if ok(sid) => Ok(SourceMember::Session {
                session_id: (*sid).to_owned(),
            }),
            _ => Err(refuse(
                "source member",
                s,
                "root | handle.<issuerKeyId>.<id> | session.<sessionId>, ids [A-Za-z0-9_-]+",
            )),
        }
    }

    /// The serve-mint rule: [`SourceMember::parse`] with every id segment bounded to 1..=64.
    pub fn parse_bounded(s: &str) -> Result<Self, EpError> {
        let m = SourceMember::parse(s)?;
        let ok = match &m {
            SourceMember::Root => true,
            SourceMember::Handle { issuer_key_id, id } => {
                issuer_key_id.len() <= 64 && id.len() <= 64
            }
            SourceMember::Session { session_id } => session_id.len() <= 64,
        };
        if !ok {
            return Err(refuse(
                "source member",
                s,
                "ids of 1..=64 chars (serve-mint rule)",
            ));
        }
        Ok(m)
    }

    pub fn to_wire(&self) -> String {
        match self {
            SourceMember::Root => "root".to_owned(),
            SourceMember::Handle { issuer_key_id, id } => format!("handle.{issuer_key_id}.{id}"),
            SourceMember::Session { session_id } => format!("session.{session_id}"),
        }
    }
}

impl fmt::Display for SourceMember {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_wire())
    }
}

// ---- Keys -----------------------------------------------------------------------------------

/// KV key builders and parsers. Builders take typed arguments so tokenization happens here and
/// exactly once; parsers take a key back apart so a row can be checked to rebuild its own key.
pub mod keys {
    use super::{
        quote, ActorToken, CredentialId, EndpointName, EndpointToken, GoalId, InstanceId,
        LifecycleUid, OwnerToken,
    };
    use crate::error::EpError;
    use crate::journal::RunId;

    /// `gate.<lifecycleUid>`: the agent family's issuance gate (auth store).
    pub fn agent_gate(uid: &LifecycleUid) -> String {
        format!("gate.{uid}")
    }

    /// `session.<sessionId>`: a redeemed session's row (sessions store, SPEC §13.6).
    pub fn session(id: &super::SessionId) -> String {
        format!("session.{id}")
    }

    /// `cred.<lifecycleUid>.<credentialId>`: the agent family's ledger row (auth store).
    pub fn cred(uid: &LifecycleUid, c: &CredentialId) -> String {
        format!("cred.{uid}.{c}")
    }

    /// `cred.<lifecycleUid>.`: the prefix of a lifecycle's whole credential family (auth store).
    pub fn cred_family_prefix(uid: &LifecycleUid) -> String {
        format!("cred.{uid}.")
    }

    /// `frontier.<lifecycleUid>`: a retired lifecycle's frontier record (records store,
    /// create-only, never deleted).
    pub fn frontier(uid: &LifecycleUid) -> String {
        format!("frontier.{uid}")
    }

    /// `lifecycle.<owner>.<actor>`: an alias's lifecycle head (records store, one unsplit key).
    pub fn lifecycle_head(owner: &OwnerToken, actor: &ActorToken) -> String {
        format!("lifecycle.{owner}.{actor}")
    }

    /// `uid.<lifecycleUid>`: the space-global uid reservation (records store).
    pub fn uid_reservation(uid: &LifecycleUid) -> String {
        format!("uid.{uid}")
    }

    pub fn epgate(e: &EndpointName, i: &InstanceId) -> String {
        format!("epgate.{}.{i}", e.token())
    }

    pub fn epcred(e: &EndpointName, i: &InstanceId, c: &CredentialId) -> String {
        format!("{}{c}", epcred_family_prefix(e, i))
    }

    /// With the trailing dot, so enumerating one instance's credentials cannot match a sibling
    /// instance whose id merely starts with this one's.
    pub fn epcred_family_prefix(e: &EndpointName, i: &InstanceId) -> String {
        format!("epcred.{}.{i}.", e.token())
    }

    /// `svc.<endpointToken>.`: every service record of one endpoint (the trailing dot keeps a
    /// sibling endpoint whose token merely starts with this one's out).
    pub fn svc_endpoint_prefix(e: &EndpointName) -> String {
        format!("svc.{}.", e.token())
    }

    /// `epgate.`: every issuance gate of a space's auth bucket.
    pub const EPGATE_PREFIX: &str = "epgate.";

    pub fn eprepair(e: &EndpointName, i: &InstanceId) -> String {
        format!("eprepair.{}.{i}", e.token())
    }

    pub fn svc_spec(e: &EndpointName, i: &InstanceId) -> String {
        format!("svc.{}.{i}.spec", e.token())
    }

    pub fn svc_status(e: &EndpointName, i: &InstanceId) -> String {
        format!("svc.{}.{i}.status", e.token())
    }

    pub fn govern(e: &EndpointName) -> String {
        format!("govern.{}", e.token())
    }

    /// `renewclean.manager.<instanceId>`: a manager instance's renewal cleanup intent.
    pub fn renewal_intent(i: &InstanceId) -> String {
        format!("renewclean.manager.{i}")
    }

    /// `admission.v1.<endpointToken>.<runId>`.
    pub fn run_admission(e: &EndpointName, run: &RunId) -> String {
        format!("admission.v1.{}.{}", e.token(), run.as_str())
    }

    /// `revoked.v1.<endpointToken>.<runId>`.
    pub fn run_revocation(e: &EndpointName, run: &RunId) -> String {
        format!("revoked.v1.{}.{}", e.token(), run.as_str())
    }

    /// `run.<endpointToken>.<runId>.status`.
    pub fn run_status(e: &EndpointName, run: &RunId) -> String {
        format!("run.{}.{}.status", e.token(), run.as_str())
    }

    /// `goalidx.<endpointToken>.<owner>.<actor>.<uid>.<goalId>`: one in-flight action goal of
    /// an endpoint's reconcile index (records store, one atomic key), keyed by its caller.
    pub fn goal_index(
        e: &EndpointName,
        owner: &OwnerToken,
        actor: &ActorToken,
        uid: &LifecycleUid,
        goal: &GoalId,
    ) -> String {
        format!("{}{actor}.{uid}.{goal}", goal_index_owner_prefix(e, owner))
    }

    /// `goalidx.<endpointToken>.<owner>.`: every index entry one owner's callers hold at an
    /// endpoint (the trailing dot keeps an owner whose token merely starts with this one's out).
    pub fn goal_index_owner_prefix(e: &EndpointName, owner: &OwnerToken) -> String {
        format!("goalidx.{}.{owner}.", e.token())
    }

    /// Refuses `key` as a whole, carrying the inner grammar refusal (if any) as the reason.
    fn bad_key(key: &str, shape: &str, why: Option<EpError>) -> EpError {
        let why = why.map(|e| format!(" ({})", e.message)).unwrap_or_default();
        EpError::bad_request(format!(
            "key {} is refused: it must be {shape}{why}",
            quote(key)
        ))
    }

    fn endpoint_instance(
        key: &str,
        shape: &str,
        tok: &str,
        iid: &str,
    ) -> Result<(EndpointName, InstanceId), EpError> {
        let e = EndpointToken::parse(tok).map_err(|err| bad_key(key, shape, Some(err)))?;
        let i = InstanceId::parse(iid).map_err(|err| bad_key(key, shape, Some(err)))?;
        Ok((e.name(), i))
    }

    pub fn parse_epgate(key: &str) -> Result<(EndpointName, InstanceId), EpError> {
        const SHAPE: &str = "epgate.<endpointToken>.<instanceId>";
        match key.split('.').collect::<Vec<_>>().as_slice() {
            ["epgate", tok, iid] => endpoint_instance(key, SHAPE, tok, iid),
            _ => Err(bad_key(key, SHAPE, None)),
        }
    }

    /// Credential ids may contain dots, so everything after the instance id is the credential.
    pub fn parse_epcred(key: &str) -> Result<(EndpointName, InstanceId, CredentialId), EpError> {
        const SHAPE: &str = "epcred.<endpointToken>.<instanceId>.<credentialId>";
        match key.splitn(4, '.').collect::<Vec<_>>().as_slice() {
            ["epcred", tok, iid, cred] => {
                let (e, i) = endpoint_instance(key, SHAPE, tok, iid)?;
                let c = CredentialId::parse(cred).map_err(|err| bad_key(key, SHAPE, Some(err)))?;
                Ok((e, i, c))
            }
            _ => Err(bad_key(key, SHAPE, None)),
        }
    }

    pub fn parse_eprepair(key: &str) -> Result<(EndpointName, InstanceId), EpError> {
        const SHAPE: &str = "eprepair.<endpointToken>.<instanceId>";
        match key.split('.').collect::<Vec<_>>().as_slice() {
            ["eprepair", tok, iid] => endpoint_instance(key, SHAPE, tok, iid),
            _ => Err(bad_key(key, SHAPE, None)),
        }
    }
}

#[cfg(test)]
mod tests {

    /// Vectors computed with Node's `crypto.createHmac` and `JSON.stringify`, the reference's
    /// own primitives, so the derivation agrees byte for byte (escapes included).
    #[test]
    fn idp_subject_owner_matches_the_reference_derivation() {
        let secret = [7u8; 32];
        let owner = DerivedOwner::for_idp_subject(&secret, "https://idp.example.com", "alice");
        assert_eq!(owner.unwrap().as_str(), "u_t5rpa3ezgd7242dzb74xaxjzsu");
        let escaped = DerivedOwner::for_idp_subject(&secret, "http://127.0.0.1:9", "b\"|\u{e9}\n");
        assert_eq!(escaped.unwrap().as_str(), "u_nnzljla6k46xyszxsigd2s234e");
        assert!(DerivedOwner::for_idp_subject(&secret, "", "alice").is_err());
        assert!(DerivedOwner::for_idp_subject(&secret, "https://idp.example.com", "").is_err());
    }
    use super::*;
    use crate::error::ErrorCode;
    use proptest::prelude::*;

    const IID: &str = "0123456789abcdefghijklmnop";

    fn iid() -> InstanceId {
        InstanceId::parse(IID).unwrap()
    }

    fn name(s: &str) -> EndpointName {
        EndpointName::parse(s).unwrap()
    }

    /// Independent base-36 rendering via u32 limbs (not the byte-array division under test).
    fn base36_by_limbs(entropy: [u8; 20]) -> String {
        let mut limbs: Vec<u64> = entropy
            .chunks(4)
            .map(|c| u64::from(u32::from_be_bytes([c[0], c[1], c[2], c[3]])))
            .collect();
        let mut out = String::new();
        while limbs.iter().any(|&l| l != 0) {
            let mut rem = 0u64;
            for l in limbs.iter_mut() {
                let acc = (rem << 32) | *l;
                *l = acc / 36;
                rem = acc % 36;
            }
            out.insert(0, char::from_digit(rem as u32, 36).unwrap());
        }
        format!("{out:0>26}")
    }

    /// Decodes base 36 back into 20 big-endian bytes (multiply-add), for the bijection check.
    fn decode36(s: &str) -> [u8; 20] {
        let mut n = [0u8; 20];
        for c in s.chars() {
            let mut carry = c.to_digit(36).unwrap();
            for b in n.iter_mut().rev() {
                let acc = u32::from(*b) * 36 + carry;
                *b = (acc & 0xff) as u8;
                carry = acc >> 8;
            }
            assert_eq!(carry, 0);
        }
        n
    }

    #[test]
    fn endpoint_names_and_tokens() {
        let e = name("com.acme.deploy");
        assert_eq!(e.token().as_str(), "com_acme_deploy");
        assert!(e.is_reverse_dns());
        assert!(!name("deploy").is_reverse_dns());
        assert_eq!(e.labels().collect::<Vec<_>>(), ["com", "acme", "deploy"]);
        assert_eq!(e.token().name(), e);
        assert_eq!(EndpointToken::parse("com_acme_deploy").unwrap(), e.token());
        assert!(EndpointToken::parse("com.acme").is_err());
        assert!(EndpointToken::parse("com__acme").is_err());

        let ok64 = format!("a.{}", "b".repeat(62));
        assert_eq!(name(&ok64).token().as_str().len(), 64);
        assert!(EndpointName::parse(&format!("a.{}", "b".repeat(63))).is_err());
        for bad in [
            "", "-a", "a-", "a.-b", "A", "com.Acme", "a_b", "a..b", ".a", "a.", "a b",
        ] {
            let err = EndpointName::parse(bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadRequest, "{bad}");
            assert!(err.message.contains(&format!("{bad:?}")), "{}", err.message);
        }
        assert!(EndpointName::parse("a-b.0-9").is_ok());
    }

    #[test]
    fn long_values_are_truncated_in_messages() {
        let long = "X".repeat(10_000);
        let msg = EndpointName::parse(&long).unwrap_err().message;
        assert!(msg.len() < 300, "{msg}");
        assert!(msg.contains("10000 chars"));
    }

    #[test]
    fn lifecycle_token_lengths() {
        for (len, ok) in [(25, false), (26, true), (32, true), (33, false)] {
            let s = "a".repeat(len);
            assert_eq!(LifecycleUid::parse(&s).is_ok(), ok, "{len}");
            assert_eq!(InstanceId::parse(&s).is_ok(), ok, "{len}");
            assert_eq!(OpId::parse(&s).is_ok(), ok, "{len}");
        }
        assert!(OpId::parse("ABCDEFGHIJKLMNOPQRSTUVWXYZ").is_err());
        assert!(OpId::parse("abcdefghijklmnopqrstuvwxy_").is_err());
        assert_eq!(iid().as_lifecycle_uid().as_str(), IID);
    }

    #[test]
    fn mint_known_values() {
        assert_eq!(OpId::mint([0; 20]).as_str(), "0".repeat(26));
        let mut one = [0u8; 20];
        one[19] = 35;
        assert_eq!(OpId::mint(one).as_str(), format!("{}z", "0".repeat(25)));
        // 2^160 - 1, cross-checked by the limb-based renderer and by decoding back.
        let max = InstanceId::mint([0xff; 20]);
        assert_eq!(max.as_str(), "twj4yidkw7a8pn4g709kzmfoaol3x8f");
        assert_eq!(max.as_str(), base36_by_limbs([0xff; 20]));
        assert_eq!(decode36(max.as_str()), [0xff; 20]);
        assert!(InstanceId::parse(max.as_str()).is_ok());
        // 2^128 - 1 against native u128 arithmetic.
        let (mut e, mut v, mut s) = ([0u8; 20], u128::MAX, String::new());
        e[4..].copy_from_slice(&v.to_be_bytes());
        while v > 0 {
            s.insert(0, char::from_digit((v % 36) as u32, 36).unwrap());
            v /= 36;
        }
        assert_eq!(LifecycleUid::mint(e).as_str(), format!("{s:0>26}"));
    }

    #[test]
    fn a_derived_owner_is_u_plus_26_base32_of_the_key_digest() {
        // Python: "u_" + base64.b32encode(sha256(b"UABC")).lower()[:26]
        let owner = DerivedOwner::derive_from_user_key("UABC");
        assert_eq!(owner.as_str(), "u_hkfd7hzmzykve4ctzwp3634hzk");
        assert!(DerivedOwner::is_derived(owner.as_str()));
        assert!(owner.owner().is_real_owner());
        assert_eq!(owner.owner().as_derived(), Some(owner.clone()));
        assert!(OwnerToken::local().as_derived().is_none());
        let platform = OwnerToken::parse("p_234567abcdefghijklmnopqrst").unwrap();
        assert!(platform.is_real_owner() && platform.as_derived().is_none());
    }

    #[test]
    fn owners_actors_principals() {
        let b32 = "abcdefghijklmnopqrstuvwxyz";
        let real = |s: &str| OwnerToken::parse(s).unwrap().is_real_owner();
        assert!(real(&format!("u_{b32}")));
        assert!(real(&format!("p_{}", "234567abcdefghijklmnopqrst")));
        assert!(real("local") && OwnerToken::local().is_real_owner());
        assert!(!real(&format!("u_{}", &b32[..25])));
        assert!(!real(&format!("u_{b32}a")));
        assert!(!real(&format!("u_{}1", &b32[..25])));
        assert!(!real("alice"));
        assert!(OwnerToken::parse(&"a".repeat(64)).is_ok());
        assert!(OwnerToken::parse(&"a".repeat(65)).is_err());
        assert!(ActorToken::parse("a-b").is_err());
        assert!(ActorToken::parse("").is_err());

        let p = Principal::parse("alice.bot_1").unwrap();
        assert_eq!((p.owner().as_str(), p.actor().as_str()), ("alice", "bot_1"));
        assert_eq!(p.key(), "alice.bot_1");
        assert_eq!(p.name(), "alice-bot_1");
        assert_eq!(p.to_string(), p.key());
        assert_eq!(Principal::parse(&p.key()).unwrap(), p);
        assert_eq!(Principal::parse_name(&p.name()).unwrap(), p);
        assert_eq!(p.name(), "alice-bot_1");
        for bad in ["alice.bot_1", "alice-bot-1", "-bot", "alice-", "a-b.c"] {
            assert!(Principal::parse_name(bad).is_err(), "{bad}");
        }
        for bad in ["a.b.c", ".a", "a.", "a", "a-b", "", "a b.c"] {
            assert!(Principal::parse(bad).is_err(), "{bad}");
        }
        let err = Principal::parse_real("alice.bot").unwrap_err();
        assert!(err.message.contains("not a real owner"), "{}", err.message);
        assert!(Principal::parse_real(&format!("u_{b32}.bot")).is_ok());
        assert!(Principal::parse_real("local.cli").is_ok());
    }

    #[test]
    fn spaces_and_buckets() {
        let s = SpaceName::parse(" prod-1_a ").unwrap();
        assert_eq!((s.as_str(), s.token()), ("prod-1_a", "prod-1_a"));
        assert_eq!(space_prefix(&s), "cotal.prod-1_a");
        assert_eq!(auth_bucket(&s), "cotal_auth_prod-1_a");
        assert_eq!(records_bucket(&s), "cotal_records_prod-1_a");
        assert_eq!(admission_bucket(&s), "cotal_admission_prod-1_a");
        assert_eq!(contract_stream(&s), "EPC_prod-1_a");
        assert_eq!(kv_stream(&auth_bucket(&s)), "KV_cotal_auth_prod-1_a");
        for bad in ["", "   ", "a.b", "a b", "a*", "é"] {
            assert!(SpaceName::parse(bad).is_err(), "{bad}");
        }
        assert!(SpaceName::parse(&"a".repeat(128)).is_ok());
        assert!(SpaceName::parse(&"a".repeat(129)).is_err());
        assert_eq!(subject_token("  a.b c*é "), "a_b_c__");
        assert_eq!(subject_token("   "), "_");
        assert_eq!(subject_token("ok-_1"), "ok-_1");
    }

    #[test]
    fn credential_ids() {
        let c = CredentialId::from_sha256_hex(&[0xab; 32]);
        assert_eq!(c.as_str(), format!("sha256-{}", "ab".repeat(32)));
        assert_eq!(CredentialId::parse(c.as_str()).unwrap(), c);
        assert!(CredentialId::parse("abc.s").is_ok());
        assert!(CredentialId::parse(&"a".repeat(256)).is_ok());
        for bad in ["", "a:b", "a..b", ".a", "a.", "a b", &"a".repeat(257)] {
            assert!(CredentialId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn source_members_and_commands() {
        let (issuer_key_id, id, session_id) = ("k1".to_owned(), "h-2".to_owned(), "s_1".to_owned());
        let h = SourceMember::Handle { issuer_key_id, id };
        let s = SourceMember::Session { session_id };
        for (wire, m) in [
            ("root", SourceMember::Root),
            ("handle.k1.h-2", h),
            ("session.s_1", s),
        ] {
            assert_eq!(SourceMember::parse(wire).unwrap(), m);
            assert_eq!(m.to_wire(), wire);
            assert_eq!(m.to_string(), wire);
        }
        let bad = [
            "",
            "root.x",
            "handle.k",
            "handle.k.i.j",
            "session",
            "session.a.b",
        ];
        for bad in bad
            .into_iter()
            .chain(["session.", "session.a:b", "other.x", "handle..i"])
        {
            assert!(SourceMember::parse(bad).is_err(), "{bad}");
        }
        let long = "a".repeat(65);
        assert!(SourceMember::parse(&format!("session.{long}")).is_ok());
        assert!(SourceMember::parse_bounded(&format!("session.{long}")).is_err());
        assert!(SourceMember::parse_bounded(&format!("handle.k.{long}")).is_err());
        assert!(SourceMember::parse_bounded(&format!("handle.k.{}", &long[1..])).is_ok());

        assert_eq!(CommandToken::parse("re-pair").unwrap().as_str(), "re-pair");
        assert!(CommandToken::parse(&"a".repeat(32)).is_ok());
        for bad in ["", "A", "a_b", &"a".repeat(33)] {
            assert!(CommandToken::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn golden_keys() {
        let e = name("com.acme.deploy");
        let i = iid();
        let c = CredentialId::parse("sess1.s").unwrap();
        let t = format!("com_acme_deploy.{IID}");
        assert_eq!(keys::epgate(&e, &i), format!("epgate.{t}"));
        assert_eq!(keys::epcred(&e, &i, &c), format!("epcred.{t}.sess1.s"));
        assert_eq!(keys::epcred_family_prefix(&e, &i), format!("epcred.{t}."));
        assert_eq!(keys::eprepair(&e, &i), format!("eprepair.{t}"));
        assert_eq!(keys::svc_spec(&e, &i), format!("svc.{t}.spec"));
        assert_eq!(keys::svc_status(&e, &i), format!("svc.{t}.status"));
        assert_eq!(keys::govern(&e), "govern.com_acme_deploy");
    }

    #[test]
    fn key_parsers_round_trip_and_refuse() {
        let e = name("com.acme.deploy");
        let i = iid();
        let c = CredentialId::parse("sess1.s").unwrap();
        let ei = (e.clone(), i.clone());
        assert_eq!(keys::parse_epgate(&keys::epgate(&e, &i)).unwrap(), ei);
        assert_eq!(keys::parse_eprepair(&keys::eprepair(&e, &i)).unwrap(), ei);
        let (pe, pi, pc) = keys::parse_epcred(&keys::epcred(&e, &i, &c)).unwrap();
        assert_eq!((pe, pi, pc), (e.clone(), i.clone(), c));
        let bad = [
            format!("epgate.com_acme_deploy.{IID}.x"),
            "epgate.com_acme_deploy".to_owned(),
            format!("eprepair.com_acme_deploy.{IID}"),
            format!("epgate.com.acme.{IID}"),
            format!("epgate.Com_acme.{IID}"),
            "epgate.com_acme.short".to_owned(),
        ];
        for k in &bad {
            assert!(keys::parse_epgate(k).is_err(), "{k}");
        }
        assert!(keys::parse_eprepair(&format!("eprepair.x.{IID}.y")).is_err());
        assert!(keys::parse_eprepair(&keys::epgate(&e, &i)).is_err());
        assert!(keys::parse_epcred(&keys::epcred_family_prefix(&e, &i)).is_err());
        assert!(keys::parse_epcred(&format!("epcred.x.{IID}")).is_err());
        assert!(keys::parse_epcred(&format!("epcred.x.{IID}.a:b")).is_err());
        assert!(keys::parse_epcred(&format!("epgate.x.{IID}.c")).is_err());
    }

    proptest! {
        #[test]
        fn mint_is_valid_and_injective(a in any::<[u8; 20]>(), b in any::<[u8; 20]>()) {
            let ua = LifecycleUid::mint(a);
            prop_assert!(ua.as_str().len() >= 26);
            prop_assert_eq!(LifecycleUid::parse(ua.as_str()).unwrap(), ua.clone());
            prop_assert_eq!(ua.as_str(), base36_by_limbs(a));
            prop_assert_eq!(decode36(ua.as_str()), a);
            prop_assert_eq!(ua == LifecycleUid::mint(b), a == b);
        }

        #[test]
        fn endpoint_token_round_trips(
            s in "[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?){0,5}"
        ) {
            let e = EndpointName::parse(&s).unwrap();
            let t = e.token();
            prop_assert_eq!(EndpointToken::parse(t.as_str()).unwrap(), t.clone());
            prop_assert_eq!(t.name(), e);
        }
    }
}
