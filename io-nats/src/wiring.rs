//! A [`NatsWorld`]'s set-up in one expression: the scanner a store's listings ride, the liveness
//! oracle as prober and evictor, the crash-test hook, and running a script to its end. The
//! plane's doors each wire a world this way ("on connection X, listings on scanner Y, eviction
//! verified by the oracle"); the builder keeps that sentence one line at every site.

use std::sync::Arc;

use cotal_core::kv::Store;
use cotal_core::machine::{Replay, Script};
use cotal_core::EpError;

use crate::authority::AuthorityClient;
use crate::driver::NatsWorld;
use crate::liveness::Oracle;
use crate::space::{SendHook, Space};

impl<'s> NatsWorld<'s> {
    /// Runs every key listing of `store` on `scanner` (see [`NatsWorld::set_scanner`]).
    pub fn scanning(mut self, store: Store, scanner: &'s Space) -> Self {
        self.set_scanner(store, scanner);
        self
    }

    /// Runs every request of each of `stores` on `space` (see [`NatsWorld::route`]).
    pub fn routes(self, stores: &[Store], space: &'s Space) -> Self {
        stores
            .iter()
            .fold(self, |world, store| world.route(*store, space))
    }

    /// Answers liveness probes and evictions with `oracle`: the servers' own listing and
    /// verified kick (F68: eviction counts only once a complete sweep shows the holder gone).
    pub fn with_oracle(mut self, oracle: &Arc<Oracle>) -> Self {
        self.set_evictor(oracle.evictor());
        self.set_prober(oracle.prober());
        self
    }

    /// Answers the plane claim's probe of a held row with `oracle`: the servers' own listing of
    /// the prior scanner connections, gone only under a complete sweep.
    pub fn probing_planes(mut self, oracle: &Arc<Oracle>) -> Self {
        self.set_plane_prober(oracle.plane_prober());
        self
    }

    /// Installs `hook` around every write's publish (see [`NatsWorld::set_send_hook`]).
    pub fn hooked(mut self, hook: Option<SendHook>) -> Self {
        self.set_send_hook(hook);
        self
    }

    /// Runs `script` to its end in this world.
    pub async fn run_script<S: Script>(&mut self, script: S) -> Result<S::Output, EpError> {
        self.run(&mut Replay::new(script)).await
    }
}

impl AuthorityClient {
    /// Runs `script` on this connection's current binding, in the world `wire` sets up.
    pub async fn run_on<S: Script>(
        &self,
        script: S,
        wire: impl FnOnce(NatsWorld<'_>) -> NatsWorld<'_>,
    ) -> Result<S::Output, EpError> {
        let bound = self.space()?;
        wire(NatsWorld::new(&bound)).run_script(script).await
    }

    /// A short-lived connection's one job: runs `script` on this connection, in the world
    /// `wire` sets up, then closes the connection whatever the outcome. The script's result,
    /// then the close's own.
    pub async fn run_once<S: Script>(
        self,
        script: S,
        wire: impl FnOnce(NatsWorld<'_>) -> NatsWorld<'_>,
    ) -> (Result<S::Output, EpError>, Result<(), EpError>) {
        let result = match self.space() {
            Ok(bound) => wire(NatsWorld::new(&bound)).run_script(script).await,
            Err(e) => Err(e),
        };
        (result, self.close().await)
    }
}
