//! ECMAScript's JSON text primitives, which both the canonical form ([`crate::canon`], RFC 8785)
//! and the byte-exact row writers ([`crate::wire`]) are built on: `JSON.stringify`'s string
//! escapes and `Number::toString`'s number spelling. They depend on neither, so the two
//! modules above them never import each other.

use crate::error::EpError;

/// Appends `s` as a JSON string literal escaped as `JSON.stringify` does: `"`, `\`, the short
/// escapes `\b \f \n \r \t`, other control characters as lowercase `\u00xx`, everything else
/// literal.
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// ECMAScript `Number::toString(x)` (ECMA-262 §6.1.6.1.20), the number form JCS mandates.
pub fn format_f64(x: f64) -> Result<String, EpError> {
    if !x.is_finite() {
        return Err(EpError::bad_request(format!(
            "number {x} is not finite; JSON cannot carry it"
        )));
    }
    if x == 0.0 {
        return Ok("0".to_owned()); // both zeros print as "0"
    }
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    let (digits, exp) = shortest_digits(x.abs())?;
    let k = i64::try_from(digits.len()).map_err(|_| EpError::internal("digit count overflow"))?;
    // `n` is where the decimal point sits relative to the digits: value = 0.digits × 10^n.
    let n = exp + 1;
    let zeros = |count: i64| "0".repeat(usize::try_from(count).unwrap_or(0));
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.push_str(&zeros(n - k));
    } else if 0 < n && n <= 21 {
        let split = usize::try_from(n).map_err(|_| EpError::internal("split overflow"))?;
        let (int, frac) = digits
            .split_at_checked(split)
            .ok_or_else(|| EpError::internal("decimal point outside digits"))?;
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.push_str(&zeros(-n));
        out.push_str(&digits);
    } else {
        let mut chars = digits.chars();
        out.extend(chars.next());
        let rest = chars.as_str();
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    Ok(out)
}

/// The digits and decimal exponent (`d.ddd × 10^exp`) ECMAScript picks for positive finite `a`:
/// the fewest digits that read back as `a`, and among those the closest to `a`, ties to even.
fn shortest_digits(a: f64) -> Result<(String, i64), EpError> {
    // `{:e}` gives the fewest round-tripping digits, but on an exact tie it rounds the last
    // digit up: 0x43143ff3c1cb0959 is ...206.25 and prints as ...206.3, where ES says .2.
    let short = format!("{a:e}");
    let k = short
        .split_once('e')
        .map_or(0, |(m, _)| m.bytes().filter(u8::is_ascii_digit).count());
    // `{:.N e}` rounds the exact binary value correctly with ties to even; at that length it
    // is the closest candidate, so it is ES's answer whenever it still reads back as `a`.
    let nearest = format!("{:.*e}", k.saturating_sub(1), a);
    let sci = if nearest.parse::<f64>() == Ok(a) {
        nearest
    } else {
        short
    };
    let (mantissa, exp) = sci
        .split_once('e')
        .ok_or_else(|| EpError::internal(format!("unexpected float form {sci}")))?;
    let exp: i64 = exp
        .parse()
        .map_err(|_| EpError::internal(format!("unexpected float exponent in {sci}")))?;
    let mut digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    // Trailing zeros carry no value and would make ES's digit count `k` wrong.
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    Ok((digits, exp))
}
