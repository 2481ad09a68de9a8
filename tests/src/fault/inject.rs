//! Carrying out a [`Step`] on a [`NetnsCluster`]: the fault, its hold, its repair, and a wait
//! until the cluster has formed again, so no step stacks on an unrepaired one.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::schedule::{Fault, Step};
use crate::nats::{HarnessError, NetnsCluster};

/// After a repair: until the cluster has formed again.
pub const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The node leading `stream`, from any reachable node's monitoring `/jsz`.
pub fn stream_leader(net: &NetnsCluster, stream: &str) -> Option<usize> {
    let cluster = net.cluster();
    for i in 0..net.size() {
        let node = cluster.node(i).ok()?;
        if !node.is_running() {
            continue;
        }
        let Ok(jsz) = node.monitor("/jsz?accounts=true&streams=true") else {
            continue;
        };
        let leader = jsz
            .get("account_details")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|a| {
                a.get("stream_detail")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
            })
            .find(|s| s.get("name").and_then(Value::as_str) == Some(stream))
            .and_then(|s| s.pointer("/cluster/leader").and_then(Value::as_str))
            .map(str::to_owned);
        if let Some(leader) = leader {
            return (0..net.size()).find(|&j| cluster.node(j).is_ok_and(|n| n.name() == leader));
        }
    }
    None
}

/// Applies one step: the fault, its hold, its repair, the calm.
pub fn apply(net: &mut NetnsCluster, step: Step, stream: &str) -> Result<Fault, String> {
    let hold = Duration::from_millis(step.hold_ms);
    let fault = step.fault;
    let e = |e: HarnessError| e.to_string();
    match fault {
        Fault::Partition(a, b) => {
            net.partition(a, b).map_err(e)?;
            std::thread::sleep(hold);
            net.heal().map_err(e)?;
        }
        Fault::OneWay(a, b) => {
            net.drop_one_way(a, b).map_err(e)?;
            std::thread::sleep(hold);
            net.heal().map_err(e)?;
        }
        Fault::Isolate(a) => {
            net.isolate(a).map_err(e)?;
            std::thread::sleep(hold);
            net.heal().map_err(e)?;
        }
        Fault::Kill(_) | Fault::KillStreamLeader => {
            let a = match fault {
                // Found at the moment of the kill: the leader the clients are writing to.
                Fault::KillStreamLeader => stream_leader(net, stream).unwrap_or(0),
                Fault::Kill(a) => a,
                _ => 0,
            };
            net.cluster_mut().kill_node(a).map_err(e)?;
            std::thread::sleep(hold);
            net.cluster_mut().relaunch_node(a).map_err(e)?;
        }
        Fault::Pause(a) => {
            net.cluster().pause_node(a).map_err(e)?;
            std::thread::sleep(hold);
            net.cluster().resume_node(a).map_err(e)?;
        }
        Fault::Restart(a) => {
            net.cluster_mut().relaunch_node(a).map_err(e)?;
        }
        Fault::NoQuorum(a) => {
            // Two of three isolated: no side has a majority, so every write must fail or stay
            // ambiguous until the heal.
            for i in (0..net.size()).filter(|&i| i != a) {
                net.isolate(i).map_err(e)?;
            }
            std::thread::sleep(hold);
            net.heal().map_err(e)?;
        }
        Fault::CrashAll => {
            // Jepsen's correlated crash: every node dies at once; with `sync_interval: always`
            // nothing acknowledged may be lost.
            for i in 0..net.size() {
                net.cluster_mut().kill_node(i).map_err(e)?;
            }
            std::thread::sleep(hold);
            for i in 0..net.size() {
                net.cluster_mut().relaunch_node(i).map_err(e)?;
            }
        }
    }
    // The next fault starts from a formed cluster, so no step stacks on an unrepaired one.
    let settle = Instant::now() + SETTLE_TIMEOUT;
    while net.cluster().wait_formed().is_err() {
        if Instant::now() >= settle {
            return Err(format!("the cluster did not form again after {fault:?}"));
        }
    }
    std::thread::sleep(Duration::from_millis(step.calm_ms));
    Ok(fault)
}
