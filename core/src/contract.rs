//! Contract artifacts, cluster manifests and cluster documents (SPEC §13.7).
//!
//! An artifact is a JSON document identified by the SHA-256 of its RFC 8785 canonical bytes and
//! stored once, create-only, under `Store::Contracts` at its digest hex. A cluster is published
//! as two artifacts: the cluster *document* and its closure *manifest*
//! `{v:1, root:<document digest>, members:[]}`; the *closure digest* that a service spec names is
//! the digest of the manifest, never of the document. Readers re-prove everything from bytes:
//! the digest, the canonical form, the manifest and the document grammar, so a garbled store
//! never serves. Multi-artifact closures (non-empty `members`) are refused, as the reference does.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::canon::{canonicalize, content_digest, parse_strict, Digest};
use crate::error::EpError;
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{KvRequest, Store};
use crate::ledger::read;
use crate::machine::{ArtifactRead, Ctx, Halt};
use crate::names::CommandToken;
use crate::wire::safe_uint;

/// One artifact rides one message, so documents above this are refused, never chunked.
pub const MAX_ARTIFACT_BYTES: usize = 256 * 1024;

/// The only trait URNs this revision governs (F65); every other trait is vocabulary.
/// Sorted, so per-command governed sets come out sorted.
pub const GOVERNED_TRAIT_URNS: [&str; 2] = ["ai.cotal.guarded", "ai.cotal.priced"];

fn invalid(what: impl AsRef<str>) -> EpError {
    EpError::contract_invalid(format!(
        "cluster document does not validate: {}",
        what.as_ref()
    ))
}

// ---- Artifact bytes -------------------------------------------------------------------------

/// The canonical bytes that identify `value` as an artifact.
pub fn artifact_canonical_bytes(value: &Value) -> Result<Vec<u8>, EpError> {
    canonicalize(value).map(String::into_bytes).map_err(|e| {
        EpError::contract_invalid(format!(
            "the value is not interchangeable I-JSON ({}); only strict I-JSON is a contract \
             artifact",
            e.message
        ))
    })
}

/// Proves `bytes` are an artifact: non-empty, at most [`MAX_ARTIFACT_BYTES`], and exactly the
/// canonical serialization of their own parse, so one value never has two identities. Returns
/// the parsed value; every refusal is `contract-invalid` and says which rule broke.
pub fn verify_artifact_bytes(bytes: &[u8]) -> Result<Value, EpError> {
    if bytes.is_empty() {
        return Err(EpError::contract_invalid(
            "a contract artifact is non-empty canonical JSON; got no bytes",
        ));
    }
    if bytes.len() > MAX_ARTIFACT_BYTES {
        return Err(EpError::contract_invalid(format!(
            "a contract artifact is bounded at {MAX_ARTIFACT_BYTES} bytes (got {}); it cannot \
             ride one message and is never chunked",
            bytes.len()
        )));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|_| EpError::contract_invalid("the artifact is not valid UTF-8"))?;
    let value = parse_strict(text).map_err(|e| {
        EpError::contract_invalid(format!("the artifact is not I-JSON: {}", e.message))
    })?;
    if artifact_canonical_bytes(&value)? != bytes {
        return Err(EpError::contract_invalid(
            "the artifact is not its own RFC 8785 canonical serialization (whitespace, key \
             order or number spelling differ); canonicalize it before publishing",
        ));
    }
    Ok(value)
}

/// Verify-on-read: bytes found under `digest` must hash to it and be a valid artifact. A
/// failure is store corruption (`internal`), not the caller's contract.
fn verify_stored(bytes: &[u8], digest: &Digest) -> Result<Value, EpError> {
    let actual = Digest::of(bytes);
    if actual != *digest {
        return Err(EpError::internal(format!(
            "the contract store holds bytes under {digest} that hash to {actual}; readers \
             verify fetched bytes and fail loud"
        )));
    }
    verify_artifact_bytes(bytes).map_err(|e| e.with_note(format!("stored under {digest}")).stored())
}

// ---- Manifests ------------------------------------------------------------------------------

/// A single-document closure manifest `{v:1, root, members:[]}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClusterManifest {
    pub root: Digest,
}

impl ClusterManifest {
    pub fn new(root: Digest) -> Self {
        ClusterManifest { root }
    }

    pub fn to_value(&self) -> Value {
        serde_json::json!({"v": 1, "root": self.root.to_prefixed(), "members": []})
    }

    /// The manifest's canonical artifact bytes (keys in JCS order).
    pub fn to_bytes(&self) -> Vec<u8> {
        format!(r#"{{"members":[],"root":"{}","v":1}}"#, self.root).into_bytes()
    }

    /// The closure digest: the artifact digest of this manifest.
    pub fn closure_digest(&self) -> Digest {
        Digest::of(&self.to_bytes())
    }
}

/// Verifies a fetched manifest against the closure digest that named it: the digest must match,
/// `v` must be 1, `root` a `sha256:` digest and `members` an empty array.
pub fn verify_cluster_manifest(
    closure: &Digest,
    manifest: &Value,
) -> Result<ClusterManifest, EpError> {
    let actual = content_digest(manifest).map_err(|e| EpError::contract_invalid(e.message))?;
    if actual != *closure {
        return Err(EpError::contract_invalid(format!(
            "cluster manifest does not hash to its closure digest {closure} (content is {actual})"
        )));
    }
    let refuse = |what: &str| EpError::contract_invalid(format!("cluster manifest {what}"));
    let map = manifest
        .as_object()
        .ok_or_else(|| refuse("is not an object"))?;
    if map.get("v").and_then(safe_uint) != Some(1) {
        return Err(refuse("v is not 1"));
    }
    let root = map
        .get("root")
        .and_then(Value::as_str)
        .and_then(|s| Digest::parse_prefixed(s).ok())
        .ok_or_else(|| refuse("root is not a sha256 artifact digest"))?;
    match map.get("members").and_then(Value::as_array) {
        None => Err(refuse("members is not an array")),
        Some(m) if !m.is_empty() => Err(EpError::contract_invalid(format!(
            "cluster closure {closure} has {} member(s); multi-artifact closures are refused, \
             never partially verified",
            m.len()
        ))),
        Some(_) => Ok(ClusterManifest { root }),
    }
}

// ---- Cluster documents ----------------------------------------------------------------------

/// `[a-z0-9][a-z0-9-]{0,62}` labels, 2..=16 of them.
fn is_reverse_dns_urn(s: &str) -> bool {
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    };
    (2..=16).contains(&s.split('.').count()) && s.split('.').all(label)
}

/// `[a-z][a-z0-9._-]{0,63}`.
fn is_capability(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// An authorization mode a targeted command admits (SPEC §13.2; all seven, Q-20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AuthzMode {
    /// `self`: the caller is the target.
    SelfTarget,
    Owner,
    Any,
    Child,
    Ledger,
    Handle,
    Exact,
}

impl AuthzMode {
    pub const ALL: [AuthzMode; 7] = [
        AuthzMode::SelfTarget,
        AuthzMode::Owner,
        AuthzMode::Any,
        AuthzMode::Child,
        AuthzMode::Ledger,
        AuthzMode::Handle,
        AuthzMode::Exact,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            AuthzMode::SelfTarget => "self",
            AuthzMode::Owner => "owner",
            AuthzMode::Any => "any",
            AuthzMode::Child => "child",
            AuthzMode::Ledger => "ledger",
            AuthzMode::Handle => "handle",
            AuthzMode::Exact => "exact",
        }
    }

    pub fn parse(s: &str) -> Option<AuthzMode> {
        AuthzMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// The bounds a journal-class command's canonicalizer refuses beyond; declared, never a constant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionCeiling {
    pub max_bytes: u64,
    pub max_depth: u64,
    pub max_items: u64,
}

/// A command's contract class; only journal-class commands accept submissions, so only they
/// carry (and must carry) an admission ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandClass {
    Ephemeral,
    Journal(AdmissionCeiling),
}

impl CommandClass {
    pub const fn as_str(self) -> &'static str {
        match self {
            CommandClass::Ephemeral => "ephemeral",
            CommandClass::Journal(_) => "journal",
        }
    }

    pub const fn is_journal(self) -> bool {
        matches!(self, CommandClass::Journal(_))
    }
}

/// Whether a command is targeted, and if so the modes it admits (non-empty, unique, in
/// document order): a targeted command admits only these, an untargeted one none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targeting {
    Untargeted,
    Targeted(Vec<AuthzMode>),
}

/// One command's registered declaration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCommand {
    pub class: CommandClass,
    pub targeting: Targeting,
    pub capability: String,
    /// Closure digests of the input and output schema bundles.
    pub input_digest: Digest,
    pub output_digest: Digest,
    /// Unique reverse-DNS trait URNs, in document order.
    pub traits: Vec<String>,
    /// The action composite marker (journal-class only).
    pub action: bool,
    /// Declared only by action commands.
    pub readiness_deadline_ms: Option<u64>,
}

impl ClusterCommand {
    /// The governed traits this command declares: only [`GOVERNED_TRAIT_URNS`], sorted (F65).
    pub fn governed_traits(&self) -> Vec<&'static str> {
        GOVERNED_TRAIT_URNS
            .into_iter()
            .filter(|urn| self.traits.iter().any(|t| t == urn))
            .collect()
    }
}

/// A parsed cluster document `{urn, revision, attributes[], commands[], events[]}`. Attributes
/// and events are carried opaquely; commands are the serve authority.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterDocument {
    pub urn: String,
    pub revision: u64,
    pub attributes: Vec<Value>,
    /// Every declared command, by name (each declared once).
    pub commands: BTreeMap<CommandToken, ClusterCommand>,
    /// Command names in document order: the governance head records commands in the order
    /// the reference meets them, and its idempotent writes compare bytes.
    pub declared_order: Vec<CommandToken>,
    pub events: Vec<Value>,
}

impl ClusterDocument {
    /// Every command with its declaration, in document order.
    pub fn commands_in_order(&self) -> impl Iterator<Item = (&CommandToken, &ClusterCommand)> {
        self.declared_order
            .iter()
            .filter_map(|name| self.commands.get_key_value(name))
    }

    /// Every command with its governed trait set (empty for an ungoverned command, so continuity
    /// can tell a stripped command from a removed one; F65).
    pub fn governed_traits(&self) -> BTreeMap<CommandToken, Vec<&'static str>> {
        self.commands
            .iter()
            .map(|(name, c)| (name.clone(), c.governed_traits()))
            .collect()
    }
}

/// Parses a cluster document at its consuming boundary; every violation is `contract-invalid`.
/// A command name is declared once per document (F66 within one document; across clusters is
/// the registrar's check).
pub fn parse_cluster_document(doc: &Value) -> Result<ClusterDocument, EpError> {
    let o = doc.as_object().ok_or_else(|| invalid("not an object"))?;
    let urn = o
        .get("urn")
        .and_then(Value::as_str)
        .filter(|u| is_reverse_dns_urn(u))
        .ok_or_else(|| invalid("urn is not a reverse-DNS cluster type URN"))?;
    let revision = o
        .get("revision")
        .and_then(safe_uint)
        .ok_or_else(|| invalid("revision is not an unsigned integer"))?;
    let array = |field: &str| {
        o.get(field)
            .and_then(Value::as_array)
            .ok_or_else(|| invalid(format!("{field} is not an array")))
    };
    let attributes = array("attributes")?.clone();
    let events = array("events")?.clone();
    let listed = o
        .get("commands")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| invalid("commands must be a non-empty array"))?;
    let mut commands = BTreeMap::new();
    let mut declared_order = Vec::with_capacity(listed.len());
    for (i, c) in listed.iter().enumerate() {
        let c = c
            .as_object()
            .ok_or_else(|| invalid(format!("commands[{i}] is not an object")))?;
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid(format!("commands[{i}].name is not a string")))?;
        let name = CommandToken::parse(name)
            .map_err(|e| invalid(format!("commands[{i}].name: {}", e.message)))?;
        if name.as_str() == "describe" {
            return Err(invalid(format!(
                "commands[{i}] declares \"describe\", which is reserved and served by the \
                 machinery"
            )));
        }
        if commands.contains_key(&name) {
            return Err(invalid(format!("command {name:?} is declared twice")));
        }
        let command = parse_command(name.as_str(), c)?;
        declared_order.push(name.clone());
        commands.insert(name, command);
    }
    Ok(ClusterDocument {
        declared_order,
        urn: urn.to_owned(),
        revision,
        attributes,
        commands,
        events,
    })
}

fn parse_command(name: &str, c: &Map<String, Value>) -> Result<ClusterCommand, EpError> {
    let refuse = |what: &str| command_refusal(name, what);
    let journal = match c.get("class").and_then(Value::as_str) {
        Some("ephemeral") => false,
        Some("journal") => true,
        _ => return Err(refuse("class is not \"ephemeral\" | \"journal\"")),
    };
    let targeting = match (c.get("targeted"), c.get("modes")) {
        (Some(Value::Bool(false)), None) => Targeting::Untargeted,
        (Some(Value::Bool(false)), Some(_)) => {
            return Err(refuse("is untargeted and must not declare modes"))
        }
        (Some(Value::Bool(true)), modes) => Targeting::Targeted(parse_modes(name, modes)?),
        _ => return Err(refuse("must declare targeted as a boolean")),
    };
    let capability = c
        .get("capability")
        .and_then(Value::as_str)
        .filter(|s| is_capability(s))
        .ok_or_else(|| refuse("capability is not a bounded capability token"))?;
    let digest = |field: &str| {
        c.get(field)
            .and_then(Value::as_str)
            .and_then(|s| Digest::parse_prefixed(s).ok())
            .ok_or_else(|| refuse(&format!("{field} is not a sha256 closure digest")))
    };
    let input_digest = digest("inputDigest")?;
    let output_digest = digest("outputDigest")?;
    let traits = parse_traits(name, c)?;
    // `action` is present-or-absent, never `false`: one spelling per fact.
    let action = match c.get("action") {
        None => false,
        Some(Value::Bool(true)) if journal => true,
        Some(Value::Bool(true)) => return Err(refuse("declares action but is not journal-class")),
        Some(_) => return Err(refuse("action is present but not true")),
    };
    // The ceiling keys on the class, never on the action marker: journal-class is what
    // receives submissions.
    let class = parse_class(name, c, journal)?;
    let readiness_deadline_ms = match c.get("readinessDeadlineMs") {
        None => None,
        Some(_) if !action => {
            return Err(refuse(
                "declares readinessDeadlineMs without the action composite",
            ))
        }
        Some(v) => Some(
            safe_uint(v)
                .ok_or_else(|| refuse("readinessDeadlineMs is not a non-negative safe integer"))?,
        ),
    };
    Ok(ClusterCommand {
        class,
        targeting,
        capability: capability.to_owned(),
        input_digest,
        output_digest,
        traits,
        action,
        readiness_deadline_ms,
    })
}

/// How a command's refusals read: "command \"<name>\" <what>".
fn command_refusal(name: &str, what: &str) -> EpError {
    invalid(format!("command {name:?} {what}"))
}

/// A command's `traits`, when listed: an array of distinct reverse-DNS URNs, in their order.
fn parse_traits(name: &str, c: &Map<String, Value>) -> Result<Vec<String>, EpError> {
    let refuse = |what: &str| command_refusal(name, what);
    let mut traits: Vec<String> = Vec::new();
    if let Some(listed) = c.get("traits") {
        for t in listed
            .as_array()
            .ok_or_else(|| refuse("traits is not an array"))?
        {
            let t = t
                .as_str()
                .filter(|t| is_reverse_dns_urn(t))
                .ok_or_else(|| refuse("declares a trait that is not a reverse-DNS URN"))?;
            if traits.iter().any(|seen| seen == t) {
                return Err(refuse(&format!("declares trait {t:?} twice")));
            }
            traits.push(t.to_owned());
        }
    }
    Ok(traits)
}

/// A command's class with its admission ceiling: a journal-class command declares the three
/// positive bounds, an ephemeral one declares none.
fn parse_class(name: &str, c: &Map<String, Value>, journal: bool) -> Result<CommandClass, EpError> {
    let refuse = |what: &str| command_refusal(name, what);
    match (journal, c.get("admissionCeiling")) {
        (true, Some(Value::Object(ceiling))) => {
            let bound = |f: &str| {
                ceiling
                    .get(f)
                    .and_then(safe_uint)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        refuse(&format!(
                            "admissionCeiling.{f} is not a positive safe integer"
                        ))
                    })
            };
            Ok(CommandClass::Journal(AdmissionCeiling {
                max_bytes: bound("maxBytes")?,
                max_depth: bound("maxDepth")?,
                max_items: bound("maxItems")?,
            }))
        }
        (true, _) => Err(refuse(
            "is journal-class and must declare admissionCeiling {maxBytes, maxDepth, \
             maxItems}",
        )),
        (false, None) => Ok(CommandClass::Ephemeral),
        (false, Some(_)) => Err(refuse("is ephemeral and must not declare admissionCeiling")),
    }
}

fn parse_modes(name: &str, modes: Option<&Value>) -> Result<Vec<AuthzMode>, EpError> {
    let listed = modes
        .and_then(Value::as_array)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "targeted command {name:?} must declare its admitted authorization modes"
            ))
        })?;
    let mut out: Vec<AuthzMode> = Vec::with_capacity(listed.len());
    for m in listed {
        let mode = m
            .as_str()
            .and_then(AuthzMode::parse)
            .ok_or_else(|| invalid(format!("command {name:?} admits unknown mode {m}")))?;
        if out.contains(&mode) {
            return Err(invalid(format!(
                "command {name:?} admits mode {:?} twice",
                mode.as_str()
            )));
        }
        out.push(mode);
    }
    Ok(out)
}

/// Verifies a fetched cluster document against the manifest's root digest, then parses it.
pub fn verify_cluster_root(root: &Digest, doc: &Value) -> Result<ClusterDocument, EpError> {
    let actual = content_digest(doc).map_err(|e| EpError::contract_invalid(e.message))?;
    if actual != *root {
        return Err(EpError::contract_invalid(format!(
            "cluster document does not hash to its manifest root {root} (content is {actual})"
        )));
    }
    parse_cluster_document(doc)
}

// ---- Procedures -----------------------------------------------------------------------------

/// A closure read through the contract store and re-verified from bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedClosure {
    pub closure: Digest,
    pub root: Digest,
    pub document: ClusterDocument,
    /// The document as stored (descriptors inline it verbatim).
    pub raw: Value,
}

/// What reading a closure found; callers map absence and invalidity differently.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadClosure {
    Verified(Box<VerifiedClosure>),
    /// The manifest (`artifact == closure`) or the root document is not published.
    Absent {
        closure: Digest,
        artifact: Digest,
    },
    /// An artifact is present but does not verify: `internal` when its bytes are corrupt,
    /// `contract-invalid` when they are intact but break the manifest or document rules.
    Invalid(EpError),
}

impl ReadClosure {
    /// Registration's reading (§3.10 step 19): an unreadable closure cannot authorize a
    /// governance change (`failed-precondition`); an invalid one keeps its own code.
    pub fn into_registration(self) -> Result<VerifiedClosure, EpError> {
        match self {
            ReadClosure::Verified(v) => Ok(*v),
            ReadClosure::Absent { closure, artifact } => {
                Err(EpError::failed_precondition(format!(
                    "cluster artifact {artifact} of closure {closure} is not published; publish \
                     the closure before registering"
                )))
            }
            ReadClosure::Invalid(e) => Err(e),
        }
    }

    /// Serve-grant authorization's reading (§3.14 step 5): an absent artifact is
    /// `failed-precondition`; an invalid one is registered state gone bad, so `internal`.
    pub fn into_serve_grant(self) -> Result<VerifiedClosure, EpError> {
        match self {
            ReadClosure::Invalid(e) => Err(e.stored()),
            other => other.into_registration(),
        }
    }
}

/// Fetches one artifact's bytes; `None` when nothing is published under `digest`.
fn fetch(cx: &mut Ctx<'_>, digest: &Digest) -> Result<Option<Vec<u8>>, Halt> {
    match cx.read_artifact(*digest)? {
        ArtifactRead::Bytes(bytes) => Ok(bytes),
        ArtifactRead::Unavailable(why) => Err(EpError::unavailable(format!(
            "the contract store could not be read for artifact {digest}: {why}"
        ))
        .into()),
    }
}

/// Why a closure read stopped short.
enum Miss {
    Halt(Halt),
    Absent(Digest),
    Invalid(EpError),
}

impl From<Halt> for Miss {
    fn from(h: Halt) -> Self {
        Miss::Halt(h)
    }
}

fn fetch_verified(cx: &mut Ctx<'_>, digest: &Digest) -> Result<Value, Miss> {
    let bytes = fetch(cx, digest)?.ok_or(Miss::Absent(*digest))?;
    verify_stored(&bytes, digest).map_err(Miss::Invalid)
}

/// Reads the closure `closure` names: its manifest, then its root document, each verified
/// against its digest and canonical form before any rule is read from it (SPEC §13.7
/// verify-on-read). Two effects when the closure is published. The read is memoized once it
/// finished, so the caller's later replays do not verify the closure again.
pub fn read_closure(cx: &mut Ctx<'_>, closure: &Digest) -> Result<ReadClosure, Halt> {
    cx.sub(|cx| read_closure_once(cx, closure))
        .map(|read| ReadClosure::clone(&read))
}

fn read_closure_once(cx: &mut Ctx<'_>, closure: &Digest) -> Result<ReadClosure, Halt> {
    let read = |cx: &mut Ctx<'_>| -> Result<VerifiedClosure, Miss> {
        let manifest = fetch_verified(cx, closure)?;
        let root = verify_cluster_manifest(closure, &manifest)
            .map_err(Miss::Invalid)?
            .root;
        let raw = fetch_verified(cx, &root)?;
        let document = verify_cluster_root(&root, &raw).map_err(Miss::Invalid)?;
        Ok(VerifiedClosure {
            closure: *closure,
            root,
            document,
            raw,
        })
    };
    match read(cx) {
        Ok(v) => Ok(ReadClosure::Verified(Box::new(v))),
        Err(Miss::Halt(h)) => Err(h),
        Err(Miss::Absent(artifact)) => Ok(ReadClosure::Absent {
            closure: *closure,
            artifact,
        }),
        Err(Miss::Invalid(e)) => Ok(ReadClosure::Invalid(e)),
    }
}

/// Publishes one artifact create-only at its digest (SPEC §13.7; artifacts are never rewritten
/// or deleted, F9). Returns the digest and whether this call's write is known to have created
/// it. A lost create is success-by-content once the stored bytes verify against the digest
/// (anything else there is corruption, `internal`); an ambiguous create is settled by reading
/// back, retried (bounded) while the key reads absent.
pub fn publish_artifact(cx: &mut Ctx<'_>, bytes: &[u8]) -> Result<(Digest, bool), Halt> {
    // The strict parse and the hash are memoized: the create and its settling read each replay
    // this script.
    let digest = *cx.once(|| {
        verify_artifact_bytes(bytes)?;
        Ok(Digest::of(bytes))
    })?;
    let key = digest.hex();
    let request = KvRequest::CreateStrict {
        store: Store::Contracts,
        key: key.clone(),
        value: bytes.to_vec(),
    };
    let settled = settle_write(cx, &request, |cx, heard| {
        if let Heard::NotSent { why, .. } = heard {
            return Err(EpError::unavailable(format!(
                "publishing artifact {digest} failed before it was sent: {why}"
            ))
            .into());
        }
        match read(cx, Store::Contracts, &key)? {
            // Our own bytes, verified above, need no second verification.
            Some(entry) if entry.is_put() && entry.value == bytes => Ok(Verdict::Settled(())),
            Some(entry) if entry.is_put() => {
                verify_stored(&entry.value, &digest)?;
                Ok(Verdict::Settled(()))
            }
            Some(entry) => Err(EpError::internal(format!(
                "artifact {digest} carries a {} marker; contract artifacts are never deleted",
                entry.operation.as_str()
            ))
            .into()),
            None if matches!(heard, Heard::Unanswered(_)) => Ok(Verdict::Unmoved),
            None => Err(EpError::internal(format!(
                "the create of artifact {digest} was refused but nothing is recorded there"
            ))
            .into()),
        }
    })?;
    match settled {
        Settled::Written(_) => Ok((digest, true)),
        Settled::Judged(()) => Ok((digest, false)),
        Settled::Exhausted(_) => Err(EpError::unavailable(format!(
            "publishing artifact {digest} stayed ambiguous across {AMBIGUOUS_WRITE_ATTEMPTS} \
             attempts; it may have committed"
        ))
        .into()),
    }
}

/// Validates a cluster document, then publishes it and its manifest; returns the closure
/// digest a service spec names. Tooling for tests and the demo.
pub fn publish_cluster(cx: &mut Ctx<'_>, doc: &Value) -> Result<Digest, Halt> {
    parse_cluster_document(doc)?;
    let (root, _) = publish_artifact(cx, &artifact_canonical_bytes(doc)?)?;
    let manifest = ClusterManifest::new(root);
    let (closure, _) = publish_artifact(cx, &manifest.to_bytes())?;
    Ok(closure)
}

/// The command surface of several closures, keyed by name, with each command declared once
/// across all of them (F66; `failed-precondition` as registration reports it, serve-grant
/// authorization re-labels it `internal`).
pub fn merge_commands<'a>(
    closures: impl IntoIterator<Item = &'a VerifiedClosure>,
) -> Result<BTreeMap<CommandToken, &'a ClusterCommand>, EpError> {
    let mut out = BTreeMap::new();
    for c in closures {
        for (name, command) in &c.document.commands {
            if out.insert(name.clone(), command).is_some() {
                return Err(EpError::failed_precondition(format!(
                    "command {name} is declared in more than one cluster (F66)"
                )));
            }
        }
    }
    Ok(out)
}
