//! The bounded JSON body reader of every POST route (§3.1).
//!
//! At most [`MAX_BODY_BYTES`] are kept. Past that the reader stops keeping bytes but goes on
//! draining the request to its end, so the client receives the 413 instead of a reset socket
//! (closing with unread bytes in the kernel's receive buffer makes the peer's stack send RST,
//! and the answer is lost). Exactly [`MAX_BODY_BYTES`] is still a body.

use http_body_util::BodyExt;
use hyper::body::{Body, Bytes};
use hyper::StatusCode;
use serde_json::Value;

/// The largest body a POST route accepts: 64 KiB.
pub const MAX_BODY_BYTES: usize = 65_536;

/// 413: the body is larger than [`MAX_BODY_BYTES`].
pub const BODY_TOO_LARGE: &str = "request body too large (maximum 65536 bytes)";
/// 400: the body (an empty one included) does not parse as JSON.
pub const BODY_NOT_JSON: &str = "request body is not valid JSON";
/// 400: the body stream failed before its end (the client went away or broke the framing).
pub const BODY_UNREADABLE: &str = "request body could not be read";

/// Why a body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRefusal {
    /// More than [`MAX_BODY_BYTES`].
    TooLarge,
    /// Not JSON.
    NotJson,
    /// The stream failed.
    Unreadable,
}

impl BodyRefusal {
    /// The HTTP status of the refusal.
    pub const fn status(self) -> StatusCode {
        match self {
            BodyRefusal::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRefusal::NotJson | BodyRefusal::Unreadable => StatusCode::BAD_REQUEST,
        }
    }

    /// The sentence of the refusal.
    pub const fn message(self) -> &'static str {
        match self {
            BodyRefusal::TooLarge => BODY_TOO_LARGE,
            BodyRefusal::NotJson => BODY_NOT_JSON,
            BodyRefusal::Unreadable => BODY_UNREADABLE,
        }
    }
}

/// Reads the whole body, keeping at most [`MAX_BODY_BYTES`], and parses it as one JSON value.
pub async fn read_json_body<B>(mut body: B) -> Result<Value, BodyRefusal>
where
    B: Body<Data = Bytes> + Unpin,
{
    let mut kept: Vec<u8> = Vec::new();
    let mut too_large = false;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| BodyRefusal::Unreadable)?;
        let Ok(data) = frame.into_data() else {
            // Trailers carry no body bytes.
            continue;
        };
        if too_large {
            continue;
        }
        if kept.len() + data.len() > MAX_BODY_BYTES {
            // Stop keeping bytes at once; the loop goes on draining.
            too_large = true;
            kept = Vec::new();
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if too_large {
        return Err(BodyRefusal::TooLarge);
    }
    parse_json(&kept)
}

/// Parses a complete body as one JSON value (any value, `null` included, as `JSON.parse`).
pub fn parse_json(bytes: &[u8]) -> Result<Value, BodyRefusal> {
    serde_json::from_slice(bytes).map_err(|_| BodyRefusal::NotJson)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;
    use hyper::body::Frame;
    use serde_json::json;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn padded(total: usize) -> Vec<u8> {
        let mut body = b"{\"pad\":\"".to_vec();
        body.resize(total - 2, b'x');
        body.extend_from_slice(b"\"}");
        assert_eq!(body.len(), total);
        body
    }

    /// A body delivered frame by frame, as a socket delivers it.
    struct Frames(std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>);

    impl Body for Frames {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            std::task::Poll::Ready(self.get_mut().0.next())
        }
    }

    fn chunked(bytes: Vec<u8>, chunk: usize) -> Frames {
        let frames: Vec<_> = bytes
            .chunks(chunk)
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        Frames(frames.into_iter())
    }

    #[test]
    fn exactly_the_limit_is_a_body() {
        let body = padded(MAX_BODY_BYTES);
        let value = block_on(read_json_body(Full::new(Bytes::from(body)))).unwrap();
        assert_eq!(value["pad"].as_str().unwrap().len(), MAX_BODY_BYTES - 10);
    }

    #[test]
    fn one_byte_over_is_too_large_in_one_frame_or_many() {
        let body = padded(MAX_BODY_BYTES + 1);
        let whole = block_on(read_json_body(Full::new(Bytes::from(body.clone()))));
        assert_eq!(whole, Err(BodyRefusal::TooLarge));
        let split = block_on(read_json_body(chunked(body, 1000)));
        assert_eq!(split, Err(BodyRefusal::TooLarge));
        assert_eq!(
            BodyRefusal::TooLarge.status(),
            StatusCode::PAYLOAD_TOO_LARGE
        );
        assert_eq!(
            BodyRefusal::TooLarge.message(),
            "request body too large (maximum 65536 bytes)"
        );
    }

    #[test]
    fn the_reader_drains_to_the_end_after_the_limit() {
        // A body far over the limit still ends in TooLarge (the reader consumed every frame).
        let body = vec![b'x'; MAX_BODY_BYTES * 4];
        assert_eq!(
            block_on(read_json_body(chunked(body, 4096))),
            Err(BodyRefusal::TooLarge)
        );
    }

    #[test]
    fn empty_and_malformed_bodies_are_not_json() {
        for bad in [
            &b""[..],
            b"{",
            b"nope",
            b"{\"a\":1}x",
            b"\xef\xbb\xbf{}",
            b"\"\xff\"",
        ] {
            assert_eq!(parse_json(bad), Err(BodyRefusal::NotJson), "{bad:?}");
        }
        assert_eq!(
            BodyRefusal::NotJson.message(),
            "request body is not valid JSON"
        );
        assert_eq!(BodyRefusal::NotJson.status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn any_json_value_parses() {
        assert_eq!(parse_json(b"null"), Ok(Value::Null));
        assert_eq!(parse_json(b" [1, 2] "), Ok(json!([1, 2])));
        assert_eq!(parse_json(b"{\"a\":{}}\n"), Ok(json!({"a": {}})));
    }

    #[test]
    fn a_failing_stream_is_unreadable() {
        let frames = vec![
            Ok(Frame::data(Bytes::from_static(b"{"))),
            Err(std::io::Error::other("reset")),
        ];
        let body = Frames(frames.into_iter());
        assert_eq!(block_on(read_json_body(body)), Err(BodyRefusal::Unreadable));
    }
}
