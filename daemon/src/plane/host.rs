//! A hosted plane's host incarnation handle (reference §7.2): a platform host registers one
//! incarnation of its reverse-DNS endpoint at every start, reads its gate, and waits for the
//! fence, all through the plane that serves its space. Each call refuses unless the plane is
//! ready (§2.8). Registration runs the core's [`RegisterHostIncarnation`] on a short connection
//! granted exactly that endpoint and instance (`cotal:host-registration:<space>`); the gate is
//! read on the connect reader, and the fence is awaited on a connection of its own whose grant
//! subscribes to that one gate key, so every write of it wakes the wait at once (beyond the
//! reference's 1 s poll, which stays as the fallback).

use cotal_core::error::EpError;
use cotal_core::host::{
    AwaitHostFence, FenceEnd, HostConfig, HostIncarnation, ObserveHostGate, RegisterHostIncarnation,
};
use cotal_core::issuance::{GateObservation, GateRef};
use cotal_core::kv::Store;
use cotal_core::names::{EndpointName, InstanceId, OpId};
use cotal_core::plane_grants::{self, PlaneConnection};
use cotal_io_fs::random;
use cotal_io_nats::host::run_fence_pushed;
use cotal_io_nats::NatsWorld;
use serde_json::Value;

use super::{Plane, Readiness};

/// What every host call of a plane that does not serve answers (reference §2.8).
pub(super) const NOT_READY: &str = "auth-service context is not ready";

impl Plane {
    /// Refuses with `unavailable` unless the plane serves and no close has begun.
    pub(super) fn refuse_unless_ready(&self) -> Result<(), EpError> {
        match *self.readiness.borrow() {
            Readiness::Ready => Ok(()),
            _ => Err(EpError::unavailable(NOT_READY)),
        }
    }

    /// Registers one incarnation of `host` at `instance`: the first commits epoch 0, each later
    /// one the previous + 1, fencing its predecessor (F69). Keeps F61/F62/F67 through the core
    /// ceremony: the host's name authority authorizes exactly its endpoint for owner `local`,
    /// and its gate records `local.host_serve_<instance>`, a principal nothing holds.
    pub async fn register_host_incarnation(
        &self,
        host: &HostConfig,
        instance: &InstanceId,
    ) -> Result<HostIncarnation, EpError> {
        self.refuse_unless_ready()?;
        let (space, endpoint, iid) = (
            host.space.clone(),
            host.endpoint.name().clone(),
            instance.clone(),
        );
        let client = self
            .dialer
            .open(
                PlaneConnection::HostRegistration,
                move |conn| plane_grants::host_registration(&space, conn, &endpoint, &iid),
                self.dialer
                    .options(&[Store::Auth, Store::Records, Store::Contracts], false),
            )
            .await
            .map_err(EpError::unavailable)?;
        let op_id = OpId::mint(random::random_bytes().map_err(EpError::unavailable)?);
        let register = RegisterHostIncarnation {
            host: host.clone(),
            instance: instance.clone(),
            op_id,
        };
        let (registered, closed) = client.run_once(register, |world| world).await;
        report_close(closed);
        registered
    }

    /// The host instance's gate as the leader holds it, `None` when there is none (read-only).
    pub async fn observe_host_gate(
        &self,
        host: &HostConfig,
        instance: &InstanceId,
    ) -> Result<Option<GateObservation>, EpError> {
        self.observe_gate(host.gate(instance)).await
    }

    /// A manager instance's gate `epgate.manager.<instance>` (reference §7.3
    /// `observeManagerGate`: a platform reads its control manager's gate over the context's own
    /// connection), `None` when there is none (read-only).
    pub async fn observe_manager_gate(
        &self,
        instance: &InstanceId,
    ) -> Result<Option<GateObservation>, EpError> {
        let manager = EndpointName::parse("manager")?;
        let space = self.registered.gate.space.clone();
        self.observe_gate(GateRef::new(space, manager, instance.clone()))
            .await
    }

    /// One leader-served read of `gate` on the connect reader, while the plane is ready.
    async fn observe_gate(&self, gate: GateRef) -> Result<Option<GateObservation>, EpError> {
        self.refuse_unless_ready()?;
        let connections = self.connections.lock().await.clone();
        let connections = connections.ok_or_else(|| EpError::unavailable(NOT_READY))?;
        let bound = connections.reader.space()?;
        let observe = ObserveHostGate { gate };
        NatsWorld::new(&bound).run_script(observe).await
    }

    /// Resolves once the incarnation at `process_epoch` is fenced: its gate gone, at another
    /// epoch, or not open (see [`cotal_core::host::host_fenced`]). `bad-request` for an epoch
    /// that is not a safe integer; `unavailable` once the plane stops being ready or a read
    /// fails.
    pub async fn await_host_fence(
        &self,
        host: &HostConfig,
        instance: &InstanceId,
        process_epoch: &Value,
    ) -> Result<FenceEnd, EpError> {
        let gate = host.gate(instance);
        let fence = AwaitHostFence::from_json(gate.clone(), process_epoch)?;
        self.refuse_unless_ready()?;
        let space = host.space.clone();
        let watched = gate.clone();
        let client = self
            .dialer
            .open(
                PlaneConnection::HostFence,
                move |conn| plane_grants::auth_reader_watching(&space, conn, &watched),
                self.dialer.options(&[Store::Auth, Store::Records], false),
            )
            .await
            .map_err(EpError::unavailable)?;
        let mut readiness = self.readiness.subscribe();
        let fenced = tokio::select! {
            fenced = run_fence_pushed(&client, fence) => fenced,
            _ = readiness.wait_for(|r| !r.may_serve()) => {
                Err(EpError::unavailable(NOT_READY))
            }
        };
        report_close(client.close().await);
        fenced
    }
}

fn report_close(closed: Result<(), EpError>) {
    if let Err(e) = closed {
        tracing::warn!("closing a host connection failed: {}", e.message);
    }
}
