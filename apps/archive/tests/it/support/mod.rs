//! What the archive worker's tests share: the worker on a test table, the
//! service's writes, a client's walk of the date lookup, and Lambda-like
//! delivery of stream records.

#![allow(dead_code)] // each test binary uses a part

pub(crate) mod template;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use archive_worker::app::{APP, SHARING};
use archive_worker::items::{ArchivedFile, Stage, UnzipItem};
use archive_worker::keys::{self, FileTime, ItemKey, Job, LookupKey};
use archive_worker::lookup::rules;
use archive_worker::unzip::UnzipSettings;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use worker_engine::Worker;
use worker_engine::item::Item;
use worker_engine::store::{ScanSpec, Store};
use worker_engine::stream::{SequenceNumber, StreamChange, encode_event};
use worker_testkit::TestTable;
use worker_testkit::app::TestApp;

pub(crate) const NOW: &str = "2024-03-25T00:00:00Z";

pub(crate) fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

/// The archive worker as its tests run it, at [`NOW`]: `ARCHIVE.worker(store)`
/// (the default settings, events recorded) or `ARCHIVE.worker_with(..)`.
pub(crate) const ARCHIVE: TestApp<Job, UnzipSettings> = TestApp {
    app: &APP,
    sharing: SHARING,
    now: NOW,
};

/// `ARCHIVE.worker(store)`.
pub(crate) fn app(store: Arc<dyn Store>) -> Worker<Job> {
    ARCHIVE.worker(store)
}

pub(crate) fn t(pk: &str) -> FileTime {
    FileTime::parse(pk).expect("a file time")
}

/// An archived file item, its `KeyName` derived from its time.
pub(crate) fn file(time: FileTime) -> Item {
    ArchivedFile {
        time,
        key_name: Some(key_name(time)),
        is_unzipped: Some(false),
        vault: Some("vault-1".into()),
    }
    .to_item()
}

pub(crate) fn key_name(time: FileTime) -> String {
    format!("archive/{}.zip", time.pk())
}

pub(crate) fn unzip_item(stage: Stage, created: i64, key_name: &str) -> Item {
    UnzipItem {
        stage,
        created,
        key_name: Some(key_name.to_owned()),
    }
    .to_item()
}

pub(crate) async fn put(store: &dyn Store, items: &[Item]) {
    for item in items {
        store.put(item.clone(), None).await.expect("put");
    }
}

pub(crate) async fn get(store: &dyn Store, key: ItemKey) -> Option<Item> {
    store.get(&key.key(), true).await.expect("get")
}

/// The strings of a `SavedDate`; panics on anything but a list of strings.
fn saved_date(item: &Item) -> Vec<String> {
    match item.get(keys::SAVED_DATE) {
        Some(AttributeValue::L(values)) => values
            .iter()
            .map(|v| v.as_s().expect("a string entry").clone())
            .collect(),
        other => panic!("SavedDate is not a list: {other:?}"),
    }
}

/// What a client finds walking the lookup from `root` (four levels of
/// GetItem), checking on the way that every list is canonical (padded,
/// sorted, no duplicate) and that every listed file exists.
pub(crate) async fn walk(store: &dyn Store) -> BTreeSet<FileTime> {
    let mut files = BTreeSet::new();
    let mut pending = vec![LookupKey::Root];
    while let Some(key) = pending.pop() {
        let Some(item) = get(store, ItemKey::Lookup(key)).await else {
            assert_eq!(key, LookupKey::Root, "{key} is listed but absent");
            continue; // no root: nothing archived
        };
        let entries = saved_date(&item);
        assert!(!entries.is_empty(), "{key} lists nothing");
        let mut sorted = entries.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(entries, sorted, "{key}: sorted, no duplicates");
        for entry in entries {
            match key.child(&entry).expect("a valid entry") {
                keys::Child::Lookup(k) => {
                    assert_eq!(keys::Child::Lookup(k).entry(), entry, "canonical");
                    pending.push(k);
                }
                keys::Child::File(f) => {
                    assert_eq!(f.entry(), entry, "canonical");
                    assert!(
                        get(store, ItemKey::File(f)).await.is_some(),
                        "{f} listed, absent"
                    );
                    files.insert(f);
                }
            }
        }
    }
    files
}

/// Every lookup item of the table (`PK` → `SavedDate`), from a scan.
pub(crate) async fn lookup_items(store: &dyn Store) -> BTreeMap<String, Vec<String>> {
    let items = store
        .scan_all(&ScanSpec {
            consistent: true,
            ..Default::default()
        })
        .await
        .expect("scan");
    items
        .iter()
        .filter(|i| matches!(ItemKey::from_item(i), Ok(ItemKey::Lookup(_))))
        .map(|i| (i[keys::PK].as_s().expect("PK").clone(), saved_date(i)))
        .collect()
}

/// The lookup items the files must end with.
pub(crate) fn expected_lookup(
    files: impl IntoIterator<Item = FileTime>,
) -> BTreeMap<String, Vec<String>> {
    rules::lookup_of(files)
        .into_iter()
        .map(|(k, c)| (k.pk(), rules::canonical(&c)))
        .collect()
}

/// Every item of the table, as `(PK, SK)` → item, sorted.
pub(crate) async fn table_state(table: &TestTable) -> BTreeMap<(String, String), Item> {
    table
        .snapshot()
        .await
        .into_iter()
        .map(|i| {
            let k = |n: &str| match i.get(n) {
                Some(AttributeValue::S(s) | AttributeValue::N(s)) => s.clone(),
                _ => String::new(),
            };
            ((k(keys::PK), k(keys::SK)), i)
        })
        .collect()
}

/// Run `changes` through `worker` as one Lambda batch, retrying from the
/// reported failure as Lambda does (up to 5 attempts).
pub(crate) async fn deliver(worker: &Worker<Job>, changes: &[StreamChange]) {
    let mut pending = changes.to_vec();
    for _ in 0..5 {
        let report = worker
            .handle_stream(&encode_event(&pending, None), None)
            .await
            .expect("a stream event");
        assert_eq!(
            report.failed, 0,
            "no permanent failure: {:?}",
            report.records
        );
        let Some(failed) = report.batch_item_failures.first() else {
            return;
        };
        let failed: SequenceNumber = failed.parse().expect("a sequence number");
        pending.retain(|c| c.sequence_number.as_ref().is_some_and(|s| *s >= failed));
    }
    panic!("a batch kept failing");
}

/// Unzip partition of an item kind.
pub(crate) fn unzip_key(stage: Stage, created: i64) -> ItemKey {
    match stage {
        Stage::Unzipped => ItemKey::Unzipped { created },
        Stage::Unzipping => ItemKey::Unzipping { created },
    }
}

/// [`worker_testkit::layers::BeforeDelete`], also for the deletes of a
/// guarded write (a transaction): the hook runs before every delete the
/// worker sends, however it sends it.
pub(crate) struct BeforeAnyDelete<H> {
    inner: Arc<dyn Store>,
    hook: H,
}

impl<H: worker_testkit::layers::DeleteHook> BeforeAnyDelete<H> {
    pub(crate) fn with_hook(inner: Arc<dyn Store>, hook: H) -> Self {
        BeforeAnyDelete { inner, hook }
    }

    pub(crate) fn hook(&self) -> &H {
        &self.hook
    }
}

#[async_trait::async_trait]
impl<H: worker_testkit::layers::DeleteHook> Store for BeforeAnyDelete<H> {
    async fn call(
        &self,
        request: worker_engine::store::Request<'_>,
    ) -> Result<worker_engine::store::Reply, worker_engine::store::StoreError> {
        use worker_engine::store::GuardedOp;
        use worker_engine::store::Request;
        match &request {
            Request::Delete { key, .. } => {
                self.hook.before_delete(key, self.inner.as_ref()).await?;
            }
            Request::WriteGuarded { ops, .. } => {
                for op in ops {
                    if let GuardedOp::Delete { key, .. } = op {
                        self.hook.before_delete(key, self.inner.as_ref()).await?;
                    }
                }
            }
            _ => {}
        }
        self.inner.call(request).await
    }
}
