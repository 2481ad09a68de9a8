//! RFC 8785's published test vectors, kept as data files under `tests/data/canon/`.
//! Kept in a `canon` module so `cargo test -p cotal-core canon` selects them, and so clippy's
//! test allowances cover the helpers too.

#[cfg(test)]
mod canon {
    use std::path::PathBuf;

    use cotal_core::canon::{
        canonicalize, canonicalize_bytes, content_digest, format_f64, is_canonical, Digest,
    };
    use serde_json::{Number, Value};

    fn data(name: &str) -> Vec<u8> {
        let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "data", "canon", name]
            .iter()
            .collect();
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn check_pair(input: &str, output: &str) {
        let expected = data(output);
        let got = canonicalize_bytes(&data(input)).unwrap();
        assert_eq!(got.as_bytes(), expected.as_slice(), "{input}");
        assert!(is_canonical(&expected));
        assert!(!is_canonical(&data(input)));
        let value: Value = serde_json::from_slice(&expected).unwrap();
        assert_eq!(content_digest(&value).unwrap(), Digest::of(&expected));
    }

    #[test]
    fn rfc8785_structured_example() {
        check_pair("structured.in.json", "structured.out.json");
    }

    #[test]
    fn rfc8785_sorting_example() {
        check_pair("sorting.in.json", "sorting.out.json");
    }

    #[test]
    fn rfc8785_number_table() {
        let table = String::from_utf8(data("numbers.txt")).unwrap();
        let mut rows = 0;
        for line in table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let (hex, expected) = line.split_once(' ').unwrap();
            let x = f64::from_bits(u64::from_str_radix(hex, 16).unwrap());
            rows += 1;
            if expected == "refused" {
                assert!(Number::from_f64(x).is_none(), "{hex}");
                assert!(format_f64(x).is_err(), "{hex}");
                continue;
            }
            let value = Value::Number(Number::from_f64(x).unwrap());
            assert_eq!(canonicalize(&value).unwrap(), expected, "{hex}");
            // The canonical spelling must read back as itself.
            assert_eq!(canonicalize_bytes(expected.as_bytes()).unwrap(), expected);
            assert!(is_canonical(expected.as_bytes()), "{expected}");
        }
        assert_eq!(rows, 26);
    }
}
