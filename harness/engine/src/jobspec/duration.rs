//! Go/Nomad-style duration strings: "250ms", "5s", "1m30s", "1.5h", "0".

use std::time::Duration;

const NANOS_PER_UNIT: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60 * 1_000_000_000),
    ("h", 3_600 * 1_000_000_000),
];

/// Parses a duration the way Go's `time.ParseDuration` does (which is what
/// Nomad uses), minus signs: a sequence of decimal numbers, each with an
/// optional fraction and a mandatory unit (`ns`, `us`, `ms`, `s`, `m`, `h`).
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    // Go accepts a bare "0" as the only unit-less duration.
    if input == "0" {
        return Ok(Duration::ZERO);
    }
    if input.is_empty() {
        return Err("empty duration".to_owned());
    }
    let mut rest = input;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(num_len);
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
            return Err(format!("expected a number at \"{rest}\""));
        }
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match NANOS_PER_UNIT.iter().find(|(name, _)| *name == unit) {
            Some((_, scale)) => *scale,
            None if unit.is_empty() => return Err(format!("missing unit after \"{number}\"")),
            None => {
                return Err(format!(
                    "unknown unit \"{unit}\" (valid units: ns, us, ms, s, m, h)"
                ))
            }
        };
        let too_large = || "duration is too large".to_owned();
        let int_nanos = if int.is_empty() {
            0
        } else {
            int.parse::<u128>()
                .ok()
                .and_then(|v| v.checked_mul(scale))
                .ok_or_else(too_large)?
        };
        // Digits past nanosecond precision cannot matter; capping them keeps the
        // fixed-point arithmetic well inside u128.
        let frac = &frac[..frac.len().min(18)];
        let frac_nanos = if frac.is_empty() {
            0
        } else {
            let digits: u128 = frac.parse().map_err(|_| too_large())?;
            digits * scale / 10u128.pow(frac.len() as u32)
        };
        total = total
            .checked_add(int_nanos + frac_nanos)
            .ok_or_else(too_large)?;
        rest = next;
    }
    u64::try_from(total)
        .map(Duration::from_nanos)
        .map_err(|_| "duration is too large".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("0", Duration::ZERO)]
    #[case("250ms", Duration::from_millis(250))]
    #[case("5s", Duration::from_secs(5))]
    #[case("1m30s", Duration::from_secs(90))]
    #[case("2h", Duration::from_secs(7200))]
    #[case("30m", Duration::from_secs(1800))]
    #[case("1.5s", Duration::from_millis(1500))]
    #[case(".5m", Duration::from_secs(30))]
    #[case("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006))]
    #[case("10µs", Duration::from_micros(10))]
    #[case("0s", Duration::ZERO)]
    fn parses_valid_durations(#[case] input: &str, #[case] expected: Duration) {
        assert_eq!(parse_duration(input), Ok(expected));
    }

    #[rstest]
    #[case("", "empty duration")]
    #[case("5", "missing unit")]
    #[case("1m30", "missing unit after \"30\"")]
    #[case("5x", "unknown unit \"x\"")]
    #[case("5 s", "unknown unit \" s\"")]
    #[case("-5s", "expected a number")]
    #[case("s", "expected a number")]
    #[case("1.2.3s", "expected a number")]
    #[case(".s", "expected a number")]
    #[case("fast", "expected a number")]
    #[case("99999999999999999999999h", "too large")]
    #[case("9999999999h", "too large")]
    fn rejects_garbage(#[case] input: &str, #[case] fragment: &str) {
        let err = parse_duration(input).unwrap_err();
        assert!(err.contains(fragment), "{input:?}: {err}");
    }
}
