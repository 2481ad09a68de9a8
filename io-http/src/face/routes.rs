//! The closed route tables of the two faces (§3.2, §3.3).
//!
//! A route is found by the **exact** request-target string: no normalisation, no prefix
//! matching, no query stripping. So `/health?x`, `/health/`, `/..%2f`, `/toString` and
//! `/constructor` are simply not in the table and answer 404 (the reference keys a `Map`, not an
//! object, for the same reason: a prototype-chain name must never resolve to a handler).

use std::borrow::Cow;
use std::fmt;

use hyper::{Method, Uri};

/// `GET /health` (any method on the loopback face).
pub const HEALTH_PATH: &str = "/health";
/// `GET /jwks`: the issuer's public key set.
pub const JWKS_PATH: &str = "/jwks";
/// `POST /exchange`: the token exchange (§3.5).
pub const EXCHANGE_PATH: &str = "/exchange";
/// `POST /manager-service-authority` (§3.7), served by both faces.
pub const MANAGER_SERVICE_AUTHORITY_PATH: &str = "/manager-service-authority";
/// `POST /manager-service-authority/verify-enrollment` (§3.8), loopback only.
pub const VERIFY_ENROLLMENT_PATH: &str = "/manager-service-authority/verify-enrollment";
/// `POST /interactive-lifecycle/retire` (§3.9), loopback only.
pub const INTERACTIVE_RETIRE_PATH: &str = "/interactive-lifecycle/retire";
/// `POST /managed-lifecycle/retire` (§3.9, #2070), loopback only.
pub const MANAGED_RETIRE_PATH: &str = "/managed-lifecycle/retire";
/// `GET /metrics`: the plane's metrics in the OpenMetrics text format, loopback face only.
pub const METRICS_PATH: &str = "/metrics";
/// `GET /.well-known/cotal-mesh`: the discovery bundle, public face only.
pub const MESH_BUNDLE_PATH: &str = "/.well-known/cotal-mesh";

/// The request-target string a route is looked up by. For the usual origin form that is the
/// path and query exactly as sent; an absolute-form target (`http://host/health`) keeps its
/// scheme and authority, so it matches nothing, as it would not in the reference. (hyper drops
/// a `#fragment` while parsing; a fragment is not part of a request target in HTTP/1.1.)
pub fn request_target(uri: &Uri) -> Cow<'_, str> {
    match (uri.scheme(), uri.authority(), uri.path_and_query()) {
        (None, None, Some(path_and_query)) => Cow::Borrowed(path_and_query.as_str()),
        _ => Cow::Owned(uri.to_string()),
    }
}

/// Which of the two listeners a request arrived on. Each has its own route table and budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Face {
    /// Always on, capability-guarded, 127.0.0.1.
    Loopback,
    /// Optional, no capability, per-peer budgets, behind the operator's reverse proxy.
    Public,
}

impl Face {
    /// The face's route table, in the order its 404 sentence lists the paths.
    pub const fn routes(self) -> &'static [Route] {
        match self {
            Face::Loopback => &[
                Route::Health,
                Route::Jwks,
                Route::Door(Door::Exchange),
                Route::Door(Door::ManagerServiceAuthority),
                Route::Door(Door::VerifyEnrollment),
                Route::Door(Door::InteractiveRetire),
                Route::Door(Door::ManagedRetire),
                Route::Metrics,
            ],
            Face::Public => &[
                Route::Health,
                Route::Jwks,
                Route::Door(Door::Exchange),
                Route::Door(Door::ManagerServiceAuthority),
                Route::MeshBundle,
            ],
        }
    }

    /// The route whose path is exactly `target`, if this face serves one.
    pub fn lookup(self, target: &str) -> Option<Route> {
        self.routes().iter().copied().find(|r| r.path() == target)
    }

    /// The 404 sentence: `unknown path - ` and the face's paths, comma-separated.
    pub fn unknown_path_message(self) -> String {
        let paths: Vec<&str> = self.routes().iter().map(|r| r.path()).collect();
        format!("unknown path - {}", paths.join(", "))
    }

    /// Lower-case name for logs.
    pub const fn name(self) -> &'static str {
        match self {
            Face::Loopback => "loopback",
            Face::Public => "public",
        }
    }
}

impl fmt::Display for Face {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry of a route table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `/health`.
    Health,
    /// `/jwks`.
    Jwks,
    /// `/.well-known/cotal-mesh`.
    MeshBundle,
    /// `/metrics` (loopback only: metrics name the plane's internals).
    Metrics,
    /// A POST route whose body goes to the [`crate::face::FaceHandler`].
    Door(Door),
}

impl Route {
    /// The exact path string the route answers.
    pub const fn path(self) -> &'static str {
        match self {
            Route::Health => HEALTH_PATH,
            Route::Jwks => JWKS_PATH,
            Route::MeshBundle => MESH_BUNDLE_PATH,
            Route::Metrics => METRICS_PATH,
            Route::Door(door) => door.path(),
        }
    }

    /// Which methods reach the route on `face`. The loopback `/health` takes any method (a
    /// readiness probe should not care); on the public face every GET route is GET only.
    pub const fn methods(self, face: Face) -> MethodRule {
        match (self, face) {
            (Route::Health, Face::Loopback) => MethodRule::Any,
            (Route::Health | Route::Jwks | Route::MeshBundle | Route::Metrics, _) => {
                MethodRule::GetOnly
            }
            (Route::Door(_), _) => MethodRule::PostOnly,
        }
    }
}

/// The method discipline of a route: a route that exists never means "any verb reaches it".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodRule {
    /// Every method is served.
    Any,
    /// Only `GET`; anything else (`HEAD` included, as in the reference) is 405 `GET only`.
    GetOnly,
    /// Only `POST`; anything else is 405 `POST only`.
    PostOnly,
}

impl MethodRule {
    /// Whether `method` reaches the route.
    pub fn admits(self, method: &Method) -> bool {
        match self {
            MethodRule::Any => true,
            MethodRule::GetOnly => method == Method::GET,
            MethodRule::PostOnly => method == Method::POST,
        }
    }
}

/// The POST routes ("doors"): each hands a guarded JSON body to the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Door {
    /// `/exchange`: IdP token or agent secret → bearer (§3.5). Budgeted.
    Exchange,
    /// `/manager-service-authority` (§3.7). Budgeted like the exchange (§3.4 "Newer").
    ManagerServiceAuthority,
    /// `/manager-service-authority/verify-enrollment` (§3.8), loopback only.
    VerifyEnrollment,
    /// `/interactive-lifecycle/retire` (§3.9), loopback only.
    InteractiveRetire,
    /// `/managed-lifecycle/retire` (§3.9), loopback only.
    ManagedRetire,
}

impl Door {
    /// The exact path string of the door.
    pub const fn path(self) -> &'static str {
        match self {
            Door::Exchange => EXCHANGE_PATH,
            Door::ManagerServiceAuthority => MANAGER_SERVICE_AUTHORITY_PATH,
            Door::VerifyEnrollment => VERIFY_ENROLLMENT_PATH,
            Door::InteractiveRetire => INTERACTIVE_RETIRE_PATH,
            Door::ManagedRetire => MANAGED_RETIRE_PATH,
        }
    }

    /// Whether the door's refusals count against the face's refused budget and turn into 429
    /// once the caller is throttled (§3.4). The host doors answer decisions, not credential
    /// probes, so their refusals are answered as they are.
    pub const fn budgeted(self) -> bool {
        matches!(self, Door::Exchange | Door::ManagerServiceAuthority)
    }
}

impl fmt::Display for Door {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_path_resolves_to_itself() {
        for face in [Face::Loopback, Face::Public] {
            for route in face.routes() {
                assert_eq!(face.lookup(route.path()), Some(*route));
            }
        }
    }

    #[test]
    fn lookup_is_exact_string_equality() {
        for target in [
            "",
            "/",
            "/health/",
            "/health?",
            "/health?x=1",
            "/HEALTH",
            "/exchange/",
            "/manager-service-authority/",
            "/.well-known/",
            "/..%2f",
            "/toString",
            "/constructor",
            "/__proto__",
            "//health",
            "/health#x",
            "http://127.0.0.1/health",
            "*",
        ] {
            assert_eq!(Face::Loopback.lookup(target), None, "{target}");
            assert_eq!(Face::Public.lookup(target), None, "{target}");
        }
    }

    #[test]
    fn the_bundle_is_public_and_the_host_doors_are_loopback() {
        assert_eq!(Face::Loopback.lookup(MESH_BUNDLE_PATH), None);
        assert_eq!(
            Face::Public.lookup(MESH_BUNDLE_PATH),
            Some(Route::MeshBundle)
        );
        for door in [
            Door::VerifyEnrollment,
            Door::InteractiveRetire,
            Door::ManagedRetire,
        ] {
            assert_eq!(Face::Public.lookup(door.path()), None);
            assert_eq!(Face::Loopback.lookup(door.path()), Some(Route::Door(door)));
        }
        for door in [Door::Exchange, Door::ManagerServiceAuthority] {
            assert_eq!(Face::Public.lookup(door.path()), Some(Route::Door(door)));
        }
    }

    #[test]
    fn unknown_path_sentences_list_each_face_table() {
        assert_eq!(
            Face::Public.unknown_path_message(),
            "unknown path - /health, /jwks, /exchange, /manager-service-authority, \
             /.well-known/cotal-mesh"
        );
        assert_eq!(
            Face::Loopback.unknown_path_message(),
            "unknown path - /health, /jwks, /exchange, /manager-service-authority, \
             /manager-service-authority/verify-enrollment, /interactive-lifecycle/retire, \
             /managed-lifecycle/retire, /metrics"
        );
    }

    #[test]
    fn request_targets_keep_queries_and_absolute_forms() {
        let target = |raw: &str| request_target(&raw.parse::<Uri>().unwrap()).into_owned();
        assert_eq!(target("/health"), "/health");
        assert_eq!(target("/health?x=1"), "/health?x=1");
        assert_eq!(target("/health?"), "/health?");
        assert_eq!(target("/..%2f"), "/..%2f");
        assert_eq!(
            target("http://127.0.0.1:8080/health"),
            "http://127.0.0.1:8080/health"
        );
        assert_eq!(target("*"), "*");
        assert_eq!(
            Face::Loopback.lookup(&target("http://127.0.0.1/health")),
            None
        );
    }

    #[test]
    fn method_rules_per_face() {
        assert!(Route::Health
            .methods(Face::Loopback)
            .admits(&Method::DELETE));
        assert!(!Route::Health.methods(Face::Public).admits(&Method::POST));
        assert!(!Route::Jwks.methods(Face::Loopback).admits(&Method::HEAD));
        assert!(Route::MeshBundle.methods(Face::Public).admits(&Method::GET));
        let exchange = Route::Door(Door::Exchange);
        assert!(exchange.methods(Face::Public).admits(&Method::POST));
        assert!(!exchange.methods(Face::Loopback).admits(&Method::GET));
    }

    #[test]
    fn only_the_exchange_and_manager_route_are_budgeted() {
        assert!(Door::Exchange.budgeted());
        assert!(Door::ManagerServiceAuthority.budgeted());
        assert!(!Door::VerifyEnrollment.budgeted());
        assert!(!Door::InteractiveRetire.budgeted());
        assert!(!Door::ManagedRetire.budgeted());
    }
}
