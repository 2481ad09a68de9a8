//! Raw loopback I/O for the harness: free ports, the client port's `INFO` line, and one
//! monitoring GET. Errors are plain strings: a failed probe is retried until a deadline, and
//! only the last one ends up in a [`HarnessError`](super::HarnessError).

use super::PROBE_IO_TIMEOUT;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};

/// The loopback address every harness server listens on, unless it runs in a network
/// namespace of its own ([`super::netns`]).
pub(super) const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// `n` distinct ports that were free a moment ago: all are bound at once (so none repeats),
/// then released for the server to take. Someone else may grab one in between; the caller
/// detects that ("address already in use") and asks again.
pub(super) fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind((HOST, 0)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("cannot bind a free loopback port: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("cannot read a bound port: {e}"))
}

/// Opens a client connection with the probe timeouts set.
pub(super) fn connect(addr: SocketAddr) -> Result<TcpStream, String> {
    let stream = TcpStream::connect_timeout(&addr, PROBE_IO_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(PROBE_IO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(PROBE_IO_TIMEOUT)))
        .map_err(|e| format!("set timeouts on {addr}: {e}"))?;
    Ok(stream)
}

/// Connects to a client port and returns the JSON of the `INFO` line the server sends first.
pub(super) fn read_info(addr: SocketAddr) -> Result<Value, String> {
    let mut line = String::new();
    BufReader::new(connect(addr)?)
        .read_line(&mut line)
        .map_err(|e| format!("read INFO from {addr}: {e}"))?;
    let json = line
        .strip_prefix("INFO ")
        .ok_or_else(|| format!("{addr} greeted with {line:?}, not INFO"))?;
    serde_json::from_str(json.trim_end()).map_err(|e| format!("INFO is not JSON ({e}): {json}"))
}

/// `GET path` on a monitoring address (HTTP/1.0, so the server closes after one answer) and
/// parses the 200 body as JSON.
pub(super) fn get_json(addr: SocketAddr, path: &str) -> Result<Value, String> {
    let mut stream = connect(addr)?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", addr.ip())
        .map_err(|e| format!("send GET {path} to {addr}: {e}"))?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| format!("read GET {path} from {addr}: {e}"))?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no HTTP header in {response:?}"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(format!("GET {path}: {status}: {}", body.trim()));
    }
    serde_json::from_str(body).map_err(|e| format!("GET {path}: body is not JSON ({e})"))
}
