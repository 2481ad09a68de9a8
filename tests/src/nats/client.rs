//! A minimal synchronous NATS client for live tests: `CONNECT` (optionally with a user JWT and
//! the nonce signature that proves the caller holds its seed), `SUB`, `PUB`, `MSG` and
//! `PING`/`PONG`, and the server's `-ERR` lines captured as values.
//!
//! Every operation that may be refused ([`NatsClient::connect`], [`NatsClient::subscribe`],
//! [`NatsClient::publish`]) is followed by a `PING` and waits for its `PONG`: the server
//! handles one connection's protocol in order, so an `-ERR` caused by the operation arrives
//! before that `PONG`, and "no error before the `PONG`" means the operation was accepted.
//! Messages that arrive meanwhile are queued for [`NatsClient::next_msg`].
//!
//! Plain `std::net`, no async runtime, and every read is bounded by a deadline.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use nkeys::KeyPair;
use serde_json::Value;
use std::collections::VecDeque;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long a connect, a write, or a wait for `PONG` may take before it is a failure.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The server answered `-ERR`: its text without the quotes, e.g.
    /// `Permissions Violation for Publish to "a.b"`. Several errors are joined with `" | "`.
    Refused(String),
    /// Nothing (or not the awaited frame) arrived before the deadline.
    Timeout(String),
    /// Socket failure, connection closed without an `-ERR`, or an unparseable line.
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Refused(e) => write!(f, "refused by the server: -ERR '{e}'"),
            ClientError::Timeout(e) => write!(f, "timed out: {e}"),
            ClientError::Protocol(e) => write!(f, "protocol failure: {e}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub subject: String,
    pub sid: u64,
    pub reply: Option<String>,
    pub payload: Vec<u8>,
}

/// JWT authentication: the user JWT and the user key pair whose seed signs the server's nonce.
#[derive(Debug, Clone, Copy)]
pub struct JwtAuth<'a> {
    pub jwt: &'a str,
    pub key: &'a KeyPair,
}

/// One frame the server sent.
enum Frame {
    Info,
    Ok,
    Ping,
    Pong,
    Err(String),
    Msg(Msg),
}

/// A connected client. Dropping it closes the socket.
#[derive(Debug)]
pub struct NatsClient {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    info: Value,
    next_sid: u64,
    pending: VecDeque<Msg>,
    /// Bytes of a line whose end has not arrived yet (kept across a read timeout).
    partial: Vec<u8>,
}

impl NatsClient {
    /// Connects to `127.0.0.1:port`, reads `INFO`, sends `CONNECT` (with `jwt` and `sig` =
    /// unpadded base64url Ed25519 signature of the `INFO` nonce when `auth` is given) and a
    /// `PING`. Succeeds on the `PONG`; an `-ERR` instead (e.g. `Authorization Violation`) is
    /// [`ClientError::Refused`].
    pub fn connect(port: u16, name: &str, auth: Option<JwtAuth<'_>>) -> Result<Self, ClientError> {
        Self::connect_with_token(port, name, auth, None)
    }

    /// [`NatsClient::connect`] that also sends `auth_token` when `token` is given: the bearer
    /// a client presents to the auth callout alongside the sentinel's JWT.
    pub fn connect_with_token(
        port: u16,
        name: &str,
        auth: Option<JwtAuth<'_>>,
        token: Option<&str>,
    ) -> Result<Self, ClientError> {
        let io = |what: &str, e: io::Error| ClientError::Protocol(format!("{what}: {e}"));
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let writer = TcpStream::connect_timeout(&addr, IO_TIMEOUT).map_err(|e| io("connect", e))?;
        // Every operation is a small write followed by a `PING`: without NODELAY, Nagle holds
        // the `PING` for the server's delayed ACK (~40 ms per operation).
        writer
            .set_nodelay(true)
            .and_then(|()| writer.set_write_timeout(Some(IO_TIMEOUT)))
            .map_err(|e| io("set socket options", e))?;
        let reader = BufReader::new(writer.try_clone().map_err(|e| io("clone socket", e))?);
        let mut client = NatsClient {
            reader,
            writer,
            info: Value::Null,
            next_sid: 1,
            pending: VecDeque::new(),
            partial: Vec::new(),
        };
        let deadline = Instant::now() + IO_TIMEOUT;
        let greeting = client.read_line(deadline)?;
        let info = greeting
            .strip_prefix("INFO ")
            .ok_or_else(|| ClientError::Protocol(format!("greeted with {greeting:?}, not INFO")))?;
        client.info = serde_json::from_str(info)
            .map_err(|e| ClientError::Protocol(format!("INFO is not JSON ({e}): {info}")))?;
        let mut connect = serde_json::Map::new();
        connect.insert("verbose".into(), false.into());
        connect.insert("pedantic".into(), false.into());
        connect.insert("tls_required".into(), false.into());
        connect.insert("name".into(), name.into());
        connect.insert("lang".into(), "rust-raw".into());
        connect.insert("version".into(), "0".into());
        connect.insert("protocol".into(), 1.into());
        connect.insert("echo".into(), true.into());
        if let Some(auth) = auth {
            let nonce = client
                .info
                .get("nonce")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ClientError::Protocol(format!(
                        "JWT auth needs a nonce but INFO has none: {}",
                        client.info
                    ))
                })?;
            let sig = auth
                .key
                .sign(nonce.as_bytes())
                .map_err(|e| ClientError::Protocol(format!("cannot sign the nonce: {e}")))?;
            connect.insert("jwt".into(), auth.jwt.into());
            connect.insert("sig".into(), URL_SAFE_NO_PAD.encode(sig).into());
        }
        if let Some(token) = token {
            connect.insert("auth_token".into(), token.into());
        }
        let connect = Value::Object(connect);
        // A CONNECT the server refuses mid-line (over `max_control_line`) makes it answer and
        // close while this write is still going: the answer is then read after the failure.
        if let Err(e) = client.send(&format!("CONNECT {connect}\r\nPING\r\n")) {
            return Err(client.refusal_or(e));
        }
        client.await_pong()?;
        Ok(client)
    }

    /// The server's `INFO` greeting.
    pub fn info(&self) -> &Value {
        &self.info
    }

    /// Subscribes (queue-qualified when `queue` is given) and returns the sid once the server
    /// has accepted the subscription.
    pub fn subscribe(&mut self, subject: &str, queue: Option<&str>) -> Result<u64, ClientError> {
        let sid = self.next_sid;
        self.next_sid += 1;
        match queue {
            Some(q) => self.send(&format!("SUB {subject} {q} {sid}\r\n"))?,
            None => self.send(&format!("SUB {subject} {sid}\r\n"))?,
        }
        self.flush()?;
        Ok(sid)
    }

    /// Publishes and returns once the server has processed the publish without an error.
    pub fn publish(
        &mut self,
        subject: &str,
        reply: Option<&str>,
        payload: &[u8],
    ) -> Result<(), ClientError> {
        let head = match reply {
            Some(r) => format!("PUB {subject} {r} {}\r\n", payload.len()),
            None => format!("PUB {subject} {}\r\n", payload.len()),
        };
        let mut frame = head.into_bytes();
        frame.extend_from_slice(payload);
        frame.extend_from_slice(b"\r\n");
        self.write(&frame)?;
        self.flush()
    }

    /// `PING` and wait for its `PONG`; any `-ERR` before it is [`ClientError::Refused`].
    pub fn flush(&mut self) -> Result<(), ClientError> {
        if let Err(e) = self.send("PING\r\n") {
            return Err(self.refusal_or(e));
        }
        self.await_pong()
    }

    fn await_pong(&mut self) -> Result<(), ClientError> {
        let deadline = Instant::now() + IO_TIMEOUT;
        let mut errors: Vec<String> = Vec::new();
        loop {
            let frame = match self.read_frame(deadline) {
                Ok(frame) => frame,
                // The server closes after some errors (authorization): the error is the news.
                Err(ClientError::Protocol(_)) if !errors.is_empty() => {
                    return Err(ClientError::Refused(errors.join(" | ")));
                }
                Err(e) => return Err(e),
            };
            match frame {
                Frame::Pong if errors.is_empty() => return Ok(()),
                Frame::Pong => return Err(ClientError::Refused(errors.join(" | "))),
                Frame::Err(e) => errors.push(e),
                Frame::Msg(m) => self.pending.push_back(m),
                Frame::Ping => self.send("PONG\r\n")?,
                Frame::Info | Frame::Ok => {}
            }
        }
    }

    /// The next delivered message, waiting up to `timeout`. An `-ERR` while waiting is
    /// [`ClientError::Refused`].
    pub fn next_msg(&mut self, timeout: Duration) -> Result<Msg, ClientError> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(m);
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.read_frame(deadline)? {
                Frame::Msg(m) => return Ok(m),
                Frame::Err(e) => return Err(ClientError::Refused(e)),
                Frame::Ping => self.send("PONG\r\n")?,
                Frame::Pong | Frame::Info | Frame::Ok => {}
            }
        }
    }

    /// After a failed write: the `-ERR` lines the server sent before closing, as
    /// [`ClientError::Refused`], or `error` when there are none.
    fn refusal_or(&mut self, error: ClientError) -> ClientError {
        let deadline = Instant::now() + IO_TIMEOUT;
        let mut errors: Vec<String> = Vec::new();
        while let Ok(frame) = self.read_frame(deadline) {
            if let Frame::Err(e) = frame {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            error
        } else {
            ClientError::Refused(errors.join(" | "))
        }
    }

    fn send(&mut self, text: &str) -> Result<(), ClientError> {
        self.write(text.as_bytes())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.writer
            .write_all(bytes)
            .map_err(|e| ClientError::Protocol(format!("write: {e}")))
    }

    /// One line without its `\r\n`. A timeout keeps the bytes read so far for the next call.
    fn read_line(&mut self, deadline: Instant) -> Result<String, ClientError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ClientError::Timeout(format!(
                    "no complete line from the server (partial: {:?})",
                    String::from_utf8_lossy(&self.partial)
                )));
            }
            self.reader
                .get_ref()
                .set_read_timeout(Some(left))
                .map_err(|e| ClientError::Protocol(format!("set read timeout: {e}")))?;
            match self.reader.read_until(b'\n', &mut self.partial) {
                Ok(0) => {
                    return Err(ClientError::Protocol(
                        "the server closed the connection".to_owned(),
                    ))
                }
                Ok(_) if self.partial.ends_with(b"\n") => {
                    let line = String::from_utf8_lossy(&self.partial)
                        .trim_end_matches(['\r', '\n'])
                        .to_owned();
                    self.partial.clear();
                    return Ok(line);
                }
                // Partial line at EOF: the next read reports the close.
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => return Err(ClientError::Protocol(format!("read: {e}"))),
            }
        }
    }

    fn read_frame(&mut self, deadline: Instant) -> Result<Frame, ClientError> {
        let line = self.read_line(deadline)?;
        let (op, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        match op {
            "PING" => Ok(Frame::Ping),
            "PONG" => Ok(Frame::Pong),
            "+OK" => Ok(Frame::Ok),
            "INFO" => Ok(Frame::Info),
            "-ERR" => Ok(Frame::Err(
                rest.trim()
                    .trim_start_matches('\'')
                    .trim_end_matches('\'')
                    .to_owned(),
            )),
            "MSG" => self.read_msg(rest).map(Frame::Msg),
            _ => Err(ClientError::Protocol(format!(
                "unexpected line from the server: {line:?}"
            ))),
        }
    }

    /// `MSG <subject> <sid> [reply] <bytes>` then the payload and `\r\n`.
    fn read_msg(&mut self, args: &str) -> Result<Msg, ClientError> {
        let bad = || ClientError::Protocol(format!("malformed MSG line: MSG {args}"));
        let parts: Vec<&str> = args.split_ascii_whitespace().collect();
        let (subject, sid, reply, size) = match parts.as_slice() {
            [s, sid, size] => (s, sid, None, size),
            [s, sid, r, size] => (s, sid, Some((*r).to_owned()), size),
            _ => return Err(bad()),
        };
        let sid: u64 = sid.parse().map_err(|_| bad())?;
        let size: usize = size.parse().map_err(|_| bad())?;
        // The payload follows its header at once; a generous bound rather than the caller's.
        self.reader
            .get_ref()
            .set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| ClientError::Protocol(format!("set read timeout: {e}")))?;
        let mut payload = vec![0u8; size + 2];
        self.reader
            .read_exact(&mut payload)
            .map_err(|e| ClientError::Protocol(format!("read MSG payload: {e}")))?;
        if !payload.ends_with(b"\r\n") {
            return Err(bad());
        }
        payload.truncate(size);
        Ok(Msg {
            subject: (*subject).to_owned(),
            sid,
            reply,
            payload,
        })
    }
}
