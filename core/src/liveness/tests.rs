#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{json, Value};

use super::*;

const ACCOUNT: &str = "ADATA";

fn standalone_jsz(name: &str) -> Vec<u8> {
    json!({"server": {"name": name, "id": format!("N{name}")}, "data": {"streams": 0}})
        .to_string()
        .into_bytes()
}

fn cluster_jsz(name: &str, peers: &[&str], size: u64) -> Vec<u8> {
    let replicas: Vec<Value> = peers
        .iter()
        .map(|p| json!({"name": p, "current": true}))
        .collect();
    json!({
        "server": {"name": name, "id": format!("N{name}"), "cluster": "c"},
        "data": {"meta_cluster": {"name": "c", "cluster_size": size, "replicas": replicas}},
    })
    .to_string()
    .into_bytes()
}

/// A clustered server's `JSZ` as the meta group's leader: each peer with how long ago the
/// leader last heard from it (`active`, in nanoseconds).
fn leader_jsz(name: &str, peers: &[(&str, u64)], size: u64) -> Vec<u8> {
    let replicas: Vec<Value> = peers
        .iter()
        .map(|(p, active)| json!({"name": p, "current": true, "active": active}))
        .collect();
    json!({
        "server": {"name": name, "id": format!("N{name}"), "cluster": "c"},
        "data": {"meta_cluster": {
            "name": "c", "leader": name, "cluster_size": size, "replicas": replicas,
        }},
    })
    .to_string()
    .into_bytes()
}

fn conn(cid: u64, principal: Option<&str>) -> Value {
    match principal {
        Some(p) => json!({"cid": cid, "name": "c", "tags": ["owner:x", format!("principal:{p}")]}),
        None => json!({"cid": cid, "name": "infra"}),
    }
}

fn page(name: &str, total: u64, offset: u64, conns: Vec<Value>) -> Vec<u8> {
    json!({
        "server": {"name": name, "id": format!("N{name}")},
        "data": {"total": total, "offset": offset, "connections": conns},
    })
    .to_string()
    .into_bytes()
}

fn holder(p: &str) -> Principal {
    Principal::parse(p).unwrap()
}

#[test]
fn f52_a_standalone_server_is_the_whole_cluster() {
    let topology = Topology::from_jsz(&[standalone_jsz("a")]).unwrap();
    assert_eq!(topology.names().len(), 1);
    let mut sweep = Sweep::new(topology);
    assert_eq!(
        sweep.listing(),
        Listing::Incomplete("1 of 1 servers did not answer (a)".into())
    );
    sweep.add(&page("a", 1, 0, vec![conn(5, Some("local.me"))]));
    assert!(sweep.heard_from_all());
    let listing = sweep.listing();
    assert_eq!(listing.liveness(&holder("local.me")), Liveness::Live);
    assert_eq!(listing.liveness(&holder("local.other")), Liveness::Gone);
    assert_eq!(listing.held_by(&holder("local.me")).count(), 1);
}

#[test]
fn f52_no_answer_is_unknown_never_gone() {
    assert!(Topology::from_jsz(&[]).is_err());
    let mut sweep = Sweep::new(Topology::from_jsz(&[cluster_jsz("a", &["b", "c"], 3)]).unwrap());
    sweep.add(&page("a", 0, 0, vec![]));
    sweep.add(&page("b", 0, 0, vec![]));
    let listing = sweep.listing();
    assert!(
        matches!(&listing, Listing::Incomplete(why) if why.contains("(c)")),
        "{listing:?}"
    );
    assert_eq!(listing.liveness(&holder("local.me")), Liveness::Unknown);
    sweep.add(&page("c", 0, 0, vec![]));
    assert_eq!(
        sweep.listing().liveness(&holder("local.me")),
        Liveness::Gone
    );
}

#[test]
fn f52_the_cluster_size_comes_from_the_meta_group_offline_peers_included() {
    // A partitioned member still reports the whole meta group.
    let topology = Topology::from_jsz(&[cluster_jsz("a", &["b", "c"], 3)]).unwrap();
    assert_eq!(topology.names().iter().collect::<Vec<_>>(), ["a", "b", "c"]);
    for bad in [
        vec![cluster_jsz("a", &["b"], 3)],
        vec![
            cluster_jsz("a", &["b", "c"], 3),
            cluster_jsz("b", &["a"], 2),
        ],
        vec![standalone_jsz("a"), cluster_jsz("b", &["a"], 2)],
        vec![standalone_jsz("a"), standalone_jsz("b")],
        vec![b"not json".to_vec()],
        vec![
            json!({"server": {"name": "a", "id": "Na", "cluster": "c"}, "data": {}})
                .to_string()
                .into_bytes(),
        ],
        vec![
            json!({"server": {"name": "a", "id": "Na"}, "error": {"code": 500}})
                .to_string()
                .into_bytes(),
        ],
    ] {
        assert!(Topology::from_jsz(&bad).is_err());
    }
}

#[test]
fn f52_a_malformed_or_foreign_reply_makes_the_sweep_incomplete() {
    let topology = || Topology::from_jsz(&[standalone_jsz("a")]).unwrap();
    for bad in [
        b"{}".to_vec(),
        page("z", 0, 0, vec![]),
        page("a", 1, 0, vec![json!({"name": "no cid"})]),
        page(
            "a",
            1,
            0,
            vec![json!({"cid": 1, "tags": ["principal:not a principal"]})],
        ),
        page(
            "a",
            1,
            0,
            vec![json!({"cid": 1, "tags": ["principal:a.b", "principal:a.c"]})],
        ),
        json!({"server": {"name": "a", "id": "Na"}, "error": {"description": "denied"}})
            .to_string()
            .into_bytes(),
    ] {
        let mut sweep = Sweep::new(topology());
        sweep.add(&bad);
        sweep.add(&page("a", 0, 0, vec![]));
        let listing = sweep.listing();
        assert!(matches!(listing, Listing::Incomplete(_)), "{listing:?}");
        assert_eq!(listing.liveness(&holder("a.b")), Liveness::Unknown);
    }
}

#[test]
fn f52_pages_are_followed_and_a_shifting_list_is_incomplete() {
    let topology = || Topology::from_jsz(&[standalone_jsz("a")]).unwrap();
    let mut sweep = Sweep::new(topology());
    sweep.add(&page("a", 3, 0, vec![conn(1, None), conn(2, None)]));
    assert_eq!(sweep.next_pages(), vec![("Na".to_owned(), 2)]);
    assert!(matches!(sweep.listing(), Listing::Incomplete(_)));
    sweep.add(&page("a", 3, 2, vec![conn(3, Some("a.b"))]));
    assert!(sweep.next_pages().is_empty());
    assert_eq!(sweep.listing().liveness(&holder("a.b")), Liveness::Live);

    let mut shifted = Sweep::new(topology());
    shifted.add(&page("a", 3, 0, vec![conn(1, None), conn(2, None)]));
    shifted.add(&page("a", 2, 2, vec![]));
    assert!(matches!(shifted.listing(), Listing::Incomplete(why) if why.contains("changed")));

    let mut out_of_order = Sweep::new(topology());
    out_of_order.add(&page("a", 3, 0, vec![conn(1, None), conn(2, None)]));
    out_of_order.add(&page("a", 3, 1, vec![conn(2, None)]));
    assert!(matches!(out_of_order.listing(), Listing::Incomplete(why) if why.contains("order")));
}

#[test]
fn a_claimed_scanner_is_live_by_its_exact_connection_or_its_user_anywhere() {
    let user = format!("U{}", "A".repeat(55));
    let tuple = ConnTuple::new("Na", 7, &user).unwrap();
    let mut sweep = Sweep::new(Topology::from_jsz(&[standalone_jsz("a")]).unwrap());
    sweep.add(&page(
        "a",
        1,
        0,
        vec![json!({"cid": 9, "authorized_user": user})],
    ));
    assert_eq!(sweep.listing().tuple_liveness(&tuple), TupleLiveness::Live);
    let mut sweep = Sweep::new(Topology::from_jsz(&[standalone_jsz("a")]).unwrap());
    sweep.add(&page("a", 1, 0, vec![json!({"cid": 7})]));
    assert_eq!(sweep.listing().tuple_liveness(&tuple), TupleLiveness::Live);
    let mut sweep = Sweep::new(Topology::from_jsz(&[standalone_jsz("a")]).unwrap());
    sweep.add(&page("a", 1, 0, vec![json!({"cid": 8})]));
    assert_eq!(sweep.listing().tuple_liveness(&tuple), TupleLiveness::Gone);
    let silent = Sweep::new(Topology::from_jsz(&[standalone_jsz("a")]).unwrap());
    assert_eq!(
        silent.listing().tuple_liveness(&tuple),
        TupleLiveness::Unknown
    );
}

#[test]
fn the_requests_name_the_account_and_the_grant_is_exactly_the_sweep_and_the_kick() {
    let request: Value = serde_json::from_slice(&connz_request(ACCOUNT, 8)).unwrap();
    assert_eq!(request["acc"], ACCOUNT);
    assert_eq!(request["auth"], true);
    assert_eq!(request["offset"], 8);
    let grant = system_user_permissions();
    assert_eq!(
        grant.publish.allow,
        [
            "$SYS.REQ.SERVER.PING.JSZ",
            "$SYS.REQ.SERVER.PING.CONNZ",
            "$SYS.REQ.SERVER.*.CONNZ",
            "$SYS.REQ.SERVER.*.KICK"
        ]
    );
    assert_eq!(grant.subscribe.allow, ["_INBOX_cotal_plane.>"]);
    assert!(kick_outcome(&page("a", 0, 0, vec![])).is_ok());
    let refused = json!({"server": {"name": "a", "id": "Na"}, "error": {"description": "no"}});
    assert!(kick_outcome(refused.to_string().as_bytes()).is_err());
}

/// F52 with the auth callout: a connection the callout admitted lists no tags, only its
/// `authorized_user`, the admitted JWT's name (the principal's dash form, as the reference
/// names it) — as nats-server 2.15.1 lists it. Such a holder is live and can be evicted; so is
/// one an older build admitted under the dot form; a user nkey there names no principal.
#[test]
fn f52_a_callout_admitted_holder_is_attributed_by_its_authorized_user() {
    let topology = Topology::from_jsz(&[standalone_jsz("a")]).unwrap();
    let mut sweep = Sweep::new(topology);
    let signed_in = "u_wyhpii5zt6soh6nfkihsfm7ioq.cli";
    let earlier = "u_wyhpii5zt6soh6nfkihsfm7ioq.ops";
    sweep.add(&page(
        "a",
        3,
        0,
        vec![
            json!({"cid": 7, "name": "ibxnonce01", "authorized_user": "u_wyhpii5zt6soh6nfkihsfm7ioq-cli"}),
            json!({"cid": 8, "name": "jwt-user", "authorized_user": "UA5AYGREMRAEGOPCMUIKJGMO6EDKLE3WEA7JBNIDW5VSEVBWNROOW6KQ"}),
            json!({"cid": 9, "name": "ibxnonce02", "authorized_user": earlier}),
        ],
    ));
    let listing = sweep.listing();
    assert_eq!(listing.liveness(&holder(signed_in)), Liveness::Live);
    assert_eq!(listing.held_by(&holder(signed_in)).count(), 1);
    assert_eq!(listing.held_by(&holder(earlier)).count(), 1);
}

fn scanner(server: &str, cid: u64, seed: u8) -> ConnTuple {
    let nkey = nkeys::KeyPair::new_from_raw(nkeys::KeyPairType::User, [seed; 32])
        .unwrap()
        .public_key();
    ConnTuple::new(&format!("N{server}"), cid, &nkey).unwrap()
}

fn scanner_conn(t: &ConnTuple) -> Value {
    json!({"cid": t.cid, "name": "cotal:auth-scan:s", "authorized_user": t.user_nkey})
}

#[test]
fn a_claim_on_a_departed_server_reads_gone_once_a_majority_answered_without_it() {
    // b leads the meta group and has not heard from a for 4 s.
    let topology = || {
        Topology::from_jsz(&[leader_jsz(
            "b",
            &[("a", 4_000_000_000), ("c", 200_000_000)],
            3,
        )])
        .unwrap()
    };
    let query = PlaneQuery {
        ledger: scanner("a", 7, 1),
        records: scanner("a", 8, 2),
    };
    // Server a (the scanners' own) is lost; b and c, a majority, answered without them.
    let mut sweep = Sweep::new(topology());
    sweep.add(&page("b", 1, 0, vec![conn(1, None)]));
    sweep.add(&page("c", 0, 0, vec![]));
    let verdict = sweep.plane_verdict(&query);
    assert_eq!(
        (verdict.ledger, verdict.records),
        (TupleLiveness::Gone, TupleLiveness::Gone)
    );
    assert!(verdict.note.unwrap().contains("have departed it"));
    // A leader elected after a was lost has never heard from it: departed too.
    let mut elected = Sweep::new(
        Topology::from_jsz(&[json!({
            "server": {"name": "b", "id": "Nb", "cluster": "c"},
            "data": {"meta_cluster": {"name": "c", "leader": "b", "cluster_size": 3, "replicas": [
                {"name": "a", "current": false, "active": 0},
                {"name": "c", "current": true, "active": 300_000_000},
            ]}},
        })
        .to_string()
        .into_bytes()])
        .unwrap(),
    );
    elected.add(&page("b", 0, 0, vec![]));
    elected.add(&page("c", 0, 0, vec![]));
    let verdict = elected.plane_verdict(&query);
    assert_eq!(
        (verdict.ledger, verdict.records),
        (TupleLiveness::Gone, TupleLiveness::Gone)
    );
    // Listed on a server that answered, a scanner is live whatever else is silent.
    let mut live = Sweep::new(topology());
    live.add(&page("b", 1, 0, vec![scanner_conn(&scanner("b", 3, 1))]));
    live.add(&page("c", 0, 0, vec![]));
    assert_eq!(live.plane_verdict(&query).ledger, TupleLiveness::Live);
    assert_eq!(live.plane_verdict(&query).records, TupleLiveness::Gone);
}

/// A member silent to the ping but still heard by the meta leader (slow, not lost), or silent
/// while no answering server leads the group, decides nothing: only the leader's own account
/// of a lost peer makes silence a departure.
#[test]
fn a_silent_member_the_leader_still_hears_or_no_leader_among_the_answering_decides_nothing() {
    let query = PlaneQuery {
        ledger: scanner("a", 7, 1),
        records: scanner("a", 8, 2),
    };
    let unknown = |topology: Topology| {
        let mut sweep = Sweep::new(topology);
        sweep.add(&page("b", 0, 0, vec![]));
        sweep.add(&page("c", 0, 0, vec![]));
        let v = sweep.plane_verdict(&query);
        (v.ledger, v.records) == (TupleLiveness::Unknown, TupleLiveness::Unknown)
    };
    // Heard 2.9 s ago: just under the bound.
    let heard = Topology::from_jsz(&[leader_jsz(
        "b",
        &[("a", DEPARTED_AFTER_NANOS - 100_000_000), ("c", 0)],
        3,
    )])
    .unwrap();
    assert!(unknown(heard));
    // Unheard for long, but reported by a follower (the leader is a, the silent one), whose
    // `active` means nothing.
    let follower = json!({
        "server": {"name": "b", "id": "Nb", "cluster": "c"},
        "data": {"meta_cluster": {"name": "c", "leader": "a", "cluster_size": 3, "replicas": [
            {"name": "a", "current": false, "active": 9_000_000_000u64},
            {"name": "c", "current": true, "active": 0},
        ]}},
    });
    let follower = Topology::from_jsz(&[follower.to_string().into_bytes()]).unwrap();
    assert!(unknown(follower));
}

#[test]
fn a_minority_or_a_partial_page_decides_nothing_and_a_complete_sweep_decides_as_before() {
    let topology = || Topology::from_jsz(&[cluster_jsz("a", &["b", "c"], 3)]).unwrap();
    let query = PlaneQuery {
        ledger: scanner("a", 7, 1),
        records: scanner("a", 8, 2),
    };
    let unknown = |sweep: &Sweep| {
        let v = sweep.plane_verdict(&query);
        (v.ledger, v.records) == (TupleLiveness::Unknown, TupleLiveness::Unknown)
    };
    // One of three answered: not a majority.
    let mut minority = Sweep::new(topology());
    minority.add(&page("b", 0, 0, vec![]));
    assert!(unknown(&minority));
    // A majority, but one of them has more pages to list.
    let mut partial = Sweep::new(topology());
    partial.add(&page("b", 2, 0, vec![conn(1, None)]));
    partial.add(&page("c", 0, 0, vec![]));
    assert!(unknown(&partial));
    // Everyone answered: the scanners on a are listed, so live; absent, gone, no note.
    let mut complete = Sweep::new(topology());
    complete.add(&page("a", 1, 0, vec![scanner_conn(&query.ledger)]));
    complete.add(&page("b", 0, 0, vec![]));
    complete.add(&page("c", 0, 0, vec![]));
    let v = complete.plane_verdict(&query);
    assert_eq!(
        (v.ledger, v.records, v.note),
        (TupleLiveness::Live, TupleLiveness::Gone, None)
    );
}
