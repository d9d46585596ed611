//! Cost per million stream records of the archive's `StreamFunction`
//! (`cargo bench -p nishiki-cli --bench cost -- --app archive --writes 5000 --seed 7`):
//! the measurement of `worker_testkit::cost` on a seeded mix of the
//! archive service's writes.
//!
//! On a DynamoDB Local of its own, a table holding a month of archived
//! files (`--files`, default 3,000, with their date lookup, as the worker
//! left it; the stream records of the seeding skipped) receives
//! `--writes` service writes, one after the other, at [`NOW`] and after: 80%
//! files archived (a new time within the month and the day after it), 10%
//! retrievals requested (an `Unzipping` item of an archived file), 8%
//! retrievals done (the `Unzipped` item of a requested file), 2% files
//! deleted. Then the stream is drained through the worker as
//! `infra/archive.yaml`'s mapping delivers it, each invocation metered
//! (`worker_testkit::cost::Meter`), and the cost is printed.

use std::collections::BTreeSet;
use std::sync::Arc;

use archive_worker::app::{APP, SHARING};
use archive_worker::items::{ArchivedFile, Stage, UnzipItem};
use archive_worker::keys::{self, FileTime, Job};
use archive_worker::lookup::rules;
use archive_worker::schema::schema;
use archive_worker::unzip::UnzipSettings;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use rand::Rng;
use worker_engine::item::Item;
use worker_engine::store::{DynamoStore, Store, local_client};
use worker_testkit::TestTable;
use worker_testkit::app::TestApp;
use worker_testkit::cost::arg;
use worker_testkit::cost::{self, Costed, Meter, StreamFunction, Tallied, Timed, US_EAST_1};
use worker_testkit::workload::{Seeded, Write, apply};

const NOW: &str = "2024-03-25T00:00:00Z";
const ARCHIVE: TestApp<Job, UnzipSettings> = TestApp {
    app: &APP,
    sharing: SHARING,
    now: NOW,
};

fn now() -> DateTime<Utc> {
    NOW.parse().expect("a time")
}

/// A file time within the 30 days before [`NOW`] and the day after.
fn random_time(rng: &mut Seeded) -> FileTime {
    let secs = rng.rng().random_range(-30 * 86_400..86_400);
    FileTime::from_epoch(now().timestamp() + secs).expect("a file time")
}

fn key_name(time: FileTime) -> String {
    format!("archive/{}.zip", time.pk())
}

fn file(time: FileTime) -> Item {
    ArchivedFile {
        time,
        key_name: Some(key_name(time)),
        is_unzipped: Some(false),
        vault: Some("vault-1".into()),
    }
    .to_item()
}

fn unzip(stage: Stage, created: i64, time: FileTime) -> Item {
    UnzipItem {
        stage,
        created,
        key_name: Some(key_name(time)),
    }
    .to_item()
}

/// The lookup items that list exactly `files` (days, months, years, root).
fn lookup(files: &BTreeSet<FileTime>) -> Vec<Item> {
    rules::lookup_of(files.iter().copied())
        .into_iter()
        .map(|(key, children)| {
            let mut item = key.key();
            let list = rules::canonical(&children)
                .into_iter()
                .map(AttributeValue::S)
                .collect();
            item.insert(keys::SAVED_DATE.into(), AttributeValue::L(list));
            item
        })
        .collect()
}

pub(crate) async fn run() -> Costed {
    let files = arg("--files", 3000) as usize;
    let writes = arg("--writes", 5000) as usize;
    let mut rng = Seeded::new(arg("--seed", 7));
    let function = StreamFunction::of("infra/archive.yaml", "StreamFunction");

    let mut archived: BTreeSet<FileTime> = BTreeSet::new();
    while archived.len() < files {
        archived.insert(random_time(&mut rng));
    }
    let mut population: Vec<Item> = archived.iter().map(|t| file(*t)).collect();
    population.extend(lookup(&archived));

    let mut history = Vec::new();
    let mut requested: Vec<(FileTime, i64)> = Vec::new();
    let mut t = now().timestamp();
    while history.len() < writes {
        t += rng.rng().random_range(1..30);
        let listed: Vec<FileTime> = archived.iter().copied().collect();
        let pick = |rng: &mut Seeded| listed[rng.rng().random_range(0..listed.len())];
        let write = match rng.rng().random_range(0..100) {
            0..80 => {
                let time = random_time(&mut rng);
                archived.insert(time);
                Write::Put(file(time))
            }
            80..90 => {
                let time = pick(&mut rng);
                requested.push((time, t));
                Write::Put(unzip(Stage::Unzipping, t, time))
            }
            90..98 if !requested.is_empty() => {
                let (time, _) = requested.swap_remove(rng.rng().random_range(0..requested.len()));
                Write::Put(unzip(Stage::Unzipped, t, time))
            }
            98..100 => {
                let time = pick(&mut rng);
                archived.remove(&time);
                Write::Delete(time.key())
            }
            _ => continue,
        };
        history.push(write);
    }
    let minutes = (t - now().timestamp()) / 60;
    eprintln!(
        "{} items seeded ({files} files), {} service writes over {minutes} minutes",
        population.len(),
        history.len()
    );

    let (local, table) = TestTable::on_own_local("cost-archive", &schema()).await;
    worker_testkit::seed_concurrently(&table.store, population, 8).await;
    let (_, mut tail) = table.stream_tail().await;
    tail.poll().await.expect("read the stream");
    apply(table.store.as_ref(), &history).await;

    let worker_store = Arc::new(
        DynamoStore::new(local_client(&local.endpoint_url()), &table.name).with_key(schema().key),
    );
    let timed = Arc::new(Timed::new(worker_store.clone()));
    let worker = ARCHIVE.worker(timed.clone() as Arc<dyn Store>);
    let mut meter = Meter::new(vec![worker_store], vec![timed as Arc<dyn Tallied>]);
    let mut streams = [cost::Stream {
        tail,
        mapping: function.mapping(None).clone(),
    }];
    meter.drain(&worker, &mut streams).await;
    Costed::of("archive", &function, US_EAST_1, &meter.run)
}
