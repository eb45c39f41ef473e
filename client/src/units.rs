//! Human units on command lines: durations (`250us`, `5ms`, `2s`, a bare number of seconds),
//! counts (`4096`, `16k`, `2M`), rates (`400`, `5k`, `2.5k`) and sizes in bytes (`4096`,
//! `64k`, `1MiB`), shared by `mds`, `mdsctl` and `loadgen` so every tool reads
//! `--duration 300` and `--max-batch 16k` the same way.

use std::time::Duration;

/// Parses a duration in human units: `250us`, `5ms`, `2s`, `1m`; a bare number is seconds
/// (`300`, `0.5`), as the 2008 report's tools took it.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|e| format!("invalid duration {s:?}: {e}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e} (try 5ms, 2s)"))
}

/// Parses a count with an optional `k` (×1000) or `m` (×1,000,000) suffix.
pub fn parse_count(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, scale) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1_000),
        Some((i, 'm' | 'M')) => (&s[..i], 1_000_000),
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("invalid count {s:?} (try 4096 or 16k)"))
}

/// Parses a rate (per second) with an optional `k` or `m` suffix, like a count but fractional
/// (`0.5`, `2.5k`), so `--rate 5k` reads as `--count 100k` does. Must be positive and finite.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (digits, scale) = match s.char_indices().last() {
        Some((i, 'k' | 'K')) => (&s[..i], 1e3),
        Some((i, 'm' | 'M')) => (&s[..i], 1e6),
        _ => (s, 1.0),
    };
    digits
        .parse::<f64>()
        .ok()
        .map(|r| r * scale)
        .filter(|r| *r > 0.0 && r.is_finite())
        .ok_or_else(|| format!("invalid rate {s:?}: a positive number per second (try 400 or 5k)"))
}

/// Parses a size in bytes with an optional binary suffix, as dd(1) and fio read one: `k`,
/// `K` or `KiB` (×1024), `m`, `M` or `MiB` (×1024²), `g`, `G` or `GiB` (×1024³). A count's
/// `k` is 1000 ([`parse_count`]); a size's is 1024, so `--size 4k` is one 4 KiB block.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, suffix) = s.split_at(digits_end);
    let shift = match suffix {
        "" => 0,
        "k" | "K" | "KiB" => 10,
        "m" | "M" | "MiB" => 20,
        "g" | "G" | "GiB" => 30,
        _ => return Err(format!("invalid size {s:?} (try 4096, 64k or 1MiB)")),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("invalid size {s:?} (try 4096, 64k or 1MiB)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units_parse_and_nonsense_does_not() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("300").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("-1").is_err());
        assert_eq!(parse_duration("5ms").unwrap(), Duration::from_millis(5));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_count("16k").unwrap(), 16_000);
        assert_eq!(parse_count("2M").unwrap(), 2_000_000);
        assert_eq!(parse_count("4096").unwrap(), 4096);
        assert!(parse_count("k").is_err());
        assert!(parse_count("-1").is_err());
        assert_eq!(parse_rate("5k").unwrap(), 5000.0);
        assert_eq!(parse_rate("2.5K").unwrap(), 2500.0);
        assert_eq!(parse_rate("1M").unwrap(), 1e6);
        assert_eq!(parse_rate("400").unwrap(), 400.0);
        assert_eq!(parse_rate("0.5").unwrap(), 0.5);
        for bad in ["", "k", "0", "-5k", "inf", "NaN", "fast"] {
            assert!(parse_rate(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_take_binary_multiples_and_refuse_the_rest() {
        assert_eq!(parse_bytes("0").unwrap(), 0);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("4k").unwrap(), 4096);
        assert_eq!(parse_bytes("64K").unwrap(), 65536);
        assert_eq!(parse_bytes("200KiB").unwrap(), 204_800);
        assert_eq!(parse_bytes("1M").unwrap(), 1 << 20);
        assert_eq!(parse_bytes("2MiB").unwrap(), 2 << 20);
        assert_eq!(parse_bytes(" 1g ").unwrap(), 1 << 30);
        for bad in [
            "",
            "k",
            "-1",
            "1.5k",
            "4kb",
            "4 k",
            "1T",
            "99999999999999999999G",
        ] {
            assert!(parse_bytes(bad).is_err(), "{bad:?}");
        }
    }
}
