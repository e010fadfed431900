//! Durations as people write them on command lines: `30s`, `10m`, `1h`,
//! `2d`, `1w`, and sums such as `1h30m` (`wardenctl logs --since`,
//! `warden-shim --approve-timeout`).

use std::time::Duration;

/// `s` as a duration, or None when it is not one (a unit is required: `30`
/// alone is refused, so that nobody guesses whether it means seconds).
pub fn parse(s: &str) -> Option<Duration> {
    let mut total: u64 = 0;
    let mut num = String::new();
    let mut any = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            num.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1_000,
            'm' => 60_000,
            'h' => 3_600_000,
            'd' => 86_400_000,
            'w' => 7 * 86_400_000,
            _ => return None,
        };
        let n: u64 = num.parse().ok()?;
        total = total.checked_add(n.checked_mul(unit)?)?;
        num.clear();
        any = true;
    }
    (any && num.is_empty()).then_some(Duration::from_millis(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_sums() {
        assert_eq!(parse("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse("2d"), Some(Duration::from_secs(172_800)));
        assert_eq!(parse("1w"), Some(Duration::from_secs(604_800)));
        assert_eq!(parse("0s"), Some(Duration::ZERO));
    }

    #[test]
    fn what_is_not_a_duration() {
        for bad in [
            "",
            "30",
            "s",
            "1x",
            "1h30",
            "-1s",
            "1.5s",
            " 1s",
            "99999999999999999999s",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
