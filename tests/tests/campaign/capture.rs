//! The checker's side of a fault campaign on a live cluster, shared by the core campaign
//! (`nats_fault_campaign`) and the daemon's (`daemon/tests/fault_campaign.rs`, which includes
//! this file by path): keep the auth stream's whole history, capture every message of it as it
//! lands, and read the acknowledged revisions back after the run. Plain async-nats on the
//! checker's own connection; none of the plane's code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use cotal_io_nats::async_nats::{self, jetstream, Client};
use cotal_tests::fault::checker::{AtSeq, FinalReads, KvOp, Last, StreamMsg};
use cotal_tests::fault::history::Event;
use futures::StreamExt;

/// Lifts the auth store's per-key history limit before anything is written, so the stream keeps
/// every message of the run and the checker sees each revision however far the capture lags.
/// The plane accepts it: the auth store's history carries no authority (every read is the
/// last message) and is not part of the verified shape (`io-nats` `shape`).
pub async fn keep_all_history(client: &Client, stream: &str) {
    let js = jetstream::new(client.clone());
    let mut handle = js.get_stream(stream).await.unwrap();
    let mut config = handle.info().await.unwrap().config.clone();
    config.max_messages_per_subject = -1;
    js.update_stream(config).await.unwrap();
}

/// Reads every message of `stream` in order on `client` (the checker's own connection) until
/// `done` is set and the capture has reached the stream's last sequence. An ordered consumer that breaks under a
/// fault is recreated from the next sequence.
pub async fn capture(
    client: Client,
    stream: String,
    prefix: String,
    done: Arc<AtomicBool>,
) -> Vec<StreamMsg> {
    let mut captured = Vec::new();
    let mut next = 1u64;
    let js = jetstream::new(client);
    let mut target: Option<u64> = None;
    loop {
        if let Some(t) = target {
            if next > t {
                return captured;
            }
        }
        let Ok(handle) = js.get_stream(&stream).await else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let config = jetstream::consumer::pull::OrderedConfig {
            deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence {
                start_sequence: next,
            },
            ..Default::default()
        };
        let Ok(consumer) = handle.create_consumer(config).await else {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        };
        let Ok(mut messages) = consumer.messages().await else {
            continue;
        };
        loop {
            if target.is_none() && done.load(Ordering::Relaxed) {
                if let Ok(mut h) = js.get_stream(&stream).await {
                    if let Ok(info) = h.info().await {
                        target = Some(info.state.last_sequence);
                    }
                }
            }
            if target.is_some_and(|t| next > t) {
                return captured;
            }
            let item = tokio::time::timeout(Duration::from_millis(500), messages.next()).await;
            let message = match item {
                Err(_) => continue,
                Ok(Some(Ok(m))) => m,
                Ok(Some(Err(_)) | None) => break,
            };
            let Ok(info) = message.info() else { break };
            let seq = info.stream_sequence;
            if seq < next {
                continue;
            }
            let op = match message
                .headers
                .as_ref()
                .and_then(|h| h.get("KV-Operation"))
                .map(|v| v.as_str().to_owned())
                .as_deref()
            {
                Some("DEL") => KvOp::Delete,
                Some("PURGE") => KvOp::Purge,
                _ => KvOp::Put,
            };
            let key = message
                .subject
                .as_str()
                .strip_prefix(prefix.as_str())
                .unwrap_or(message.subject.as_str())
                .to_owned();
            captured.push(StreamMsg {
                seq,
                key,
                op,
                payload: message.payload.to_vec(),
            });
            next = seq + 1;
        }
    }
}

/// Leader reads, after the run, of every acknowledged touch and the last message of each gate
/// and revoked row.
pub async fn final_reads(
    client: Client,
    stream: &str,
    prefix: &str,
    events: &[Event],
) -> FinalReads {
    let js = jetstream::new(client);
    let handle = js.get_stream(stream).await.unwrap();
    let mut finals = FinalReads::default();
    for event in events {
        let key = match event {
            Event::Registered { gate, .. } | Event::Released { gate, .. } => gate,
            Event::Revoked { row_key, .. } => row_key,
            _ => continue,
        };
        if !finals.last.contains_key(key) {
            let last = handle
                .get_last_raw_message_by_subject(&format!("{prefix}{key}"))
                .await
                .unwrap();
            let last = Last {
                revision: last.sequence,
                payload: last.payload.to_vec(),
            };
            finals.last.insert(key.clone(), last);
        }
        let Event::Released { gate_revision, .. } = event else {
            continue;
        };
        if !finals.at_seq.contains_key(gate_revision) {
            let read = handle.get_raw_message(*gate_revision).await;
            let at = match read {
                Ok(m) => AtSeq::Present {
                    key: m
                        .subject
                        .as_str()
                        .strip_prefix(prefix)
                        .unwrap_or(m.subject.as_str())
                        .to_owned(),
                    payload: m.payload.to_vec(),
                },
                Err(e)
                    if e.kind()
                        == async_nats::jetstream::stream::LastRawMessageErrorKind::NoMessageFound =>
                {
                    AtSeq::Absent
                }
                Err(e) => panic!("the final read of revision {gate_revision} failed: {e}"),
            };
            finals.at_seq.insert(*gate_revision, at);
        }
    }
    finals
}
