//! A managed agent's broker durables as real JetStream consumers ([`NatsDurables`]): the
//! [`footprint`](cotal_core::actors::footprint) a provision creates and a deprovision removes,
//! each run on its own short connection whose credential is the core's `provisioner` or
//! target-pinned `deprovisioner` profile — five minutes, the exact rows of that operation and
//! nothing else, so a teardown replayed against a same-alias successor is broker-denied (F4).

use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, Context};
use async_nats::{AuthError, ConnectOptions, HeaderMap};
use cotal_core::actors::footprint::{
    acl_bucket, acl_key, acl_revision, acl_row, check_provision, lifecycle_mailboxes, member_key,
    members_bucket, task_queue, Mailbox,
};
use cotal_core::actors::{DurablesOutcome, DurablesRequest};
use cotal_core::jwt::UnixSeconds;
use cotal_core::names::{LifecycleUid, Principal, SpaceName};
use cotal_core::profiles::{
    deprovisioner, provisioner, Channel, ConnId, DeprovisionerBinding, Profile, ProvisionerBinding,
};
use nkeys::KeyPair;
use serde_json::{json, Value};
use std::sync::Arc;

use crate::authority::DataAccountSigner;
use crate::dial::Dial;

/// The JetStream API's "consumer not found".
const CONSUMER_NOT_FOUND: u64 = 10014;

/// The broker-durables adapter of one space.
#[derive(Debug, Clone)]
pub struct NatsDurables {
    dial: Dial,
    space: SpaceName,
    signer: DataAccountSigner,
    /// The minting authority the short credentials are issued to (the plane's principal).
    holder: Principal,
    timeout: Duration,
}

impl NatsDurables {
    pub fn new(
        servers: impl Into<Dial>,
        space: SpaceName,
        signer: DataAccountSigner,
        holder: Principal,
    ) -> NatsDurables {
        NatsDurables {
            dial: servers.into(),
            space,
            signer,
            holder,
            timeout: Duration::from_secs(5),
        }
    }

    /// Executes one request at `now_ms` (the ACL row's `updatedAt`); every failure is one
    /// sentence naming what could not be done.
    pub async fn execute(&self, request: &DurablesRequest, now_ms: u64) -> DurablesOutcome {
        let done = match request {
            DurablesRequest::Provision {
                principal,
                lifecycle_uid,
                subscribe,
                allow_subscribe,
                role,
            } => {
                self.provision(
                    principal,
                    lifecycle_uid,
                    subscribe,
                    allow_subscribe,
                    role.as_deref(),
                    now_ms,
                )
                .await
            }
            DurablesRequest::Deprovision {
                principal,
                lifecycle_uid,
                member_channels,
            } => {
                self.deprovision(principal, lifecycle_uid, member_channels)
                    .await
            }
        };
        match done {
            Ok(()) => DurablesOutcome::Done,
            Err(why) => DurablesOutcome::Failed(why),
        }
    }

    async fn provision(
        &self,
        principal: &Principal,
        uid: &LifecycleUid,
        subscribe: &[String],
        allow_subscribe: &[String],
        role: Option<&str>,
        now_ms: u64,
    ) -> Result<(), String> {
        check_provision(subscribe, allow_subscribe)
            .map_err(|e| format!("provisioning {principal} at {uid}: {e}"))?;
        let js = self
            .connect("cotal:provisioner", |conn| {
                provisioner(&ProvisionerBinding {
                    space: self.space.clone(),
                    principal: self.holder.clone(),
                    conn: conn.clone(),
                })
            })
            .await?;
        let [dm, dlv] = lifecycle_mailboxes(&self.space, principal, uid);
        ensure_frontier_mailbox(&js, &dm).await?;
        create_mailbox(&js, &dlv, 0).await?;
        self.reissue_acl(&js, principal, uid, allow_subscribe, now_ms)
            .await?;
        if let Some(role) = role {
            create_mailbox(&js, &task_queue(&self.space, role), 0).await?;
        }
        Ok(())
    }

    /// Creates or rewrites the ACL row at its revision, the read ceiling raised to `allow`.
    async fn reissue_acl(
        &self,
        js: &Context,
        principal: &Principal,
        uid: &LifecycleUid,
        allow: &[String],
        now_ms: u64,
    ) -> Result<(), String> {
        let bucket = acl_bucket(&self.space);
        let subject = format!("$KV.{bucket}.{}", acl_key(principal, uid));
        let stream = js
            .get_stream_no_info(format!("KV_{bucket}"))
            .await
            .map_err(|e| format!("binding the ACL bucket {bucket} failed: {e}"))?;
        // A leader-served read: a follower could answer a stale row under the CAS.
        let (revision, expected) = match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(stored) => (
                acl_revision(&stored.payload).unwrap_or(0).saturating_add(1),
                stored.sequence,
            ),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => (1, 0),
            Err(e) => return Err(format!("reading the ACL row {subject} failed: {e}")),
        };
        let mut headers = HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            expected.to_string().as_str(),
        );
        js.publish_with_headers(
            subject.clone(),
            headers,
            acl_row(allow, revision, now_ms).into(),
        )
        .await
        .map_err(|e| format!("writing the ACL row {subject} failed: {e}"))?
        .await
        .map_err(|e| format!("the ACL row {subject} was not acknowledged: {e}"))?;
        Ok(())
    }

    async fn deprovision(
        &self,
        principal: &Principal,
        uid: &LifecycleUid,
        member_channels: &[String],
    ) -> Result<(), String> {
        let channels = member_channels
            .iter()
            .map(|c| Channel::parse(c).map_err(|e| e.message))
            .collect::<Result<Vec<_>, _>>()?;
        let js = self
            .connect("cotal:deprovisioner", |conn| {
                deprovisioner(&DeprovisionerBinding {
                    space: self.space.clone(),
                    principal: self.holder.clone(),
                    conn: conn.clone(),
                    target: principal.clone(),
                    target_uid: uid.clone(),
                    member_channels: channels.clone(),
                })
            })
            .await?;
        // The read ACL first: while it may still be live, the mailboxes stay.
        purge(
            &js,
            &format!(
                "$KV.{}.{}",
                acl_bucket(&self.space),
                acl_key(principal, uid)
            ),
        )
        .await?;
        for mailbox in lifecycle_mailboxes(&self.space, principal, uid) {
            let answer: Value = js
                .request(
                    format!("CONSUMER.DELETE.{}.{}", mailbox.stream, mailbox.name),
                    &json!({}),
                )
                .await
                .map_err(|e| format!("deleting the mailbox {} failed: {e}", mailbox.name))?;
            match api_error(&answer) {
                None | Some(CONSUMER_NOT_FOUND) => {}
                Some(_) => {
                    return Err(format!(
                        "deleting the mailbox {} was refused: {answer}",
                        mailbox.name
                    ))
                }
            }
        }
        for channel in member_channels {
            purge(
                &js,
                &format!(
                    "$KV.{}.{}",
                    members_bucket(&self.space),
                    member_key(channel, principal, uid)
                ),
            )
            .await?;
        }
        Ok(())
    }

    /// One short connection under `profile`'s credential, for a fresh user key.
    async fn connect(
        &self,
        label: &str,
        profile: impl FnOnce(&ConnId) -> Result<Profile, cotal_core::EpError>,
    ) -> Result<Context, String> {
        let user = Arc::new(KeyPair::new_user());
        let conn = ConnId::parse(&user.public_key()).map_err(|e| e.message)?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_err(|_| "the system clock is before 1970".to_owned())?
            .as_secs();
        let jwt = profile(&conn)
            .and_then(|p| {
                p.sign_for(
                    &self.signer.signer,
                    &self.signer.account,
                    &user.public_key(),
                    UnixSeconds(now),
                )
            })
            .map_err(|e| e.message)?
            .jwt;
        let client = self
            .dial
            .apply(ConnectOptions::with_jwt(jwt, move |nonce| {
                let user = Arc::clone(&user);
                async move { user.sign(&nonce).map_err(AuthError::new) }
            }))
            .name(format!("{label}:{}", self.space.token()))
            .custom_inbox_prefix(format!("_INBOX_{conn}"))
            .connection_timeout(self.timeout)
            .max_reconnects(Some(0))
            .connect(self.dial.urls())
            .await
            .map_err(|e| {
                format!(
                    "{label} cannot connect to {}: {}",
                    self.dial.servers(),
                    self.dial.describe(&e)
                )
            })?;
        let mut js = jetstream::new(client);
        js.set_timeout(self.timeout);
        Ok(js)
    }
}

/// The DM mailbox: kept as found when it exists (its frontier never moves); else created to
/// start after the stream's last sequence, read from the stream leader; a create that lost a
/// race to a concurrent one defers to the winner.
async fn ensure_frontier_mailbox(js: &Context, mailbox: &Mailbox) -> Result<(), String> {
    if consumer_exists(js, mailbox).await? {
        return Ok(());
    }
    let info: Value = js
        .request(format!("STREAM.INFO.{}", mailbox.stream), &json!({}))
        .await
        .map_err(|e| format!("reading stream {} failed: {e}", mailbox.stream))?;
    let frontier = info
        .pointer("/state/last_seq")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("stream {} is not readable: {info}", mailbox.stream))?;
    match create_mailbox(js, mailbox, frontier).await {
        Ok(()) => Ok(()),
        Err(e) if consumer_exists(js, mailbox).await.unwrap_or(false) => {
            tracing::debug!("{e}; a concurrent provision created it first");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Whether the mailbox exists: only "consumer not found" is absence (a denial is not).
async fn consumer_exists(js: &Context, mailbox: &Mailbox) -> Result<bool, String> {
    let info: Value = js
        .request(
            format!("CONSUMER.INFO.{}.{}", mailbox.stream, mailbox.name),
            &json!({}),
        )
        .await
        .map_err(|e| format!("reading the mailbox {} failed: {e}", mailbox.name))?;
    match api_error(&info) {
        None => Ok(true),
        Some(CONSUMER_NOT_FOUND) => Ok(false),
        Some(_) => Err(format!(
            "reading the mailbox {} was refused: {info}",
            mailbox.name
        )),
    }
}

/// `CONSUMER.CREATE` of `mailbox` (idempotent for the same configuration).
async fn create_mailbox(js: &Context, mailbox: &Mailbox, frontier: u64) -> Result<(), String> {
    let answer: Value = js
        .request(
            format!(
                "CONSUMER.CREATE.{}.{}.{}",
                mailbox.stream, mailbox.name, mailbox.filter
            ),
            &mailbox.create_body(frontier),
        )
        .await
        .map_err(|e| format!("creating the mailbox {} failed: {e}", mailbox.name))?;
    match api_error(&answer) {
        None => Ok(()),
        Some(_) => Err(format!(
            "creating the mailbox {} was refused: {answer}",
            mailbox.name
        )),
    }
}

/// Purges one KV key (a `PURGE` marker rolling up its history).
async fn purge(js: &Context, subject: &str) -> Result<(), String> {
    let mut headers = HeaderMap::new();
    headers.insert("KV-Operation", "PURGE");
    headers.insert("Nats-Rollup", "sub");
    js.publish_with_headers(subject.to_owned(), headers, Vec::new().into())
        .await
        .map_err(|e| format!("purging {subject} failed: {e}"))?
        .await
        .map_err(|e| format!("the purge of {subject} was not acknowledged: {e}"))?;
    Ok(())
}

/// The JetStream API error code of an answer, if it is an error.
fn api_error(answer: &Value) -> Option<u64> {
    answer
        .get("error")
        .map(|e| e.get("err_code").and_then(Value::as_u64).unwrap_or(0))
}
