//! The operator's client of a running plane's loopback face: the capability-bearing `POST`s the
//! verbs make to the URL and capability the plane's discovery file names — `login`'s exchange
//! and `actor grant|revoke|retire`'s interactive retire door. The bodies are the ones the doors
//! parse ([`crate::face::exchange`], core's [`RetireTarget`]) and the answers are read back
//! beside the writers that make them.

use std::time::Duration;

use cotal_core::lifecycle::{PlaneRetire, RetireTarget};
use cotal_core::names::SpaceName;
use hyper::StatusCode;
use serde_json::Value;

use crate::face::exchange::{human_ask, Granted};
use crate::face::Door;

/// How long a retirement may take: its barrier freezes, revokes, kicks and verifies (F47).
const RETIRE_WAIT: Duration = Duration::from_secs(40);
/// How long an exchange may take.
const EXCHANGE_WAIT: Duration = Duration::from_secs(15);
/// The largest door answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// A running plane's loopback face, as its discovery file names it.
#[derive(Debug, Clone, Copy)]
pub struct Loopback<'a> {
    /// `http://127.0.0.1:<port>`.
    pub url: &'a str,
    /// The loopback capability.
    pub cap: &'a str,
}

impl Loopback<'_> {
    /// `POST` `body` to `door` with the capability: the status and the JSON body, whatever the
    /// status (a refusal's `{"error"}` is the answer the caller shows).
    async fn post(
        &self,
        door: Door,
        body: &Value,
        wait: Duration,
    ) -> Result<(StatusCode, Value), String> {
        let authorization = format!("Bearer {}", self.cap);
        crate::fetch::post_json(
            &format!("{}{}", self.url, door.path()),
            &[("authorization", &authorization)],
            body,
            wait,
            MAX_ANSWER_BYTES,
        )
        .await
    }

    /// Asks the plane of `space` to retire `target` at its interactive retire door: the gate
    /// frozen, the credentials revoked, the holders kicked and verified gone, then retired
    /// (F47). A face that does not answer is [`PlaneRetire::Unreached`].
    pub async fn retire_interactive(
        &self,
        space: &SpaceName,
        target: &RetireTarget,
    ) -> PlaneRetire {
        match self
            .post(Door::InteractiveRetire, &target.body(), RETIRE_WAIT)
            .await
        {
            Ok((status, answer)) => {
                PlaneRetire::answered(status.is_success(), &status.to_string(), &answer)
            }
            Err(why) => PlaneRetire::unanswered(space, self.url, &why),
        }
    }

    /// A signed-in human's exchange of `idp_token` for a bearer of `actor` (for `ttl_secs`,
    /// else the plane's default): the bearer, or the refusal in one sentence.
    pub async fn exchange(
        &self,
        idp_token: &str,
        actor: &str,
        ttl_secs: Option<u64>,
    ) -> Result<Granted, String> {
        let ask = human_ask(idp_token, actor, ttl_secs);
        let (status, answer) = self.post(Door::Exchange, &ask, EXCHANGE_WAIT).await?;
        if !status.is_success() {
            return Err(format!(
                "the exchange was refused ({status}): {}",
                answer
                    .get("error")
                    .and_then(Value::as_str)
                    .map_or_else(|| answer.to_string(), str::to_owned)
            ));
        }
        Granted::read(&answer)
            .ok_or_else(|| format!("the exchange answered 200 without a bearer: {answer}"))
    }
}
