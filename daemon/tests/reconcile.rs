//! `cotal-authd gate reconcile` on a real operator-mode server, over residue a real crashed
//! start leaves (the binary's `COTAL_AUTHD_KILL_AT` hook freezes and then kills or stops it):
//! a dead holder is reopened (F52: only after a complete listing shows it gone, and its
//! connections are verified evicted, F68), a live one is refused and its gate left frozen
//! (exit 5), and `up` over a freeze that is not its own refuses naming this command.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod common;

use std::fs;
use std::path::Path;
use std::process::Output;

use common::*;
use rustix::process::Signal;
use serde_json::Value;

fn reconcile(state: &Path, json: bool) -> Output {
    let iid = instance(state);
    let url = server_url(state);
    let mut args = vec![
        "gate",
        "reconcile",
        "--space",
        SPACE,
        "--server",
        &url,
        "--endpoint",
        "auth",
        "--instance",
        &iid,
        "--state-dir",
        state.to_str().unwrap(),
    ];
    if json {
        args.push("--json");
    }
    run(&args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Registers once and kills the plane, then finds the first write after which a killed restart
/// leaves the gate frozen: the restart's freeze. Returns that write's number.
fn registered_then_freeze_write(state: &Path, reaper: &mut Reaper) -> usize {
    init(state);
    reaper.0.push(up(state));
    ready(state, reaper.0.last_mut().unwrap());
    reaper.0.last_mut().unwrap().kill().unwrap();
    for k in 1..32 {
        let mut victim = start_killed_at(state, &format!("after:{k}"));
        assert!(
            died(state, &mut victim).is_some(),
            "no freeze before write {k}"
        );
        if gate(state).unwrap()["state"] == "frozen" {
            // Heal it (the restart resumes its recorded op) and stop that plane too.
            reaper.0.push(up(state));
            ready(state, reaper.0.last_mut().unwrap());
            reaper.0.last_mut().unwrap().kill().unwrap();
            return k;
        }
    }
    panic!("no restart froze the gate");
}

/// F52: a holder that is alive (stopped mid-registration, its connections open) is never
/// reconciled over: exit 5, "ALIVE", the gate untouched. Once it is dead the same command
/// reopens the gate, and the next `up` comes up.
#[test]
fn f52_reconcile_refuses_a_live_holder_and_reopens_once_it_is_gone() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    let freeze = registered_then_freeze_write(&state, &mut reaper);

    let open = reconcile(&state, false);
    assert_eq!(open.status.code(), Some(1), "{}", text(&open.stderr));
    assert!(
        text(&open.stderr).contains("not \"frozen\""),
        "{}",
        text(&open.stderr)
    );

    reaper
        .0
        .push(start_killed_at(&state, &format!("after:{freeze}:stop")));
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while gate(&state).unwrap()["state"] != "frozen" {
        assert!(
            std::time::Instant::now() < deadline,
            "the stopped start never froze"
        );
        std::thread::sleep(POLL);
    }
    let before = gate(&state).unwrap();
    let refused = reconcile(&state, false);
    assert_eq!(refused.status.code(), Some(5), "{}", text(&refused.stderr));
    let (out, err) = (text(&refused.stdout), text(&refused.stderr));
    assert!(err.contains("ALIVE"), "{err}");
    assert!(err.contains("the gate stays frozen"), "{err}");
    assert!(out.contains("live ("), "{out}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(
        gate(&state).unwrap(),
        before,
        "a refused reconcile changes nothing"
    );

    // The holder dies: its connections close with it.
    let stopped = reaper.0.last_mut().unwrap();
    stopped.kill().unwrap();
    stopped.wait().unwrap();
    let done = reconcile(&state, true);
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    let report: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(report["reopened"], true);
    assert_eq!(report["liveness"], "gone");
    assert_eq!(report["opId"], before["op"]["opId"]);
    let after = gate(&state).unwrap();
    assert_eq!(after["state"], "open");
    assert_eq!(
        after["generation"].as_u64().unwrap(),
        before["generation"].as_u64().unwrap() + 1
    );
    let epoch = after["processEpoch"].as_u64().unwrap();

    reaper.0.push(up(&state));
    let d = ready(&state, reaper.0.last_mut().unwrap());
    assert_eq!(d["processEpoch"], epoch + 1);
    signal(reaper.0.last().unwrap(), Signal::TERM);
    assert_eq!(
        exits(reaper.0.last_mut().unwrap(), EXIT_TIMEOUT).code(),
        Some(0)
    );
}

/// A freeze left by an operation this state dir did not record (a lost record, another copy of
/// the instance): `up` refuses naming the real command, the command reopens over the dead
/// holder, and `up` then comes up.
#[test]
fn f14_up_refuses_a_foreign_freeze_naming_gate_reconcile_which_reopens_it() {
    require_server();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut reaper = Reaper(Vec::new(), state.clone());
    let freeze = registered_then_freeze_write(&state, &mut reaper);
    let mut victim = start_killed_at(&state, &format!("after:{freeze}"));
    assert!(died(&state, &mut victim).is_some());
    fs::remove_file(state.join(SEGMENT).join("auth-registration.json")).unwrap();

    let refused = command()
        .args(["up", "--space", SPACE, "--state-dir"])
        .arg(&state)
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    let err = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let remedy = format!(
        "cotal-authd gate reconcile --space {SPACE} --endpoint auth --instance {}",
        instance(&state)
    );
    assert!(err.contains(&remedy), "{err}");
    assert_eq!(gate(&state).unwrap()["state"], "frozen");

    let done = reconcile(&state, false);
    let out = text(&done.stdout);
    assert_eq!(done.status.code(), Some(0), "{}", text(&done.stderr));
    assert!(out.contains("gone ("), "{out}");
    assert!(out.contains("did: reopened the gate"), "{out}");
    reaper.0.push(up(&state));
    ready(&state, reaper.0.last_mut().unwrap());
}
