//! An inbox reachable only by its principal (issue 26 item 1): the binding of a client's inbox
//! nonce to the first principal that connects with it.
//!
//! A client connects with its inbox nonce as the connection name and is granted
//! `_INBOX_<nonce>.>`. The nonce is no secret: it rides every reply subject the client
//! publishes. Without a binding, a second principal who read it off a shared channel could
//! connect under the same name, be granted the same inbox, and receive the first one's replies
//! (its DM-mailbox pulls among them). So the callout binds each nonce, at its first admitted
//! connect, to that connect's principal, and admits a later connect under the nonce only for
//! that principal.
//!
//! Why at connect, and why this row:
//! * A reference client draws its nonce itself, keeps it across reconnects and bearer
//!   renewals, and never sends it to the exchange; the first moment the plane sees a nonce
//!   beside an authenticated principal is the connect, so the binding is made there, and such a
//!   client needs to know nothing about it.
//! * The row `inbox.v1.<token>` (`{"principal":"<owner>.<actor>","version":1}`) lives in the
//!   accepted store (`cotal_accepted_<space>`), beside the accepted rows that are keyed by the
//!   same nonce, written by the same issuing connection. That store is write-once per key on the
//!   server itself (one message per subject, new ones discarded, no delete, no purge, no TTL):
//!   a binding, once written, can be replaced by nobody, this plane included. Its reference rows
//!   are untouched; this only adds keys under a prefix of its own.
//! * A binding never expires. A rule with an age would need a clock shared by the active plane
//!   and its standby, and a bound above the longest life of any connection of the holder; with
//!   no expiry there is no instant at which a live holder's inbox reopens to anyone, across a
//!   plane restart, a standby's takeover or a clock step. What it costs is one row per nonce
//!   ever admitted (a client draws one per process), kept for as long as the store.
//! * Common path, a reconnect: no round trip of its own. A binding never changes once written,
//!   so the plane keeps the ones it has seen ([`KnownBindings`]) and judges a known nonce
//!   without reading it; an unknown one is read beside the credential rows, in the same round
//!   trip. A first connect adds one create-only write; two first connects of different
//!   principals race on it and the server's create decides: exactly one wins, the other reads
//!   the winner back and is refused.
//!
//! Every branch fails closed: an unreadable store, a garbled row or an unsettled write denies.

use std::fmt;
use std::num::NonZeroUsize;

use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::canon::canonicalize;
use crate::error::EpError;
use crate::issued::closed;
use crate::kv::settle::{settle_write, Heard, Settled, Verdict, AMBIGUOUS_WRITE_ATTEMPTS};
use crate::kv::{Entry, KvRequest, ReadOutcome, Store};
use crate::machine::{Ctx, Halt, Script};
use crate::names::Principal;
use crate::profiles::ConnId;

/// The token an inbox binding is keyed by: the first 32 lowercase hex characters of
/// `sha256("cotal.inbox.v1\0" + nonce)`. Hashed, as the accepted token is, so the key's length
/// and alphabet never depend on the client's choice; a domain of its own, so it never equals
/// the accepted token of the same nonce.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InboxToken(String);

impl InboxToken {
    pub fn for_nonce(nonce: &ConnId) -> InboxToken {
        let mut h = Sha256::new();
        h.update(b"cotal.inbox.v1\0");
        h.update(nonce.as_str().as_bytes());
        let mut full: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        full.truncate(32);
        InboxToken(full)
    }

    /// `inbox.v1.<token>` in [`Store::Accepted`].
    pub fn key(&self) -> String {
        format!("inbox.v1.{}", self.0)
    }
}

impl fmt::Display for InboxToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The binding row: canonical JSON `{"principal":"<owner>.<actor>","version":1}`.
pub fn binding_row(principal: &Principal) -> Result<Vec<u8>, EpError> {
    let value = json!({"version": 1, "principal": principal.key()});
    Ok(canonicalize(&value)?.into_bytes())
}

/// Reads a binding row back: a closed record at version 1 naming one principal.
pub fn parse_binding_row(bytes: &[u8]) -> Result<Principal, String> {
    const LABEL: &str = "inbox binding";
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("{LABEL} is not JSON: {e}"))?;
    let m = closed(Some(&value), &["version", "principal"], LABEL)?;
    if m.get("version") != Some(&json!(1)) {
        return Err(format!("{LABEL} has an unsupported version"));
    }
    let principal = m
        .get("principal")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("{LABEL} field principal must be a string"))?;
    Principal::parse(principal).map_err(|e| e.message)
}

/// Binds the connection's inbox nonce to `principal`, or refuses because another principal
/// holds it. Keeps the rule "an inbox is reachable only by its principal": a connect under a
/// nonce is admitted only for the principal bound to it, and the first admitted connect binds
/// it. Round trips: one leader read when the nonce is bound (every reconnect); one more write,
/// plus one read-back per unanswered or lost write, when it is not.
///
/// Run it after every check that can refuse the principal itself (the bearer, the ledger row,
/// the credential), so a connect that is refused anyway never binds a nonce.
#[derive(Debug, Clone)]
pub struct BindInbox {
    pub nonce: ConnId,
    pub principal: Principal,
}

impl BindInbox {
    /// The refusal for a nonce another principal holds: one sentence, naming neither principal
    /// (the caller needs only to draw a new nonce; the holder's name is none of its business).
    fn taken() -> Halt {
        EpError::permission_denied(
            "this connection name is the inbox nonce of another principal; connect under a \
             fresh random nonce of your own",
        )
        .into()
    }

    /// Admits the principal under a nonce bound to `holder`, or refuses: the one comparison a
    /// binding read from the store and a binding kept in [`KnownBindings`] both go through.
    pub fn admits(&self, holder: &Principal) -> Result<(), Halt> {
        if *holder == self.principal {
            Ok(())
        } else {
            Err(Self::taken())
        }
    }

    /// The leader read of the nonce's binding (its first message: the only one the store
    /// keeps). A caller may send it beside reads of its own, then hand its outcome to
    /// [`BindInbox::bind_after`]: a binding is written once and never changes, so the read may
    /// land before or after the others.
    pub fn read_of(nonce: &ConnId) -> KvRequest {
        KvRequest::GetFirst {
            store: Store::Accepted,
            key: InboxToken::for_nonce(nonce).key(),
        }
    }

    /// Judges a read of the binding: `None` when unbound. A deletion marker (the store denies
    /// deletes, so only corruption makes one), a garbled row and an unserved read all refuse: a
    /// binding that cannot be read never admits.
    fn judge(outcome: ReadOutcome, key: &str) -> Result<Option<Principal>, Halt> {
        let entry: Option<Entry> = match outcome {
            ReadOutcome::Entry(entry) => entry,
            ReadOutcome::Unavailable(why) => {
                return Err(EpError::unavailable(format!(
                    "the inbox binding of this connection name could not be read ({why}); \
                     retry shortly"
                ))
                .into())
            }
        };
        match entry {
            None => Ok(None),
            Some(e) if !e.is_put() => Err(EpError::permission_denied(format!(
                "the inbox binding {key} carries a deletion marker; a binding is never removed, \
                 so it admits nobody"
            ))
            .into()),
            Some(e) => parse_binding_row(&e.value).map(Some).map_err(|why| {
                EpError::permission_denied(format!(
                    "the inbox binding {key} is unreadable ({why}); it admits nobody"
                ))
                .into()
            }),
        }
    }

    fn read(&self, cx: &mut Ctx<'_>, key: &str) -> Result<Option<Principal>, Halt> {
        let outcome = cx.get_first(Store::Accepted, key)?;
        Self::judge(outcome, key)
    }

    /// Admits the principal under the nonce from `read` (the outcome of
    /// [`BindInbox::read_of`]): bound to it already, nothing more is sent; unbound, the
    /// binding is created; bound to another principal, refused.
    pub fn bind_after(&self, cx: &mut Ctx<'_>, read: ReadOutcome) -> Result<(), Halt> {
        let key = InboxToken::for_nonce(&self.nonce).key();
        if let Some(holder) = Self::judge(read, &key)? {
            return self.admits(&holder);
        }
        let request = KvRequest::CreateStrict {
            store: Store::Accepted,
            key: key.clone(),
            value: binding_row(&self.principal)?,
        };
        // Any answer but a commit is settled by reading the key back: our principal there is
        // our write (or a concurrent connect of the same principal's, which binds the same);
        // another principal there won the create; an absent key did not move (sent again).
        let settled = settle_write(cx, &request, |cx, heard| {
            if let Heard::NotSent { why, earlier: None } = heard {
                return Err(EpError::unavailable(format!(
                    "the inbox binding of this connection name was not written ({why}); retry \
                     shortly"
                ))
                .into());
            }
            Ok(match self.read(cx, &key)? {
                Some(holder) => Verdict::Settled(holder == self.principal),
                None => Verdict::Unmoved,
            })
        })?;
        match settled {
            Settled::Written(_) | Settled::Judged(true) => Ok(()),
            Settled::Judged(false) => Err(Self::taken()),
            Settled::Exhausted(_) => Err(EpError::unavailable(format!(
                "the inbox binding of this connection name stayed unanswered after \
                 {AMBIGUOUS_WRITE_ATTEMPTS} attempts and reads back absent; retry shortly"
            ))
            .into()),
        }
    }
}

impl Script for BindInbox {
    type Output = ();

    fn run(&self, cx: &mut Ctx<'_>) -> Result<(), Halt> {
        let read = cx.get_first(Store::Accepted, InboxToken::for_nonce(&self.nonce).key())?;
        self.bind_after(cx, read)
    }
}

/// The most bindings a plane keeps: one per client process it admitted, a few hundred bytes
/// each. Past it the least recently admitted nonce is forgotten and read again at its next
/// connect.
pub const KNOWN_BINDINGS: usize = 16_384;

/// The inbox bindings this plane has seen, by connection name. Sound without a read because a
/// binding is write-once: the accepted store keeps one message per key and refuses deletes and
/// purges, so a binding seen once is the binding for as long as the store exists. A forgotten
/// or never-seen nonce is read from the store; a kept one is never trusted over a refusal (it
/// only ever admits the principal the store bound).
#[derive(Debug)]
pub struct KnownBindings {
    kept: lru::LruCache<String, Principal>,
}

impl KnownBindings {
    pub fn new() -> KnownBindings {
        KnownBindings::with_capacity(NonZeroUsize::MIN.saturating_add(KNOWN_BINDINGS - 1))
    }

    pub fn with_capacity(capacity: NonZeroUsize) -> KnownBindings {
        KnownBindings {
            kept: lru::LruCache::new(capacity),
        }
    }

    /// The principal `nonce` is bound to, when this plane has seen it.
    pub fn holder(&mut self, nonce: &str) -> Option<Principal> {
        self.kept.get(nonce).cloned()
    }

    /// Keeps the binding an admitted connect proved (read, written or judged).
    pub fn keep(&mut self, nonce: &str, principal: &Principal) {
        self.kept.put(nonce.to_owned(), principal.clone());
    }

    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }
}

impl Default for KnownBindings {
    fn default() -> Self {
        KnownBindings::new()
    }
}
