//! A reference endpoint binds on this plane's `agent` profile: the official NATS JS client
//! libraries the reference uses (`@nats-io/transport-node`, `@nats-io/jetstream`,
//! `@nats-io/kv`, pinned by `tests/reference-client/package-lock.json` and installed by
//! `scripts/nats-js.sh`) connect as a signed-in agent through the auth callout (the space's
//! sentinel creds, the bearer as the token, the inbox nonce as the connection name and inbox
//! prefix) and make `bindConnection`'s calls on the space's own operator-mode server:
//! `new Kvm(nc)`, both buckets opened by name, `kv.watch()` awaited on `cotal_presence_<s>` and
//! on `cotal_channels_<s>` (ordered push consumers), each delivering an update (the agent's own
//! presence row put with `kv.put` on `<owner>.<actor>`; a channel-registry row the test writes),
//! each stopped and its ordered consumer deleted, all with no permission violation. A `kv.put`
//! on another principal's presence key is refused by the server.
//!
//! `tests/reference-client/agent-watch.mjs` makes the calls and nothing else; the bytes it
//! writes are chosen here and read back through an unrestricted connection.
//!
//! Needs Node.js and npm: when they or the libraries are missing the test fails and names the
//! install command, never skips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::process::ExitStatus;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use common::reference_client::{install, run_script};
use common::signin::{post, sentinel, Space};
use common::*;
use cotal_io_nats::async_nats::jetstream::{self, kv};
use futures::StreamExt as _;
use serde_json::{json, Value};

const CALLS: &str = "tests/reference-client/agent-watch.mjs";
const NONCE: &str = "ibxagentwatch01";
const ACTOR: &str = "cli";
const CHANNEL: &str = "general";

/// The positive steps the script must report, in order.
const STEPS: [&str; 9] = [
    "connect",
    "kv.open",
    "presence.watch",
    "channels.watch",
    "presence.put",
    "presence.update",
    "channels.update",
    "presence.stop",
    "channels.stop",
];

fn run_calls(config: Value, answer: impl Fn(&Value) -> Value) -> (ExitStatus, Vec<Value>, String) {
    run_script(CALLS, &config, answer)
}

async fn consumers(js: &jetstream::Context, stream: &str) -> Vec<String> {
    let stream = js.get_stream(stream).await.unwrap();
    let mut names = stream.consumer_names();
    let mut out = Vec::new();
    while let Some(name) = names.next().await {
        out.push(name.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reference_nats_js_agent_watches_presence_and_the_channel_registry() {
    install();
    let mut space = Space::new();
    space.grant_lists(ACTOR, "alice", "", CHANNEL, CHANNEL);
    let server = space.serve_broker();
    let d = space.up(&["--server", &server]);

    // The presence and channel-registry buckets are the mesh's, not the auth plane's: in a
    // Cotal deployment `cotal up` provisions them (`up` here makes only the authority's
    // stores), so the test makes them over an unrestricted data-account connection before the
    // agent connects.
    let admin = space.admin(&server).await;
    let js = jetstream::new(admin.space().unwrap().client().clone());
    let mut buckets = Vec::new();
    for bucket in ["presence", "channels"] {
        buckets.push(
            js.create_key_value(kv::Config {
                bucket: format!("cotal_{bucket}_{SPACE}"),
                history: 1,
                ..Default::default()
            })
            .await
            .unwrap(),
        );
    }
    let [presence_kv, channels_kv] = <[kv::Store; 2]>::try_from(buckets).unwrap();

    let (status, body) = post(
        d["url"].as_str().unwrap(),
        Some(d["cap"].as_str().unwrap()),
        &json!({"idpToken": space.idp_token("alice"), "actor": ACTOR, "ttlSec": 120}),
    );
    assert_eq!(status, 200, "{body}");
    let owner = body["owner"].as_str().unwrap().to_owned();
    let token = body["token"].as_str().unwrap().to_owned();
    let me = format!("{owner}.{ACTOR}");
    // Another actor of the same owner, and another owner's actor of the same name.
    let foreign = [
        format!("{owner}.other"),
        format!("{}.{ACTOR}", space.owner("bob")),
    ];
    let presence = serde_json::to_vec(&json!({
        "card": {"id": me, "name": ACTOR}, "status": "idle", "activity": "watching",
    }))
    .unwrap();
    let channel = serde_json::to_vec(&json!({"name": CHANNEL, "description": "the mesh"})).unwrap();
    let config = json!({
        "server": server,
        "space": SPACE,
        "creds": sentinel(&space),
        "token": token,
        "nonce": NONCE,
        "presenceKey": me,
        "presence": B64.encode(&presence),
        "foreignKeys": foreign,
        "channelKey": CHANNEL,
    });

    // The registry row the agent cannot write: put by the admin connection when asked.
    let handle = tokio::runtime::Handle::current();
    let writer = channels_kv.clone();
    let written = channel.clone();
    let (status, steps, stderr) = tokio::task::spawn_blocking(move || {
        run_calls(config, |need| {
            assert_eq!(need["need"], "channel", "an unknown ask: {need}");
            let key = need["key"].as_str().unwrap().to_owned();
            let revision = handle
                .block_on(writer.put(key, written.clone().into()))
                .unwrap();
            json!({"revision": revision, "bytes": B64.encode(&written)})
        })
    })
    .await
    .unwrap();
    let said = || {
        let lines: Vec<String> = steps.iter().map(Value::to_string).collect();
        format!("{}\nstderr: {stderr}", lines.join("\n"))
    };
    assert!(status.success(), "{CALLS} exited {status}:\n{}", said());

    // Every positive step succeeded, in order, with no permission violation on the way.
    let step = |name: &str| {
        steps
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("no {name} step:\n{}", said()))
    };
    let names: Vec<&str> = steps.iter().filter_map(|s| s["step"].as_str()).collect();
    assert_eq!(names[..STEPS.len()], STEPS, "{}", said());
    for name in STEPS {
        let s = step(name);
        assert_eq!(s["ok"], true, "{}", said());
        assert_eq!(s["violations"], json!([]), "{name}: {}", said());
    }
    // Both updates arrived on the live watch (not as the initial snapshot: both buckets were
    // empty when the watches started).
    for name in ["presence.update", "channels.update"] {
        assert_eq!(step(name)["isUpdate"], true, "{name}: {}", said());
    }
    assert_eq!(step("presence.update")["key"], me.as_str(), "{}", said());
    assert_eq!(step("channels.update")["key"], CHANNEL, "{}", said());
    // Each stop deleted the consumer its watch created.
    for (watch, stop) in [
        ("presence.watch", "presence.stop"),
        ("channels.watch", "channels.stop"),
    ] {
        let created = step(watch)["consumer"].as_str().unwrap();
        assert_eq!(step(stop)["consumer"], created, "{}", said());
    }

    // Another principal's presence key: refused by the server, which names the subject.
    let bucket = format!("cotal_presence_{SPACE}");
    let refusals: Vec<(String, String)> = foreign
        .iter()
        .map(|k| {
            (
                format!("refused.presence-put.{k}"),
                format!("$KV.{bucket}.{k}"),
            )
        })
        .collect();
    assert_eq!(
        names[STEPS.len()..],
        refusals.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        "{}",
        said()
    );
    for (name, subject) in &refusals {
        let s = step(name);
        assert_eq!(
            (&s["ok"], &s["expect"]),
            (&json!(false), &json!("refusal")),
            "{}",
            said()
        );
        let violations = s["violations"].as_array().unwrap();
        assert!(
            violations.iter().any(|v| {
                let v = v.as_str().unwrap_or_default();
                v.contains("Permissions Violation for Publish") && v.contains(subject.as_str())
            }),
            "{name}: no publish violation naming {subject}:\n{}",
            said()
        );
    }

    // What the admin view reads back: the agent's own row, nothing on the foreign keys, and no
    // watcher consumer left on either bucket's stream.
    let revision = step("presence.put")["revision"].as_u64().unwrap();
    let entry = presence_kv.entry(me.as_str()).await.unwrap().unwrap();
    assert_eq!(
        (entry.revision, &entry.value[..]),
        (revision, &presence[..])
    );
    for key in &foreign {
        assert!(
            presence_kv.entry(key.as_str()).await.unwrap().is_none(),
            "{key} was written"
        );
    }
    for bucket in ["presence", "channels"] {
        let stream = format!("KV_cotal_{bucket}_{SPACE}");
        let left = consumers(&js, &stream).await;
        assert!(left.is_empty(), "{stream} keeps consumers {left:?}");
    }
    admin.close().await.unwrap();
}
