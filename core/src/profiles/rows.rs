//! The row kit every builder shares: the one row checker, the checked allow lists, the profile
//! assembly, and the space-derived names and row shapes several profiles repeat.

use super::binding::{all_chars, id_char};
use super::{principal_tags, ConnId, Profile, RailCaller, MAX_SUBJECT_BYTES};
use crate::error::EpError;
use crate::jwt::{NatsLimits, Permission, Permissions};
use crate::names::{
    admission_bucket, auth_bucket, contract_stream, records_bucket, space_prefix, Principal,
    SpaceName,
};

/// Refuses a row that is not a well-formed NATS subject (or, on the subscribe side, a
/// queue-qualified `"<subject> <queue>"`): too long, an empty token, whitespace, or a wildcard
/// that is not a whole token (`>` only last).
fn check_row(row: &str, queue_ok: bool) -> Result<(), EpError> {
    let refuse = |why: &str| {
        let shown: String = row.chars().take(120).collect();
        Err(EpError::bad_request(format!(
            "permission row {shown:?} is refused: {why}"
        )))
    };
    let (subject, queue) = match row.split_once(' ') {
        Some((s, q)) if queue_ok => (s, Some(q)),
        Some(_) => return refuse("only a subscribe row may carry a queue group"),
        None => (row, None),
    };
    if subject.len() > MAX_SUBJECT_BYTES {
        return refuse(&format!(
            "the subject is {} bytes, over the {MAX_SUBJECT_BYTES}-byte bound",
            subject.len()
        ));
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    let last = tokens.len().saturating_sub(1);
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() {
            return refuse("it has an empty token");
        }
        if t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return refuse("a token carries whitespace");
        }
        let wild = t.contains('*') || t.contains('>');
        if wild && *t != "*" && *t != ">" {
            return refuse("a wildcard must be a whole token");
        }
        if *t == ">" && i != last {
            return refuse("'>' may only be the last token");
        }
    }
    if let Some(q) = queue {
        if q.is_empty() || !all_chars(q, id_char) {
            return refuse("the queue group must be one [A-Za-z0-9_-]+ token");
        }
    }
    Ok(())
}

/// Checks every row and drops repeats (first position wins): the allow-only permissions every
/// profile (and every plane connection grant, [`crate::plane_grants`]) is made of.
pub(crate) fn checked_permissions(
    publish: Vec<String>,
    subscribe: Vec<String>,
) -> Result<Permissions, EpError> {
    Ok(Permissions {
        publish: Permission {
            allow: checked_rows(publish, false)?,
            deny: Vec::new(),
        },
        subscribe: Permission {
            allow: checked_rows(subscribe, true)?,
            deny: Vec::new(),
        },
        response: None,
    })
}

/// Checks every row of one list and drops repeats (first position wins); `queue_ok` admits the
/// subscribe side's queue-qualified form.
pub(super) fn checked_rows(rows: Vec<String>, queue_ok: bool) -> Result<Vec<String>, EpError> {
    let mut out: Vec<String> = Vec::with_capacity(rows.len());
    for row in rows {
        check_row(&row, queue_ok)?;
        if !out.contains(&row) {
            out.push(row);
        }
    }
    Ok(out)
}

/// Checks every row, drops repeats (first position wins) and builds the profile.
pub(super) fn assemble(
    name: &'static str,
    limits: NatsLimits,
    principal: &Principal,
    ttl_seconds: u64,
    publish: Vec<String>,
    subscribe: Vec<String>,
) -> Result<Profile, EpError> {
    Ok(Profile {
        name,
        permissions: checked_permissions(publish, subscribe)?,
        tags: principal_tags(principal),
        ttl_seconds,
        limits,
    })
}

/// The space-derived names every profile builds from.
pub(super) struct Space {
    /// `cotal.<space>`.
    pub(super) p: String,
    /// The space token.
    pub(super) s: String,
    pub(super) auth: String,
    pub(super) records: String,
    pub(super) admission: String,
    pub(super) epc: String,
}

impl Space {
    pub(super) fn new(space: &SpaceName) -> Self {
        Space {
            p: space_prefix(space),
            s: space.token().to_owned(),
            auth: auth_bucket(space),
            records: records_bucket(space),
            admission: admission_bucket(space),
            epc: contract_stream(space),
        }
    }

    /// A per-space stream: `<FAMILY>_<s>`.
    pub(super) fn stream(&self, family: &str) -> String {
        format!("{family}_{}", self.s)
    }

    /// A per-space KV bucket: `cotal_<kind>_<s>`.
    pub(super) fn bucket(&self, kind: &str) -> String {
        format!("cotal_{kind}_{}", self.s)
    }

    /// The contract-store fetch every resolver holds: last-by-subject, subject-confined.
    pub(super) fn epc_fetch(&self) -> String {
        format!("$JS.API.DIRECT.GET.{}.{}.epc.>", self.epc, self.p)
    }
}

pub(crate) fn inbox(conn: &ConnId) -> String {
    format!("_INBOX_{conn}.>")
}

/// Bind-only rows on a pre-created pull durable: info, next, ack — never create or delete.
pub(super) fn bind_rows(stream: &str, durable: &str) -> [String; 3] {
    [
        format!("$JS.API.CONSUMER.INFO.{stream}.{durable}"),
        format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{durable}"),
        format!("$JS.ACK.{stream}.{durable}.>"),
    ]
}

/// The caller's own reply rail: every endpoint's replies to this triple, nonce wildcarded.
pub(super) fn caller_reply_filter(sp: &Space, c: &RailCaller) -> String {
    format!("{}.ep.reply.*.*.*.{c}.*", sp.p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_checker_refuses_malformed_rows() {
        assert!(check_row("a.b.>", false).is_ok());
        assert!(check_row("a.*.c", false).is_ok());
        assert!(check_row("a.b.> q_1", true).is_ok());
        for bad in ["", "a..b", ".a", "a.", "a.>.b", "a.b*", "a.>x", "a b"] {
            assert!(check_row(bad, false).is_err(), "{bad:?}");
        }
        assert!(check_row("a.b.> q", false).is_err());
        assert!(check_row("a.b.> q.x", true).is_err());
        assert!(check_row("a.b.> ", true).is_err());
        let long = format!("a.{}", "b".repeat(MAX_SUBJECT_BYTES));
        let err = check_row(&long, false).unwrap_err();
        assert!(err.message.contains("1024"), "{}", err.message);
    }
}
