//! The plane's self-registration run on its registration connection, stage by stage
//! (`cotal_core::self_registration`; F14, F69): the cluster published and the gate provisioned,
//! the serving registration, then its confirmation by leader read. Each stage's world comes
//! from the caller (its oracle and crash-test hook); the confirmation reads on the bare
//! connection.

use cotal_core::host::{PrepareSelfAuthorized, SelfAuthorizedInstance};
use cotal_core::machine::Replay;
use cotal_core::registration::Registered;
use cotal_core::self_registration::{Stage, Stopped};

use crate::driver::{drive, NatsWorld};
use crate::space::Space;

/// Runs `ceremony`'s three stages on `bound`, each of the first two in a fresh `world()`;
/// `provisioned` hears whether this start provisioned the gate, before the next stage runs.
/// The registration committed, or the stage that stopped it.
pub async fn register_self<'s>(
    bound: &'s Space,
    ceremony: &SelfAuthorizedInstance,
    world: impl Fn() -> NatsWorld<'s>,
    provisioned: impl FnOnce(bool),
) -> Result<Registered, Stopped> {
    let stop = |stage| move |error| Stopped { stage, error };
    let prepared = world().run_script(PrepareSelfAuthorized(ceremony)).await;
    provisioned(prepared.map_err(stop(Stage::Prepare))?);
    let serving = ceremony.serving().map_err(stop(Stage::Request))?;
    let registered = world()
        .run_script(serving)
        .await
        .map_err(stop(Stage::Register))?
        .registered;
    drive(&mut Replay::new(ceremony.confirm(&registered)), bound)
        .await
        .map_err(stop(Stage::Confirm))?;
    Ok(registered)
}
