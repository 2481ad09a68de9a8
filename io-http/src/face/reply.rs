//! Building the faces' replies: JSON (the metrics exposition aside), never a CORS header.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body_util::Full;
use hyper::body::{Body, Bytes, Frame, SizeHint};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONNECTION, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::Value;

use super::answer::error_body;
use super::shares::Share;

/// A reply body: the serialized JSON, plus the in-flight share the request holds. The share
/// is given back when hyper drops the body — once it is written out or the
/// connection is gone — so the in-flight count falls on response completion, not earlier.
#[derive(Debug)]
pub(crate) struct ReplyBody {
    json: Full<Bytes>,
    slot: Option<Share>,
}

impl Body for ReplyBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.get_mut().json).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.json.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.json.size_hint()
    }
}

/// A JSON reply.
pub(crate) type Reply = Response<ReplyBody>;

/// `status` with `body` as `application/json`.
pub(crate) fn json(status: StatusCode, body: &Value) -> Reply {
    let mut reply = Response::new(ReplyBody {
        json: Full::new(Bytes::from(body.to_string())),
        slot: None,
    });
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    reply
}

/// `status` with a text `body` of `content_type` (the metrics exposition).
pub(crate) fn text(status: StatusCode, body: String, content_type: &'static str) -> Reply {
    let mut reply = Response::new(ReplyBody {
        json: Full::new(Bytes::from(body)),
        slot: None,
    });
    *reply.status_mut() = status;
    reply
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    reply
}

/// `status` with `{"error": message}`.
pub(crate) fn error(status: StatusCode, message: &str) -> Reply {
    json(status, &error_body(message))
}

/// Adds `cache-control: <value>`.
pub(crate) fn with_cache_control(mut reply: Reply, value: &'static str) -> Reply {
    reply
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static(value));
    reply
}

/// Asks hyper to close the connection after this reply (the request was cut short).
pub(crate) fn closing(mut reply: Reply) -> Reply {
    reply
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    reply
}

/// Ties the in-flight share to the reply body.
pub(crate) fn holding(mut reply: Reply, slot: Share) -> Reply {
    reply.body_mut().slot = Some(slot);
    reply
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use serde_json::json;

    #[test]
    fn replies_are_json_with_an_exact_length_and_no_cors() {
        let reply = error(StatusCode::NOT_FOUND, "unknown path - /health");
        assert_eq!(reply.status(), StatusCode::NOT_FOUND);
        assert_eq!(reply.headers()[CONTENT_TYPE], "application/json");
        assert!(reply
            .headers()
            .keys()
            .all(|k| !k.as_str().starts_with("access-control-")));
        let expected = br#"{"error":"unknown path - /health"}"#;
        assert_eq!(
            reply.body().size_hint().exact(),
            Some(expected.len() as u64)
        );
        let bytes = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(reply.into_body().collect())
            .unwrap()
            .to_bytes();
        assert_eq!(&bytes[..], expected);
    }

    #[test]
    fn cache_control_and_close_headers() {
        let reply = closing(with_cache_control(
            json(StatusCode::OK, &json!({})),
            "max-age=300",
        ));
        assert_eq!(reply.headers()[CACHE_CONTROL], "max-age=300");
        assert_eq!(reply.headers()[CONNECTION], "close");
    }
}
