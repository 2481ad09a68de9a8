//! The README walk-through's last step: connect to the space as a signed-in actor with a
//! standard NATS client (async-nats), from the bundle `cotal-authd login` wrote, and watch the
//! plane's callout enforce the grant — a publish on a granted channel is delivered, one on
//! another channel is refused by the server.
//!
//!     cargo run -p cotal-authd --example connect -- [STATE_DIR] [SPACE] [ACTOR] [CHANNEL]
//!
//! Defaults: `.cotal demo cli team`.

use std::time::Duration;

use cotal_io_fs::random;
use cotal_io_nats::async_nats::{ConnectOptions, Event};
use futures::StreamExt as _;
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_owned());
    let (root, space, actor, channel) = (
        arg(0, ".cotal"),
        arg(1, "demo"),
        arg(2, "cli"),
        arg(3, "team"),
    );
    let segment: String = space.bytes().map(|b| format!("{b:02x}")).collect();
    let bundle = format!("{root}/login/space.{segment}/{actor}/login.json");
    let login: Value = serde_json::from_slice(
        &std::fs::read(&bundle)
            .map_err(|e| format!("{bundle}: {e}; sign in first with `cotal-authd login`"))?,
    )
    .map_err(|e| format!("{bundle}: {e}"))?;
    let text = |name: &str| {
        login
            .get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let creds = std::fs::read_to_string(text("creds")).map_err(|e| e.to_string())?;
    let token = std::fs::read_to_string(text("bearer")).map_err(|e| e.to_string())?;
    // The connection name is the client's inbox nonce; its replies arrive under _INBOX_<nonce>.
    let nonce: String = random::random_bytes::<8>()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let (tx, mut errors) = tokio::sync::mpsc::unbounded_channel();
    let client = ConnectOptions::new()
        .credentials(&creds)
        .map_err(|e| e.to_string())?
        .token(token)
        .name(&nonce)
        .custom_inbox_prefix(format!("_INBOX_{nonce}"))
        .event_callback(move |event| {
            let tx = tx.clone();
            async move {
                if let Event::ServerError(e) = event {
                    let _ = tx.send(e.to_string());
                }
            }
        })
        .connect(text("server"))
        .await
        .map_err(|e| format!("the connect was refused: {e}"))?;
    println!(
        "connected as {}.{actor} through the auth callout",
        text("owner")
    );
    let mut live = client
        .subscribe(format!("cotal.{space}.chat.*.*.{channel}"))
        .await
        .map_err(|e| e.to_string())?;
    client.flush().await.map_err(|e| e.to_string())?;
    let granted = format!("cotal.{space}.chat.{}.{actor}.{channel}", text("owner"));
    client
        .publish(granted.clone(), "hello".into())
        .await
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(5), live.next()).await {
        Ok(Some(m)) => println!(
            "delivered on {}: {}",
            m.subject,
            String::from_utf8_lossy(&m.payload)
        ),
        _ => return Err(format!("the publish on {granted} was not delivered")),
    }
    let forbidden = format!("cotal.{space}.chat.{}.{actor}.not-{channel}", text("owner"));
    client
        .publish(forbidden.clone(), "nope".into())
        .await
        .map_err(|e| e.to_string())?;
    client.flush().await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(5), errors.recv()).await {
        Ok(Some(e)) => println!("refused on {forbidden}: {e}"),
        _ => return Err(format!("the publish on {forbidden} was not refused")),
    }
    Ok(())
}
