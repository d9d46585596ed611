//! The unzip lifecycle's rules, without I/O.
//!
//! For one `KeyName`:
//!
//! - its archived file(s) have `IsUnzipped = true` exactly while an
//!   `Unzipped` item of that `KeyName` exists ([`wanted_flag`]), whichever
//!   was written last: a file written (archived again, rewritten) while one
//!   exists is flagged as well as one that exists when it is created;
//! - an `Unzipping` item is done once an `Unzipped` item of its `KeyName`
//!   created at or after it exists ([`finished_unzipping`]); one created
//!   later is a new request and stays;
//! - an `Unzipped` item expires once its `CreatedDate` is before
//!   now − retention; an `Unzipping` one is stuck once before now −
//!   the stuck threshold ([`cutoff`]).
//!
//! Each rule is a function of what exists, not of the record that
//! triggered it, so a record handled twice or out of order decides the
//! same.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use worker_engine::item::Item;
use worker_engine::store::Key;

use crate::items::{Stage, UnzipItem};
use crate::keys::{self, ItemKey};

/// The items a `KeyName` query returned, by kind.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Related {
    /// Archived files, under the key they are stored with.
    pub files: Vec<Key>,
    /// `CreatedDate` of the `Unzipped` items.
    pub unzipped: Vec<i64>,
    /// `CreatedDate` of the `Unzipping` items.
    pub unzipping: Vec<i64>,
}

/// Sort index items (keys only) by kind; others are ignored.
pub fn related(items: &[Item]) -> Related {
    let mut r = Related::default();
    for item in items {
        match ItemKey::from_item(item) {
            Ok(ItemKey::File(_)) => {
                let key = [keys::PK, keys::SK]
                    .into_iter()
                    .filter_map(|k| item.get(k).map(|v| (k.to_owned(), v.clone())))
                    .collect();
                r.files.push(key);
            }
            Ok(ItemKey::Unzipped { created }) => r.unzipped.push(created),
            Ok(ItemKey::Unzipping { created }) => r.unzipping.push(created),
            _ => {}
        }
    }
    r
}

/// `IsUnzipped` of the files, given the `CreatedDate` of the `Unzipped`
/// items of their `KeyName` that exist.
pub fn wanted_flag(unzipped: &[i64]) -> bool {
    !unzipped.is_empty()
}

/// Of the `Unzipping` items (`CreatedDate`), those an existing `Unzipped`
/// item (`CreatedDate`) finishes.
pub fn finished_unzipping(unzipping: &[i64], unzipped: &[i64]) -> Vec<i64> {
    match unzipped.iter().max() {
        Some(latest) => unzipping.iter().copied().filter(|u| u <= latest).collect(),
        None => Vec::new(),
    }
}

/// The epoch second before which an item is due, `hours` before `now`.
pub fn cutoff(now: DateTime<Utc>, hours: u64) -> i64 {
    let secs = i64::try_from(hours.saturating_mul(3600)).unwrap_or(i64::MAX);
    now.timestamp().saturating_sub(secs)
}

/// The `detail` of an `UnzippedFileExpired` event (`None` without a
/// `KeyName`: nothing to announce).
pub fn expired_detail(item: &UnzipItem, now: DateTime<Utc>) -> Option<Value> {
    if item.stage != Stage::Unzipped {
        return None;
    }
    let key_name = item.key_name.as_deref()?;
    Some(json!({
        "keyName": key_name,
        "createdDate": item.created,
        "createdAt": item.created_at().map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
        "expiredAt": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::FileTime;

    #[test]
    fn index_items_are_sorted_by_kind() {
        let f = FileTime::parse("2024-3-5-7-8-9").unwrap();
        let mut lenient = f.spellings()[1].clone();
        lenient.insert(
            keys::KEY_NAME.into(),
            aws_sdk_dynamodb::types::AttributeValue::S("k".into()),
        );
        let items = vec![
            lenient,
            ItemKey::Unzipped { created: 5 }.key(),
            ItemKey::Unzipping { created: 3 }.key(),
            ItemKey::Unzipping { created: 9 }.key(),
            keys::checkpoint(keys::Job::ExpireUnzipped),
        ];
        let r = related(&items);
        assert_eq!(
            r.files,
            [f.spellings()[1].clone()],
            "stored key kept, attributes dropped"
        );
        assert_eq!((r.unzipped, r.unzipping), (vec![5], vec![3, 9]));
    }

    #[test]
    fn the_lifecycle() {
        assert!(!wanted_flag(&[]));
        assert!(wanted_flag(&[5]));
        assert_eq!(finished_unzipping(&[3, 5, 9], &[5]), [3, 5]);
        assert_eq!(finished_unzipping(&[3, 9], &[]), Vec::<i64>::new());
        assert_eq!(finished_unzipping(&[3, 9], &[1, 10]), [3, 9]);
    }

    #[test]
    fn cutoffs_and_events() {
        let now: DateTime<Utc> = "2024-03-25T00:00:00Z".parse().unwrap();
        assert_eq!(cutoff(now, 24), now.timestamp() - 86_400);
        assert_eq!(
            cutoff(now, u64::MAX),
            now.timestamp() - i64::MAX,
            "no overflow"
        );
        let item = UnzipItem {
            stage: Stage::Unzipped,
            created: now.timestamp() - 90_000,
            key_name: Some("photos/a.zip".into()),
        };
        let d = expired_detail(&item, now).unwrap();
        assert_eq!(d["keyName"], "photos/a.zip");
        assert_eq!(d["createdAt"], "2024-03-23T23:00:00Z");
        let nameless = UnzipItem {
            key_name: None,
            ..item.clone()
        };
        assert_eq!(expired_detail(&nameless, now), None);
        let unzipping = UnzipItem {
            stage: Stage::Unzipping,
            ..item
        };
        assert_eq!(expired_detail(&unzipping, now), None);
    }
}
