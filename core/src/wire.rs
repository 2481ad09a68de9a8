//! The wire helpers every closed schema shares: reading JSON objects whose member set is closed,
//! and writing rows byte-exactly.
//!
//! Stored rows are read at a consuming boundary: anything malformed is corruption and surfaces
//! as `internal`, never a panic. Rows are written with a fixed field order and the string
//! escaping of ECMAScript's `JSON.stringify`, because the reference's idempotent creates compare
//! raw bytes and a peer in another language must produce the same ones.

use serde_json::{Map, Value};

use crate::ecma::format_f64;
pub use crate::ecma::push_json_string;
use crate::error::EpError;

/// The largest integer I-JSON (and the reference's `Number.isSafeInteger`) admits.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Parses stored bytes as a JSON object, naming `what` in the refusal.
pub fn parse_object(bytes: &[u8], what: &str) -> Result<Map<String, Value>, EpError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(EpError::internal(format!(
            "stored {what} is not a JSON object"
        ))),
        Err(e) => Err(EpError::internal(format!(
            "stored {what} is not valid JSON: {e}"
        ))),
    }
}

/// Refuses any field outside `allowed` (closed schemas).
pub fn reject_unknown(
    map: &Map<String, Value>,
    allowed: &[&str],
    what: &str,
) -> Result<(), EpError> {
    match unknown_member(map, allowed) {
        Some(field) => Err(EpError::internal(format!(
            "stored {what} carries unknown field {field:?}; its schema is closed"
        ))),
        None => Ok(()),
    }
}

/// The first member of `map` outside the closed set `allowed`: the one closed-object check
/// every request and row reader makes, each wording its own refusal.
pub fn unknown_member<'m>(map: &'m Map<String, Value>, allowed: &[&str]) -> Option<&'m str> {
    member_outside(map, |k| allowed.contains(&k))
}

/// [`unknown_member`] for a closed set given as a predicate (a shared list plus a few of the
/// reader's own members).
pub fn member_outside(map: &Map<String, Value>, allowed: impl Fn(&str) -> bool) -> Option<&str> {
    map.keys().map(String::as_str).find(|k| !allowed(k))
}

/// A non-negative safe integer, accepting the integral doubles `JSON.parse` would accept
/// (`1.0`, `1e3`) so that rows written by any I-JSON peer read the same here.
pub fn safe_uint(value: &Value) -> Option<u64> {
    if let Some(n) = value.as_u64() {
        return (n <= MAX_SAFE_INTEGER).then_some(n);
    }
    let f = value.as_f64()?;
    // Exact in f64 below 2^53, so the cast back is lossless.
    let in_range = f.fract() == 0.0 && (0.0..=MAX_SAFE_INTEGER as f64).contains(&f);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    in_range.then_some(f as u64)
}

/// A required field of a stored row, read by `read`; a missing one, or one `read` refuses, is
/// `internal` naming what the field must be (`kind`).
fn required<'m, T>(
    map: &'m Map<String, Value>,
    field: &str,
    what: &str,
    kind: &str,
    read: impl FnOnce(&'m Value) -> Option<T>,
) -> Result<T, EpError> {
    map.get(field).and_then(read).ok_or_else(|| {
        EpError::internal(format!(
            "stored {what} field {field:?} is missing or not {kind}"
        ))
    })
}

/// A required safe unsigned integer field.
pub fn uint_field(map: &Map<String, Value>, field: &str, what: &str) -> Result<u64, EpError> {
    required(map, field, what, "a safe unsigned integer", safe_uint)
}

/// A required string field.
pub fn str_field<'m>(
    map: &'m Map<String, Value>,
    field: &str,
    what: &str,
) -> Result<&'m str, EpError> {
    required(map, field, what, "a string", Value::as_str)
}

/// A required array-of-strings field.
pub fn str_array_field<'m>(
    map: &'m Map<String, Value>,
    field: &str,
    what: &str,
) -> Result<Vec<&'m str>, EpError> {
    let strings = |v: &'m Value| v.as_array()?.iter().map(Value::as_str).collect();
    required(map, field, what, "an array of strings", strings)
}

/// Writes a JSON object field by field, in the order the caller appends them.
#[derive(Debug)]
pub struct ObjectWriter {
    out: String,
    first: bool,
}

impl Default for ObjectWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectWriter {
    pub fn new() -> Self {
        ObjectWriter {
            out: String::from("{"),
            first: true,
        }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        push_json_string(&mut self.out, key);
        self.out.push(':');
    }

    pub fn string(mut self, key: &str, value: &str) -> Self {
        self.key(key);
        push_json_string(&mut self.out, value);
        self
    }

    pub fn uint(mut self, key: &str, value: u64) -> Self {
        self.key(key);
        self.out.push_str(&value.to_string());
        self
    }

    pub fn strings<'s>(mut self, key: &str, values: impl IntoIterator<Item = &'s str>) -> Self {
        self.key(key);
        self.out.push('[');
        for (i, v) in values.into_iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            push_json_string(&mut self.out, v);
        }
        self.out.push(']');
        self
    }

    /// Appends an already-serialized JSON value.
    pub fn raw(mut self, key: &str, json: &str) -> Self {
        self.key(key);
        self.out.push_str(json);
        self
    }

    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// Writes `value` as ECMAScript `JSON.stringify` would after `JSON.parse`: integer-index keys
/// first in ascending numeric order (ECMAScript's own-key order), other keys in insertion order;
/// ECMAScript number spelling; `JSON.stringify` string escapes.
pub fn js_stringify(out: &mut String, value: &Value) -> Result<(), EpError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match n.as_f64() {
            Some(x) => out.push_str(&format_f64(x)?),
            None => return Err(EpError::bad_request("a JSON number is not a double")),
        },
        Value::String(s) => push_json_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                js_stringify(out, item)?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut indices: Vec<(u32, &String, &Value)> = members
                .iter()
                .filter_map(|(k, v)| array_index(k).map(|i| (i, k, v)))
                .collect();
            indices.sort_by_key(|(i, _, _)| *i);
            let rest = members.iter().filter(|(k, _)| array_index(k).is_none());
            out.push('{');
            let ordered = indices.into_iter().map(|(_, k, v)| (k, v)).chain(rest);
            for (i, (k, v)) in ordered.enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_json_string(out, k);
                out.push(':');
                js_stringify(out, v)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// An ECMAScript array index: the canonical decimal spelling of an integer below 2^32 - 1.
pub fn array_index(key: &str) -> Option<u32> {
    let n: u32 = key.parse().ok()?;
    (n != u32::MAX && n.to_string() == key).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn safe_uint_accepts_what_json_parse_accepts() {
        assert_eq!(safe_uint(&json!(0)), Some(0));
        assert_eq!(safe_uint(&json!(1.0)), Some(1));
        assert_eq!(safe_uint(&json!(MAX_SAFE_INTEGER)), Some(MAX_SAFE_INTEGER));
        assert_eq!(safe_uint(&json!(MAX_SAFE_INTEGER + 1)), None);
        assert_eq!(safe_uint(&json!(-1)), None);
        assert_eq!(safe_uint(&json!(1.5)), None);
        assert_eq!(safe_uint(&json!("1")), None);
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let mut s = String::new();
        push_json_string(&mut s, "a\"b\\c\n\u{1}\u{7f}é\u{2028}/");
        assert_eq!(s, "\"a\\\"b\\\\c\\n\\u0001\u{7f}é\u{2028}/\"");
        // serde_json agrees on every one of these, so a peer's bytes round-trip.
        assert_eq!(
            serde_json::from_str::<String>(&s).unwrap(),
            "a\"b\\c\n\u{1}\u{7f}é\u{2028}/"
        );
    }

    #[test]
    fn object_writer_keeps_insertion_order() {
        let text = ObjectWriter::new()
            .string("z", "1")
            .uint("a", 2)
            .strings("m", ["x", "y"])
            .raw("o", "{}")
            .finish();
        assert_eq!(text, r#"{"z":"1","a":2,"m":["x","y"],"o":{}}"#);
    }
}
