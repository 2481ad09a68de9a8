//! The request guards every POST route runs before its body is read (§3.1), in the reference's
//! order: method, then `Origin`, then content type (the capability follows, in
//! [`crate::face::capability`]).

use hyper::header::{CONTENT_TYPE, ORIGIN};
use hyper::{HeaderMap, Method};

use super::routes::MethodRule;

/// 405 on a POST route reached by another method.
pub const POST_ONLY: &str = "POST only";
/// 405 on a GET route reached by another method.
pub const GET_ONLY: &str = "GET only";
/// 403 for any request that carries an `Origin` header to a POST route.
pub const BROWSER_ORIGIN_REFUSED: &str = "browser-origin requests are not served here";
/// 415 when the content type is not `application/json`.
pub const NOT_JSON: &str = "content-type must be application/json";

/// The 405 sentence when `rule` does not admit `method`; `None` when it does.
pub fn method_refusal(rule: MethodRule, method: &Method) -> Option<&'static str> {
    if rule.admits(method) {
        return None;
    }
    match rule {
        MethodRule::Any => None,
        MethodRule::GetOnly => Some(GET_ONLY),
        MethodRule::PostOnly => Some(POST_ONLY),
    }
}

/// Whether the request carries an `Origin` header, whatever its value. A cross-site page can
/// reach a loopback port but cannot strip `Origin`, and the CLI never sends one, so its mere
/// presence marks a browser that must not drive a POST route.
pub fn is_browser(headers: &HeaderMap) -> bool {
    headers.contains_key(ORIGIN)
}

/// Whether the request's content type passes the reference's `^application/json\b` test: the
/// value starts with exactly `application/json` (case-sensitive) and the next byte, if any, is
/// not a word character, so `application/json; charset=utf-8` passes and
/// `application/jsonp` does not. A missing header fails. With several `Content-Type` headers
/// the first counts, as in Node, which keeps the first and drops duplicates.
pub fn is_json_content_type(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|value| json_media_type(value.as_bytes()))
}

/// [`is_json_content_type`] on the raw header bytes.
pub fn json_media_type(value: &[u8]) -> bool {
    const PREFIX: &[u8] = b"application/json";
    match value.strip_prefix(PREFIX) {
        None => false,
        Some(rest) => rest
            .first()
            .is_none_or(|&b| !(b.is_ascii_alphanumeric() || b == b'_')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    #[test]
    fn json_media_type_follows_the_word_boundary_rule() {
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "application/json;charset=UTF-8",
            "application/json ",
            "application/json-seq",
            "application/json+x",
            "application/json.v1",
        ] {
            assert!(json_media_type(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "text/plain",
            "application/jsonp",
            "application/json_x",
            "application/json1",
            "Application/JSON",
            " application/json",
            "application/jso",
            "text/application/json",
        ] {
            assert!(!json_media_type(bad.as_bytes()), "{bad}");
        }
        // A non-ASCII byte is no word character, as in a JavaScript regex over latin-1 text.
        assert!(json_media_type(b"application/json\xe9"));
    }

    #[test]
    fn the_first_content_type_header_counts() {
        let mut headers = HeaderMap::new();
        assert!(!is_json_content_type(&headers));
        headers.append(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        headers.append(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        assert!(!is_json_content_type(&headers));
        let mut headers = HeaderMap::new();
        headers.append(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.append(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
        assert!(is_json_content_type(&headers));
    }

    #[test]
    fn any_origin_header_marks_a_browser() {
        let mut headers = HeaderMap::new();
        assert!(!is_browser(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static(""));
        assert!(is_browser(&headers));
        headers.insert(ORIGIN, HeaderValue::from_static("null"));
        assert!(is_browser(&headers));
    }

    #[test]
    fn method_refusal_sentences() {
        assert_eq!(method_refusal(MethodRule::Any, &Method::PATCH), None);
        assert_eq!(method_refusal(MethodRule::GetOnly, &Method::GET), None);
        assert_eq!(
            method_refusal(MethodRule::GetOnly, &Method::POST),
            Some("GET only")
        );
        assert_eq!(
            method_refusal(MethodRule::GetOnly, &Method::HEAD),
            Some("GET only")
        );
        assert_eq!(method_refusal(MethodRule::PostOnly, &Method::POST), None);
        assert_eq!(
            method_refusal(MethodRule::PostOnly, &Method::GET),
            Some("POST only")
        );
    }
}
