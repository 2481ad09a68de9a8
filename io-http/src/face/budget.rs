//! The refusal budgets of the two faces (§3.4), and the clock they read.
//!
//! * Loopback: one shared refused-exchange window ([`FAILED_EXCHANGE_PER_MIN`]) and a separate
//!   invalid-capability window ([`BAD_CAP_PER_MIN`]), so a cap-less prober never consumes the
//!   refused budget of callers holding the real capability.
//! * Public: one refused window per peer ([`PUBLIC_FAILED_PER_MIN`]) in an LRU of
//!   [`PUBLIC_PEER_BUCKETS_MAX`] buckets, so peer A's flood throttles peer A only.
//!
//! Every window is a rolling [`WINDOW`] of refusal instants. **The #802 rule**: the throttle is
//! *evaluated* before the body is read but *enforced* only on refusals. A throttled caller whose
//! credential is good still gets its answer; a throttled caller that is refused gets 429
//! ([`TOO_MANY_REFUSALS`]) instead of the specific reason, because the reason is what makes
//! probing cheap. Successes are never counted and never throttled.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::peer::PeerKey;

/// The rolling window every budget counts over.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Loopback: refused exchanges per rolling minute before refusals answer 429.
pub const FAILED_EXCHANGE_PER_MIN: usize = 30;
/// Loopback: invalid-capability attempts per rolling minute; past it they answer 429.
pub const BAD_CAP_PER_MIN: usize = 30;
/// Public: refused exchanges per peer per rolling minute before its refusals answer 429.
pub const PUBLIC_FAILED_PER_MIN: usize = 30;
/// Public: how many per-peer buckets the LRU holds.
pub const PUBLIC_PEER_BUCKETS_MAX: usize = 1024;

/// 429 for a refusal while the caller's refused budget is exhausted.
pub const TOO_MANY_REFUSALS: &str = "too many refused exchanges - wait a minute and retry";

/// A monotonic clock. Injected so the budget tests can move time instead of sleeping a minute.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The process's monotonic clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to, for tests and simulations.
#[derive(Debug)]
pub struct ManualClock {
    origin: Instant,
    elapsed: Mutex<Duration>,
}

impl ManualClock {
    /// A clock standing at the present instant.
    pub fn new() -> ManualClock {
        ManualClock {
            origin: Instant::now(),
            elapsed: Mutex::new(Duration::ZERO),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut elapsed = self
            .elapsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *elapsed += by;
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        let elapsed = *self
            .elapsed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.origin + elapsed
    }
}

/// A rolling window of event instants with a limit.
///
/// Memory stays bounded: only the newest `limit + 1` instants are kept. Both questions the
/// faces ask — "at least `limit` in the window?" and "more than `limit`?" — depend on no older
/// instant, so the answers are exactly those of keeping every instant.
#[derive(Debug, Clone)]
pub struct RollingWindow {
    limit: usize,
    events: VecDeque<Instant>,
}

impl RollingWindow {
    /// An empty window with `limit`.
    pub fn new(limit: usize) -> RollingWindow {
        RollingWindow {
            limit,
            events: VecDeque::new(),
        }
    }

    /// Drops the instants older than [`WINDOW`] at `now` (one exactly [`WINDOW`] old stays).
    fn prune(&mut self, now: Instant) {
        while let Some(&oldest) = self.events.front() {
            if now.saturating_duration_since(oldest) > WINDOW {
                self.events.pop_front();
            } else {
                break;
            }
        }
    }

    /// Whether the window already holds `limit` events at `now`: the caller is throttled.
    pub fn is_full(&mut self, now: Instant) -> bool {
        self.prune(now);
        self.events.len() >= self.limit
    }

    /// Records one event at `now`.
    pub fn record(&mut self, now: Instant) {
        self.prune(now);
        self.events.push_back(now);
        while self.events.len() > self.limit.saturating_add(1) {
            self.events.pop_front();
        }
    }

    /// Records one event at `now` and says whether the window now holds more than `limit`.
    pub fn record_exceeds(&mut self, now: Instant) -> bool {
        self.record(now);
        self.events.len() > self.limit
    }

    /// Events in the window at `now`.
    pub fn count(&mut self, now: Instant) -> usize {
        self.prune(now);
        self.events.len()
    }
}

/// Per-peer refusal windows in a bounded LRU: touching a peer moves it to most-recent;
/// inserting one when full evicts the least-recent, whose history is forgotten.
#[derive(Debug)]
pub struct PeerBudgets {
    capacity: usize,
    limit: usize,
    buckets: HashMap<PeerKey, Bucket>,
    /// Recency order: the touch stamp of each bucket, oldest first.
    recency: BTreeMap<u64, PeerKey>,
    next_stamp: u64,
}

#[derive(Debug)]
struct Bucket {
    stamp: u64,
    window: RollingWindow,
}

impl PeerBudgets {
    /// An empty LRU of at most `capacity` buckets, each with `limit` refusals per window.
    pub fn new(capacity: usize, limit: usize) -> PeerBudgets {
        PeerBudgets {
            capacity: capacity.max(1),
            limit,
            buckets: HashMap::new(),
            recency: BTreeMap::new(),
            next_stamp: 0,
        }
    }

    /// The public face's budgets: [`PUBLIC_PEER_BUCKETS_MAX`] × [`PUBLIC_FAILED_PER_MIN`].
    pub fn public() -> PeerBudgets {
        PeerBudgets::new(PUBLIC_PEER_BUCKETS_MAX, PUBLIC_FAILED_PER_MIN)
    }

    /// Whether `peer` is throttled at `now`. Touches (or creates) its bucket, as the reference
    /// does: asking is a use.
    pub fn is_throttled(&mut self, peer: &PeerKey, now: Instant) -> bool {
        self.touch(peer).is_full(now)
    }

    /// Records a refusal for `peer` at `now`.
    pub fn record_refusal(&mut self, peer: &PeerKey, now: Instant) {
        self.touch(peer).record(now);
    }

    /// How many buckets the LRU holds.
    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    /// Whether the LRU holds no bucket.
    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Whether `peer` has a bucket, without touching it.
    pub fn contains(&self, peer: &PeerKey) -> bool {
        self.buckets.contains_key(peer)
    }

    fn touch(&mut self, peer: &PeerKey) -> &mut RollingWindow {
        let stamp = self.next_stamp;
        self.next_stamp += 1;
        if let Some(previous) = self.buckets.get(peer).map(|b| b.stamp) {
            self.recency.remove(&previous);
        } else {
            while self.buckets.len() >= self.capacity {
                let Some((_, oldest)) = self.recency.pop_first() else {
                    break;
                };
                self.buckets.remove(&oldest);
            }
        }
        self.recency.insert(stamp, peer.clone());
        let limit = self.limit;
        let bucket = self.buckets.entry(peer.clone()).or_insert_with(|| Bucket {
            stamp,
            window: RollingWindow::new(limit),
        });
        bucket.stamp = stamp;
        &mut bucket.window
    }
}

/// A face's refused budget: one shared window (loopback) or one per peer (public).
#[derive(Debug)]
pub enum RefusedBudget {
    /// The loopback face's single window.
    Shared(Mutex<RollingWindow>),
    /// The public face's per-peer LRU.
    PerPeer(Mutex<PeerBudgets>),
}

impl RefusedBudget {
    /// The loopback face's budget: one window of [`FAILED_EXCHANGE_PER_MIN`].
    pub fn loopback() -> RefusedBudget {
        RefusedBudget::Shared(Mutex::new(RollingWindow::new(FAILED_EXCHANGE_PER_MIN)))
    }

    /// The public face's budget: [`PeerBudgets::public`].
    pub fn public() -> RefusedBudget {
        RefusedBudget::PerPeer(Mutex::new(PeerBudgets::public()))
    }

    /// Whether `peer` is throttled at `now` (the peer is ignored by the shared window).
    pub fn is_throttled(&self, peer: &PeerKey, now: Instant) -> bool {
        match self {
            RefusedBudget::Shared(window) => lock(window).is_full(now),
            RefusedBudget::PerPeer(buckets) => lock(buckets).is_throttled(peer, now),
        }
    }

    /// Records a refusal for `peer` at `now`.
    pub fn record_refusal(&self, peer: &PeerKey, now: Instant) {
        match self {
            RefusedBudget::Shared(window) => lock(window).record(now),
            RefusedBudget::PerPeer(buckets) => lock(buckets).record_refusal(peer, now),
        }
    }
}

/// Locks a budget. The state is a list of instants that stays consistent at every step, so a
/// panic elsewhere while holding the lock leaves nothing to repair.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(s: &str) -> PeerKey {
        PeerKey::new(s)
    }

    #[test]
    fn a_window_is_full_at_its_limit_and_drains_after_a_minute() {
        let t0 = Instant::now();
        let mut w = RollingWindow::new(30);
        for i in 0..30 {
            assert!(!w.is_full(t0), "after {i}");
            w.record(t0);
        }
        assert!(w.is_full(t0));
        // An event exactly a window old still counts; one past it does not.
        assert!(w.is_full(t0 + WINDOW));
        assert!(!w.is_full(t0 + WINDOW + Duration::from_millis(1)));
        assert_eq!(w.count(t0 + WINDOW + Duration::from_millis(1)), 0);
    }

    #[test]
    fn the_window_rolls_event_by_event() {
        let t0 = Instant::now();
        let mut w = RollingWindow::new(2);
        w.record(t0);
        w.record(t0 + Duration::from_secs(30));
        assert!(w.is_full(t0 + Duration::from_secs(60)));
        assert!(!w.is_full(t0 + Duration::from_secs(61)));
        assert_eq!(w.count(t0 + Duration::from_secs(61)), 1);
    }

    #[test]
    fn bad_caps_answer_429_only_past_the_limit() {
        let t0 = Instant::now();
        let mut w = RollingWindow::new(BAD_CAP_PER_MIN);
        for i in 1..=30 {
            assert!(!w.record_exceeds(t0), "attempt {i}");
        }
        assert!(w.record_exceeds(t0));
        assert!(w.record_exceeds(t0));
        assert!(!w.record_exceeds(t0 + WINDOW + Duration::from_millis(1)));
    }

    #[test]
    fn a_window_keeps_at_most_limit_plus_one_instants() {
        let t0 = Instant::now();
        let mut w = RollingWindow::new(3);
        for _ in 0..1000 {
            w.record(t0);
        }
        assert_eq!(w.count(t0), 4);
        assert!(w.is_full(t0));
    }

    #[test]
    fn peers_have_separate_buckets() {
        let t0 = Instant::now();
        let mut b = PeerBudgets::new(8, 2);
        b.record_refusal(&peer("a"), t0);
        b.record_refusal(&peer("a"), t0);
        assert!(b.is_throttled(&peer("a"), t0));
        assert!(!b.is_throttled(&peer("b"), t0));
    }

    #[test]
    fn the_lru_evicts_the_least_recently_touched_bucket() {
        let t0 = Instant::now();
        let mut b = PeerBudgets::new(3, 1);
        for p in ["a", "b", "c"] {
            b.record_refusal(&peer(p), t0);
        }
        // Touch a: b is now the least recent.
        assert!(b.is_throttled(&peer("a"), t0));
        b.record_refusal(&peer("d"), t0);
        assert_eq!(b.len(), 3);
        assert!(!b.contains(&peer("b")));
        assert!(b.contains(&peer("a")) && b.contains(&peer("c")) && b.contains(&peer("d")));
        // An evicted peer starts over with an empty bucket.
        assert!(!b.is_throttled(&peer("b"), t0));
        assert!(
            !b.contains(&peer("c")),
            "inserting b evicted c, the least recent"
        );
    }

    #[test]
    fn the_public_lru_holds_1024_buckets() {
        let t0 = Instant::now();
        let mut b = PeerBudgets::public();
        for i in 0..PUBLIC_PEER_BUCKETS_MAX + 10 {
            b.record_refusal(&peer(&format!("10.0.{}.{}", i / 256, i % 256)), t0);
        }
        assert_eq!(b.len(), PUBLIC_PEER_BUCKETS_MAX);
        assert!(!b.contains(&peer("10.0.0.0")));
        assert!(b.contains(&peer("10.0.4.9")));
    }

    #[test]
    fn the_shared_budget_ignores_the_peer() {
        let t0 = Instant::now();
        let budget = RefusedBudget::loopback();
        for i in 0..FAILED_EXCHANGE_PER_MIN {
            budget.record_refusal(&peer(&format!("p{i}")), t0);
        }
        assert!(budget.is_throttled(&peer("anyone"), t0));
        let public = RefusedBudget::public();
        for _ in 0..PUBLIC_FAILED_PER_MIN {
            public.record_refusal(&peer("a"), t0);
        }
        assert!(public.is_throttled(&peer("a"), t0));
        assert!(!public.is_throttled(&peer("b"), t0));
    }

    #[test]
    fn the_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new();
        let t0 = clock.now();
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_secs(61));
        assert_eq!(clock.now() - t0, Duration::from_secs(61));
    }
}
