//! The date lookup kept by the stream, on DynamoDB Local: many files in
//! any order with duplicate deliveries, removals up the levels, and the
//! races of concurrent shards made deterministic with store layers.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use archive_worker::keys::{FileTime, ItemKey, LookupKey};
use archive_worker::schema::schema;
use async_trait::async_trait;
use chrono::{Duration, NaiveDate};
use rand::Rng;
use support::*;
use worker_engine::Worker;
use worker_engine::store::{ItemWriter, Key, Reply, Request, Store, StoreError};
use worker_engine::stream::{ChangeKind, StreamChange};
use worker_testkit::layers::DeleteHook;
use worker_testkit::workload::{Seeded, Write, apply};
use worker_testkit::{Drain, TestTable};

/// `n` distinct file times over `days` distinct days between November
/// 2023 and March 2024 (every day has one at least).
fn files_over_days(seed: &mut Seeded, n: usize, days: usize) -> Vec<FileTime> {
    let first = NaiveDate::from_ymd_opt(2023, 11, 1).unwrap();
    let mut chosen = BTreeSet::new();
    while chosen.len() < days {
        chosen.insert(first + Duration::days(seed.rng().random_range(0..152)));
    }
    let chosen: Vec<NaiveDate> = chosen.into_iter().collect();
    let mut files = BTreeSet::new();
    while files.len() < n {
        let day = if files.len() < days {
            chosen[files.len()]
        } else {
            chosen[seed.rng().random_range(0..days)]
        };
        let r = seed.rng();
        let (h, m, s) = (
            r.random_range(0..24),
            r.random_range(0..60),
            r.random_range(0..60),
        );
        files.insert(FileTime::new(day, h, m, s).unwrap());
    }
    files.into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_files_delivered_in_any_order_and_twice_walk_back_from_the_root() {
    let table = TestTable::with_schema(&schema()).await;
    let mut seed = Seeded::new(2002);
    let files = files_over_days(&mut seed, 500, 40);
    let writes: Vec<Write> = seed
        .shuffled(files.clone())
        .into_iter()
        .map(|f| Write::Put(file(f)))
        .collect();
    let mut drain = Drain::new(&table).await;
    apply(table.store.as_ref(), &writes).await;
    let inserts = drain.read().await;
    assert_eq!(inserts.len(), 500);

    // Two shards' worth of invocations at once (two workers), each batch
    // up to 100 records, a third of the records delivered twice.
    let deliveries = seed.redelivered(inserts.clone(), 0.3);
    assert!(deliveries.len() > 600);
    let batches = seed.batches(deliveries, 100);
    let (a, b) = (app(table.store.clone()), app(table.store.clone()));
    let run = |worker: Worker<_>, batches: Vec<Vec<StreamChange>>| async move {
        for batch in batches {
            deliver(&worker, &batch).await;
        }
        worker
    };
    let (mine, theirs): (Vec<_>, Vec<_>) = batches
        .into_iter()
        .enumerate()
        .partition(|(i, _)| i % 2 == 0);
    let strip =
        |v: Vec<(usize, Vec<StreamChange>)>| v.into_iter().map(|(_, b)| b).collect::<Vec<_>>();
    let (a, _b) = tokio::join!(run(a, strip(mine)), run(b, strip(theirs)));

    let listed = walk(table.store.as_ref()).await;
    let archived: BTreeSet<FileTime> = files.iter().copied().collect();
    let missing = archived.difference(&listed).count();
    let extra = listed.difference(&archived).count();
    assert_eq!(
        (missing, extra),
        (0, 0),
        "files missing from / extra in the lookup"
    );
    assert_eq!(
        lookup_items(table.store.as_ref()).await,
        expected_lookup(files.clone())
    );

    // The worker's own writes come back through the stream: skipped.
    drain.run(&a).await;
    assert!(
        drain
            .batches
            .iter()
            .all(|b| b.handled == 0 && b.failed == 0)
    );
    // At least once: a batch again changes nothing.
    let settled = table_state(&table).await;
    deliver(&a, &inserts[..100]).await;
    assert_eq!(table_state(&table).await, settled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_every_file_of_a_day_removes_the_day_and_the_levels_it_leaves_empty() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let all = [
        "2023-12-31-10-00-00", // the only day of 2023
        "2023-12-31-11-00-00",
        "2024-01-05-00-00-01", // the only day of January
        "2024-01-05-23-59-59",
        "2024-02-10-08-00-00", // February keeps the 11th
        "2024-02-10-09-00-00",
        "2024-02-11-12-00-00",
        "2024-03-01-00-00-00",
    ]
    .map(t);
    put(store, &all.map(file)).await;
    drain.run(&app).await;
    assert_eq!(lookup_items(store).await, expected_lookup(all));

    let gone: Vec<FileTime> = all
        .iter()
        .copied()
        .filter(|f| f.pk().as_str() < "2024-02-11")
        .collect();
    for f in &gone {
        store.delete(&f.key(), None).await.expect("delete");
    }
    drain.run(&app).await;
    let left: Vec<FileTime> = all.iter().copied().filter(|f| !gone.contains(f)).collect();
    assert_eq!(walk(store).await, left.iter().copied().collect());
    let items = lookup_items(store).await;
    assert_eq!(items, expected_lookup(left.clone()));
    for absent in [
        "2023",
        "2023-12",
        "2023-12-31",
        "2024-01",
        "2024-01-05",
        "2024-02-10",
    ] {
        assert!(!items.contains_key(absent), "{absent}");
    }
    assert_eq!(items["root"], ["2024"]);
    assert_eq!(items["2024"], ["02", "03"]);
    assert_eq!(items["2024-02"], ["11"]);

    // The last files: nothing is left, not even the root.
    for f in &left {
        store.delete(&f.key(), None).await.expect("delete");
    }
    drain.run(&app).await;
    assert!(lookup_items(store).await.is_empty());
    assert!(walk(store).await.is_empty());
}

/// Answers the first two reads of one key only together, once both have
/// been read: two workers then both see the item as it was before either
/// wrote. (Gated before the read, a worker slowed down under load could
/// read after the other had written: then only two writes.)
struct ReadTogether {
    inner: Arc<dyn Store>,
    key: Key,
    gate: tokio::sync::Barrier,
    waiting: AtomicUsize,
    writes: AtomicUsize,
}

#[async_trait]
impl Store for ReadTogether {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        let reads = match &request {
            Request::Get { key, .. } => *key == &self.key,
            Request::GetMany { keys, .. } => keys.contains(&self.key),
            _ => false,
        };
        if reads && self.waiting.fetch_add(1, Ordering::SeqCst) < 2 {
            let read = self.inner.call(request).await;
            self.gate.wait().await;
            return read;
        }
        let writes = match &request {
            Request::Update { key, .. } | Request::Delete { key, .. } => *key == &self.key,
            _ => false,
        };
        if writes {
            self.writes.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.call(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_files_of_a_new_day_on_two_shards_are_both_listed() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let earlier = t("2024-04-01-00-00-00");
    put(store, &[file(earlier)]).await;
    let mut drain = Drain::new(&table).await;
    drain.run(&app(table.store.clone())).await;

    let (a, b) = (t("2024-04-02-08-00-00"), t("2024-04-02-09-30-00"));
    put(store, &[file(a), file(b)]).await;
    let records = drain.read().await;
    assert_eq!(records.len(), 2);
    let gate = Arc::new(ReadTogether {
        inner: table.store.clone(),
        key: LookupKey::Day(a.date()).key(),
        gate: tokio::sync::Barrier::new(2),
        waiting: AtomicUsize::new(0),
        writes: AtomicUsize::new(0),
    });
    // Two invocations (two shards), each with its own worker.
    let (one, two) = (app(gate.clone()), app(gate.clone()));
    tokio::join!(deliver(&one, &records[..1]), deliver(&two, &records[1..]));

    // What is listed first, then how it came about: both wrote, one
    // condition failed, and that writer read again and wrote again.
    assert_eq!(walk(store).await, BTreeSet::from([earlier, a, b]));
    assert_eq!(lookup_items(store).await, expected_lookup([earlier, a, b]));
    assert_eq!(
        gate.writes.load(Ordering::SeqCst),
        3,
        "both wrote, one wrote again"
    );
}

/// Right before the month item is deleted, another shard lists a new file
/// of the day being emptied.
struct InsertBeforeDelete {
    target: Key,
    other: Arc<Worker<archive_worker::keys::Job>>,
    file: FileTime,
    fired: AtomicUsize,
}

#[async_trait]
impl DeleteHook for InsertBeforeDelete {
    async fn before_delete(&self, key: &Key, inner: &dyn Store) -> Result<(), StoreError> {
        if *key == self.target && self.fired.fetch_add(1, Ordering::SeqCst) == 0 {
            let item = file(self.file);
            inner.put(item.clone(), None).await?;
            deliver(&self.other, &[insert_record(item)]).await;
        }
        Ok(())
    }
}

fn insert_record(item: worker_engine::item::Item) -> StreamChange {
    let keys = [archive_worker::keys::PK, archive_worker::keys::SK]
        .into_iter()
        .map(|k| (k.to_owned(), item[k].clone()))
        .collect();
    StreamChange {
        event_id: "raced".into(),
        kind: ChangeKind::Insert,
        sequence_number: Some("900000000000000000001".parse().unwrap()),
        approximate_creation: None,
        keys,
        old_image: None,
        new_image: Some(item),
        event_source_arn: None,
        size_bytes: None,
        typed: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_listed_while_its_day_is_emptied_is_kept() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let (april, last) = (t("2024-04-01-00-00-00"), t("2024-05-20-10-00-00"));
    let newcomer = t("2024-05-20-11-00-00");
    put(store, &[file(april), file(last)]).await;
    let mut drain = Drain::new(&table).await;
    drain.run(&app(table.store.clone())).await;

    store.delete(&last.key(), None).await.expect("delete");
    let removal = drain.read().await;
    assert_eq!(removal.len(), 1);
    let hook = InsertBeforeDelete {
        target: LookupKey::Day(last.date()).parent().unwrap().key(),
        other: Arc::new(app(table.store.clone())),
        file: newcomer,
        fired: AtomicUsize::new(0),
    };
    let racing = Arc::new(BeforeAnyDelete::with_hook(table.store.clone(), hook));
    // The removal empties 2024-05-20, then deletes 2024-05 (which listed
    // only that day); the other shard lists the newcomer in between: its
    // month step finds the day still listed and writes nothing. The
    // month's deletion is decided from the day being gone, so it carries
    // a guard on the day: refilled, the day withholds it.
    deliver(&app(racing.clone()), &removal).await;
    assert_eq!(
        racing.hook().fired.load(Ordering::SeqCst),
        1,
        "the race happened"
    );
    assert_eq!(walk(store).await, BTreeSet::from([april, newcomer]));
    assert_eq!(
        lookup_items(store).await,
        expected_lookup([april, newcomer])
    );

    // The removal delivered again changes nothing.
    let settled = table_state(&table).await;
    deliver(&app(table.store.clone()), &removal).await;
    assert_eq!(table_state(&table).await, settled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_removed_and_written_again_ends_listed() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let f = t("2024-06-01-12-00-00");
    put(store, &[file(f)]).await;
    store.delete(&f.key(), None).await.expect("delete");
    put(store, &[file(f)]).await;
    let history = drain.read().await;
    let kinds: Vec<ChangeKind> = history.iter().map(|c| c.kind).collect();
    assert_eq!(
        kinds,
        [ChangeKind::Insert, ChangeKind::Remove, ChangeKind::Insert]
    );
    deliver(&app, &history).await;
    assert_eq!(walk(store).await, BTreeSet::from([f]));

    // Late and out of order: the old removal alone, then the first insert
    // after a real removal. Each follows what exists now.
    deliver(&app, &history[1..2]).await;
    assert_eq!(walk(store).await, BTreeSet::from([f]), "the file exists");
    store.delete(&f.key(), None).await.expect("delete");
    drain.run(&app).await;
    deliver(&app, &history[..1]).await;
    assert!(walk(store).await.is_empty(), "the file is gone");
    assert!(lookup_items(store).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lenient_lists_are_read_and_written_back_canonical() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let app = app(table.store.clone());
    let old = t("2024-7-4-1-2-3");
    // A client wrote an unpadded lookup, with a duplicate.
    let lookup = [
        ("root", vec!["2024"]),
        ("2024", vec!["7"]),
        ("2024-07", vec!["4", "04"]),
        ("2024-07-04", vec!["1-2-3"]),
    ];
    for (pk, entries) in lookup {
        let mut item = archive_worker::keys::ItemKey::Lookup(LookupKey::parse(pk).unwrap()).key();
        item.insert(
            archive_worker::keys::SAVED_DATE.into(),
            aws_sdk_dynamodb::types::AttributeValue::L(
                entries
                    .iter()
                    .map(|e| aws_sdk_dynamodb::types::AttributeValue::S((*e).into()))
                    .collect(),
            ),
        );
        store.put(item, None).await.expect("put");
    }
    put(store, &[file(old)]).await;
    let mut drain = Drain::new(&table).await;
    drain.skip_existing().await;
    // A second file that day: the day and month are rewritten canonical.
    let new = t("2024-07-04-05-00-00");
    put(store, &[file(new)]).await;
    drain.run(&app).await;
    let items = lookup_items(store).await;
    assert_eq!(items["2024-07-04"], ["01-02-03", "05-00-00"]);
    assert_eq!(items["2024-07"], ["4", "04"], "already listed: no write");
    assert_eq!(items["2024"], ["7"]);
    assert!(get(store, ItemKey::File(old)).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_with_a_malformed_key_is_reported_by_key_and_skipped() {
    let table = TestTable::with_schema(&schema()).await;
    let store = table.store.as_ref();
    let app = app(table.store.clone());
    let mut drain = Drain::new(&table).await;
    let good = t("2024-08-01-00-00-00");
    let mut bad = file(good);
    bad.insert(
        archive_worker::keys::PK.into(),
        aws_sdk_dynamodb::types::AttributeValue::S("2024-02-30-10-00-00".into()),
    );
    let mut wrong_sk = file(t("2024-08-02-00-00-00"));
    wrong_sk.insert(
        archive_worker::keys::SK.into(),
        aws_sdk_dynamodb::types::AttributeValue::N("5".into()),
    );
    put(store, &[bad, wrong_sk, file(good)]).await;
    let records = drain.read().await;
    let report = worker_testkit::handle_records(&app, &records).await;
    assert!(
        report.batch_item_failures.is_empty(),
        "permanent: not retried"
    );
    assert_eq!((report.handled, report.rejected), (1, 2));
    for r in &report.records {
        if let worker_engine::stream::RecordStatus::Rejected { reason } = &r.status {
            assert!(reason.contains("malformed key"), "{reason}");
            assert!(!reason.contains(".zip"), "no attribute value: {reason}");
        }
    }
    assert_eq!(walk(store).await, BTreeSet::from([good]));
}
