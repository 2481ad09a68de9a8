//! A routed `nats-server` cluster whose nodes are separate hosts: each node runs in a network
//! namespace this harness creates (`ip netns`), joined to a bridge in the caller's namespace by
//! a veth pair, so the network between nodes can be cut.
//!
//! Addressing stays inside namespaces the harness owns: a private `/24` (`10.213.<k>.0`, `k`
//! chosen so that no interface of the caller already uses it), node `i` at `.<i+1>`, the
//! caller (the test's clients) at `.254` on the bridge. Nothing routes out of it.
//!
//! Faults are routes, not packet filters: this machine's kernel has neither netfilter nor the
//! `netem` qdisc, but a `blackhole` route in a node's namespace drops everything that node sends
//! to one address, which is exactly a one-way partition (its peer's packets still arrive, its
//! own answers never leave). A symmetric partition is two of them; healing deletes them.
//!
//! Needs root and iproute2 (`ip`); a missing one is an error that says so, never a skip.

use super::server::{ClusterPlan, LaunchError, NatsServer, ServerOptions};
use super::{locate, unique_name, HarnessError, NatsCluster};
use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The ports every node uses inside its own namespace (each namespace has its own port space,
/// so they never collide with anything of the caller's).
const CLIENT_PORT: u16 = 4222;
const MONITOR_PORT: u16 = 8222;
const ROUTE_PORT: u16 = 6222;

/// The address of the caller's side of the bridge in subnet `k`.
const CALLER_HOST: u8 = 254;

/// `size` nodes, each in its own network namespace. Dropping it kills every node, then removes
/// the namespaces (which takes their veth ends along) and the bridge.
#[derive(Debug)]
pub struct NetnsCluster {
    // Field order is drop order: the servers die before their namespaces go.
    cluster: NatsCluster,
    net: Network,
}

impl NetnsCluster {
    /// Creates the namespaces and the bridge, starts one node in each (JetStream clustered,
    /// `sync_interval: always`) and returns once the cluster is formed.
    pub fn start(size: usize) -> Result<Self, HarnessError> {
        Self::start_with(size, ServerOptions::default())
    }

    /// [`Self::start`] with extra config for every node.
    pub fn start_with(size: usize, opts: ServerOptions) -> Result<Self, HarnessError> {
        if size == 0 {
            return Err(HarnessError::new("a cluster needs at least one node"));
        }
        let binary = locate(opts.binary.as_deref())?;
        let net = Network::create(size)?;
        let name = unique_name("netns");
        // Fixed ports in namespaces of its own: nothing else can hold them, so one launch.
        let mut nodes = Vec::with_capacity(size);
        for i in 0..size {
            let mut node = NatsServer::unstarted(
                binary.clone(),
                format!("{name}-n{i}"),
                opts.extra_config.clone(),
            )?;
            node.place(net.namespace(i)?.to_owned(), net.node_addr(i));
            let routes = (0..size)
                .filter(|&j| j != i)
                .map(|j| SocketAddr::from((net.node_addr(j), ROUTE_PORT)))
                .collect();
            let plan = ClusterPlan {
                name: name.clone(),
                port: ROUTE_PORT,
                routes,
            };
            node.set_ports(CLIENT_PORT, MONITOR_PORT, Some(plan));
            nodes.push(node);
        }
        let cluster = NatsCluster::launch(nodes).map_err(LaunchError::into_inner)?;
        Ok(Self { cluster, net })
    }

    /// The routed cluster itself: kill, pause, restart nodes, wait for it to form.
    pub fn cluster(&self) -> &NatsCluster {
        &self.cluster
    }

    /// [`Self::cluster`], mutably.
    pub fn cluster_mut(&mut self) -> &mut NatsCluster {
        &mut self.cluster
    }

    /// Every node's client URL, reachable from the caller's namespace.
    pub fn urls(&self) -> Vec<String> {
        self.cluster.urls()
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.cluster.size()
    }

    /// Cuts both directions between nodes `a` and `b`.
    pub fn partition(&mut self, a: usize, b: usize) -> Result<(), HarnessError> {
        self.drop_one_way(a, b)?;
        self.drop_one_way(b, a)
    }

    /// Drops everything node `from` sends to node `to`; `to`'s packets still reach `from`.
    pub fn drop_one_way(&mut self, from: usize, to: usize) -> Result<(), HarnessError> {
        let addr = self.net.node_addr(to);
        self.net.block(from, addr)
    }

    /// Cuts node `i` off from every other node and from the caller's clients (a minority of
    /// one: it keeps running and its clients' connections hang until they time out).
    pub fn isolate(&mut self, i: usize) -> Result<(), HarnessError> {
        for j in (0..self.size()).filter(|&j| j != i) {
            self.partition(i, j)?;
        }
        let caller = self.net.caller_addr();
        self.net.block(i, caller)
    }

    /// Removes every cut this cluster made.
    pub fn heal(&mut self) -> Result<(), HarnessError> {
        self.net.heal()
    }

    /// The cuts in place now, as `(from node, to address)`.
    pub fn cuts(&self) -> Vec<(usize, Ipv4Addr)> {
        self.net.blackholes.iter().copied().collect()
    }
}

/// The namespaces, the bridge and the cuts of one [`NetnsCluster`].
#[derive(Debug)]
struct Network {
    bridge: String,
    namespaces: Vec<String>,
    subnet: u8,
    blackholes: BTreeSet<(usize, Ipv4Addr)>,
}

impl Network {
    fn create(size: usize) -> Result<Self, HarnessError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Interface names are at most 15 bytes: a short tag from the pid and a counter.
        let tag = format!("{:05x}", (std::process::id() & 0xfff) << 8 | (n & 0xff));
        let subnet = free_subnet()?;
        let mut net = Self {
            bridge: format!("cfb{tag}"),
            namespaces: Vec::new(),
            subnet,
            blackholes: BTreeSet::new(),
        };
        // Whatever fails from here on is undone by `Drop`.
        ip(&["link", "add", &net.bridge, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.caller_addr()),
            "dev",
            &net.bridge,
        ])?;
        ip(&["link", "set", &net.bridge, "up"])?;
        for i in 0..size {
            let ns = format!("cotal-fault-{tag}-{i}");
            ip(&["netns", "add", &ns])?;
            net.namespaces.push(ns.clone());
            let outer = format!("cfv{tag}{i}");
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &outer, "master", &net.bridge, "up"])?;
            let addr = format!("{}/24", net.node_addr(i));
            ip(&["-n", &ns, "addr", "add", &addr, "dev", "eth0"])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn namespace(&self, i: usize) -> Result<&str, HarnessError> {
        self.namespaces
            .get(i)
            .map(String::as_str)
            .ok_or_else(|| HarnessError::new(format!("no namespace for node {i}")))
    }

    fn node_addr(&self, i: usize) -> Ipv4Addr {
        let host = u8::try_from(i + 1).unwrap_or(CALLER_HOST - 1);
        Ipv4Addr::new(10, 213, self.subnet, host)
    }

    fn caller_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, CALLER_HOST)
    }

    fn block(&mut self, from: usize, to: Ipv4Addr) -> Result<(), HarnessError> {
        if self.blackholes.contains(&(from, to)) {
            return Ok(());
        }
        let ns = self.namespace(from)?.to_owned();
        ip(&["-n", &ns, "route", "add", "blackhole", &format!("{to}/32")])?;
        self.blackholes.insert((from, to));
        Ok(())
    }

    fn heal(&mut self) -> Result<(), HarnessError> {
        while let Some((from, to)) = self.blackholes.pop_first() {
            let ns = self.namespace(from)?.to_owned();
            ip(&["-n", &ns, "route", "del", "blackhole", &format!("{to}/32")])?;
        }
        Ok(())
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

/// A `10.213.<k>.0/24` no interface of the caller's namespace already has an address in.
fn free_subnet() -> Result<u8, HarnessError> {
    let output = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .map_err(|e| missing_ip(&e))?;
    let listing = String::from_utf8_lossy(&output.stdout);
    let start = u8::try_from(std::process::id() % 200).unwrap_or(0);
    (0..250u8)
        .map(|d| start.wrapping_add(d) % 250 + 1)
        .find(|k| !listing.contains(&format!(" 10.213.{k}.")))
        .ok_or_else(|| HarnessError::new("every 10.213.<k>.0/24 subnet is in use"))
}

/// Runs `ip <args>`; a failure carries the command and what `ip` said.
fn ip(args: &[&str]) -> Result<(), HarnessError> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| missing_ip(&e))?;
    if output.status.success() {
        return Ok(());
    }
    Err(HarnessError::new(format!(
        "`ip {}` failed ({}): {} (the namespaced cluster needs root and iproute2)",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

fn missing_ip(e: &std::io::Error) -> HarnessError {
    HarnessError::new(format!(
        "cannot run `ip` ({e}): the namespaced cluster needs iproute2 (`apt-get install \
         iproute2`) and root"
    ))
}
