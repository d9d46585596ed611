//! Typed items over the raw [`Item`]: read leniently (a value of an
//! unexpected type is absent, not an error), written canonically. Error
//! texts name keys only, never `KeyName` or `Vault` values.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use worker_engine::item::Item;
use worker_engine::store::Key;
use worker_engine::{Pass, PassAttributes};

use crate::keys::{self, FileTime, ItemKey, Job};

/// A string attribute.
pub fn string<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

/// A whole-number attribute (`N`, or a string of digits).
pub fn number(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(s) | AttributeValue::S(s)) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The `KeyName` of any item carrying one.
pub fn key_name(item: &Item) -> Option<&str> {
    string(item, keys::KEY_NAME).filter(|k| !k.is_empty())
}

/// `IsUnzipped`, read leniently: `BOOL`, or `"true"`/`"false"`, or `1`/`0`.
pub fn is_unzipped(item: &Item) -> Option<bool> {
    match item.get(keys::IS_UNZIPPED)? {
        AttributeValue::Bool(b) => Some(*b),
        AttributeValue::S(s) if s.eq_ignore_ascii_case("true") => Some(true),
        AttributeValue::S(s) if s.eq_ignore_ascii_case("false") => Some(false),
        AttributeValue::N(n) if n == "1" => Some(true),
        AttributeValue::N(n) if n == "0" => Some(false),
        _ => None,
    }
}

/// An archived file: `PK` its time, `SK` the same in epoch seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedFile {
    /// The file's time, which is its key: `PK` and `SK` (see [`FileTime`]).
    pub time: FileTime,
    /// The S3 object key (absent: the file cannot be unzipped).
    pub key_name: Option<String>,
    /// Absent counts as not unzipped.
    pub is_unzipped: Option<bool>,
    /// `Vault`: the Glacier vault the file is in (absent: not recorded).
    pub vault: Option<String>,
}

impl ArchivedFile {
    /// `None` when the item is not an archived file.
    pub fn from_item(item: &Item) -> Option<ArchivedFile> {
        let Ok(ItemKey::File(time)) = ItemKey::from_item(item) else {
            return None;
        };
        Some(ArchivedFile {
            time,
            key_name: key_name(item).map(str::to_owned),
            is_unzipped: is_unzipped(item),
            vault: string(item, keys::VAULT).map(str::to_owned),
        })
    }

    /// The item, under its canonical key.
    pub fn to_item(&self) -> Item {
        let mut item = self.time.key();
        if let Some(k) = &self.key_name {
            item.insert(keys::KEY_NAME.into(), AttributeValue::S(k.clone()));
        }
        if let Some(b) = self.is_unzipped {
            item.insert(keys::IS_UNZIPPED.into(), AttributeValue::Bool(b));
        }
        if let Some(v) = &self.vault {
            item.insert(keys::VAULT.into(), AttributeValue::S(v.clone()));
        }
        item
    }
}

/// Which of the two unzip partitions an item is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// A retrieval was requested (`PK = Unzipping`).
    Unzipping,
    /// The file is unzipped and available (`PK = Unzipped`).
    Unzipped,
}

/// An `Unzipped` or `Unzipping` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnzipItem {
    /// Which partition the item is in (`PK`).
    pub stage: Stage,
    /// `CreatedDate` (the `SK`), epoch seconds.
    pub created: i64,
    /// `KeyName`: the S3 object key of the file (absent or empty: `None`,
    /// and the item matches no file).
    pub key_name: Option<String>,
}

impl UnzipItem {
    /// `None` when the item is neither.
    pub fn from_item(item: &Item) -> Option<UnzipItem> {
        let (stage, created) = match ItemKey::from_item(item) {
            Ok(ItemKey::Unzipped { created }) => (Stage::Unzipped, created),
            Ok(ItemKey::Unzipping { created }) => (Stage::Unzipping, created),
            _ => return None,
        };
        Some(UnzipItem {
            stage,
            created,
            key_name: key_name(item).map(str::to_owned),
        })
    }

    /// The item's key as an [`ItemKey`] (`Unzipped` or `Unzipping`, by
    /// [`UnzipItem::stage`]).
    pub fn item_key(&self) -> ItemKey {
        match self.stage {
            Stage::Unzipped => ItemKey::Unzipped {
                created: self.created,
            },
            Stage::Unzipping => ItemKey::Unzipping {
                created: self.created,
            },
        }
    }

    /// The item's key attributes, canonical (`PK` the stage, `SK` `CreatedDate`).
    pub fn key(&self) -> Key {
        self.item_key().key()
    }

    /// `CreatedDate` as a time (`None` outside chrono's range).
    pub fn created_at(&self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp(self.created, 0)
    }

    /// The item as stored: its key, and `KeyName` when there is one.
    pub fn to_item(&self) -> Item {
        let mut item = self.key();
        if let Some(k) = &self.key_name {
            item.insert(keys::KEY_NAME.into(), AttributeValue::S(k.clone()));
        }
        item
    }
}

/// Where a scheduled job stopped, saved when a tick runs out of time
/// (`PK = WorkerCheckpoint#<job>`, `SK = 0`). A job deletes it when its
/// pass completes.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The job the checkpoint belongs to (its key is `WorkerCheckpoint#<job>`).
    pub job: Job,
    /// The job's phase (its own names).
    pub phase: String,
    /// `expire-unzipped` only: `Unzipped` items created before this epoch
    /// second expire (`None` for `rebuild-lookup`).
    pub cutoff: Option<i64>,
    /// `expire-unzipped` only: `Unzipping` items created before this epoch
    /// second are reported stuck (`None` for `rebuild-lookup`).
    pub stuck_cutoff: Option<i64>,
    /// Where the pass resumes, its start, ticks and totals.
    pub pass: Pass,
}

/// The attributes a checkpoint stores its [`Pass`] under (numbers read
/// leniently, as every number here).
pub const PASS_ATTRIBUTES: PassAttributes = PassAttributes {
    position: keys::POSITION,
    pass_started: keys::PASS_STARTED,
    ticks: keys::TICKS,
    totals: keys::TOTALS,
    key: [keys::PK, keys::SK],
    number,
};

impl Checkpoint {
    /// A new pass of `job` started at `now`, at the start of `phase`, with no
    /// cutoffs yet (the job sets its own).
    pub fn new(job: Job, phase: &str, now: DateTime<Utc>) -> Self {
        Checkpoint {
            job,
            phase: phase.to_owned(),
            cutoff: None,
            stuck_cutoff: None,
            pass: Pass::new(now),
        }
    }

    /// Read a stored checkpoint; `Err` (a reason, no values) when it does
    /// not decode, which the job takes as "start a new pass".
    pub fn from_item(job: Job, item: &Item) -> Result<Checkpoint, String> {
        if ItemKey::from_item(item) != Ok(ItemKey::Checkpoint(job)) {
            return Err("not this job's checkpoint".into());
        }
        let phase = string(item, keys::PHASE).ok_or("no Phase")?.to_owned();
        Ok(Checkpoint {
            job,
            phase,
            cutoff: number(item, keys::CUTOFF),
            stuck_cutoff: number(item, keys::STUCK_CUTOFF),
            pass: Pass::from_item(item, &PASS_ATTRIBUTES)?,
        })
    }

    /// The item as stored under `WorkerCheckpoint#<job>`: the phase, the
    /// cutoffs that are set, and the [`Pass`] under [`PASS_ATTRIBUTES`].
    pub fn to_item(&self) -> Item {
        let mut item = keys::checkpoint(self.job);
        item.insert(keys::PHASE.into(), AttributeValue::S(self.phase.clone()));
        if let Some(c) = self.cutoff {
            item.insert(keys::CUTOFF.into(), keys::n(c));
        }
        if let Some(c) = self.stuck_cutoff {
            item.insert(keys::STUCK_CUTOFF.into(), keys::n(c));
        }
        self.pass.put(&mut item, &PASS_ATTRIBUTES);
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_read_leniently() {
        let time = FileTime::parse("2024-03-05-07-08-09").unwrap();
        let file = ArchivedFile {
            time,
            key_name: Some("photos/a.zip".into()),
            is_unzipped: Some(false),
            vault: Some("v1".into()),
        };
        let mut item = file.to_item();
        assert_eq!(ArchivedFile::from_item(&item), Some(file.clone()));
        item.insert(keys::IS_UNZIPPED.into(), AttributeValue::S("TRUE".into()));
        assert_eq!(
            ArchivedFile::from_item(&item).unwrap().is_unzipped,
            Some(true)
        );
        item.insert(keys::IS_UNZIPPED.into(), AttributeValue::L(vec![]));
        assert_eq!(ArchivedFile::from_item(&item).unwrap().is_unzipped, None);
        item.insert(keys::KEY_NAME.into(), AttributeValue::N("1".into()));
        assert_eq!(ArchivedFile::from_item(&item).unwrap().key_name, None);
        assert_eq!(
            ArchivedFile::from_item(&keys::checkpoint(Job::RebuildLookup)),
            None
        );
    }

    #[test]
    fn unzip_items_and_checkpoints_round_trip() {
        let u = UnzipItem {
            stage: Stage::Unzipped,
            created: 1_700_000_000,
            key_name: Some("k".into()),
        };
        assert_eq!(UnzipItem::from_item(&u.to_item()), Some(u));

        let mut c = Checkpoint::new(
            Job::RebuildLookup,
            "add",
            "2024-03-25T00:00:00Z".parse().unwrap(),
        );
        c.pass.position = Some(FileTime::parse("2024-1-1-0-0-0").unwrap().key());
        c.cutoff = Some(5);
        c.pass.ticks = 2;
        c.pass.add("files", 7);
        c.pass.add("files", 1);
        assert_eq!(c.pass.total("files"), 8);
        let item = c.to_item();
        assert_eq!(item[keys::PASS_STARTED], keys::n(1_711_324_800));
        assert_eq!(item[keys::TICKS], keys::n(2));
        assert_eq!(item[keys::PHASE], AttributeValue::S("add".into()));
        assert_eq!(Checkpoint::from_item(Job::RebuildLookup, &item), Ok(c));
        assert!(Checkpoint::from_item(Job::ExpireUnzipped, &item).is_err());
        let mut bad = item.clone();
        bad.insert(keys::POSITION.into(), AttributeValue::S("x".into()));
        assert_eq!(
            Checkpoint::from_item(Job::RebuildLookup, &bad),
            Err("Position is not a key".into())
        );
        bad.remove(keys::POSITION);
        bad.insert(keys::PASS_STARTED.into(), AttributeValue::S(" 7 ".into()));
        assert_eq!(
            Checkpoint::from_item(Job::RebuildLookup, &bad).map(|c| c.pass.pass_started),
            Ok(7),
            "numbers read leniently"
        );
        bad.remove(keys::PASS_STARTED);
        assert_eq!(
            Checkpoint::from_item(Job::RebuildLookup, &bad),
            Err("no PassStarted".into())
        );
    }
}
