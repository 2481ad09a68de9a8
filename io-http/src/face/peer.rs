//! Who a request comes from, for the public face's per-peer budgets (§3.3).
//!
//! With `trusted_proxy` the peer is the **last** hop of `X-Forwarded-For`: the one address the
//! operator's own reverse proxy appended. Every earlier hop is written by the client and could
//! be anything, so trusting it would let one prober spread its refusals over endless fake
//! peers. Without `trusted_proxy` the header is ignored and the socket's address is the peer.

use std::fmt;
use std::net::SocketAddr;

use hyper::header::HeaderName;
use hyper::HeaderMap;

/// `X-Forwarded-For`.
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The key a refusal is attributed to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerKey(String);

impl PeerKey {
    /// A key from its text.
    pub fn new(key: impl Into<String>) -> PeerKey {
        PeerKey(key.into())
    }

    /// The socket peer's IP address (without the port, which changes per connection).
    pub fn from_socket(remote: SocketAddr) -> PeerKey {
        PeerKey(remote.ip().to_string())
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PeerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The peer of a public-face request: the last `X-Forwarded-For` hop when `trusted_proxy` and
/// that hop is not empty, else the socket address.
pub fn peer_key(headers: &HeaderMap, trusted_proxy: bool, remote: SocketAddr) -> PeerKey {
    if trusted_proxy {
        let instances = headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .map(|value| value.as_bytes());
        if let Some(hop) = last_forwarded_hop(instances) {
            return hop;
        }
    }
    PeerKey::from_socket(remote)
}

/// The last comma-separated hop of the last `X-Forwarded-For` instance, trimmed; `None` when
/// there is no instance or that hop is empty. Bytes are read as latin-1, as Node reads header
/// text, so any header value yields a key.
pub fn last_forwarded_hop<'a>(instances: impl Iterator<Item = &'a [u8]>) -> Option<PeerKey> {
    let last_instance = instances.last()?;
    let hop = last_instance.rsplit(|&b| b == b',').next()?;
    let hop = trim_js_whitespace(hop);
    if hop.is_empty() {
        return None;
    }
    Some(PeerKey(hop.iter().map(|&b| char::from(b)).collect()))
}

/// Trims what JavaScript's `String.prototype.trim` trims, within latin-1: tab, line feed,
/// vertical tab, form feed, carriage return, space and no-break space (0xA0).
fn trim_js_whitespace(bytes: &[u8]) -> &[u8] {
    let is_space = |b: &u8| matches!(b, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' | 0xa0);
    let start = bytes
        .iter()
        .position(|b| !is_space(b))
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_space(b))
        .map_or(start, |i| i + 1);
    bytes.get(start..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn remote() -> SocketAddr {
        "127.0.0.1:54321".parse().unwrap()
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append(&X_FORWARDED_FOR, HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    #[test]
    fn the_last_hop_of_the_last_instance_is_the_peer() {
        let key = |values: &[&str]| peer_key(&xff(values), true, remote()).0;
        assert_eq!(key(&["10.0.0.1, 203.0.113.7"]), "203.0.113.7");
        assert_eq!(key(&["203.0.113.7"]), "203.0.113.7");
        assert_eq!(key(&["  198.51.100.9  "]), "198.51.100.9");
        assert_eq!(key(&["1.1.1.1, 2.2.2.2", "3.3.3.3, 4.4.4.4"]), "4.4.4.4");
        assert_eq!(key(&["1.1.1.1,2.2.2.2,\t5.5.5.5"]), "5.5.5.5");
    }

    #[test]
    fn an_empty_last_hop_falls_back_to_the_socket() {
        let key = |values: &[&str]| peer_key(&xff(values), true, remote()).0;
        assert_eq!(key(&[]), "127.0.0.1");
        assert_eq!(key(&[""]), "127.0.0.1");
        assert_eq!(key(&["1.1.1.1, "]), "127.0.0.1");
        assert_eq!(key(&["1.1.1.1", ""]), "127.0.0.1");
        assert_eq!(key(&["1.1.1.1,"]), "127.0.0.1");
    }

    #[test]
    fn without_a_trusted_proxy_the_header_is_ignored() {
        let headers = xff(&["203.0.113.7"]);
        assert_eq!(peer_key(&headers, false, remote()).as_str(), "127.0.0.1");
    }

    #[test]
    fn the_socket_key_drops_the_port() {
        let a = PeerKey::from_socket("127.0.0.1:1".parse().unwrap());
        let b = PeerKey::from_socket("127.0.0.1:2".parse().unwrap());
        assert_eq!(a, b);
        let v6 = PeerKey::from_socket("[::1]:80".parse().unwrap());
        assert_eq!(v6.as_str(), "::1");
    }

    #[test]
    fn header_bytes_read_as_latin1_and_trim_like_javascript() {
        let hop = last_forwarded_hop([b"a, \xa0h\xe9\xa0".as_slice()].into_iter()).unwrap();
        assert_eq!(hop.as_str(), "h\u{e9}");
        // NEL (0x85) is not JavaScript whitespace, so it stays part of the key.
        let hop = last_forwarded_hop([b"\x85x".as_slice()].into_iter()).unwrap();
        assert_eq!(hop.as_str(), "\u{85}x");
        assert_eq!(last_forwarded_hop([b" \t ".as_slice()].into_iter()), None);
    }
}
