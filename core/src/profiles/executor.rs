//! The registration executor: the plane's own one-shot connection for one instance's
//! registration ceremony, serve-mint fence and gate reconciliation.

use super::{
    assemble, inbox, ConnId, Profile, Space, HOST_LIMITS, ONE_SHOT_TTL_SECS,
    RECONCILE_EXECUTOR_TTL_SECS, REGISTRATION_EXECUTOR,
};
use crate::error::EpError;
use crate::names::{keys, EndpointName, InstanceId, Principal, SpaceName};

// ---- registration executor ------------------------------------------------------------------

/// What a registration executor is minted for; only the lifetime differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutorWindow {
    /// A registration or serve-mint window: [`ONE_SHOT_TTL_SECS`].
    Registration,
    /// A gate reconciliation (reference-auth-service §4.7): [`RECONCILE_EXECUTOR_TTL_SECS`].
    Reconcile,
}

/// What a registration executor binds: ONE endpoint instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationExecutorBinding {
    pub space: SpaceName,
    pub principal: Principal,
    pub conn: ConnId,
    pub endpoint: EndpointName,
    pub instance: InstanceId,
    pub window: ExecutorWindow,
}

/// `endpoint-serve-executor` (the registration executor): the plane's own one-shot connection
/// for one instance's registration ceremony and serve-mint fence. Every write names exactly this
/// instance's keys.
///
/// | # | dir | row | why |
/// |---|-----|-----|-----|
/// | 1 | pub | `$JS.API.INFO` | |
/// | 2 | pub | `$KV.cotal_auth_s.epgate.e.iid` | gate provision, freeze/reopen CAS, mint finalize (F19–F23) |
/// | 3 | pub | `$KV.cotal_auth_s.eprepair.e.iid` | the one repair cursor |
/// | 4 | pub | `$KV.cotal_auth_s.epcred.e.iid.>` | the instance's ledger family: stage and revoke (F68) |
/// | 5 | pub | `$KV.cotal_records_s.svc.e.iid.spec`, `….svc.e.iid.status`, `….govern.e` | spec CAS, READY status, governance slot (F63, F64) |
/// | 6 | pub | `P.epc.*` | contract publication, one digest token |
/// | 7 | pub | `$JS.API.DIRECT.GET.EPC_s.P.epc.>`, `$JS.API.DIRECT.GET.EPC_s` | lost-create verify read of an artifact |
/// | 8 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_auth_s` | leader-served gate and row reads (F7; named serve-executor residual of F98) |
/// | 9 | pub | `$JS.API.DIRECT.GET.KV_cotal_records_s.$KV.cotal_records_s.<key>` for the keys of 5 | key-pinned reads |
/// | 10 | pub | `$JS.API.STREAM.MSG.GET.KV_cotal_records_s` | leader-served records reads (F8) |
/// | 11 | sub | `inbox` | |
///
/// Keeps F98: the reference's `CONSUMER.{CREATE,INFO,DELETE}` rows on `KV_cotal_auth_s` are
/// omitted — family enumeration belongs to the sealed scanner.
pub fn registration_executor(b: &RegistrationExecutorBinding) -> Result<Profile, EpError> {
    let ttl = match b.window {
        ExecutorWindow::Registration => ONE_SHOT_TTL_SECS,
        ExecutorWindow::Reconcile => RECONCILE_EXECUTOR_TTL_SECS,
    };
    assemble(
        REGISTRATION_EXECUTOR,
        HOST_LIMITS,
        &b.principal,
        ttl,
        registration_executor_rows(&b.space, &b.endpoint, &b.instance),
        vec![inbox(&b.conn)],
    )
}

/// The publish rows 1–10 of [`registration_executor`], unchecked; the plane's own registration
/// connection ([`crate::plane_grants::auth_registration`]) builds on exactly these.
pub(crate) fn registration_executor_rows(
    space: &SpaceName,
    endpoint: &EndpointName,
    instance: &InstanceId,
) -> Vec<String> {
    let sp = Space::new(space);
    let reg = RegistrationRows::new(&sp, endpoint, instance);
    let mut publish = vec!["$JS.API.INFO".to_owned()];
    publish.extend(reg.gate);
    publish.extend(reg.records);
    publish.extend(reg.contract);
    publish.push(format!("$JS.API.STREAM.MSG.GET.KV_{}", sp.auth));
    publish.extend(reg.record_reads);
    publish
}

/// One instance's registration surface, grouped as both the registration executor and the
/// remote manager's executor emit it ([`super::remote_manager`]). Their tables interleave other
/// rows between the groups, so each builder places the groups; what a group holds is one
/// definition, so the two credentials cannot drift apart on the keys they may write.
pub(super) struct RegistrationRows {
    /// `$KV.cotal_auth_s.epgate.e.iid`, `….eprepair.e.iid`, `….epcred.e.iid.>`: gate provision,
    /// freeze/reopen CAS, the one repair cursor and the instance's ledger family.
    pub(super) gate: [String; 3],
    /// `$KV.cotal_records_s.svc.e.iid.spec`, `….svc.e.iid.status`, `….govern.e`.
    pub(super) records: Vec<String>,
    /// `P.epc.*`, `$JS.API.DIRECT.GET.EPC_s.P.epc.>`, `$JS.API.DIRECT.GET.EPC_s`: contract
    /// publication and its read-back.
    pub(super) contract: [String; 3],
    /// The key-pinned direct reads of the record keys, then the leader-served records read.
    pub(super) record_reads: Vec<String>,
}

impl RegistrationRows {
    pub(super) fn new(sp: &Space, endpoint: &EndpointName, instance: &InstanceId) -> Self {
        let (p, auth, rec) = (&sp.p, &sp.auth, &sp.records);
        let (e, i) = (endpoint.token(), instance);
        let record_keys = [
            keys::svc_spec(endpoint, i),
            keys::svc_status(endpoint, i),
            keys::govern(endpoint),
        ];
        let mut record_reads: Vec<String> = record_keys
            .iter()
            .map(|k| format!("$JS.API.DIRECT.GET.KV_{rec}.$KV.{rec}.{k}"))
            .collect();
        record_reads.push(format!("$JS.API.STREAM.MSG.GET.KV_{rec}"));
        RegistrationRows {
            gate: [
                format!("$KV.{auth}.epgate.{e}.{i}"),
                format!("$KV.{auth}.eprepair.{e}.{i}"),
                format!("$KV.{auth}.epcred.{e}.{i}.>"),
            ],
            records: record_keys
                .iter()
                .map(|k| format!("$KV.{rec}.{k}"))
                .collect(),
            contract: [
                format!("{p}.epc.*"),
                sp.epc_fetch(),
                format!("$JS.API.DIRECT.GET.{}", sp.epc),
            ],
            record_reads,
        }
    }
}
