//! A routed `nats-server` cluster on loopback: every node routes to every other, each with its
//! own store dir, JetStream clustered (so R3 buckets work once a meta leader is elected).

use super::server::{ClusterPlan, LaunchError, NatsServer, ServerOptions};
use super::{
    locate, unique_name, wire, HarnessError, CLUSTER_FORM_TIMEOUT, POLL_INTERVAL, PORT_ATTEMPTS,
    START_TIMEOUT,
};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::thread::sleep;
use std::time::Instant;

/// `size` [`NatsServer`]s named `<cluster>-n<i>`, routed to each other. Dropping it drops
/// (kills and cleans up) every node.
#[derive(Debug)]
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// [`Self::start_with`] with default options.
    pub fn start(size: usize) -> Result<Self, HarnessError> {
        Self::start_with(size, ServerOptions::default())
    }

    /// Starts `size` nodes (the same options each) on free loopback ports and returns once the
    /// cluster is formed (see [`Self::wait_formed`]). A port lost to someone else restarts the
    /// whole cluster on fresh ports, since every node's routes name the others' ports.
    pub fn start_with(size: usize, opts: ServerOptions) -> Result<Self, HarnessError> {
        if size == 0 {
            return Err(HarnessError::new("a cluster needs at least one node"));
        }
        let binary = locate(opts.binary.as_deref())?;
        let cluster = unique_name("cluster");
        let mut last = HarnessError::new("no start attempted");
        for _ in 0..PORT_ATTEMPTS {
            // Per node: client, monitoring and route ports.
            let ports = wire::free_ports(3 * size).map_err(HarnessError::new)?;
            let plans: Vec<(u16, u16, u16)> = ports
                .chunks_exact(3)
                .filter_map(|c| match *c {
                    [client, monitor, route] => Some((client, monitor, route)),
                    _ => None,
                })
                .collect();
            let mut nodes = Vec::with_capacity(size);
            for (i, &(client, monitor, route)) in plans.iter().enumerate() {
                let mut node = NatsServer::unstarted(
                    binary.clone(),
                    format!("{cluster}-n{i}"),
                    opts.extra_config.clone(),
                )?;
                let routes = plans
                    .iter()
                    .map(|&(_, _, r)| r)
                    .filter(|&r| r != route)
                    .map(|r| SocketAddr::from((wire::HOST, r)))
                    .collect();
                let plan = ClusterPlan {
                    name: cluster.clone(),
                    port: route,
                    routes,
                };
                node.set_ports(client, monitor, Some(plan));
                nodes.push(node);
            }
            match Self::launch(nodes) {
                Ok(cluster) => return Ok(cluster),
                Err(LaunchError::PortTaken(e)) => last = e,
                Err(LaunchError::Failed(e)) => return Err(e),
            }
        }
        Err(HarnessError::new(format!(
            "no free port set for the cluster after {PORT_ATTEMPTS} attempts; last: {last}"
        )))
    }

    /// Starts nodes whose ports and routes are already planned and returns once the cluster is
    /// formed.
    pub(super) fn launch(mut nodes: Vec<NatsServer>) -> Result<Self, LaunchError> {
        // Spawn all before waiting on any: the nodes boot in parallel.
        for node in &mut nodes {
            node.spawn()?;
        }
        let deadline = Instant::now() + START_TIMEOUT;
        nodes
            .iter_mut()
            .try_for_each(|node| node.await_ready(deadline))?;
        let cluster = Self { nodes };
        cluster.wait_formed()?;
        Ok(cluster)
    }

    /// Number of nodes, running or not.
    pub fn size(&self) -> usize {
        self.nodes.len()
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> Result<&NatsServer, HarnessError> {
        self.nodes.get(i).ok_or_else(|| self.no_such(i))
    }

    /// Every node's client URL (running or not), for a client's server list.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// SIGKILLs node `i` (no wait for the cluster to notice).
    pub fn kill_node(&mut self, i: usize) -> Result<(), HarnessError> {
        self.node_mut(i)?.kill()
    }

    /// Gracefully stops node `i`.
    pub fn stop_node(&mut self, i: usize) -> Result<(), HarnessError> {
        self.node_mut(i)?.stop()
    }

    /// SIGSTOPs node `i` (see [`NatsServer::pause`]).
    pub fn pause_node(&self, i: usize) -> Result<(), HarnessError> {
        self.node(i)?.pause()
    }

    /// SIGCONTs a paused node `i`.
    pub fn resume_node(&self, i: usize) -> Result<(), HarnessError> {
        self.node(i)?.resume()
    }

    /// Restarts node `i` on its ports and store dir and waits only for its `INFO` (the cluster
    /// may not be able to form yet, e.g. during a partition).
    pub fn relaunch_node(&mut self, i: usize) -> Result<(), HarnessError> {
        self.node_mut(i)?.restart()
    }

    /// Restarts node `i` on its ports and store dir, then waits until the cluster is formed
    /// again with it.
    pub fn restart_node(&mut self, i: usize) -> Result<(), HarnessError> {
        self.node_mut(i)?.restart()?;
        self.wait_formed()
    }

    /// Waits up to [`CLUSTER_FORM_TIMEOUT`] until every running node has routes to exactly the
    /// other running nodes (`/routez`, by remote server name: route pooling opens several
    /// connections per peer), reports itself healthy (`/healthz`: JetStream current with the
    /// meta leader) and names the same running node as JetStream meta leader (`/jsz`). Needs a
    /// quorum of nodes running.
    pub fn wait_formed(&self) -> Result<(), HarnessError> {
        self.await_formed().map(drop)
    }

    /// The index of the JetStream meta leader, once the cluster is formed.
    pub fn meta_leader(&self) -> Result<usize, HarnessError> {
        let leader = self.await_formed()?;
        self.nodes
            .iter()
            .position(|n| n.name() == leader)
            .ok_or_else(|| HarnessError::new(format!("meta leader {leader} is not a node")))
    }

    fn await_formed(&self) -> Result<String, HarnessError> {
        let deadline = Instant::now() + CLUSTER_FORM_TIMEOUT;
        loop {
            match self.formed() {
                Ok(leader) => return Ok(leader),
                Err(why) if Instant::now() >= deadline => {
                    return Err(HarnessError::new(format!(
                        "the cluster did not form within {CLUSTER_FORM_TIMEOUT:?}: {why}"
                    )));
                }
                Err(_) => sleep(POLL_INTERVAL),
            }
        }
    }

    /// One look at the running nodes: `Ok(meta leader name)` when formed, else why not.
    fn formed(&self) -> Result<String, String> {
        let running: Vec<&NatsServer> = self.nodes.iter().filter(|n| n.is_running()).collect();
        let mut leaders = BTreeSet::new();
        for node in &running {
            let routez = node.monitor("/routez").map_err(|e| e.to_string())?;
            let peers: BTreeSet<&str> = routez
                .get("routes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|r| r.get("remote_name").and_then(Value::as_str))
                .collect();
            let expected: BTreeSet<&str> = running
                .iter()
                .map(|n| n.name())
                .filter(|&n| n != node.name())
                .collect();
            if peers != expected {
                return Err(format!(
                    "{} routes to {peers:?}, expected {expected:?}",
                    node.name()
                ));
            }
            // 503 until this node's JetStream is current with the meta leader (and its streams
            // with theirs). An R3 create can still be refused for a few seconds more ("no
            // suitable peers", until the leader has every peer's first statistics); creators
            // retry that refusal.
            node.monitor("/healthz")
                .map_err(|e| format!("{}: {e}", node.name()))?;
            let jsz = node.monitor("/jsz").map_err(|e| e.to_string())?;
            let leader = jsz
                .pointer("/meta_cluster/leader")
                .and_then(Value::as_str)
                .unwrap_or_default();
            leaders.insert(leader.to_owned());
        }
        match leaders.into_iter().collect::<Vec<_>>().as_slice() {
            [leader] if running.iter().any(|n| n.name() == leader) => Ok(leader.clone()),
            views => Err(format!("the running nodes see meta leaders {views:?}")),
        }
    }

    fn node_mut(&mut self, i: usize) -> Result<&mut NatsServer, HarnessError> {
        let missing = self.no_such(i);
        self.nodes.get_mut(i).ok_or(missing)
    }

    fn no_such(&self, i: usize) -> HarnessError {
        HarnessError::new(format!(
            "no node {i} in a {}-node cluster",
            self.nodes.len()
        ))
    }
}
