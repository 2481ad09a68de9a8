//! The seeded fault schedule: which fault, on which nodes, for how long. One fault at a time,
//! each followed by its repair and a calm spell, so every history mixes faulted and healthy
//! stretches and the same seed replays the same plan.

use crate::sim::SplitMix64;

/// One fault of the campaign. Node indices are into a cluster of [`Plan::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Both directions between two nodes cut.
    Partition(usize, usize),
    /// Everything the first node sends to the second dropped; the reverse still flows.
    OneWay(usize, usize),
    /// A node cut off from its peers and from the clients.
    Isolate(usize),
    /// `kill -9` of a node, restarted at the end of the fault.
    Kill(usize),
    /// `kill -9` of whichever node leads the auth store's stream at that moment.
    KillStreamLeader,
    /// SIGSTOP of a node, SIGCONT at the end.
    Pause(usize),
    /// A graceful restart of a node.
    Restart(usize),
    /// Every node but this one isolated: no majority anywhere.
    NoQuorum(usize),
    /// `kill -9` of every node at once, then all restarted.
    CrashAll,
}

impl Fault {
    /// The fault's kind, for a campaign's tally.
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Partition(..) => "partition",
            Fault::OneWay(..) => "one-way drop",
            Fault::Isolate(_) => "isolation",
            Fault::Kill(_) => "kill -9",
            Fault::KillStreamLeader => "kill -9 of the stream leader",
            Fault::Pause(_) => "SIGSTOP",
            Fault::Restart(_) => "restart",
            Fault::NoQuorum(_) => "no quorum",
            Fault::CrashAll => "kill -9 of every node",
        }
    }
}

/// One step: the fault, how long it holds, and the calm after its repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub fault: Fault,
    pub hold_ms: u64,
    pub calm_ms: u64,
}

/// A seeded plan of steps over a cluster of `nodes`.
#[derive(Debug, Clone)]
pub struct Plan {
    pub nodes: usize,
    rng: SplitMix64,
}

impl Plan {
    pub fn new(seed: u64, nodes: usize) -> Self {
        Self {
            nodes: nodes.max(2),
            rng: SplitMix64::new(seed),
        }
    }

    /// The next step.
    pub fn next_step(&mut self) -> Step {
        let a = self.rng.index(self.nodes);
        let b = (a + 1 + self.rng.index(self.nodes - 1)) % self.nodes;
        // The whole-cluster faults are rarer: each takes every client down for a while.
        let fault = match self.rng.weighted(&[3, 3, 3, 3, 3, 3, 2, 1, 1]) {
            Some(0) => Fault::Partition(a, b),
            Some(1) => Fault::OneWay(a, b),
            Some(2) => Fault::Isolate(a),
            Some(3) => Fault::Kill(a),
            Some(4) => Fault::KillStreamLeader,
            Some(5) => Fault::Pause(a),
            Some(7) => Fault::NoQuorum(a),
            Some(8) => Fault::CrashAll,
            _ => Fault::Restart(a),
        };
        Step {
            fault,
            hold_ms: 500 + self.rng.below(2_500),
            calm_ms: 300 + self.rng.below(1_200),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_plan_and_faults_name_two_distinct_nodes() {
        let steps = |seed| {
            let mut plan = Plan::new(seed, 3);
            (0..50).map(|_| plan.next_step()).collect::<Vec<_>>()
        };
        assert_eq!(steps(7), steps(7));
        assert_ne!(steps(7), steps(8));
        for step in steps(7) {
            if let Fault::Partition(a, b) | Fault::OneWay(a, b) = step.fault {
                assert!(a != b && a < 3 && b < 3, "{step:?}");
            }
        }
    }
}
