//! The archive worker's event fixtures (`events/archive/`): every entry of
//! `events/archive/manifest.json` is replayed twice (idempotency) on a
//! fresh table through the code of `archive-worker replay`, and the table
//! is compared with its golden snapshot.
//!
//! - `cargo test -p archive-worker --test it fixtures::`: compare;
//! - `UPDATE_GOLDEN=1 cargo test -p archive-worker --test it fixtures::`:
//!   rewrite the goldens (review the diff);
//! - `REGENERATE_FIXTURES=1 cargo test -p archive-worker --test it fixtures::
//!   -- --ignored regenerate`: rebuild the tables and re-capture the stream
//!   files from DynamoDB Local (the service's writes, read back from the
//!   stream), rewrite the ticks and the manifest; then update the goldens.

use crate::support;

use std::path::PathBuf;

use archive_cli::Archive;
use archive_worker::items::{ArchivedFile, Stage};
use archive_worker::keys::{self, FileTime, ItemKey};
use archive_worker::schema::schema;
use support::*;
use worker_engine::item::Item;
use worker_testkit::fixtures::{self, Fixture};
use worker_testkit::workload::Write;
use worker_toolkit::replay::snapshot::{read_snapshot, write_snapshot};

const KEYS: (&str, &str) = (keys::PK, keys::SK);
/// The stream ARN the captures carry (as Lambda delivers them).
const STREAM_ARN: &str =
    "arn:aws:dynamodb:eu-west-1:123456789012:table/archive/stream/2024-03-01T00:00:00.000";

fn events_dir() -> PathBuf {
    fixtures::events_dir(env!("CARGO_MANIFEST_DIR"), "archive")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_replays_to_its_golden_twice() {
    fixtures::replay_every_fixture_twice::<Archive>(&events_dir(), 7).await;
}

/// Every event file is replayed by an entry; every file named exists; the
/// rebuild of the damaged lookup gives back the table the stream built.
#[test]
fn the_manifest_covers_every_fixture() {
    let dir = events_dir();
    fixtures::the_manifest_covers_every_fixture(&dir);
    let rebuilt = std::fs::read_to_string(dir.join("golden/rebuild-lookup.json")).expect("golden");
    let built = std::fs::read_to_string(dir.join("tables/archive.json")).expect("table");
    assert_eq!(
        rebuilt, built,
        "rebuild-lookup restores the stream's lookup"
    );
    for table in ["tables/archive.json", "tables/damaged-lookup.json"] {
        read_snapshot(&dir.join(table), KEYS).expect("a snapshot");
    }
}

fn file_item(pk: &str) -> Item {
    file(t(pk))
}

fn unzipped_file(pk: &str) -> Item {
    let time: FileTime = t(pk);
    ArchivedFile {
        time,
        key_name: Some(key_name(time)),
        is_unzipped: Some(true),
        vault: Some("vault-1".into()),
    }
    .to_item()
}

/// `CreatedDate` `hours` before the fixtures' now.
fn ago(hours: i64) -> i64 {
    now().timestamp() - hours * 3600
}

/// The table of the fixtures, before the stream made its lookup.
fn service_items() -> Vec<Item> {
    vec![
        file_item("2023-12-31-12-00-00"),
        file_item("2024-02-29-23-59-59"),
        file_item("2024-03-01-09-00-00"),
        file_item("2024-03-01-17-30-00"),
        unzipped_file("2024-03-10-08-15-00"),
        unzipped_file("2024-03-20-07-00-00"),
        // Requested 30 h ago, not unzipped yet.
        unzip_item(
            Stage::Unzipping,
            ago(30),
            &key_name(t("2024-03-01-09-00-00")),
        ),
        // Requested three days ago: stuck.
        unzip_item(
            Stage::Unzipping,
            ago(72),
            &key_name(t("2023-12-31-12-00-00")),
        ),
        // Unzipped 30 h ago (due for expiry) and 2 h ago.
        unzip_item(
            Stage::Unzipped,
            ago(30),
            &key_name(t("2024-03-10-08-15-00")),
        ),
        unzip_item(Stage::Unzipped, ago(2), &key_name(t("2024-03-20-07-00-00"))),
    ]
}

/// The service's writes of each stream fixture, with what it shows.
fn stream_fixtures() -> Vec<(&'static str, &'static str, Vec<Write>)> {
    let lenient = t("2024-04-01-00-00-00");
    let mut lenient_item = file(lenient);
    lenient_item.insert(
        keys::PK.into(),
        aws_sdk_dynamodb::types::AttributeValue::S("2024-4-1-0-0-0".into()),
    );
    vec![
        (
            "files-archived",
            "Three files archived: one on a day already listed, one on a new day, one written with an unpadded PK (a new month): the lookup lists each, canonically.",
            vec![
                Write::Put(file_item("2024-03-01-20-00-00")),
                Write::Put(file_item("2024-03-24-06-00-00")),
                Write::Put(lenient_item),
            ],
        ),
        (
            "last-files-of-days-removed",
            "The only file of 2024-03-10 and the only file of February are deleted: the days go, and February leaves 2024.",
            vec![
                Write::Delete(t("2024-03-10-08-15-00").key()),
                Write::Delete(t("2024-02-29-23-59-59").key()),
            ],
        ),
        (
            "file-unzipped",
            "The file requested 30 h ago is unzipped: its Unzipping item goes, the file is flagged IsUnzipped.",
            vec![Write::Put(unzip_item(
                Stage::Unzipped,
                ago(1),
                &key_name(t("2024-03-01-09-00-00")),
            ))],
        ),
        (
            "unzipped-removed",
            "The Unzipped item of 2024-03-20 goes: the file's IsUnzipped returns to false.",
            vec![Write::Delete(ItemKey::Unzipped { created: ago(2) }.key())],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "rewrites events/archive: REGENERATE_FIXTURES=1 ... -- --ignored regenerate"]
async fn regenerate() {
    if !fixtures::regenerating("archive") {
        return;
    }
    let dir = events_dir();
    // The table: the service's items, and the lookup the stream made.
    let items = fixtures::streamed_items(&schema(), &service_items(), app, KEYS).await;
    write_snapshot(&dir.join("tables/archive.json"), &items, KEYS).expect("write");

    // The same files with a lookup gone wrong: stale entries at each
    // level, unpadded and duplicated entries, a missing day.
    let mut damaged: Vec<Item> = items
        .iter()
        .filter(|i| !matches!(ItemKey::from_item(i), Ok(ItemKey::Lookup(_))))
        .cloned()
        .collect();
    let lookup = |pk: &str, entries: &[&str]| {
        let mut item = ItemKey::Lookup(keys::LookupKey::parse(pk).expect("a lookup key")).key();
        item.insert(
            keys::SAVED_DATE.into(),
            aws_sdk_dynamodb::types::AttributeValue::L(
                entries
                    .iter()
                    .map(|e| aws_sdk_dynamodb::types::AttributeValue::S((*e).into()))
                    .collect(),
            ),
        );
        item
    };
    damaged.extend([
        lookup("root", &["2024", "2022"]),
        lookup("2022", &["06"]),
        lookup("2024", &["3", "2", "3"]),
        lookup("2024-03", &["01", "15"]),
        lookup("2024-03-01", &["9-0-0", "17-30-00", "23-00-00"]),
    ]);
    write_snapshot(&dir.join("tables/damaged-lookup.json"), &damaged, KEYS).expect("write");

    // Stream captures, each from the table above.
    let mut entries = fixtures::capture_stream_fixtures(
        &dir,
        &schema(),
        &items,
        "tables/archive.json",
        STREAM_ARN,
        NOW,
        stream_fixtures(),
    )
    .await;

    // Ticks, in both EventBridge shapes.
    for job in ["expire-unzipped", "rebuild-lookup"] {
        fixtures::write_ticks(&dir, "archive-worker", job, NOW);
    }
    let expire = "expire-unzipped: the unzipped file of 30 h ago is deleted (announced when NOTIFY_EVENT_BUS is set; a local run never publishes) and its file's flag is left to the stream; the unzipping file of 72 h ago is reported stuck.";
    let rebuild = "rebuild-lookup on the damaged lookup: stale entries pruned, lists canonical, missing days listed: the table the stream built.";
    for shape in ["scheduler", "rule"] {
        entries.push(Fixture::new(
            &format!("expire-unzipped-{shape}"),
            expire,
            vec![format!("schedule/expire-unzipped.{shape}.json")],
            "tables/archive.json",
            NOW,
            false,
            "expire-unzipped",
        ));
        entries.push(Fixture::new(
            &format!("rebuild-lookup-{shape}"),
            rebuild,
            vec![format!("schedule/rebuild-lookup.{shape}.json")],
            "tables/damaged-lookup.json",
            NOW,
            false,
            "rebuild-lookup",
        ));
    }
    fixtures::write_manifest(&dir, "apps/archive/tests/it/fixtures.rs", &entries);
}
