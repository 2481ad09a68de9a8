//! An operator-mode server for tests that mint their own user JWTs: a fresh operator, a system
//! account and one data account with JetStream enabled without limits and one signing key, all
//! handed to the server through a memory-resolver preload (callout-operator-mode §1–§3).

use nkeys::KeyPair;

use cotal_core::jwt::{
    self, AccountLimits, AccountNats, JetStreamLimits, OperatorNats, UnixSeconds, Validity,
};

use super::{HarnessError, NatsServer, ServerOptions};

/// A running operator-mode server and the data account's keys.
#[derive(Debug)]
pub struct OperatorServer {
    pub server: NatsServer,
    /// The data account's identity key pair (`A…`).
    pub account: KeyPair,
    /// The data account's signing key (`A…`), listed in its JWT.
    pub signing: KeyPair,
}

impl OperatorServer {
    /// Starts the server; `now` (unix seconds, the server's wall clock) dates the JWTs, which
    /// never expire.
    pub fn start(now: UnixSeconds) -> Result<OperatorServer, HarnessError> {
        let mint = |r: Result<String, cotal_core::EpError>| {
            r.map_err(|e| HarnessError::new(format!("minting a trust JWT failed: {}", e.message)))
        };
        let forever = Validity {
            issued_at: now,
            expires_at: None,
        };
        let operator = KeyPair::new_operator();
        let system = KeyPair::new_account();
        let account = KeyPair::new_account();
        let signing = KeyPair::new_account();
        let operator_jwt = mint(jwt::operator_jwt(
            &operator,
            "cotal-test-operator",
            &OperatorNats {
                system_account: Some(system.public_key()),
                ..OperatorNats::default()
            },
            forever,
        ))?;
        let system_jwt = mint(jwt::account_jwt(
            &operator,
            &system.public_key(),
            "SYS",
            &AccountNats::default(),
            forever,
        ))?;
        let account_jwt = mint(jwt::account_jwt(
            &operator,
            &account.public_key(),
            "cotal",
            &AccountNats {
                limits: AccountLimits {
                    jetstream: JetStreamLimits::UNLIMITED,
                    ..AccountLimits::default()
                },
                signing_keys: vec![signing.public_key()],
                ..AccountNats::default()
            },
            forever,
        ))?;
        let extra_config = format!(
            "operator: \"{operator_jwt}\"\n\
             system_account: \"{sys}\"\n\
             resolver: MEMORY\n\
             resolver_preload: {{\n  \"{sys}\": \"{system_jwt}\"\n  \"{acct}\": \"{account_jwt}\"\n}}\n",
            sys = system.public_key(),
            acct = account.public_key(),
        );
        let server = NatsServer::start(ServerOptions {
            binary: None,
            extra_config,
        })?;
        Ok(OperatorServer {
            server,
            account,
            signing,
        })
    }
}
