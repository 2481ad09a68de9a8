//! RFC 8785 JSON Canonicalization Scheme (JCS) and the content digests built on it.
//!
//! Records are hashed and signed over their canonical text, so two parties that hold the same
//! *value* must produce the same *bytes*. JCS pins every degree of freedom JSON leaves open:
//! member order (UTF-16 code units of the keys), whitespace (none), string escapes (minimal)
//! and number spelling (ECMAScript `Number.prototype.toString` of the IEEE-754 double).
//!
//! Policy choices beyond the RFC text, all refusals with `bad-request`:
//! - Integers whose magnitude exceeds 2^53 are refused rather than rounded. JCS sees every
//!   number as a double, so `9007199254740993` would silently become `9007199254740992`; for
//!   identifiers and counters that is corruption, not canonicalization. A `u64`/`i64` in a
//!   [`Value`] beyond ±2^53 is always refused. In JSON *text* an integer literal beyond ±2^53
//!   is accepted only if it is already the canonical spelling of a double (as the canonical
//!   form of 1e20 is `100000000000000000000`), so canonical output always reads back, and is
//!   otherwise refused since canonicalization would alter it.
//! - Duplicate object keys and unpaired surrogate escapes are refused (I-JSON, RFC 7493).
//! - Nesting deeper than [`MAX_DEPTH`] is refused, so hostile input cannot exhaust the stack.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};
use sha2::{Digest as _, Sha256};

pub use crate::ecma::format_f64;
use crate::ecma::push_json_string;
use crate::error::EpError;

/// Deepest array/object nesting accepted; matches serde_json's own parser limit.
pub const MAX_DEPTH: usize = 128;

/// 2^53: the largest magnitude below which every integer is exactly a double.
const MAX_SAFE_MAGNITUDE: u64 = 1 << 53;

/// The JCS text of `value`.
pub fn canonicalize(value: &Value) -> Result<String, EpError> {
    let mut out = String::new();
    write_value(&mut out, value, 0)?;
    Ok(out)
}

/// Parses JSON text strictly (see [`parse_strict`]) and returns its JCS text.
pub fn canonicalize_str(text: &str) -> Result<String, EpError> {
    canonicalize(&parse_strict(text)?)
}

/// Like [`canonicalize_str`], for bytes that must be UTF-8.
pub fn canonicalize_bytes(bytes: &[u8]) -> Result<String, EpError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| EpError::bad_request(format!("JSON text is not UTF-8 ({e}); send UTF-8")))?;
    canonicalize_str(text)
}

/// Whether `bytes` are already exactly their own canonical form.
pub fn is_canonical(bytes: &[u8]) -> bool {
    canonicalize_bytes(bytes).is_ok_and(|c| c.as_bytes() == bytes)
}

/// SHA-256 of the canonical UTF-8 bytes of `value`.
pub fn content_digest(value: &Value) -> Result<Digest, EpError> {
    Ok(Digest::of(canonicalize(value)?.as_bytes()))
}

fn write_value(out: &mut String, value: &Value, depth: usize) -> Result<(), EpError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => out.push_str(&format_number(n)?),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            check_depth(depth)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, depth + 1)?;
            }
            out.push(']');
        }
        Value::Object(members) => {
            check_depth(depth)?;
            // JCS orders by UTF-16 code units (what JavaScript compares), which differs from
            // UTF-8/char order once astral characters meet U+E000..U+FFFF.
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item, depth + 1)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn check_depth(depth: usize) -> Result<(), EpError> {
    if depth >= MAX_DEPTH {
        return Err(EpError::bad_request(format!(
            "JSON nests deeper than {MAX_DEPTH} levels; flatten the document"
        )));
    }
    Ok(())
}

/// JCS escaping is exactly `JSON.stringify`'s: only what JSON requires is escaped, so `/`,
/// U+2028/2029 and all non-ASCII stay literal, and the short forms win where JSON has them.
fn write_string(out: &mut String, s: &str) {
    push_json_string(out, s);
}

fn format_number(n: &Number) -> Result<String, EpError> {
    let magnitude = n.as_u64().or_else(|| n.as_i64().map(i64::unsigned_abs));
    if magnitude.is_some_and(|m| m > MAX_SAFE_MAGNITUDE) {
        return Err(EpError::bad_request(format!(
            "integer {n} exceeds 2^53 and would not survive canonical (double) form; \
             send it as a string"
        )));
    }
    // Integers within ±2^53 convert to f64 exactly.
    let x = n
        .as_f64()
        .ok_or_else(|| EpError::bad_request(format!("number {n} is not a double")))?;
    format_f64(x)
}

/// Parses JSON text as I-JSON: duplicate keys, unpaired surrogates, integer literals that
/// canonical form would alter (see the module notes) and excess nesting are refused, and
/// every number is the correctly rounded double of its text.
///
/// serde_json (without its `float_roundtrip` feature, which this workspace does not enable)
/// may land one or two ULPs off for long decimals, breaking RFC 8785's own examples. So each
/// number literal is re-read from the text with Rust's correctly rounding parser; serde_json
/// still does the grammar, escapes and structure.
pub fn parse_strict(text: &str) -> Result<Value, EpError> {
    let mut numbers = Numbers {
        lexemes: number_lexemes(text).into_iter(),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let value = ValueSeed {
        numbers: &mut numbers,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v))
    .map_err(|e| EpError::bad_request(format!("invalid JSON text: {e}")))?;
    Ok(value)
}

/// Number literals of `text` in document order. Only meaningful once serde_json has accepted
/// the text: then every `-` or digit outside a string starts a number.
fn number_lexemes(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut start: Option<usize> = None;
    for (i, b) in text.bytes().enumerate() {
        if let Some(s) = start {
            if matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                continue;
            }
            found.extend(text.get(s..i));
            start = None;
        }
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b'-' || b.is_ascii_digit() {
            start = Some(i);
        }
    }
    if let Some(s) = start {
        found.extend(text.get(s..));
    }
    found
}

struct Numbers<'t> {
    lexemes: std::vec::IntoIter<&'t str>,
}

impl Numbers<'_> {
    /// The value of the literal behind the number serde_json just produced, re-read exactly.
    /// `int` is serde_json's exact integer, kept when the literal is a safe integer.
    fn next_value<E: de::Error>(&mut self, approx: f64, int: Option<Number>) -> Result<Value, E> {
        let lexeme = self
            .lexemes
            .next()
            .ok_or_else(|| E::custom("number scan out of step with the parser"))?;
        let exact: f64 = lexeme
            .parse()
            .map_err(|_| E::custom(format!("unreadable number {lexeme}")))?;
        // serde_json's rounding error is at most a couple of ULPs; a larger gap means the
        // scan paired this number with the wrong literal, which must never pass silently.
        let close = exact == approx
            || (exact.is_sign_negative() == approx.is_sign_negative()
                && exact.to_bits().abs_diff(approx.to_bits()) <= 8);
        if !close {
            return Err(E::custom("number scan out of step with the parser"));
        }
        let integral = !lexeme.contains(['.', 'e', 'E']);
        let big = integral
            && lexeme
                .parse::<i128>()
                .map_or(true, |i| i.unsigned_abs() > u128::from(MAX_SAFE_MAGNITUDE));
        if big && format_f64(exact).ok().as_deref() != Some(lexeme) {
            return Err(E::custom(format!(
                "integer {lexeme} exceeds 2^53 and would be altered by canonical (double) form; \
                 send it as a string"
            )));
        }
        match int {
            Some(n) if !big => Ok(Value::Number(n)),
            // A big literal that *is* a double's canonical spelling (the canonical form of
            // 2^60 as a double, say) stays a double, so canonical text always reads back.
            _ => Number::from_f64(exact)
                .map(Value::Number)
                .ok_or_else(|| E::custom("number is not finite")),
        }
    }
}

/// Builds a [`Value`] like serde_json's own impl, but refuses repeated keys (serde_json keeps
/// the last silently) and substitutes exactly parsed numbers.
struct ValueSeed<'a, 't> {
    numbers: &'a mut Numbers<'t>,
}

impl<'de> DeserializeSeed<'de> for ValueSeed<'_, '_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.numbers.next_value(v as f64, Some(v.into()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.numbers.next_value(v as f64, Some(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.numbers.next_value(v, None)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let numbers = self.numbers;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(ValueSeed {
            numbers: &mut *numbers,
        })? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let numbers = self.numbers;
        let mut members = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if members.contains_key(&key) {
                // Quote a bounded prefix so a hostile key cannot bloat the refusal.
                let shown: String = key.chars().take(64).collect();
                return Err(de::Error::custom(format!(
                    "duplicate object key {shown:?}; send each key once"
                )));
            }
            let item = map.next_value_seed(ValueSeed {
                numbers: &mut *numbers,
            })?;
            members.insert(key, item);
        }
        Ok(Value::Object(members))
    }
}

/// A SHA-256 content digest, written `sha256:<64 lowercase hex>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest([u8; 32]);

const HEX: &[u8; 16] = b"0123456789abcdef";
const PREFIX: &str = "sha256:";

impl Digest {
    pub const fn from_bytes(bytes: [u8; 32]) -> Digest {
        Digest(bytes)
    }

    /// SHA-256 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// 64 lowercase hex digits.
    pub fn hex(&self) -> String {
        let mut s = String::with_capacity(64);
        for b in self.0 {
            for nibble in [b >> 4, b & 0x0f] {
                s.extend(HEX.get(usize::from(nibble)).map(|h| char::from(*h)));
            }
        }
        s
    }

    /// `sha256:` followed by [`Digest::hex`].
    pub fn to_prefixed(&self) -> String {
        format!("{PREFIX}{}", self.hex())
    }

    /// Exactly `sha256:` + 64 lowercase hex digits.
    pub fn parse_prefixed(s: &str) -> Result<Digest, EpError> {
        let hex = s
            .strip_prefix(PREFIX)
            .ok_or_else(|| EpError::bad_request(format!("a digest must start with {PREFIX:?}")))?;
        Digest::parse_hex(hex)
    }

    /// Exactly 64 lowercase hex digits. Uppercase is refused so each digest has one spelling.
    pub fn parse_hex(s: &str) -> Result<Digest, EpError> {
        // The input is not quoted: it may be arbitrarily long and hostile.
        let refuse = || EpError::bad_request("a digest must be exactly 64 lowercase hex digits");
        if s.len() != 64 {
            return Err(refuse());
        }
        let nibble = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(s.as_bytes().chunks_exact(2)) {
            let mut it = pair.iter().map(|c| nibble(*c));
            match (it.next().flatten(), it.next().flatten()) {
                (Some(hi), Some(lo)) => *byte = (hi << 4) | lo,
                _ => return Err(refuse()),
            }
        }
        Ok(Digest(out))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        f.write_str(&self.hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use proptest::prelude::*;
    use serde_json::json;

    fn refused(text: &str) -> bool {
        canonicalize_str(text).is_err_and(|e| e.code == ErrorCode::BadRequest)
    }

    #[test]
    fn escapes_only_what_json_requires() {
        let all_controls: String = (0u8..0x20).map(char::from).collect();
        let got = canonicalize(&json!(all_controls)).unwrap();
        assert_eq!(
            got,
            "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r\
             \\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\
             \\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\""
        );
        let literal = "/ é € \u{2028}\u{2029} \u{7f} 😀";
        assert_eq!(
            canonicalize(&json!(literal)).unwrap(),
            format!("\"{literal}\"")
        );
        assert_eq!(canonicalize(&json!("\"\\")).unwrap(), r#""\"\\""#);
    }

    #[test]
    fn keys_sort_by_utf16_code_units_not_chars() {
        // By char, U+1F600 > U+FB33; in UTF-16 its lead surrogate 0xD83D sorts first.
        let v = json!({"\u{fb33}": 1, "\u{1f600}": 2, "\u{e9}": 3, "b": 4, "a": {"z": 0, "y": []}});
        assert_eq!(
            canonicalize(&v).unwrap(),
            "{\"a\":{\"y\":[],\"z\":0},\"b\":4,\"\u{e9}\":3,\"\u{1f600}\":2,\"\u{fb33}\":1}"
        );
    }

    #[test]
    fn empty_and_nested_containers() {
        assert_eq!(canonicalize_str(" { } ").unwrap(), "{}");
        assert_eq!(canonicalize_str("[ ]").unwrap(), "[]");
        assert_eq!(
            canonicalize_str(r#"[ [[]], {"b": [{}, 1.50]}, {"a" : null} ]"#).unwrap(),
            r#"[[[]],{"b":[{},1.5]},{"a":null}]"#
        );
    }

    #[test]
    fn lone_surrogates_are_refused() {
        for text in [
            r#""\ud800""#,
            r#""\udc00""#,
            r#""x\ud83dy""#,
            r#""\ud800\u0041""#,
            r#""\ud800\ud800""#,
            r#"{"\udfff": 1}"#,
        ] {
            assert!(refused(text), "{text} accepted");
        }
        assert_eq!(canonicalize_str(r#""\ud83d\ude00""#).unwrap(), "\"😀\"");
    }

    #[test]
    fn duplicate_keys_are_refused() {
        assert!(refused(r#"{"a": 1, "a": 1}"#));
        assert!(refused(r#"{"a": 1, "\u0061": 2}"#)); // equal once unescaped
        assert!(refused(r#"[{"x": {"k": 1, "k": 2}}]"#));
        assert_eq!(
            canonicalize_str(r#"{"a": {"a": 1}, "b": {"a": 2}}"#).unwrap(),
            r#"{"a":{"a":1},"b":{"a":2}}"#
        );
    }

    #[test]
    fn integers_beyond_2_pow_53_are_refused() {
        assert_eq!(
            canonicalize_str("9007199254740992").unwrap(),
            "9007199254740992"
        );
        assert_eq!(
            canonicalize_str("-9007199254740992").unwrap(),
            "-9007199254740992"
        );
        for text in [
            "9007199254740993",
            "-9007199254740993",
            "18446744073709551615",
            "18446744073709551616",
            "-100000000000000000000000",
        ] {
            assert!(refused(text), "{text} accepted");
        }
        assert!(canonicalize(&json!(u64::MAX)).is_err());
        assert!(canonicalize(&json!(i64::MIN)).is_err());
        assert!(canonicalize(&json!((1u64 << 53) + 1)).is_err());
        // Written as a double, the value is the double's business.
        assert_eq!(
            canonicalize_str("9007199254740993.0").unwrap(),
            "9007199254740992"
        );
        assert!(canonicalize(&json!(9007199254740994u64)).is_err());
        assert!(canonicalize(&json!(9007199254740994.0)).is_ok());
        // A big literal that is already a double's canonical spelling reads back as that double.
        for text in [
            "9007199254740994",
            "-18446744073709552000",
            "295147905179352830000",
        ] {
            assert_eq!(canonicalize_str(text).unwrap(), text);
            assert!(parse_strict(text).unwrap().is_f64());
        }
        assert_eq!(canonicalize_str("1e22").unwrap(), "1e+22");
    }

    #[test]
    fn numbers_are_read_exactly_despite_serde_json_rounding() {
        let v = parse_strict("[333333333.33333329, 7.567984495461021e183]").unwrap();
        let bits: Vec<u64> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_f64().unwrap().to_bits())
            .collect();
        assert_eq!(
            bits,
            ["333333333.33333329", "7.567984495461021e183"]
                .map(|s| { s.parse::<f64>().unwrap().to_bits() })
        );
        assert_eq!(canonicalize_str("-0").unwrap(), "0");
        assert_eq!(canonicalize_str("[-0.0, 0e5, 1E2]").unwrap(), "[0,0,100]");
    }

    #[test]
    fn non_finite_and_malformed_input_is_refused() {
        assert!(format_f64(f64::NAN).is_err());
        assert!(format_f64(f64::INFINITY).is_err());
        assert!(format_f64(f64::NEG_INFINITY).is_err());
        for text in [
            "1e400",
            "NaN",
            "[1,]",
            "{\"a\" 1}",
            "1 2",
            "",
            "'a'",
            "\"\t\"",
            "01",
        ] {
            assert!(refused(text), "{text:?} accepted");
        }
        let e = canonicalize_bytes(b"\"\xff\"").unwrap_err();
        assert_eq!(e.code, ErrorCode::BadRequest);
    }

    #[test]
    fn nesting_is_bounded() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(canonicalize_str(&deep(100)).is_ok());
        assert!(refused(&deep(MAX_DEPTH + 1)));
        let mut v = json!(null);
        for _ in 0..=MAX_DEPTH {
            v = json!([v]);
        }
        assert!(canonicalize(&v).is_err());
    }

    #[test]
    fn is_canonical_accepts_only_the_exact_form() {
        assert!(is_canonical(br#"{"a":[1,2.5,"x"],"b":null}"#));
        assert!(!is_canonical(br#"{"b":null,"a":[1,2.5,"x"]}"#));
        assert!(!is_canonical(br#"{"a": 1}"#));
        assert!(!is_canonical(b"1.0"));
        assert!(!is_canonical(b"\"\\u00e9\""));
        assert!(!is_canonical(b"{\"a\":1,\"a\":1}"));
        assert!(!is_canonical(b"not json"));
    }

    #[test]
    fn digest_golden_and_round_trip() {
        let d = content_digest(&json!({})).unwrap();
        let golden = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
        assert_eq!(d.to_prefixed(), golden);
        assert_eq!(d.to_string(), golden);
        assert_eq!(d, Digest::of(b"{}"));
        assert_eq!(Digest::parse_prefixed(golden).unwrap(), d);
        assert_eq!(Digest::parse_hex(&d.hex()).unwrap(), d);
        assert_eq!(Digest::from_bytes(*d.as_bytes()), d);
        // Member order and whitespace do not change the digest.
        assert_eq!(
            content_digest(&json!({"b": 1, "a": [true]})).unwrap(),
            Digest::of(
                canonicalize_str("{ \"a\": [true], \"b\": 1.0 }")
                    .unwrap()
                    .as_bytes()
            )
        );
    }

    #[test]
    fn digest_spellings_other_than_canonical_are_refused() {
        let hex = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
        for bad in [
            hex.to_owned(),
            format!("sha256:{}", hex.to_uppercase()),
            format!("SHA256:{hex}"),
            format!("sha256:{hex}0"),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{}g", &hex[1..]),
            format!("sha256: {}", &hex[1..]),
            format!("sha512:{hex}"),
        ] {
            let e = Digest::parse_prefixed(&bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{bad}");
        }
        assert!(Digest::parse_hex(&format!("é{}", &hex[2..])).is_err());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let safe = 1i64 << 53;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<u64>()
                .prop_map(f64::from_bits)
                .prop_filter_map("finite", Number::from_f64)
                .prop_map(Value::Number),
            (-safe..=safe).prop_map(Value::from),
            any::<String>().prop_map(Value::String),
            "[\\x00-\\x1f\"\\\\/a-z\u{e9}\u{2028}\u{fb33}\u{1f600}]{0,6}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a-c\u{e9}\u{1f600}\u{fb33}]{0,2}", inner), 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_form_is_a_fixed_point(v in arb_json()) {
            let once = canonicalize(&v).unwrap();
            prop_assert!(is_canonical(once.as_bytes()));
            prop_assert_eq!(canonicalize_str(&once).unwrap(), once);
        }

        #[test]
        fn formatted_numbers_read_back_to_the_same_double(bits in any::<u64>()) {
            let x = f64::from_bits(bits);
            prop_assume!(x.is_finite());
            let text = format_f64(x).unwrap();
            let back: f64 = text.parse().unwrap();
            let expected = if x == 0.0 { 0.0 } else { x };
            prop_assert_eq!(back.to_bits(), expected.to_bits(), "{} -> {}", x, text);
        }
    }
}
