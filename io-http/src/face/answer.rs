//! What a handler answers a door with, and the §3.11 status of each refusal.
//!
//! An [`Answer`] is a status, a JSON body, and one bit the face needs for its budgets: whether
//! it is a **refusal** (the credential or the request was refused after being evaluated) or
//! not (a success, or a malformed request that never reached an authority decision). Only
//! refusals count against a refused budget, and only a refusal turns into 429 when the caller
//! is throttled (§3.4).

use cotal_core::{EpError, ErrorCode};
use hyper::StatusCode;
use serde_json::{json, Value};

use super::routes::Door;

/// A handler's answer to one door request.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    status: StatusCode,
    body: Value,
    refusal: bool,
}

impl Answer {
    /// `200` with `body`.
    pub fn ok(body: Value) -> Answer {
        Answer {
            status: StatusCode::OK,
            body,
            refusal: false,
        }
    }

    /// A refusal with `status` and `{"error": message}`. It counts against a budgeted door's
    /// refused budget, and becomes 429 when the caller is throttled.
    pub fn refused(status: StatusCode, message: impl Into<String>) -> Answer {
        Answer {
            status,
            body: error_body(&message.into()),
            refusal: true,
        }
    }

    /// A refusal of `error` with the door's §3.11 status ([`refusal_status`]).
    pub fn refusal(door: Door, error: &EpError) -> Answer {
        Answer::refused(refusal_status(door, error.code), error.message.clone())
    }

    /// `400` with `{"error": message}` for a malformed request (a shape error): not a
    /// refusal, so never counted and never turned into 429.
    pub fn bad_request(message: impl Into<String>) -> Answer {
        Answer {
            status: StatusCode::BAD_REQUEST,
            body: error_body(&message.into()),
            refusal: false,
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The JSON body.
    pub fn body(&self) -> &Value {
        &self.body
    }

    /// Whether the answer is a refusal (see the module doc).
    pub fn is_refusal(&self) -> bool {
        self.refusal
    }

    pub(crate) fn into_parts(self) -> (StatusCode, Value) {
        (self.status, self.body)
    }
}

/// `{"error": message}`.
pub fn error_body(message: &str) -> Value {
    json!({ "error": message })
}

/// The HTTP status of a refusal with `code` at `door` (§3.11):
///
/// * `/exchange`: every refused exchange is 401 (a refused view on the public face is a 403
///   the handler answers with [`Answer::refused`]), except `unavailable`: the plane could not
///   decide (the IdP's key set cannot be had, a store did not answer), which is a 503 the
///   caller retries, never a refusal of its token.
/// * `/manager-service-authority`: every refusal is 403, whatever its code, except
///   `unavailable` (503, as at the exchange).
/// * verify-enrollment: `permission-denied` 403, `conflict` 409, `failed-precondition` 412,
///   `bad-request` 400, any other code 403 (never 500).
/// * `/managed-lifecycle/retire`: `conflict` 409, anything else 400.
/// * `/interactive-lifecycle/retire`: `not-found` (the actor is not granted) 404, `conflict`
///   (the row is at another lifecycle) 409, anything else 400.
pub const fn refusal_status(door: Door, code: ErrorCode) -> StatusCode {
    match door {
        Door::Exchange | Door::ManagerServiceAuthority
            if matches!(code, ErrorCode::Unavailable) =>
        {
            StatusCode::SERVICE_UNAVAILABLE
        }
        Door::Exchange => StatusCode::UNAUTHORIZED,
        Door::ManagerServiceAuthority => StatusCode::FORBIDDEN,
        Door::VerifyEnrollment => match code {
            ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::FailedPrecondition => StatusCode::PRECONDITION_FAILED,
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            _ => StatusCode::FORBIDDEN,
        },
        Door::ManagedRetire => match code {
            ErrorCode::Conflict => StatusCode::CONFLICT,
            _ => StatusCode::BAD_REQUEST,
        },
        Door::InteractiveRetire => match code {
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::Conflict => StatusCode::CONFLICT,
            _ => StatusCode::BAD_REQUEST,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exchange_and_manager_route_ignore_the_code_but_unavailable() {
        for code in ErrorCode::ALL {
            let (exchange, route) = if code == ErrorCode::Unavailable {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    StatusCode::SERVICE_UNAVAILABLE,
                )
            } else {
                (StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN)
            };
            assert_eq!(refusal_status(Door::Exchange, code), exchange);
            assert_eq!(refusal_status(Door::ManagerServiceAuthority, code), route);
        }
    }

    #[test]
    fn verify_enrollment_maps_its_four_codes_and_never_500s() {
        let status = |code| refusal_status(Door::VerifyEnrollment, code).as_u16();
        assert_eq!(status(ErrorCode::PermissionDenied), 403);
        assert_eq!(status(ErrorCode::Conflict), 409);
        assert_eq!(status(ErrorCode::FailedPrecondition), 412);
        assert_eq!(status(ErrorCode::BadRequest), 400);
        for code in [
            ErrorCode::Internal,
            ErrorCode::Unavailable,
            ErrorCode::Unimplemented,
        ] {
            assert_eq!(status(code), 403);
        }
    }

    #[test]
    fn the_retire_doors() {
        let managed = |code| refusal_status(Door::ManagedRetire, code).as_u16();
        assert_eq!(managed(ErrorCode::Conflict), 409);
        assert_eq!(managed(ErrorCode::NotFound), 400);
        assert_eq!(managed(ErrorCode::Internal), 400);
        let interactive = |code| refusal_status(Door::InteractiveRetire, code).as_u16();
        assert_eq!(interactive(ErrorCode::NotFound), 404);
        assert_eq!(interactive(ErrorCode::Conflict), 409);
        assert_eq!(interactive(ErrorCode::BadRequest), 400);
    }

    #[test]
    fn answers_carry_the_refusal_bit_and_the_error_envelope() {
        let refused = Answer::refusal(Door::Exchange, &EpError::permission_denied("no"));
        assert!(refused.is_refusal());
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(refused.body(), &json!({"error": "no"}));
        let shape = Answer::bad_request("exchange needs { idpToken: string }");
        assert!(!shape.is_refusal());
        assert_eq!(shape.status(), StatusCode::BAD_REQUEST);
        let ok = Answer::ok(json!({"token": "t"}));
        assert!(!ok.is_refusal());
        assert_eq!(ok.status(), StatusCode::OK);
    }
}
