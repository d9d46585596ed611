//! Every key string and attribute name of the archive table, and the only
//! code that builds or parses its keys.
//!
//! | item | `PK` (S) | `SK` (N) |
//! |---|---|---|
//! | archived file | `YYYY-MM-DD-hh-mm-ss` (UTC) | epoch seconds of that time |
//! | date lookup, root | `root` | `0` |
//! | date lookup, year / month / day | `YYYY` / `YYYY-MM` / `YYYY-MM-DD` | `0` |
//! | unzipped file | `Unzipped` | `CreatedDate` (epoch seconds) |
//! | unzipping file | `Unzipping` | `CreatedDate` (epoch seconds) |
//! | the worker's checkpoint of a job | `WorkerCheckpoint#<job>` | `0` |
//!
//! Numbers are read leniently (`2024-3-5-7-8-9` is the file of
//! `2024-03-05-07-08-09`, a month entry `3` is `03`) and always written in
//! the canonical, zero-padded form. A date that does not exist
//! (`2024-02-30`) is malformed. Errors ([`KeyError`]) name key values only:
//! the keys of this table are dates and fixed words, never personal data.
//!
//! The checkpoint's partition cannot collide with the table's items: every
//! other partition is `root`, `Unzipped`, `Unzipping` or made of digits and
//! dashes.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Timelike};
use worker_engine::item::Item;
use worker_engine::schedule::JobName;
use worker_engine::store::Key;

/// The partition key attribute (S) of every item.
pub const PK: &str = "PK";
/// The sort key attribute (N) of every item: epoch seconds, or `0`.
pub const SK: &str = "SK";
/// Archived file: whether it is unzipped now (BOOL).
pub const IS_UNZIPPED: &str = "IsUnzipped";
/// Archived file: its Glacier vault (S).
pub const VAULT: &str = "Vault";
/// Archived, unzipped and unzipping files: the S3 object key (S).
pub const KEY_NAME: &str = "KeyName";
/// Date lookup: the list of the level below (L of S).
pub const SAVED_DATE: &str = "SavedDate";

/// Every item carrying [`KEY_NAME`] by its `KeyName` (see
/// [`crate::schema::BY_KEY_NAME`]).
pub const BY_KEY_NAME_INDEX: &str = "ArchiveByKeyName";

/// Checkpoint attributes (worker-owned items only); this one the job's
/// phase (S), e.g. `expire` or `stuck`.
pub const PHASE: &str = "Phase";
/// Checkpoint: where the pass resumes (M, the key last read).
pub const POSITION: &str = "Position";
/// Checkpoint: the expiry cutoff of the pass, epoch seconds (N).
pub const CUTOFF: &str = "Cutoff";
/// Checkpoint: the stuck cutoff of the pass, epoch seconds (N).
pub const STUCK_CUTOFF: &str = "StuckCutoff";
/// Checkpoint: when the pass started, epoch seconds (N).
pub const PASS_STARTED: &str = "PassStarted";
/// Checkpoint: the ticks the pass has taken so far (N).
pub const TICKS: &str = "Ticks";
/// Checkpoint: the pass's running totals by name (M of N).
pub const TOTALS: &str = "Totals";

const ROOT: &str = "root";
const UNZIPPED: &str = "Unzipped";
const UNZIPPING: &str = "Unzipping";
const CHECKPOINT_PREFIX: &str = "WorkerCheckpoint#";
/// What a malformed file key is called in errors.
const FILE_PK: &str = "file PK";

worker_engine::job_names! {
    /// The scheduled jobs of the archive worker (also the checkpoint keys).
    pub enum Job {
        /// Deletes unzipped files past their retention, one event each.
        ExpireUnzipped = "expire-unzipped",
        /// Rebuilds the date lookup from the files (on demand).
        RebuildLookup = "rebuild-lookup",
    }
}

/// A key that does not read. Texts carry key values only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// `PK` or `SK` is absent (the attribute named).
    #[error("the key has no {0} attribute")]
    Missing(&'static str),
    /// `PK` or `SK` is not of the key's type (`PK` S, `SK` N).
    #[error("{attribute} is not of type {expected}")]
    WrongType {
        /// The key attribute (`PK` or `SK`).
        attribute: &'static str,
        /// The type it should have (`S` or `N`).
        expected: &'static str,
    },
    /// Not an item of the archive table's design (left alone).
    #[error("PK {pk:?} is not a partition of the archive table")]
    Foreign {
        /// The partition, as read.
        pk: String,
    },
    /// A file's, a lookup item's `PK` or the `SK` does not parse (bad
    /// numbers, a date that does not exist).
    #[error("{what} {value:?} is malformed: {reason}")]
    Malformed {
        /// What was read (`file PK`, `lookup PK`, `SK`).
        what: &'static str,
        /// The value, cut at 64 characters.
        value: String,
        /// Why it does not parse.
        reason: &'static str,
    },
    /// The `SK` is not the one the `PK` implies: a file's time in epoch
    /// seconds, `0` for a lookup item or a checkpoint.
    #[error("PK {pk:?} has SK {sk}, expected {expected}")]
    WrongSk {
        /// The partition, as read.
        pk: String,
        /// The sort key, as read.
        sk: String,
        /// The sort key the partition implies.
        expected: String,
    },
}

impl KeyError {
    /// Whether the item is simply not one of this design's (as opposed to
    /// one of its items with a broken key).
    pub fn is_foreign(&self) -> bool {
        matches!(self, KeyError::Foreign { .. })
    }

    /// Whether the key is shaped like an archived file's (six numbers):
    /// a broken file key, as opposed to another kind of item.
    pub fn about_file(&self) -> bool {
        match self {
            KeyError::Malformed { what, .. } => *what == FILE_PK,
            KeyError::WrongSk { pk, .. } => pk.split('-').count() == 6,
            _ => false,
        }
    }

    fn malformed(what: &'static str, value: &str, reason: &'static str) -> Self {
        KeyError::Malformed {
            what,
            value: value.chars().take(64).collect(),
            reason,
        }
    }
}

/// A whole number of at most `digits` ASCII digits (leading zeros optional).
fn number(s: &str, digits: usize) -> Option<u32> {
    if s.is_empty() || s.len() > digits || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The time of an archived file: a second of UTC, years 1 to 9999. Its
/// canonical `PK` is `YYYY-MM-DD-hh-mm-ss`, its `SK` the epoch seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileTime(NaiveDateTime);

impl FileTime {
    /// The time of these components, if it exists.
    pub fn new(date: NaiveDate, hour: u32, min: u32, sec: u32) -> Option<Self> {
        let year = date.year();
        if !(1..=9999).contains(&year) {
            return None;
        }
        date.and_hms_opt(hour, min, sec).map(FileTime)
    }

    /// The time at `secs` since the epoch.
    pub fn from_epoch(secs: i64) -> Option<Self> {
        let t = DateTime::from_timestamp(secs, 0)?.naive_utc();
        FileTime::new(t.date(), t.hour(), t.minute(), t.second())
    }

    /// Epoch seconds: the file's `SK`.
    pub fn epoch(self) -> i64 {
        self.0.and_utc().timestamp()
    }

    /// The UTC day of the file: the day lookup item listing it.
    pub fn date(self) -> NaiveDate {
        self.0.date()
    }

    /// Parse a file's `PK` leniently: six dash-separated numbers, each
    /// padded or not.
    pub fn parse(pk: &str) -> Result<Self, KeyError> {
        match FileTime::parse_canonical(pk) {
            Some(t) => Ok(t),
            None => FileTime::parse_lenient(pk),
        }
    }

    /// The canonical spelling, `YYYY-MM-DD-hh-mm-ss`, read in place: every
    /// record's key is parsed here, and the service writes this one.
    /// `None` for any other text (then [`FileTime::parse_lenient`] reads
    /// it, or says why not).
    fn parse_canonical(pk: &str) -> Option<Self> {
        let b = pk.as_bytes();
        if b.len() != 19 || [4, 7, 10, 13, 16].iter().any(|&i| b[i] != b'-') {
            return None;
        }
        let digits = |from: usize, n: usize| {
            b[from..from + n].iter().try_fold(0u32, |acc, &c| {
                c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
            })
        };
        let year = digits(0, 4).filter(|y| *y >= 1)?;
        let date = NaiveDate::from_ymd_opt(year as i32, digits(5, 2)?, digits(8, 2)?)?;
        FileTime::new(date, digits(11, 2)?, digits(14, 2)?, digits(17, 2)?)
    }

    /// Any spelling: six dash-separated numbers, each padded or not.
    fn parse_lenient(pk: &str) -> Result<Self, KeyError> {
        let bad = |reason| KeyError::malformed(FILE_PK, pk, reason);
        // Six parts, split in place: every record's key is parsed here.
        let mut split = pk.split('-');
        let mut parts = [""; 6];
        for part in &mut parts {
            *part = split
                .next()
                .ok_or_else(|| bad("expected YYYY-MM-DD-hh-mm-ss"))?;
        }
        let ([y, mo, d, h, mi, s], None) = (parts, split.next()) else {
            return Err(bad("expected YYYY-MM-DD-hh-mm-ss"));
        };
        let date = parse_date(y, mo, d).ok_or_else(|| bad("not a date"))?;
        let n = |s: &str| number(s, 2).ok_or_else(|| bad("not a time"));
        FileTime::new(date, n(h)?, n(mi)?, n(s)?).ok_or_else(|| bad("not a time"))
    }

    /// The canonical `PK`: `YYYY-MM-DD-hh-mm-ss`.
    pub fn pk(self) -> String {
        self.0.format("%Y-%m-%d-%H-%M-%S").to_string()
    }

    /// The `PK` with no zero padding at all (`2024-3-5-7-8-9`), the other
    /// spelling a lenient writer may have used.
    pub fn unpadded_pk(self) -> String {
        let t = self.0;
        format!(
            "{}-{}-{}-{}-{}-{}",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }

    /// The file's entry in its day's lookup item: `hh-mm-ss`.
    pub fn entry(self) -> String {
        self.0.format("%H-%M-%S").to_string()
    }

    /// The canonical key of the file.
    pub fn key(self) -> Key {
        key_of(self.pk(), self.epoch())
    }

    /// The keys this file may be stored under: canonical, and unpadded
    /// when that differs (mixed paddings are not looked for).
    pub fn spellings(self) -> Vec<Key> {
        let mut keys = vec![self.key()];
        if self.unpadded_pk() != self.pk() {
            keys.push(key_of(self.unpadded_pk(), self.epoch()));
        }
        keys
    }
}

impl fmt::Display for FileTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pk())
    }
}

fn parse_date(y: &str, m: &str, d: &str) -> Option<NaiveDate> {
    let year = number(y, 4).filter(|y| *y >= 1)?;
    NaiveDate::from_ymd_opt(year as i32, number(m, 2)?, number(d, 2)?)
}

/// A date lookup item. Each level lists the one below it: the root its
/// years, a year its months, a month its days, a day its files' times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LookupKey {
    /// Listed entries: files of the day, `hh-mm-ss`.
    Day(NaiveDate),
    /// Listed entries: days, `DD`.
    Month {
        /// The year, 1 to 9999.
        year: i32,
        /// The month, 1 to 12.
        month: u32,
    },
    /// Listed entries: months, `MM`.
    Year(i32),
    /// Listed entries: years, `YYYY`.
    Root,
}

/// What a lookup item's entry names: a lookup item below, or a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Child {
    /// A date lookup item, listed by the level above (a year by the root).
    Lookup(LookupKey),
    /// An archived file: its day's lookup item lists it.
    File(FileTime),
}

impl LookupKey {
    /// The lookup item of the day `date`.
    pub fn day(date: NaiveDate) -> Self {
        LookupKey::Day(date)
    }

    /// Bottom-up level: day 0, month 1, year 2, root 3.
    pub fn level(self) -> u8 {
        match self {
            LookupKey::Day(_) => 0,
            LookupKey::Month { .. } => 1,
            LookupKey::Year(_) => 2,
            LookupKey::Root => 3,
        }
    }

    /// The item that lists this one, with this one as its entry; `None`
    /// for the root.
    pub fn parent(self) -> Option<LookupKey> {
        match self {
            LookupKey::Day(d) => Some(LookupKey::Month {
                year: d.year(),
                month: d.month(),
            }),
            LookupKey::Month { year, .. } => Some(LookupKey::Year(year)),
            LookupKey::Year(_) => Some(LookupKey::Root),
            LookupKey::Root => None,
        }
    }

    /// The canonical `PK`.
    pub fn pk(self) -> String {
        match self {
            LookupKey::Day(d) => d.format("%Y-%m-%d").to_string(),
            LookupKey::Month { year, month } => format!("{year:04}-{month:02}"),
            LookupKey::Year(year) => format!("{year:04}"),
            LookupKey::Root => ROOT.to_owned(),
        }
    }

    /// The item's key (`SK = 0`).
    pub fn key(self) -> Key {
        key_of(self.pk(), 0)
    }

    /// Parse a lookup `PK` leniently (`SK` is checked by [`ItemKey`]).
    pub fn parse(pk: &str) -> Result<Self, KeyError> {
        if pk == ROOT {
            return Ok(LookupKey::Root);
        }
        let bad = |reason| KeyError::malformed("lookup PK", pk, reason);
        let parts: Vec<&str> = pk.split('-').collect();
        match parts.as_slice() {
            [y] => number(y, 4)
                .filter(|y| *y >= 1)
                .map(|y| LookupKey::Year(y as i32))
                .ok_or_else(|| bad("not a year")),
            [y, m] => match (number(y, 4).filter(|y| *y >= 1), number(m, 2)) {
                (Some(year), Some(month)) if (1..=12).contains(&month) => Ok(LookupKey::Month {
                    year: year as i32,
                    month,
                }),
                _ => Err(bad("not a month")),
            },
            [y, m, d] => parse_date(y, m, d)
                .map(LookupKey::Day)
                .ok_or_else(|| bad("not a date")),
            _ => Err(bad("expected root, YYYY, YYYY-MM or YYYY-MM-DD")),
        }
    }

    /// The child an entry of this item's `SavedDate` names (read
    /// leniently).
    pub fn child(self, entry: &str) -> Result<Child, KeyError> {
        let bad = |reason| KeyError::malformed("lookup entry", entry, reason);
        match self {
            LookupKey::Root => number(entry, 4)
                .filter(|y| *y >= 1)
                .map(|y| Child::Lookup(LookupKey::Year(y as i32)))
                .ok_or_else(|| bad("not a year")),
            LookupKey::Year(year) => number(entry, 2)
                .filter(|m| (1..=12).contains(m))
                .map(|month| Child::Lookup(LookupKey::Month { year, month }))
                .ok_or_else(|| bad("not a month")),
            LookupKey::Month { year, month } => number(entry, 2)
                .and_then(|d| NaiveDate::from_ymd_opt(year, month, d))
                .map(|d| Child::Lookup(LookupKey::Day(d)))
                .ok_or_else(|| bad("not a day of the month")),
            LookupKey::Day(date) => {
                let parts: Vec<&str> = entry.split('-').collect();
                let [h, m, s] = parts.as_slice() else {
                    return Err(bad("expected hh-mm-ss"));
                };
                let n = |s: &str| number(s, 2).ok_or_else(|| bad("not a time"));
                FileTime::new(date, n(h)?, n(m)?, n(s)?)
                    .map(Child::File)
                    .ok_or_else(|| bad("not a time"))
            }
        }
    }
}

impl fmt::Display for LookupKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pk())
    }
}

impl Child {
    /// The item that lists this child.
    pub fn parent(self) -> Option<LookupKey> {
        match self {
            Child::File(t) => Some(LookupKey::Day(t.date())),
            Child::Lookup(k) => k.parent(),
        }
    }

    /// Its canonical entry in its parent's `SavedDate`.
    pub fn entry(self) -> String {
        match self {
            Child::File(t) => t.entry(),
            Child::Lookup(LookupKey::Day(d)) => format!("{:02}", d.day()),
            Child::Lookup(LookupKey::Month { month, .. }) => format!("{month:02}"),
            Child::Lookup(LookupKey::Year(year)) => format!("{year:04}"),
            // The root is nobody's entry; never built by this module.
            Child::Lookup(LookupKey::Root) => ROOT.to_owned(),
        }
    }
}

/// Any item of the table, by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ItemKey {
    /// An archived file (`PK` its time, `SK` its epoch seconds).
    File(FileTime),
    /// A date lookup item (`SK = 0`).
    Lookup(LookupKey),
    /// A file unzipped and available (`PK = Unzipped`).
    Unzipped {
        /// `CreatedDate`: epoch seconds.
        created: i64,
    },
    /// A retrieval requested, not yet finished (`PK = Unzipping`).
    Unzipping {
        /// `CreatedDate`: epoch seconds.
        created: i64,
    },
    /// The worker's checkpoint of a job (`PK = WorkerCheckpoint#<job>`, `SK = 0`).
    Checkpoint(Job),
}

impl ItemKey {
    /// Read an item's (or a stream record's) key. Lenient numbers are
    /// accepted; a file whose `SK` is not its time, or a lookup item whose
    /// `SK` is not 0, is an error.
    pub fn from_item(item: &Item) -> Result<Self, KeyError> {
        let pk = match item.get(PK) {
            Some(AttributeValue::S(s)) => s.as_str(),
            Some(_) => {
                return Err(KeyError::WrongType {
                    attribute: PK,
                    expected: "S",
                });
            }
            None => return Err(KeyError::Missing(PK)),
        };
        let sk_text = match item.get(SK) {
            Some(AttributeValue::N(n)) => n.as_str(),
            Some(_) => {
                return Err(KeyError::WrongType {
                    attribute: SK,
                    expected: "N",
                });
            }
            None => return Err(KeyError::Missing(SK)),
        };
        let sk: i64 = sk_text
            .trim()
            .parse()
            .map_err(|_| KeyError::malformed("SK", sk_text, "not a whole number"))?;
        let expect = |expected: i64, key: ItemKey| {
            if sk == expected {
                Ok(key)
            } else {
                Err(KeyError::WrongSk {
                    pk: pk.to_owned(),
                    sk: sk_text.to_owned(),
                    expected: expected.to_string(),
                })
            }
        };
        match pk {
            UNZIPPED => return Ok(ItemKey::Unzipped { created: sk }),
            UNZIPPING => return Ok(ItemKey::Unzipping { created: sk }),
            _ => {}
        }
        if let Some(name) = pk.strip_prefix(CHECKPOINT_PREFIX) {
            return match Job::parse(name) {
                Some(job) => expect(0, ItemKey::Checkpoint(job)),
                None => Err(KeyError::Foreign { pk: pk.to_owned() }),
            };
        }
        let date_shaped =
            pk == ROOT || (!pk.is_empty() && pk.bytes().all(|b| b.is_ascii_digit() || b == b'-'));
        if !date_shaped {
            return Err(KeyError::Foreign { pk: pk.to_owned() });
        }
        // Six dash-separated parts: a file.
        if pk.bytes().filter(|&b| b == b'-').count() == 5 {
            let t = FileTime::parse(pk)?;
            return expect(t.epoch(), ItemKey::File(t));
        }
        let key = LookupKey::parse(pk)?;
        expect(0, ItemKey::Lookup(key))
    }

    /// The key attributes, canonical.
    pub fn key(self) -> Key {
        match self {
            ItemKey::File(t) => t.key(),
            ItemKey::Lookup(k) => k.key(),
            ItemKey::Unzipped { created } => key_of(UNZIPPED.to_owned(), created),
            ItemKey::Unzipping { created } => key_of(UNZIPPING.to_owned(), created),
            ItemKey::Checkpoint(job) => checkpoint(job),
        }
    }

    /// Whether `item`'s `PK` is written exactly as [`ItemKey::key`] writes it.
    pub fn is_canonical_in(self, item: &Item) -> bool {
        self.key().get(PK) == item.get(PK)
    }
}

/// The worker's checkpoint of `job`.
pub fn checkpoint(job: Job) -> Key {
    key_of(format!("{CHECKPOINT_PREFIX}{job}"), 0)
}

/// The `PK` value of the unzipped files' partition.
pub fn unzipped_partition() -> AttributeValue {
    AttributeValue::S(UNZIPPED.to_owned())
}

/// The `PK` value of the unzipping files' partition.
pub fn unzipping_partition() -> AttributeValue {
    AttributeValue::S(UNZIPPING.to_owned())
}

/// A number attribute value.
pub fn n(v: i64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn key_of(pk: String, sk: i64) -> Key {
    HashMap::from([
        (PK.to_owned(), AttributeValue::S(pk)),
        (SK.to_owned(), n(sk)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(pk: &str, sk: &str) -> Item {
        HashMap::from([
            (PK.to_owned(), AttributeValue::S(pk.to_owned())),
            (SK.to_owned(), AttributeValue::N(sk.to_owned())),
        ])
    }

    fn t(s: &str) -> FileTime {
        FileTime::parse(s).unwrap()
    }

    #[test]
    fn files_parse_leniently_and_print_canonically() {
        let f = t("2024-3-5-7-8-9");
        assert_eq!(f.pk(), "2024-03-05-07-08-09");
        assert_eq!(f.unpadded_pk(), "2024-3-5-7-8-9");
        assert_eq!(f.entry(), "07-08-09");
        assert_eq!(f.epoch(), 1_709_622_489);
        assert_eq!(FileTime::from_epoch(1_709_622_489), Some(f));
        assert_eq!(f.spellings().len(), 2);
        assert_eq!(t("2024-11-15-10-11-12").spellings().len(), 1);
        for bad in [
            "2024-02-30-00-00-00",
            "2024-01-01-24-00-00",
            "2024-01-01-00-60-00",
            "2024-01-01-00-00",
            "2024-001-01-00-00-00",
            "0000-01-01-00-00-00",
            "2024-01-01-00-00-0x",
            "",
        ] {
            assert!(FileTime::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn items_are_told_apart_by_their_keys() {
        let f = t("2024-03-05-07-08-09");
        assert_eq!(
            ItemKey::from_item(&item("2024-03-05-07-08-09", "1709622489")),
            Ok(ItemKey::File(f))
        );
        assert_eq!(
            ItemKey::from_item(&item("2024-3-5-7-8-9", "1709622489")),
            Ok(ItemKey::File(f)),
            "lenient"
        );
        let e = ItemKey::from_item(&item("2024-03-05-07-08-09", "5")).unwrap_err();
        assert!(matches!(e, KeyError::WrongSk { .. }), "{e}");
        assert_eq!(
            ItemKey::from_item(&item("root", "0")),
            Ok(ItemKey::Lookup(LookupKey::Root))
        );
        assert_eq!(
            ItemKey::from_item(&item("2024", "0")),
            Ok(ItemKey::Lookup(LookupKey::Year(2024)))
        );
        assert_eq!(
            ItemKey::from_item(&item("2024-3", "0")),
            Ok(ItemKey::Lookup(LookupKey::Month {
                year: 2024,
                month: 3
            }))
        );
        assert_eq!(
            ItemKey::from_item(&item("2024-03-05", "0")),
            Ok(ItemKey::Lookup(LookupKey::Day(f.date())))
        );
        assert!(ItemKey::from_item(&item("2024-03-05", "1")).is_err());
        assert_eq!(
            ItemKey::from_item(&item("Unzipped", "17")),
            Ok(ItemKey::Unzipped { created: 17 })
        );
        assert_eq!(
            ItemKey::from_item(&item("Unzipping", "18")),
            Ok(ItemKey::Unzipping { created: 18 })
        );
        assert_eq!(
            ItemKey::from_item(&item("WorkerCheckpoint#rebuild-lookup", "0")),
            Ok(ItemKey::Checkpoint(Job::RebuildLookup))
        );
        for foreign in ["Other", "WorkerCheckpoint#vacuum", "USER#1"] {
            let e = ItemKey::from_item(&item(foreign, "0")).unwrap_err();
            assert!(e.is_foreign(), "{foreign}: {e}");
        }
        for broken in ["2024-13", "2024-02-30", "2024-1-2-3", "12345", "-"] {
            let e = ItemKey::from_item(&item(broken, "0")).unwrap_err();
            assert!(!e.is_foreign(), "{broken}: {e}");
        }
        let mut wrong = item("root", "0");
        wrong.insert(SK.into(), AttributeValue::S("0".into()));
        assert_eq!(
            ItemKey::from_item(&wrong),
            Err(KeyError::WrongType {
                attribute: SK,
                expected: "N"
            })
        );
        assert_eq!(
            ItemKey::from_item(&HashMap::new()),
            Err(KeyError::Missing(PK))
        );
    }

    #[test]
    fn lookup_levels_chain_up_to_the_root() {
        let f = t("2024-03-05-07-08-09");
        let day = LookupKey::Day(f.date());
        assert_eq!(Child::File(f).parent(), Some(day));
        assert_eq!(day.pk(), "2024-03-05");
        let month = day.parent().unwrap();
        assert_eq!(month.pk(), "2024-03");
        assert_eq!(Child::Lookup(day).entry(), "05");
        let year = month.parent().unwrap();
        assert_eq!(
            (year.pk(), Child::Lookup(month).entry()),
            ("2024".into(), "03".into())
        );
        assert_eq!(year.parent(), Some(LookupKey::Root));
        assert_eq!(Child::Lookup(year).entry(), "2024");
        assert_eq!(LookupKey::Root.parent(), None);
        assert_eq!(LookupKey::Root.key()[SK], AttributeValue::N("0".into()));

        assert_eq!(day.child("7-8-9"), Ok(Child::File(f)));
        assert_eq!(month.child("5"), Ok(Child::Lookup(day)));
        assert!(month.child("31").is_ok());
        let feb = LookupKey::Month {
            year: 2023,
            month: 2,
        };
        assert!(feb.child("29").is_err(), "2023 is no leap year");
        assert!(year.child("13").is_err());
        assert!(LookupKey::Root.child("twenty").is_err());
        assert!(day.child("07-08").is_err());
    }

    #[test]
    fn checkpoints_have_a_key_of_their_own() {
        let k = checkpoint(Job::ExpireUnzipped);
        assert_eq!(
            k[PK],
            AttributeValue::S("WorkerCheckpoint#expire-unzipped".into())
        );
        assert_eq!(
            ItemKey::from_item(&k),
            Ok(ItemKey::Checkpoint(Job::ExpireUnzipped))
        );
    }

    fn file_time() -> impl Strategy<Value = FileTime> {
        // Years 1 to 9999.
        (-62_135_596_800i64..253_402_300_799).prop_map(|s| FileTime::from_epoch(s).unwrap())
    }

    proptest! {
        #[test]
        fn file_keys_round_trip(f in file_time()) {
            prop_assert_eq!(FileTime::parse(&f.pk()), Ok(f));
            prop_assert_eq!(FileTime::parse(&f.unpadded_pk()), Ok(f));
            prop_assert_eq!(FileTime::from_epoch(f.epoch()), Some(f));
            for key in f.spellings() {
                prop_assert_eq!(ItemKey::from_item(&key), Ok(ItemKey::File(f)));
            }
            // Each level's entry reads back as the child it names.
            let mut child = Child::File(f);
            while let Some(parent) = child.parent() {
                prop_assert_eq!(parent.child(&child.entry()), Ok(child));
                prop_assert_eq!(ItemKey::from_item(&parent.key()), Ok(ItemKey::Lookup(parent)));
                child = Child::Lookup(parent);
            }
        }

        #[test]
        fn the_canonical_spelling_reads_as_the_lenient_reading_does(
            y in 0u32..10_000, mo in 0u32..14, d in 0u32..33, h in 0u32..26, mi in 0u32..62, s in 0u32..62,
        ) {
            // Every field in and just out of its range.
            let pk = format!("{y:04}-{mo:02}-{d:02}-{h:02}-{mi:02}-{s:02}");
            prop_assert_eq!(FileTime::parse_canonical(&pk), FileTime::parse_lenient(&pk).ok());
        }

        #[test]
        fn canonical_forms_sort_like_time(a in file_time(), b in file_time()) {
            prop_assert_eq!(a.pk().cmp(&b.pk()), a.cmp(&b));
        }

        #[test]
        fn any_text_parses_or_fails_without_panic(pk in "[0-9a-zA-Z#-]{0,24}", sk in "-?[0-9]{0,20}") {
            let _ = ItemKey::from_item(&item(&pk, &sk));
            for level in [LookupKey::Root, LookupKey::Year(2024), LookupKey::Month { year: 2024, month: 2 }] {
                let _ = level.child(&pk);
            }
        }
    }
}
