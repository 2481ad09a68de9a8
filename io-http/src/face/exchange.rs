//! The shape of a `POST /exchange` body (reference §3.5 steps 6–9 and the arms' field checks):
//! which arm it asks for and with what, or the 400 it earns before any credential is looked at.
//! The face-specific rule (a view the public face never serves) is a refusal (403, counted),
//! not a shape error. Fields outside the exchange's are ignored, as the reference ignores them.

use serde_json::{json, Map, Value};

use cotal_core::error::EpError;
use cotal_core::exchange::{AgentSecret, Exchanger, SignedIn};
use cotal_core::jwt::UnixSeconds;
use cotal_core::trust::DaemonMaterial;
use cotal_core::view::View;

use crate::idp_keys::IdpKeys;

use super::routes::Face;

/// Why an exchange body is not served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExchangeShape {
    /// A malformed request: 400, not counted against the budget.
    Malformed(String),
    /// A view the public face never serves: a 403 refusal, counted.
    RefusedView(String),
}

/// What a well-formed exchange asks for: what both arms carry, and the arm.
#[derive(Debug, Clone)]
pub struct ExchangeRequest {
    pub ttl_secs: Option<f64>,
    pub manager_instance_id: Option<String>,
    pub arm: ExchangeArm,
}

/// Who asks.
#[derive(Debug, Clone)]
pub enum ExchangeArm {
    /// A signed-in human: an IdP token for an interactive actor, maybe a view.
    Human {
        idp_token: String,
        actor: String,
        view: Option<String>,
        session_grant: Option<Value>,
    },
    /// An agent: its owner, actor and secret, maybe the `manager-caller` view.
    Agent(AgentSecret),
}

/// The body of a granted exchange: the bearer, the owner it was minted for, its expiry in
/// seconds, and for a `manager-caller` bearer the manager instance it names.
pub fn granted(token: &str, owner: &str, exp: u64, manager_instance: Option<&str>) -> Value {
    let mut body = json!({ "token": token, "owner": owner, "exp": exp });
    if let (Some(instance), Some(o)) = (manager_instance, body.as_object_mut()) {
        o.insert("managerInstanceId".into(), json!(instance));
    }
    body
}

/// A granted exchange's body as its client reads it back ([`granted`]): the bearer, the owner
/// it was minted for and its expiry in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Granted {
    pub token: String,
    pub owner: String,
    pub exp: u64,
}

impl Granted {
    /// The bearer a granted exchange's `answer` carries, or `None` when it carries none.
    pub fn read(answer: &Value) -> Option<Granted> {
        let field = |name: &str| answer.get(name).and_then(Value::as_str).map(str::to_owned);
        Some(Granted {
            token: field("token")?,
            owner: field("owner")?,
            exp: answer.get("exp").and_then(Value::as_u64)?,
        })
    }
}

/// A signed-in human's exchange body, as [`parse`] reads it: `{idpToken, actor, ttlSec?}`.
pub fn human_ask(idp_token: &str, actor: &str, ttl_secs: Option<u64>) -> Value {
    let mut ask = json!({"idpToken": idp_token, "actor": actor});
    if let (Some(ttl), Some(map)) = (ttl_secs, ask.as_object_mut()) {
        map.insert("ttlSec".into(), ttl.into());
    }
    ask
}

impl ExchangeArm {
    /// The arm's token checks, the ones the adapter owns: for a human, a view the exchange
    /// serves, then the IdP token, then the owner its subject derives in the space; an agent's
    /// secret is core's to check against its row.
    pub async fn verify(
        self,
        idp: &IdpKeys,
        material: &DaemonMaterial,
        now: UnixSeconds,
    ) -> Result<Exchanger, EpError> {
        match self {
            ExchangeArm::Human {
                idp_token,
                actor,
                view,
                session_grant,
            } => {
                let view = view.as_deref().map(View::served_at_exchange).transpose()?;
                let identity = idp.verify(&idp_token, now).await?;
                Ok(Exchanger::Human(SignedIn {
                    owner: material.owner_for_idp_subject(&identity.subject)?,
                    token_expires_at: identity.expires_at,
                    actor,
                    view,
                    session_grant,
                }))
            }
            ExchangeArm::Agent(agent) => Ok(Exchanger::Agent(agent)),
        }
    }
}

const BOTH: &str = "exchange takes idpToken (human) OR owner+actorToken (agent), never both";
const HUMAN_NEEDS: &str =
    "exchange needs { idpToken: string, actor: string, ttlSec?: number, view?: string }";
const AGENT_NEEDS: &str =
    "agent exchange needs { owner: string, actor: string, actorToken: string, ttlSec?: number }";
const AGENT_VIEWS: &str = "the managed (agent-secret) exchange never mints elevated views - views \
     ride a signed-in human exchange";
const PUBLIC_VIEWS: &str =
    "elevated views are a loopback operator surface - the public exchange never serves them";

fn malformed(why: &str) -> ExchangeShape {
    ExchangeShape::Malformed(why.to_owned())
}

/// A non-empty string field, `None` when absent; `Err` when present with another type.
fn text(body: &Map<String, Value>, key: &str) -> Result<Option<String>, ()> {
    match body.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(()),
    }
}

/// Reads an exchange body arriving on `face`.
pub fn parse(face: Face, body: &Value) -> Result<ExchangeRequest, ExchangeShape> {
    let Value::Object(body) = body else {
        return Err(malformed(HUMAN_NEEDS));
    };
    let ttl_secs = match body.get("ttlSec") {
        None => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(_) => return Err(malformed("ttlSec must be a number")),
    };
    let view = text(body, "view").map_err(|()| malformed("view must be a string when present"))?;
    let session_grant = body.get("sessionGrant").cloned();
    if (view.as_deref() == Some("session-caller")) != session_grant.is_some() {
        return Err(malformed(
            "sessionGrant rides exactly the session-caller view: send both or neither",
        ));
    }
    let manager_instance_id = text(body, "managerInstanceId")
        .map_err(|()| malformed("managerInstanceId must be a string when present"))?;
    if manager_instance_id.is_some() && view.as_deref() != Some("manager-caller") {
        return Err(malformed(
            "managerInstanceId rides only the manager-caller view",
        ));
    }
    if face == Face::Public {
        let served = view
            .as_deref()
            .is_none_or(|v| View::parse(v).is_some_and(View::on_public_exchange));
        if !served {
            return Err(ExchangeShape::RefusedView(PUBLIC_VIEWS.to_owned()));
        }
    }
    let field = |key: &str, needs: &str| {
        text(body, key)
            .map_err(|()| malformed(needs))
            .map(|v| v.filter(|s| !s.is_empty()))
    };
    let idp_token = body.get("idpToken");
    let actor_token = body.get("actorToken");
    if idp_token.is_some() && actor_token.is_some() {
        return Err(malformed(BOTH));
    }
    if actor_token.is_some() {
        let manager_caller = match view.as_deref() {
            None => false,
            Some("manager-caller") => true,
            Some(_) => return Err(malformed(AGENT_VIEWS)),
        };
        let (Some(owner), Some(actor), Some(secret)) = (
            field("owner", AGENT_NEEDS)?,
            field("actor", AGENT_NEEDS)?,
            field("actorToken", AGENT_NEEDS)?,
        ) else {
            return Err(malformed(AGENT_NEEDS));
        };
        return Ok(ExchangeRequest {
            ttl_secs,
            manager_instance_id,
            arm: ExchangeArm::Agent(AgentSecret {
                owner,
                actor,
                secret,
                manager_caller,
            }),
        });
    }
    let (Some(idp_token), Some(actor)) = (
        field("idpToken", HUMAN_NEEDS)?,
        field("actor", HUMAN_NEEDS)?,
    ) else {
        return Err(malformed(HUMAN_NEEDS));
    };
    Ok(ExchangeRequest {
        ttl_secs,
        manager_instance_id,
        arm: ExchangeArm::Human {
            idp_token,
            actor,
            view,
            session_grant,
        },
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn shape(face: Face, body: Value) -> ExchangeShape {
        parse(face, &body).unwrap_err()
    }

    /// The client's body is the one the door reads as a human's; a granted answer reads back
    /// as the bearer it carries, and an answer without one reads as none.
    #[test]
    fn a_clients_ask_and_the_granted_answer_round_trip() {
        for ttl in [None, Some(60)] {
            let request = parse(Face::Loopback, &human_ask("t", "alice", ttl)).unwrap();
            assert_eq!(request.ttl_secs, ttl.map(|t| t as f64));
            let ExchangeArm::Human {
                idp_token, actor, ..
            } = request.arm
            else {
                panic!("a human's ask is the human arm");
            };
            assert_eq!((idp_token.as_str(), actor.as_str()), ("t", "alice"));
        }
        let granted = Granted::read(&granted("b", "u_o", 7, Some("m"))).unwrap();
        assert_eq!(
            granted,
            Granted {
                token: "b".into(),
                owner: "u_o".into(),
                exp: 7
            }
        );
        assert_eq!(Granted::read(&json!({"token": "b", "owner": "u_o"})), None);
    }

    #[test]
    fn remote_exchange_shape_cells() {
        let l = Face::Loopback;
        assert_eq!(
            shape(l, json!({"idpToken": "t", "actorToken": "s", "actor": "a"})),
            malformed(BOTH)
        );
        assert_eq!(shape(l, json!({"pad": "x"})), malformed(HUMAN_NEEDS));
        assert_eq!(shape(l, json!([1])), malformed(HUMAN_NEEDS));
        assert_eq!(
            shape(l, json!({"idpToken": "t", "actor": "a", "ttlSec": "9"})),
            malformed("ttlSec must be a number")
        );
        assert_eq!(
            shape(
                l,
                json!({"owner": "o", "actor": "a", "actorToken": "s", "view": "channel-writer"})
            ),
            malformed(AGENT_VIEWS)
        );
        assert_eq!(
            shape(l, json!({"owner": "o", "actor": "", "actorToken": "s"})),
            malformed(AGENT_NEEDS)
        );
        assert!(matches!(
            shape(l, json!({"idpToken": "t", "actor": "a", "view": "session-caller"})),
            ExchangeShape::Malformed(m) if m.contains("sessionGrant")
        ));
        assert!(matches!(
            shape(l, json!({"idpToken": "t", "actor": "a", "managerInstanceId": "x"})),
            ExchangeShape::Malformed(m) if m.contains("manager-caller")
        ));
        assert!(matches!(
            parse(
                l,
                &json!({"owner": "o", "actor": "a", "actorToken": "s", "view": "manager-caller"})
            ),
            Ok(ExchangeRequest {
                arm: ExchangeArm::Agent(AgentSecret {
                    manager_caller: true,
                    ..
                }),
                ..
            })
        ));
    }

    #[test]
    fn the_public_face_serves_only_its_views() {
        let p = Face::Public;
        for refused in [
            "purger",
            "admin",
            "deployer",
            "manager-service",
            "no-such-view",
        ] {
            assert_eq!(
                shape(p, json!({"idpToken": "t", "actor": "a", "view": refused})),
                ExchangeShape::RefusedView(PUBLIC_VIEWS.to_owned()),
                "{refused}"
            );
        }
        assert!(parse(
            p,
            &json!({"idpToken": "t", "actor": "a", "view": "channel-writer"})
        )
        .is_ok());
        assert!(parse(p, &json!({"idpToken": "t", "actor": "a"})).is_ok());
        assert!(parse(
            Face::Loopback,
            &json!({"idpToken": "t", "actor": "a", "view": "purger"})
        )
        .is_ok());
    }
}
