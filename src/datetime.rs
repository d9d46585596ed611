//! Datetimes as the service stores them.
//!
//! The service writes JavaScript `toISOString()` (`2024-03-22T22:03:33.123Z`);
//! older and test data also hold forms without `Z` or with 0–9 fraction digits
//! (`3023-12-23T12:21:10.10`). [`parse`] reads all of them (a missing zone
//! means UTC) and rejects anything else with a [`DateTimeError`];
//! [`format()`] always writes the canonical form.

use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, NaiveTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serializer};

/// A stored datetime that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not an ISO 8601 datetime like 2024-03-22T22:03:33.123Z ({reason})")]
pub struct DateTimeError {
    /// The stored text as read.
    pub value: String,
    /// What is wrong with it (`too short`, `no such date`, ...).
    pub reason: &'static str,
}

/// Parse a stored datetime leniently: `YYYY-MM-DDTHH:MM:SS`, an optional
/// fraction of 1–9 digits, and an optional `Z` (absent means UTC).
pub fn parse(value: &str) -> Result<DateTime<Utc>, DateTimeError> {
    let err = |reason| DateTimeError {
        value: value.to_owned(),
        reason,
    };
    let s = value.strip_suffix('Z').unwrap_or(value);
    let b = s.as_bytes();
    if b.len() < 19 {
        return Err(err("too short"));
    }
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    let shape_ok = digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !shape_ok {
        return Err(err("expected YYYY-MM-DDTHH:MM:SS"));
    }
    let num = |r: std::ops::Range<usize>| -> u32 {
        b[r].iter().fold(0, |acc, d| acc * 10 + u32::from(d - b'0'))
    };
    let date = NaiveDate::from_ymd_opt(num(0..4) as i32, num(5..7), num(8..10))
        .ok_or_else(|| err("no such date"))?;
    let mut nanos = 0u32;
    let rest = &b[19..];
    if !rest.is_empty() {
        let frac = rest
            .strip_prefix(b".")
            .ok_or_else(|| err("unexpected text after the seconds"))?;
        if frac.is_empty() || frac.len() > 9 || !frac.iter().all(u8::is_ascii_digit) {
            return Err(err("the fraction must have 1 to 9 digits"));
        }
        nanos = frac
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'))
            * 10u32.pow(9 - frac.len() as u32);
    }
    let time = NaiveTime::from_hms_nano_opt(num(11..13), num(14..16), num(17..19), nanos)
        .ok_or_else(|| err("no such time of day"))?;
    Ok(NaiveDateTime::new(date, time).and_utc())
}

/// The canonical stored form: `YYYY-MM-DDTHH:MM:SS.sssZ` (UTC, milliseconds).
pub fn format(at: DateTime<Utc>) -> String {
    if (0..=9999).contains(&at.year()) {
        // chrono's RFC 3339 writer gives the same text for four-digit
        // years (the tests hold the two side by side), without parsing
        // the pattern again on every call.
        at.to_rfc3339_opts(SecondsFormat::Millis, true)
    } else {
        at.format(CANONICAL).to_string()
    }
}

/// The canonical form as a `strftime` pattern.
const CANONICAL: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";

/// A datetime read leniently from a string, without copying the string.
struct Lenient(DateTime<Utc>);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Lenient, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = Lenient;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Lenient, E> {
                parse(s).map(Lenient).map_err(E::custom)
            }
        }
        d.deserialize_string(Text)
    }
}

/// Serde adapter: read leniently, write canonically.
pub mod serde_lenient {
    use super::*;

    /// Write `at` in the canonical form ([`format()`]).
    pub fn serialize<S: Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*at))
    }

    /// Read a string in any stored form ([`parse`]); anything else is an
    /// error naming the value.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        Ok(Lenient::deserialize(d)?.0)
    }
}

/// Serde adapter for an optional datetime stored as a string or NULL.
pub mod serde_lenient_opt {
    use super::*;

    /// Write `Some` in the canonical form ([`format()`]), `None` as `NULL`.
    pub fn serialize<S: Serializer>(at: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
        match at {
            Some(at) => s.serialize_some(&format(*at)),
            None => s.serialize_none(),
        }
    }

    /// Read `NULL` as `None`, a string in any stored form ([`parse`]) as
    /// `Some`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        Ok(Option::<Lenient>::deserialize(d)?.map(|at| at.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Timelike};
    use proptest::prelude::*;

    #[test]
    fn reads_every_stored_form() {
        let base = Utc.with_ymd_and_hms(2024, 3, 22, 22, 3, 33).unwrap();
        assert_eq!(
            parse("2024-03-22T22:03:33.123Z").unwrap(),
            base.with_nanosecond(123_000_000).unwrap()
        );
        assert_eq!(parse("2024-03-22T22:03:33Z").unwrap(), base);
        assert_eq!(parse("2024-03-22T22:03:33").unwrap(), base);
        assert_eq!(
            parse("2024-03-22T22:03:33.1").unwrap(),
            base.with_nanosecond(100_000_000).unwrap()
        );
        assert_eq!(
            parse("3023-12-23T12:21:10.10").unwrap(),
            Utc.with_ymd_and_hms(3023, 12, 23, 12, 21, 10)
                .unwrap()
                .with_nanosecond(100_000_000)
                .unwrap()
        );
        assert_eq!(
            parse("2024-03-22T22:03:33.123456789Z").unwrap(),
            base.with_nanosecond(123_456_789).unwrap()
        );
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        for bad in [
            "",
            "tomorrow",
            "2024-03-22",
            "2024-03-22 22:03:33",
            "2024-02-30T00:00:00Z",
            "2024-03-22T25:00:00Z",
            "2024-03-22T22:03:33.Z",
            "2024-03-22T22:03:33.1234567891Z",
            "2024-03-22T22:03:33+09:00",
            "2024-03-22T22:03:33ZZ",
            "２024-03-22T22:03:33Z",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.value, bad);
            assert!(e.to_string().contains("ISO 8601"), "{e}");
        }
    }

    #[test]
    fn years_past_four_digits_are_written_as_the_pattern_writes_them() {
        for year in [-1, 10_000] {
            let at = Utc.with_ymd_and_hms(year, 1, 2, 3, 4, 5).unwrap();
            assert_eq!(format(at), at.format(CANONICAL).to_string());
        }
        assert_eq!(
            format(Utc.with_ymd_and_hms(10_000, 1, 2, 3, 4, 5).unwrap()),
            "+10000-01-02T03:04:05.000Z"
        );
    }

    #[test]
    fn writes_canonically() {
        let at = parse("3023-12-23T12:21:10.10").unwrap();
        assert_eq!(format(at), "3023-12-23T12:21:10.100Z");
        assert_eq!(
            format(parse("2024-01-02T03:04:05").unwrap()),
            "2024-01-02T03:04:05.000Z"
        );
    }

    proptest! {
        #[test]
        fn canonical_form_round_trips(ms in 0i64..253_402_300_799_999) {
            let at = Utc.timestamp_millis_opt(ms).unwrap();
            let s = format(at);
            prop_assert_eq!(s.len(), 24);
            prop_assert_eq!(parse(&s).unwrap(), at);
        }

        /// The RFC 3339 writer gives the pattern's text, leap seconds
        /// included.
        #[test]
        fn written_as_the_pattern_writes(
            ms in 0i64..253_402_300_799_999, leap in any::<bool>()
        ) {
            let mut at = Utc.timestamp_millis_opt(ms).unwrap();
            if leap {
                // A leap second: 59 s, and the nanoseconds past 10^9.
                let nanos = 1_000_000_000 + at.nanosecond() % 1_000_000_000;
                at = at.with_second(59).unwrap().with_nanosecond(nanos).unwrap();
            }
            prop_assert_eq!(format(at), at.format(CANONICAL).to_string());
        }

        #[test]
        fn never_panics(s in ".{0,40}") {
            let _ = parse(&s);
        }
    }
}
