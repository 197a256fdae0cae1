//! Sizes and durations as people write them: `64MiB`, `1.5GB`, `30s`, `250ms`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A size in bytes, parsed from `4096`, `64KiB`, `64MiB`, `1GiB`, `10MB`...
///
/// Binary suffixes (`KiB`, `MiB`, `GiB`) are powers of 1024, decimal ones
/// (`KB`, `MB`, `GB`) powers of 1000; `K`, `M`, `G` alone are binary, as in
/// most tools that size memory.
///
/// ```
/// use waft_core::ByteSize;
/// assert_eq!("64MiB".parse::<ByteSize>().unwrap().bytes(), 64 << 20);
/// assert_eq!("1.5 KB".parse::<ByteSize>().unwrap().bytes(), 1500);
/// assert!("lots".parse::<ByteSize>().is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ByteSize(u64);

impl ByteSize {
    /// `n` bytes.
    pub const fn b(n: u64) -> Self {
        Self(n)
    }

    /// `n` KiB.
    pub const fn kib(n: u64) -> Self {
        Self(n << 10)
    }

    /// `n` MiB.
    pub const fn mib(n: u64) -> Self {
        Self(n << 20)
    }

    /// `n` GiB.
    pub const fn gib(n: u64) -> Self {
        Self(n << 30)
    }

    /// The size in bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// The size in bytes as a `usize`, saturating on 32-bit hosts.
    pub fn as_usize(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

/// Why a size or a duration did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read {input:?} as {what}: {why}")]
pub struct ParseError {
    input: String,
    what: &'static str,
    why: String,
}

impl FromStr for ByteSize {
    type Err = ParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let error = |why: &str| ParseError {
            input: input.to_owned(),
            what: "a size",
            why: why.to_owned(),
        };
        let text = input.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        if number.is_empty() {
            return Err(error("expected a number, e.g. 64MiB"));
        }
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => {
                return Err(error(
                    "unknown unit; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB",
                ));
            }
        };
        let bytes = if let Ok(whole) = number.parse::<u64>() {
            whole
                .checked_mul(multiplier)
                .ok_or_else(|| error("too large"))?
        } else {
            let value: f64 = number.parse().map_err(|_| error("not a number"))?;
            let bytes = (value * multiplier as f64).round();
            if !bytes.is_finite() || bytes >= u64::MAX as f64 {
                return Err(error("too large"));
            }
            bytes as u64
        };
        Ok(Self(bytes))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        for (unit, size) in UNITS {
            if self.0 >= size && self.0.is_multiple_of(size) {
                return write!(f, "{}{unit}", self.0 / size);
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// Reads a duration the way people write one in a configuration file
/// (`"30s"`, see [`parse_duration`]): for `#[serde(deserialize_with)]`.
pub fn deserialize_duration<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Duration, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(deserializer)?;
    parse_duration(&text).map_err(serde::de::Error::custom)
}

/// Parses a duration: `30s`, `250ms`, `2m`, `1h 30m`, `1.5s`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(waft_core::parse_duration("250ms").unwrap(), Duration::from_millis(250));
/// assert_eq!(waft_core::parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
/// assert!(waft_core::parse_duration("soon").is_err());
/// ```
pub fn parse_duration(input: &str) -> Result<Duration, ParseError> {
    let error = |why: String| ParseError {
        input: input.to_owned(),
        what: "a duration",
        why,
    };
    let text = input.trim();
    // humantime does not take fractions; accept `1.5s` the way people write it.
    if let Some(seconds) = text.strip_suffix('s').filter(|n| n.contains('.'))
        && let Ok(value) = seconds.parse::<f64>()
    {
        return Duration::try_from_secs_f64(value).map_err(|e| error(e.to_string()));
    }
    humantime::parse_duration(text).map_err(|e| error(format!("{e}; write e.g. 30s, 250ms or 2m")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_and_decimal_units() {
        for (text, bytes) in [
            ("0", 0),
            ("4096", 4096),
            ("4096B", 4096),
            ("64KiB", 64 << 10),
            ("64k", 64 << 10),
            ("64MiB", 64 << 20),
            ("64 MiB", 64 << 20),
            ("2G", 2 << 30),
            ("10MB", 10_000_000),
            ("0.5MiB", 512 << 10),
        ] {
            assert_eq!(text.parse::<ByteSize>().unwrap().bytes(), bytes, "{text}");
        }
    }

    #[test]
    fn bad_sizes_say_why() {
        for text in [
            "",
            "MiB",
            "12 parsecs",
            "-1MiB",
            "99999999999999999999",
            "1e400GiB",
        ] {
            let err = text.parse::<ByteSize>().unwrap_err();
            assert!(err.to_string().contains("cannot read"), "{text}: {err}");
        }
        assert!(
            "20000000TiB"
                .parse::<ByteSize>()
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
    }

    #[test]
    fn sizes_display_in_the_largest_exact_unit() {
        assert_eq!(ByteSize::mib(64).to_string(), "64MiB");
        assert_eq!(ByteSize::b(1500).to_string(), "1500B");
        assert_eq!(ByteSize::gib(4).to_string(), "4GiB");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("0.25s").unwrap(), Duration::from_millis(250));
        assert!(parse_duration("").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(
            parse_duration("fast")
                .unwrap_err()
                .to_string()
                .contains("a duration")
        );
    }
}
