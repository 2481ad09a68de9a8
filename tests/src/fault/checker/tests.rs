//! The checker can fail: a clean run passes, and each rule catches its own seeded violation.

use super::*;

const GATE: &str = "epgate.svc.iiiiiiiiiiiiiiiiiiiiiiiiii";
const ROW: &str = "epcred.svc.iiiiiiiiiiiiiiiiiiiiiiiiii.sha256-aa";

fn gate(state: &str, generation: u64, epoch: u64) -> Vec<u8> {
    let op = if state == "open" {
        String::new()
    } else {
        r#","op":{"opId":"oooooooooooooooooooooooooo","kind":"registration"}"#.to_owned()
    };
    format!(
        r#"{{"state":"{state}","generation":{generation},"processEpoch":{epoch},"registrationRevision":3,"nameAuthorityRevision":0,"principal":"u_c.term"{op}}}"#
    )
    .into_bytes()
}

fn row(state: &str) -> Vec<u8> {
    format!(r#"{{"credentialId":"sha256-aa","state":"{state}","exp":1}}"#).into_bytes()
}

fn put(seq: u64, key: &str, payload: Vec<u8>) -> StreamMsg {
    StreamMsg {
        seq,
        key: key.to_owned(),
        op: KvOp::Put,
        payload,
    }
}

/// Open at generation 1 epoch 0; a row staged and released by a touch at 3; a barrier that
/// freezes at 4, revokes at 5 and reopens at 6 for epoch 1.
fn clean() -> (Vec<StreamMsg>, FinalReads, Vec<Event>) {
    let captured = vec![
        put(1, GATE, gate("open", 1, 0)),
        put(2, ROW, row("active")),
        put(3, GATE, gate("open", 1, 0)),
        put(4, GATE, gate("frozen", 1, 0)),
        put(5, ROW, row("revoked")),
        put(6, GATE, gate("open", 2, 1)),
    ];
    let mut finals = FinalReads::default();
    finals.at_seq.insert(
        3,
        AtSeq::Present {
            key: GATE.into(),
            payload: gate("open", 1, 0),
        },
    );
    finals.last.insert(
        GATE.into(),
        Last {
            revision: 6,
            payload: gate("open", 2, 1),
        },
    );
    finals.last.insert(
        "cred.u.x".into(),
        Last {
            revision: 9,
            payload: row("revoked"),
        },
    );
    let events = vec![
        Event::Registered {
            gate: GATE.into(),
            worker: 0,
            epoch: 0,
            generation: 1,
            registration_revision: 3,
        },
        Event::Released {
            gate: GATE.into(),
            worker: 0,
            row_key: ROW.into(),
            gate_revision: 3,
            epoch: 0,
            registration_revision: 3,
        },
        Event::Registered {
            gate: GATE.into(),
            worker: 1,
            epoch: 1,
            generation: 2,
            registration_revision: 3,
        },
        Event::Admitted {
            row_key: "cred.u.x".into(),
            started_ms: 10,
        },
        Event::Revoked {
            row_key: "cred.u.x".into(),
            acked_ms: 20,
        },
        Event::Refused {
            op: "mint",
            code: "expired".into(),
            message: "fenced".into(),
        },
    ];
    (captured, finals, events)
}

fn rules(report: &Report) -> Vec<&str> {
    report
        .violations
        .iter()
        .filter_map(|v| v.split(':').next())
        .collect()
}

#[test]
fn a_clean_run_passes() {
    let (captured, finals, events) = clean();
    let report = check(&captured, &finals, &events);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!((report.releases, report.registrations), (1, 2));
}

#[test]
fn a_release_at_a_frozen_gate_is_caught() {
    let (mut captured, finals, events) = clean();
    captured[2] = put(3, GATE, gate("frozen", 1, 0));
    let report = check(&captured, &finals, &events);
    assert!(
        rules(&report).contains(&"released-inside-fence"),
        "{report:?}"
    );
}

#[test]
fn a_reopen_before_the_released_row_is_revoked_is_caught() {
    let (mut captured, finals, events) = clean();
    captured[4] = put(5, GATE, gate("open", 2, 1));
    captured[5] = put(6, ROW, row("revoked"));
    let report = check(&captured, &finals, &events);
    assert!(
        rules(&report).contains(&"barrier-revokes-released"),
        "{report:?}"
    );
}

#[test]
fn an_abort_reopen_at_the_same_coordinates_keeps_the_released_credential() {
    let (mut captured, mut finals, mut events) = clean();
    // Frozen at 4 by a registration that fails before any revoke and reopens at 5 with only
    // the generation moved; the real successor at 7 comes after the revoke at 6.
    captured[4] = put(5, GATE, gate("open", 2, 0));
    captured[5] = put(6, ROW, row("revoked"));
    captured.push(put(7, GATE, gate("frozen", 2, 0)));
    captured.push(put(8, GATE, gate("open", 3, 1)));
    events[2] = Event::Registered {
        gate: GATE.into(),
        worker: 1,
        epoch: 1,
        generation: 3,
        registration_revision: 3,
    };
    finals.last.insert(
        GATE.into(),
        Last {
            revision: 8,
            payload: gate("open", 3, 1),
        },
    );
    let report = check(&captured, &finals, &events);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    // Without the revoke the successor's reopen is caught.
    captured[5] = put(6, "epcred.other", row("revoked"));
    let report = check(&captured, &finals, &events);
    assert!(
        rules(&report).contains(&"barrier-revokes-released"),
        "{report:?}"
    );
}

#[test]
fn a_generation_that_goes_back_or_skips_is_caught() {
    let (mut captured, finals, events) = clean();
    captured[5] = put(6, GATE, gate("open", 3, 1));
    captured.push(put(7, GATE, gate("frozen", 1, 1)));
    let report = check(&captured, &finals, &events);
    // The registration the history says reopened at generation 2 is not in the stream either.
    assert_eq!(
        rules(&report),
        vec![
            "coordinates-advance",
            "coordinates-advance",
            "acked-writes-survive"
        ],
        "{report:?}"
    );
}

#[test]
fn two_registrations_of_one_epoch_and_a_stale_release_are_caught() {
    let (captured, finals, mut events) = clean();
    events.push(Event::Registered {
        gate: GATE.into(),
        worker: 2,
        epoch: 1,
        generation: 3,
        registration_revision: 3,
    });
    events.push(Event::Released {
        gate: GATE.into(),
        worker: 0,
        row_key: ROW.into(),
        gate_revision: 1,
        epoch: 1,
        registration_revision: 3,
    });
    let report = check(&captured, &finals, &events);
    let found = rules(&report);
    assert_eq!(
        found.iter().filter(|r| **r == "one-live-epoch").count(),
        2,
        "{report:?}"
    );
}

#[test]
fn an_acknowledged_write_rolled_back_is_caught() {
    let (captured, mut finals, events) = clean();
    finals.at_seq.insert(
        3,
        AtSeq::Present {
            key: ROW.into(),
            payload: row("active"),
        },
    );
    let report = check(&captured, &finals, &events);
    assert!(
        rules(&report).contains(&"acked-writes-survive"),
        "{report:?}"
    );
    // Trimmed by history is fine only while a later revision of the key exists.
    finals.at_seq.insert(3, AtSeq::Absent);
    assert!(check(&captured, &finals, &events).violations.is_empty());
    finals.last.insert(
        GATE.into(),
        Last {
            revision: 3,
            payload: gate("open", 2, 1),
        },
    );
    let report = check(&captured, &finals, &events);
    assert!(
        rules(&report).contains(&"acked-writes-survive"),
        "{report:?}"
    );
}

#[test]
fn a_registration_or_a_revoke_the_store_forgot_is_caught() {
    let (captured, mut finals, mut events) = clean();
    // The store ends with the gate back at generation 1 and the revoked row active again.
    finals.last.insert(
        GATE.into(),
        Last {
            revision: 6,
            payload: gate("open", 1, 0),
        },
    );
    finals.last.insert(
        "cred.u.x".into(),
        Last {
            revision: 9,
            payload: row("active"),
        },
    );
    // And a root credential handed out with no active row in the stream.
    events.push(Event::Exchanged {
        row_key: "cred.u.y".into(),
    });
    let report = check(&captured, &finals, &events);
    assert_eq!(
        rules(&report),
        vec![
            "acked-writes-survive",
            "acked-writes-survive",
            "released-inside-fence"
        ],
        "{report:?}"
    );
}

#[test]
fn a_revived_row_a_late_admission_and_an_internal_refusal_are_caught() {
    let (mut captured, finals, mut events) = clean();
    captured.push(put(7, ROW, row("active")));
    events.push(Event::Admitted {
        row_key: "cred.u.x".into(),
        started_ms: 21,
    });
    events.push(Event::Refused {
        op: "register",
        code: "internal".into(),
        message: "row".into(),
    });
    let report = check(&captured, &finals, &events);
    assert_eq!(
        rules(&report),
        vec![
            "rows-monotonic",
            "revocation-shuts-connects",
            "refusal-codes"
        ],
        "{report:?}"
    );
}
