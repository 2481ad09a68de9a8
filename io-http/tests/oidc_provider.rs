//! The plane's IdP verification against tokens and a JWKS this project did not produce: a real
//! OpenID provider, panva's certified `oidc-provider` from npm (pinned by
//! `scripts/oidc-provider.sh`), run by `tests/oidc/provider.mjs` and signing EdDSA ID tokens.
//! Its helper route drives the real authorization-code flow (dev login as the subject,
//! consent, code, `POST /token`), so the ID token here is minted end to end by oidc-provider.
//!
//! Needs Node.js and npm: when they or the package are missing the test fails and names the
//! install command, never skips.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use cotal_core::error::ErrorCode;
use cotal_core::jwt::UnixSeconds;
use cotal_io_http::idp_keys::{IdpKeys, IdpSource};
use jsonwebtoken::Algorithm;

/// The command that installs the pinned provider, quoted in every "missing" failure.
const INSTALL_COMMAND: &str = "scripts/oidc-provider.sh";
/// From spawning node until the provider prints `ready`.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Connect, read and write timeout of one request to the helper route (one whole code flow).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn now() -> UnixSeconds {
    UnixSeconds(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs the install script (a no-op once the pinned version is there).
fn install() {
    let out = Command::new("bash")
        .arg(repo_root().join(INSTALL_COMMAND))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {INSTALL_COMMAND} ({e}); bash is needed"));
    assert!(
        out.status.success(),
        "{INSTALL_COMMAND} failed (it needs node and npm; run it by hand to install the pinned \
         oidc-provider into .tools/oidc): {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// The running provider; killed when dropped.
struct Provider {
    child: Child,
    origin: String,
    stderr: Arc<Mutex<String>>,
}

impl Provider {
    fn start() -> Provider {
        install();
        let port = free_port();
        let mut child = Command::new("node")
            .arg(repo_root().join("tests/oidc/provider.mjs"))
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start node ({e}); install Node.js >= 20, then {INSTALL_COMMAND}")
            });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = String::new();
            let _ = err_pipe.read_to_string(&mut buf);
            sink.lock().unwrap().push_str(&buf);
        });
        let (ready_tx, ready_rx) = mpsc::channel();
        let out_pipe = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(out_pipe).lines() {
                let Ok(line) = line else { break };
                if line == "ready" {
                    let _ = ready_tx.send(());
                }
            }
        });
        let provider = Provider {
            child,
            origin: format!("http://127.0.0.1:{port}"),
            stderr,
        };
        match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(()) => provider,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                // Stdout closed without `ready`: node exited; give its stderr time to drain.
                std::thread::sleep(Duration::from_millis(200));
                panic!(
                    "tests/oidc/provider.mjs exited before printing ready: {}",
                    provider.stderr()
                )
            }
            Err(mpsc::RecvTimeoutError::Timeout) => panic!(
                "tests/oidc/provider.mjs did not print ready within {START_TIMEOUT:?}: {}",
                provider.stderr()
            ),
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn source(&self) -> IdpSource {
        IdpSource {
            issuer: self.origin.clone(),
            audience: self.origin.clone(),
            jwks_uri: format!("{}/jwks", self.origin),
        }
    }

    /// An ID token for `sub` through the helper route (`client`: none for the plane's client,
    /// `Some("other")` for the second one), with a plain HTTP/1.1 GET.
    fn id_token(&self, sub: &str, client: Option<&str>) -> String {
        let mut path = format!("/test/id-token?sub={sub}");
        if let Some(client) = client {
            path.push_str(&format!("&client={client}"));
        }
        let host = self.origin.trim_start_matches("http://");
        let mut stream = TcpStream::connect(host).unwrap();
        stream.set_read_timeout(Some(REQUEST_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(REQUEST_TIMEOUT)).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap_or_else(|e| {
            panic!(
                "GET {path} gave no whole answer within {REQUEST_TIMEOUT:?} ({e}): {}",
                self.stderr()
            )
        });
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(
            head.starts_with("HTTP/1.1 200"),
            "GET {path}: {head}\n{body}\n{}",
            self.stderr()
        );
        body.trim().to_owned()
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `token` with one byte of its signature flipped.
fn tampered(token: &str) -> String {
    let (signed, sig) = token.rsplit_once('.').unwrap();
    let mut sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
    sig[0] ^= 0x01;
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig))
}

#[tokio::test]
async fn a_real_openid_provider_s_eddsa_id_token_verifies_against_its_published_jwks() {
    let provider = Provider::start();
    let keys = IdpKeys::new(provider.source());

    let token = provider.id_token("alice", None);
    let who = keys
        .verify(&token, now())
        .await
        .unwrap_or_else(|e| panic!("the provider's ID token was refused: {e:?}\ntoken: {token}"));
    assert_eq!(who.subject, "alice");
    assert_eq!(who.issuer, provider.origin);
    assert_eq!(who.algorithm, Algorithm::EdDSA);
    assert!(who.expires_at.0 > who.issued_at.0, "{who:?}");

    // The same provider's token for another client: signed by the same key, refused for its
    // audience.
    let other = provider.id_token("alice", Some("other"));
    let err = keys.verify(&other, now()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err:?}");
    assert!(err.message.contains("audience"), "{err:?}");
    assert!(err.message.contains("other-client"), "{err:?}");

    // One signature byte flipped: refused on the signature.
    let err = keys.verify(&tampered(&token), now()).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::PermissionDenied, "{err:?}");
    assert!(err.message.contains("signature does not verify"), "{err:?}");
}
