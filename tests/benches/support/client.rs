//! An authority connection for a bench on its operator-mode server, shared by the benches that
//! include this file: the data account's signer, the grants the caller names, a 900 s JWT.

use std::sync::Arc;
use std::time::Duration;

use cotal_core::jwt::UserNats;
use cotal_core::names::SpaceName;
use cotal_core::profiles::ConnId;
use cotal_core::EpError;
use cotal_io_nats::{AuthorityClient, DataAccountSigner, SpaceOptions};
use cotal_tests::nats::operator::OperatorServer;
use nkeys::KeyPair;

/// A bench's errors are sentences.
pub fn fail(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Opens `label`'s connection to `space` with `grant`'s permissions and `options`.
pub async fn client(
    live: &OperatorServer,
    space: &SpaceName,
    label: &str,
    grant: impl FnOnce(&ConnId) -> Result<UserNats, EpError>,
    options: SpaceOptions,
) -> Result<AuthorityClient, String> {
    let signer = DataAccountSigner {
        account: live.account.public_key(),
        signer: Arc::new(KeyPair::from_seed(&live.signing.seed().map_err(fail)?).map_err(fail)?),
    };
    AuthorityClient::open(
        &live.server.url(),
        label.to_owned(),
        signer,
        grant,
        Duration::from_secs(900),
        space.clone(),
        options,
    )
    .await
    .map_err(|e| e.message)
}
