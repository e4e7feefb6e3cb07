//! Sizes as operators write them: `4096`, `512K`, `8G`, `1T`.

/// Parses a size with an optional binary suffix (K, M, G, T; `iB`/`B` allowed).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let digits = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, suffix) = s.split_at(digits);
    let n: u64 = num.parse().ok()?;
    let shift = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("8G"), Some(8 << 30));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("1TiB"), Some(1 << 40));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("1Q"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }
}
