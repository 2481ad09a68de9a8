//! The one plain-text table the operator's read commands print (`actor ls`, `gate ls|show`):
//! left-aligned columns two spaces apart, a header line first, no trailing blanks.

/// `headers` and `rows` as aligned lines.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|r| r.get(i).map(String::len))
                .chain([h.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |fields: Vec<&str>| {
        fields
            .iter()
            .zip(&widths)
            .map(|(f, w)| format!("{f:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(headers.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn columns_align_two_spaces_apart_without_trailing_blanks() {
        let rows = vec![
            vec!["alice".to_owned(), "-".to_owned()],
            vec!["b".to_owned(), "admin,spawn".to_owned()],
        ];
        assert_eq!(
            render(&["ACTOR", "SCOPE"], &rows),
            "ACTOR  SCOPE\nalice  -\nb      admin,spawn"
        );
        assert_eq!(render(&["A", "B"], &[]), "A  B");
    }
}
