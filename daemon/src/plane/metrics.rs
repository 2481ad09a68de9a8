//! The plane's metrics (`GET /metrics` on the loopback face, OpenMetrics text through
//! `prometheus-client`): requests by face, route and status with their latency, authority
//! decisions by operation, outcome and code, and the plane's own coordinates and fence events.

use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use cotal_core::error::ErrorCode;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tracing::warn;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    face: &'static str,
    route: &'static str,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RouteLabels {
    face: &'static str,
    route: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    operation: &'static str,
    outcome: &'static str,
    /// The refusal's code; empty for a grant.
    code: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FlightLabels {
    /// Who asked: `door`, `rail` or `boot`.
    entry: &'static str,
    /// `started` a barrier run, or `joined` one already in flight.
    flight: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct EndLabels {
    kind: &'static str,
}

type Latency = Family<RouteLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 0.25 ms to about 8 s, doubling.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

/// Every metric the plane exports, and the registry that encodes them.
#[derive(Debug)]
pub(super) struct PlaneMetrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    latency: Latency,
    process_epoch: Gauge<u64, AtomicU64>,
    generation: Gauge<u64, AtomicU64>,
    ends: Family<EndLabels, Counter>,
    decisions: Family<DecisionLabels, Counter>,
    retirements: Family<FlightLabels, Counter>,
    rollbacks: Counter,
    servers_regained: Counter,
}

impl PlaneMetrics {
    pub(super) fn new() -> PlaneMetrics {
        let mut registry = Registry::with_prefix("cotal");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Latency = Family::new_with_constructor(latency_histogram);
        let process_epoch = Gauge::<u64, AtomicU64>::default();
        let generation = Gauge::<u64, AtomicU64>::default();
        let ends = Family::<EndLabels, Counter>::default();
        let decisions = Family::<DecisionLabels, Counter>::default();
        let retirements = Family::<FlightLabels, Counter>::default();
        let rollbacks = Counter::default();
        let servers_regained = Counter::default();
        registry.register(
            "http_requests",
            "Requests answered, by face, route and status",
            requests.clone(),
        );
        registry.register(
            "http_request_duration_seconds",
            "How long an answer took, by face and route",
            latency.clone(),
        );
        registry.register(
            "plane_process_epoch",
            "The process epoch this plane registered at",
            process_epoch.clone(),
        );
        registry.register(
            "plane_generation",
            "The gate generation this plane registered at",
            generation.clone(),
        );
        registry.register(
            "plane_ends",
            "Times the plane stopped serving on its own, by kind (fenced, failed)",
            ends.clone(),
        );
        registry.register(
            "authority_decisions",
            "Authority decisions, by operation (exchange, connect), outcome and refusal code",
            decisions.clone(),
        );
        registry.register(
            "retirement_flights",
            "Retirement barrier runs, by entry (door, rail, boot) and whether the request \
             started one or joined the one in flight for its op id",
            retirements.clone(),
        );
        registry.register(
            "rollbacks_detected",
            "Store rollbacks detected while serving (a gate read below what this plane saw; the \
             plane fences itself)",
            rollbacks.clone(),
        );
        registry.register(
            "plane_servers_regained",
            "Times the plane lost its server and served again once it came back, under its \
             re-taken plane claim",
            servers_regained.clone(),
        );
        PlaneMetrics {
            servers_regained,
            decisions,
            retirements,
            rollbacks,
            registry: Mutex::new(registry),
            requests,
            latency,
            process_epoch,
            generation,
            ends,
        }
    }

    pub(super) fn registered(&self, process_epoch: u64, generation: u64) {
        self.process_epoch.set(process_epoch);
        self.generation.set(generation);
    }

    /// Counts one authority decision: granted, or refused with `code`.
    pub(super) fn decided(&self, operation: &'static str, refused: Option<ErrorCode>) {
        let labels = match refused {
            None => DecisionLabels {
                operation,
                outcome: "granted",
                code: "",
            },
            Some(code) => DecisionLabels {
                operation,
                outcome: "refused",
                code: code.as_str(),
            },
        };
        self.decisions.get_or_create(&labels).inc();
    }

    /// Counts one retirement request's flight: `started` a barrier run or `joined` one.
    pub(super) fn retirement_flight(&self, entry: &'static str, started: bool) {
        let flight = if started { "started" } else { "joined" };
        self.retirements
            .get_or_create(&FlightLabels { entry, flight })
            .inc();
    }

    /// Counts one rollback detected while serving.
    pub(super) fn rollback(&self) {
        self.rollbacks.inc();
    }

    /// Counts one lost server the plane rode out.
    pub(super) fn server_regained(&self) {
        self.servers_regained.inc();
    }

    pub(super) fn ended(&self, kind: &'static str) {
        self.ends.get_or_create(&EndLabels { kind }).inc();
    }

    pub(super) fn request(
        &self,
        face: &'static str,
        route: &'static str,
        status: u16,
        took: Duration,
    ) {
        self.requests
            .get_or_create(&RequestLabels {
                face,
                route,
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels { face, route })
            .observe(took.as_secs_f64());
    }

    /// The OpenMetrics text exposition.
    pub(super) fn encode(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = encode(&mut text, &registry) {
            warn!("encoding the metrics failed: {e}");
        }
        text
    }
}
