//! Peak memory of the archive worker's Lambda `bootstrap`s, built with the
//! release settings that ship (`worker_testkit::lambda_process`), each a
//! fresh process on a local Lambda Runtime API against a DynamoDB Local of
//! its own, on the worst inputs its function can legally meet. Its peak
//! RSS (`VmHWM` of `/proc/<pid>/status`) after init and after each
//! delivery, and the `MemorySize` (of `infra/archive.yaml`) that holds it
//! with a 50% margin.
//!
//! 1. **`StreamFunction`** (`archive-stream`), a batch delivered twice to
//!    one warm process (the second: a retry, idempotent). The date lookup
//!    reads and rewrites a file's day item (up to 400 KB: a day listing
//!    [`FULL_DAY`] files) for every file it lists: one read-modify-write at
//!    a time per day (group commit), but every day of the batch at once,
//!    each holding its item several times over; the unzip lifecycle queries
//!    each file's `KeyName` and flags the file. So: (a) a day's burst:
//!    [`BATCH_SIZE`] (the mapping's `BatchSize`) new files of one nearly
//!    full day, each with an `Unzipped` item, its `KeyName` S3's longest
//!    (1,024 bytes); (b) the same filled up to Lambda's 6 MiB with the
//!    table's largest records, full day items' MODIFY records (both
//!    images): the worker's own writes coming back, which both handlers
//!    skip but the batch decodes; (c) a backfill: (b)'s files spread over
//!    [`BACKFILL_DAYS`] nearly full days (`-- --days N`), that many full
//!    day items held at once. The legal worst, a day per file, is past what
//!    DynamoDB Local serves (at 100 days its locks time out under the
//!    concurrent 400 KB writes, where DynamoDB's would not, and records
//!    fail): the bench prints the cost per day and what a day per file
//!    comes to.
//! 2. **`ExpireUnzippedFunction`** (`archive-schedule`, `expire-unzipped`):
//!    a tick holds one Query page at a time (ten due `Unzipped` items and
//!    their `PutEvents` call, then pages of 100 stuck `Unzipping` items),
//!    for as many pages as its deadline allows, so the size of a page is
//!    what counts; seeded with [`DUE`] due and [`STUCK`] stuck items
//!    (1,024-byte `KeyName`s) and publishing to EventBridge (moto's
//!    server), the tick completes the pass.
//! 3. **`RebuildLookupFunction`** (`archive-schedule`, `rebuild-lookup`): a
//!    tick holds one Scan page at a time (100 keys, and at most 1 MB of
//!    items read: three full day items, the third past the MB); pruning a
//!    page, it checks its lookup items at once (up to 8), each reading
//!    every file its list names. So the worst page holds [`REBUILD_DAYS`]
//!    full days: the days that come first in a Scan (DynamoDB Local orders
//!    it by a hash of the partition key: a scratch table of candidate days
//!    tells which), each listing [`FULL_DAY`] files (1,024-byte `KeyName`s)
//!    and [`STALE`] gone ones. `DEADLINE_MARGIN_MS` leaves the tick
//!    [`REBUILD_TICK_S`] of the invocation's 900, after which it saves its
//!    checkpoint as a tick out of time does (its later pages: 100 files
//!    each, in the rest of the prune and in the add phase).
//!
//! Run: `cargo bench -p archive-worker --bench lambda_process` (`-- --days
//! N`; `-- --skip-stream`, `-- --skip-expire`, `-- --skip-rebuild`).

use std::path::Path;

use archive_worker::items::{ArchivedFile, Stage, UnzipItem};
use archive_worker::keys::{self, FileTime, Job, LookupKey};
use archive_worker::lookup::rules;
use archive_worker::schema::schema;
use archive_worker::unzip::expire::{EVENT_SOURCE, EVENT_TYPE};
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use futures::StreamExt;
use serde_json::json;
use worker_engine::item::Item;
use worker_engine::store::{
    DynamoStore, Expr, ItemReader, ItemWriter, QuerySpec, QueryStore, ScanSpec,
};
use worker_engine::stream::{ChangeKind, StreamChange, encode_event};
use worker_testkit::TestTable;
use worker_testkit::eventbridge::RoutedBus;
use worker_testkit::lambda_process::{self as process, MIB, PAYLOAD_LIMIT, Peak};

const NOW: &str = "2024-03-25T00:00:00Z";
/// The stream mapping's `BatchSize` (infra/archive.yaml).
const BATCH_SIZE: usize = 1_000;
/// `hh-mm-ss` entries of a full day item: 9 bytes each (DynamoDB's size
/// of a list element), 405 KB of the 400 KiB an item may hold.
const FULL_DAY: usize = 45_000;
/// S3's longest object key, in bytes: the largest `KeyName`.
const KEY_NAME_BYTES: usize = 1_024;
/// `expire-unzipped`: due `Unzipped` items, and recent ones that stay.
const DUE: usize = 1_000;
const RECENT: usize = 100;
/// `expire-unzipped`: stuck `Unzipping` items, and recent ones.
const STUCK: usize = 1_000;
const WAITING: usize = 100;
/// Stream case (c): nearly full days of the batch's files (`-- --days N`).
const BACKFILL_DAYS: usize = 30;
/// `rebuild-lookup`: full days in the first Scan page, as many as its 1 MB
/// holds.
const REBUILD_DAYS: usize = 3;
/// Entries of each of those days naming a file that is gone.
const STALE: usize = 10;
/// Candidate days of the scratch table that finds the first ones in a Scan.
const CANDIDATES: usize = 20_000;
/// Seconds the `rebuild-lookup` tick gets (of the invocation's 900).
const REBUILD_TICK_S: u64 = 90;
/// Items built and put at once while seeding, and concurrent writers.
const SEED_CHUNK: usize = 5_000;
const SEED_TASKS: usize = 4;
const SEED_BYTES: usize = 64 * 1024 * 1024;
const STREAM_ARN: &str = "arn:aws:dynamodb:us-east-1:123456789012:table/archive-table-prod/stream/2024-01-01T00:00:00.000";

fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

/// Day `n` from 2000-01-01.
fn day(n: usize) -> NaiveDate {
    NaiveDate::from_ymd_opt(2000, 1, 1).expect("a date") + TimeDelta::days(n as i64)
}

/// The file at `second` of `date`.
fn at(date: NaiveDate, second: usize) -> FileTime {
    let s = second as u32;
    FileTime::new(date, s / 3600, s / 60 % 60, s % 60).expect("a time of the day")
}

/// A `KeyName` of [`KEY_NAME_BYTES`].
fn key_name(t: FileTime) -> String {
    let mut k = format!("archive/{}/", t.pk());
    k.extend(std::iter::repeat_n('k', KEY_NAME_BYTES - k.len() - 4));
    k + ".zip"
}

fn file(t: FileTime) -> Item {
    ArchivedFile {
        time: t,
        key_name: Some(key_name(t)),
        is_unzipped: Some(false),
        vault: Some("archive-vault-eu-west-1".into()),
    }
    .to_item()
}

fn unzip_item(stage: Stage, created: i64, key_name: String) -> Item {
    UnzipItem {
        stage,
        created,
        key_name: Some(key_name),
    }
    .to_item()
}

/// A lookup item listing `entries`.
fn lookup_item(key: LookupKey, entries: impl IntoIterator<Item = String>) -> Item {
    let mut item = key.key();
    let list = entries.into_iter().map(AttributeValue::S).collect();
    item.insert(keys::SAVED_DATE.into(), AttributeValue::L(list));
    item
}

/// A day item listing its files at `seconds`.
fn day_item(date: NaiveDate, seconds: impl Iterator<Item = usize>) -> Item {
    lookup_item(LookupKey::Day(date), seconds.map(|s| at(date, s).entry()))
}

/// The month, year and root items listing `days`.
fn parents(days: &[NaiveDate]) -> Vec<Item> {
    rules::lookup_of(days.iter().map(|d| at(*d, 0)))
        .into_iter()
        .filter(|(key, _)| key.level() > 0)
        .map(|(key, children)| lookup_item(key, rules::canonical(&children)))
        .collect()
}

/// A table of the archive schema on a DynamoDB Local of its own (no
/// stream: the bench hands the records over itself).
async fn own_table(name: &str) -> (worker_toolkit::local::DynamoDbLocal, TestTable) {
    TestTable::on_own_local(name, &schema().without_stream()).await
}

/// Put `items`, built [`SEED_CHUNK`] (or [`SEED_BYTES`]) at a time: the
/// small ones in batches, the large ones one by one (25 day items would
/// pass BatchWriteItem's 16 MB).
async fn seed(table: &TestTable, items: impl Iterator<Item = Item>) -> usize {
    let mut items = items.peekable();
    let mut n = 0;
    while items.peek().is_some() {
        let (mut large, mut small, mut bytes) = (Vec::new(), Vec::new(), 0);
        while let Some(item) = items.next_if(|_| small.len() < SEED_CHUNK && bytes < SEED_BYTES) {
            let size = item_bytes(&item);
            bytes += size;
            if size > 64 * 1024 {
                large.push(item);
            } else {
                small.push(item);
            }
        }
        n += large.len() + small.len();
        let puts = large.into_iter().map(|item| table.store.put(item, None));
        futures::stream::iter(puts)
            .buffer_unordered(SEED_TASKS)
            .for_each(|r| async move {
                r.expect("PutItem");
            })
            .await;
        worker_testkit::seed_concurrently(&table.store, small, SEED_TASKS).await;
    }
    n
}

/// Consistent reads of `keys`, 100 at a time.
async fn read_all(store: &DynamoStore, keys: Vec<Item>) -> Vec<Option<Item>> {
    let mut out = Vec::new();
    for chunk in keys.chunks(100) {
        out.extend(store.get_many(chunk, true).await.expect("BatchGetItem"));
    }
    out
}

fn entries(item: &Item) -> Vec<String> {
    match item.get(keys::SAVED_DATE) {
        Some(AttributeValue::L(l)) => l.iter().filter_map(|v| v.as_s().ok().cloned()).collect(),
        other => panic!("SavedDate is not a list: {other:?}"),
    }
}

/// DynamoDB's size of an item (a list: 3 bytes and 1 per element), for a
/// record's `SizeBytes`.
fn item_bytes(item: &Item) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
            AttributeValue::L(l) => 3 + l.iter().map(|e| 1 + value(e)).sum::<usize>(),
            _ => 1,
        }
    }
    item.iter().map(|(k, v)| k.len() + value(v)).sum()
}

/// Stream record `n` (its sequence number's order) of an item's change.
fn change(n: usize, kind: ChangeKind, old: Option<Item>, new: Option<Item>) -> StreamChange {
    let image = new.as_ref().or(old.as_ref()).expect("an image");
    let keys: Item = [keys::PK, keys::SK]
        .into_iter()
        .map(|k| (k.to_owned(), image[k].clone()))
        .collect();
    let size = [&old, &new]
        .into_iter()
        .flatten()
        .map(item_bytes)
        .sum::<usize>();
    StreamChange {
        event_id: format!("{n:032x}"),
        kind,
        sequence_number: Some(
            format!("{:021}", 100_000_000 + n)
                .parse()
                .expect("a number"),
        ),
        approximate_creation: Some(now()),
        keys,
        size_bytes: Some(size as i64),
        old_image: old,
        new_image: new,
        event_source_arn: Some(STREAM_ARN.into()),
        typed: None,
    }
}

fn payload(changes: &[StreamChange]) -> Vec<u8> {
    serde_json::to_vec(&encode_event(changes, None)).expect("JSON")
}

/// Record `n`: the MODIFY of echo `e`, a full day item (of a day no file of
/// the batch is in) gaining its last file: the worker's own write, back
/// through the stream.
fn echo(n: usize, e: usize) -> StreamChange {
    let date = day(20_000 + e);
    let old = day_item(date, 1..FULL_DAY);
    let new = day_item(date, 0..FULL_DAY);
    change(n, ChangeKind::Modify, Some(old), Some(new))
}

/// Records `e..` of a batch: the INSERTs of the files at `times`.
fn inserts(e: usize, times: &[FileTime]) -> Vec<StreamChange> {
    let insert =
        |(i, t): (usize, &FileTime)| change(e + i, ChangeKind::Insert, None, Some(file(*t)));
    times.iter().enumerate().map(insert).collect()
}

/// How many echoes fit in 6 MiB beside the INSERTs of the rest of a full
/// batch (every file record is the same size).
fn echoes_that_fit() -> usize {
    let times: Vec<FileTime> = (0..BATCH_SIZE).map(|s| at(day(0), s)).collect();
    let mut e = 0;
    loop {
        let mut batch: Vec<StreamChange> = (0..=e).map(|k| echo(k, k)).collect();
        batch.extend(inserts(e + 1, &times[e + 1..]));
        if payload(&batch).len() > PAYLOAD_LIMIT {
            return e;
        }
        e += 1;
    }
}

fn failures(peak: &Peak) -> Vec<usize> {
    peak.deliveries
        .iter()
        .map(|d| {
            d.response["batchItemFailures"]
                .as_array()
                .map_or(0, Vec::len)
        })
        .collect()
}

/// Stream case: with `fill`, as many full day items' MODIFY records as fit
/// in 6 MiB (echoes), then the INSERTs of the rest of a full batch of new
/// files, file `i` in day `i % days` (at most a day per file), each day
/// nearly full (listing [`FULL_DAY`] files once they are added), each file
/// with an `Unzipped` item of its `KeyName`. Delivered twice.
async fn stream_case(stream: &Path, what: &str, days: usize, fill: bool) -> f64 {
    let echoes = if fill { echoes_that_fit() } else { 0 };
    let files = BATCH_SIZE - echoes;
    let days = days.clamp(1, files);
    let dates: Vec<NaiveDate> = (0..days).map(day).collect();
    let times: Vec<FileTime> = (0..files).map(|i| at(dates[i % days], i / days)).collect();
    // Day `d` gets files d, d + days, ...: seconds 0.. of it.
    let new_in = |d: usize| (files - d).div_ceil(days);
    let (_local, table) = own_table("archive-lambda-stream").await;
    let unzipped = times.iter().enumerate().map(|(i, t)| {
        unzip_item(
            Stage::Unzipped,
            now().timestamp() - 3_600 - i as i64,
            key_name(*t),
        )
    });
    let lookups = (0..days).map(|d| day_item(dates[d], new_in(d)..FULL_DAY));
    let seeded = seed(
        &table,
        lookups
            .chain(parents(&dates))
            .chain(times.iter().map(|t| file(*t)))
            .chain(unzipped),
    )
    .await;

    let mut changes: Vec<StreamChange> = (0..echoes).map(|e| echo(e, e)).collect();
    changes.extend(inserts(echoes, &times));
    let payload = payload(&changes);
    assert!(payload.len() <= PAYLOAD_LIMIT && changes.len() <= BATCH_SIZE);

    let env = [
        ("TABLE_NAME", table.name.clone()),
        ("DYNAMODB_ENDPOINT_URL", table.endpoint.clone()),
        ("DEADLINE_MARGIN_MS", "2000".to_owned()),
        ("STREAM_CONCURRENCY", BATCH_SIZE.to_string()),
    ];
    let peak = process::peak(stream, &env, &payload, 2).await;
    println!(
        "memory StreamFunction ({what}): {} records ({files} new files in {days} nearly full day(s), \
         {echoes} full day MODIFY record(s)), {:.2} MiB payload, {seeded} items seeded; \
         batch item failures {:?}; {}",
        changes.len(),
        payload.len() as f64 / MIB,
        failures(&peak),
        peak.describe()
    );
    assert_eq!(failures(&peak), [0, 0], "no batch item failures");

    // Every day lists its new files (and is full); every file is flagged.
    let day_keys = dates.iter().map(|d| LookupKey::Day(*d).key()).collect();
    for (d, item) in read_all(&table.store, day_keys).await.iter().enumerate() {
        let listed = entries(item.as_ref().expect("the day item"));
        assert_eq!(listed.len(), FULL_DAY, "day {} lists every file", dates[d]);
        assert_eq!(listed[0], at(dates[d], 0).entry(), "its first new file");
    }
    let file_keys = times.iter().map(|t| t.key()).collect();
    for item in read_all(&table.store, file_keys).await {
        let file = ArchivedFile::from_item(&item.expect("the file")).expect("a file");
        assert_eq!(file.is_unzipped, Some(true), "{} flagged", file.time);
    }
    peak.mib()
}

/// `expire-unzipped`: [`DUE`] due `Unzipped` items published to EventBridge
/// (moto's server) and deleted, [`STUCK`] stuck `Unzipping` items reported.
async fn expire_case(schedule: &Path) -> f64 {
    let (moto, routed) = RoutedBus::of_events("archive-lambda", EVENT_SOURCE, EVENT_TYPE).await;
    let (_local, table) = own_table("archive-lambda-expire").await;
    let now = now().timestamp();
    let name = |i: usize| key_name(at(day(i / 86_400), i % 86_400));
    let (h24, h48) = (24 * 3_600, 48 * 3_600);
    let unzipped = (0..DUE + RECENT).map(|i| {
        let created = if i < DUE {
            now - h24 - 1 - i as i64
        } else {
            now - i as i64
        };
        unzip_item(Stage::Unzipped, created, name(i))
    });
    let unzipping = (0..STUCK + WAITING).map(|i| {
        let created = if i < STUCK {
            now - h48 - 1 - i as i64
        } else {
            now - i as i64
        };
        unzip_item(Stage::Unzipping, created, name(i))
    });
    let seeded = seed(&table, unzipped.chain(unzipping)).await;

    let mut env = vec![
        ("TABLE_NAME", table.name.clone()),
        ("DYNAMODB_ENDPOINT_URL", table.endpoint.clone()),
        ("WORKER_JOB", Job::ExpireUnzipped.to_string()),
        ("WORKER_NOW", NOW.to_owned()),
        ("DEADLINE_MARGIN_MS", "2000".to_owned()),
        ("UNZIPPED_RETENTION_HOURS", "24".to_owned()),
        ("UNZIP_STUCK_HOURS", "48".to_owned()),
        ("NOTIFY_EVENT_BUS", routed.bus.clone()),
    ];
    env.extend(moto.env());
    let tick = json!({"job": "expire-unzipped", "scheduledTime": NOW});
    let peak = process::peak(schedule, &env, tick.to_string().as_bytes(), 1).await;
    let answer = &peak.deliveries[0].response;
    let d = &answer["details"];
    println!(
        "memory ExpireUnzippedFunction: {seeded} items seeded ({DUE} due, {RECENT} recent Unzipped; \
         {STUCK} stuck, {WAITING} recent Unzipping; 1,024-byte KeyNames), events to moto's \
         EventBridge; {}; {}",
        answer["summary"],
        peak.describe()
    );
    assert_eq!(answer["complete"], true, "{answer}");
    assert_eq!(
        [
            &d["due"],
            &d["expired"],
            &d["published"],
            &d["rejected"],
            &d["stuck"]
        ],
        [
            &json!(DUE),
            &json!(DUE),
            &json!(DUE),
            &json!(0),
            &json!(STUCK)
        ],
        "{answer}"
    );
    let count = |partition: AttributeValue| {
        let spec = QuerySpec {
            consistent: true,
            ..QuerySpec::partition_of(keys::PK, partition)
        };
        let store = table.store.clone();
        async move { store.query_all(&spec).await.expect("Query").len() }
    };
    assert_eq!(
        count(keys::unzipped_partition()).await,
        RECENT,
        "the due ones deleted"
    );
    assert_eq!(
        count(keys::unzipping_partition()).await,
        STUCK + WAITING,
        "reported, kept"
    );
    peak.mib()
}

/// The [`REBUILD_DAYS`] days whose items come first in a Scan of this
/// DynamoDB Local: the first page of a scratch table of candidate days.
async fn first_days_in_scan(endpoint: &str) -> Vec<NaiveDate> {
    let scratch = TestTable::create(
        endpoint,
        "archive-lambda-scratch",
        &schema().without_stream(),
    )
    .await;
    seed(
        &scratch,
        (0..CANDIDATES).map(|n| LookupKey::Day(day(n)).key()),
    )
    .await;
    let spec = ScanSpec {
        limit: Some(REBUILD_DAYS as i32),
        ..Default::default()
    };
    let page = scratch.store.scan_page(&spec, None).await.expect("Scan");
    page.items
        .iter()
        .map(
            |item| match LookupKey::parse(item[keys::PK].as_s().expect("PK")) {
                Ok(LookupKey::Day(d)) => d,
                other => panic!("a day: {other:?}"),
            },
        )
        .collect()
}

/// `rebuild-lookup`: its worst page, [`REBUILD_DAYS`] full days pruned at
/// once (each [`FULL_DAY`] files and [`STALE`] gone ones).
async fn rebuild_case(schedule: &Path) -> f64 {
    let (_local, table) = own_table("archive-lambda-rebuild").await;
    let dates = first_days_in_scan(&table.endpoint).await;
    let lists = dates.iter().map(|d| day_item(*d, 0..FULL_DAY + STALE));
    let files = dates
        .iter()
        .flat_map(|d| (0..FULL_DAY).map(|s| file(at(*d, s))));
    let seeded = seed(&table, lists.chain(parents(&dates)).chain(files)).await;
    let keys_only = ScanSpec {
        projection: Some(Expr::new("#pk").name("#pk", keys::PK)),
        limit: Some(archive_worker::lookup::rebuild::PAGE_SIZE),
        ..Default::default()
    };
    let first = table.store.scan_page(&keys_only, None).await.expect("Scan");
    let first: Vec<&str> = first
        .items
        .iter()
        .map(|i| i[keys::PK].as_s().expect("PK").as_str())
        .collect();
    for d in &dates {
        let pk = LookupKey::Day(*d).pk();
        assert!(
            first.contains(&pk.as_str()),
            "day {pk} in the first Scan page"
        );
    }

    let margin_ms = (900 - REBUILD_TICK_S) * 1_000;
    let env = [
        ("TABLE_NAME", table.name.clone()),
        ("DYNAMODB_ENDPOINT_URL", table.endpoint.clone()),
        ("WORKER_JOB", Job::RebuildLookup.to_string()),
        ("WORKER_NOW", NOW.to_owned()),
        ("DEADLINE_MARGIN_MS", margin_ms.to_string()),
    ];
    let tick = json!({"job": "rebuild-lookup", "scheduledTime": NOW});
    let peak = process::peak(schedule, &env, tick.to_string().as_bytes(), 1).await;
    let answer = &peak.deliveries[0].response;
    let d = &answer["details"];
    println!(
        "memory RebuildLookupFunction: {seeded} items seeded ({REBUILD_DAYS} days of {FULL_DAY} files \
         with 1,024-byte KeyNames, each listing {STALE} gone files, all in the first Scan page), a \
         {REBUILD_TICK_S} s tick: {} ({} pages, {} lookup items, {} stale entries); {}",
        answer["summary"],
        d["pages"],
        d["lookup_items"],
        d["stale_entries"],
        peak.describe()
    );
    assert_eq!(d["stale_entries"], json!(REBUILD_DAYS * STALE), "{answer}");
    assert_eq!(d["withheld"], json!(0), "{answer}");
    let checkpoint = table
        .store
        .get(&keys::checkpoint(Job::RebuildLookup), true)
        .await
        .expect("GetItem");
    assert_eq!(
        checkpoint.is_some(),
        answer["complete"] == false,
        "a tick out of time saves its checkpoint: {answer}"
    );
    let day_keys = dates.iter().map(|d| LookupKey::Day(*d).key()).collect();
    for (d, item) in read_all(&table.store, day_keys).await.iter().enumerate() {
        let listed = entries(item.as_ref().expect("the day item"));
        assert_eq!(
            listed.len(),
            FULL_DAY,
            "day {}: the gone files pruned",
            dates[d]
        );
    }
    peak.mib()
}

/// The backfill's cost per nearly full day of the batch, from (b) and (c),
/// and what it comes to with a day per file (the legal worst).
fn backfill(one_day: f64, days_peak: f64, days: usize) {
    if days < 2 {
        return;
    }
    let per_day = (days_peak - one_day) / (days - 1) as f64;
    let files = BATCH_SIZE - echoes_that_fit();
    let worst = one_day + per_day * (files - 1) as f64;
    println!(
        "memory StreamFunction: {per_day:.1} MiB more per nearly full day of the batch; a day per \
         file ({files} days, the legal worst, more than DynamoDB Local serves at once) would \
         peak near {worst:.0} MiB (MemorySize {} MB; Lambda's largest is 10,240 MB)",
        process::memory_size(worst, 0.5)
    );
}

fn summary(function: &str, peak: f64) {
    println!(
        "memory archive: {function} peak {peak:.1} MiB -> MemorySize {} MB (50% margin)",
        process::memory_size(peak, 0.5)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let skip = |what: &str| args.iter().any(|a| *a == format!("--skip-{what}"));
    let days = args
        .iter()
        .position(|a| a == "--days")
        .and_then(|i| args.get(i + 1)?.parse().ok())
        .unwrap_or(BACKFILL_DAYS);
    let dir = process::build(
        "archive-worker",
        &["archive-stream", "archive-schedule"],
        &[],
    );
    let (stream, schedule) = (dir.join("archive-stream"), dir.join("archive-schedule"));

    let mut peaks = Vec::new();
    if !skip("stream") {
        let a = stream_case(&stream, "(a) a day's burst", 1, false).await;
        let b = stream_case(&stream, "(b) a day's burst in 6 MiB", 1, true).await;
        let c = stream_case(&stream, "(c) a backfill", days, true).await;
        backfill(b, c, days);
        peaks.push(("StreamFunction", a.max(b).max(c)));
    }
    if !skip("expire") {
        peaks.push(("ExpireUnzippedFunction", expire_case(&schedule).await));
    }
    if !skip("rebuild") {
        peaks.push(("RebuildLookupFunction", rebuild_case(&schedule).await));
    }
    for (function, peak) in peaks {
        summary(function, peak);
    }
}
