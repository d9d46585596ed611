//! The event fixtures in `events/`: every fixture of `events/manifest.json`
//! is replayed (twice, to prove idempotency) on a fresh table of the shared
//! DynamoDB Local, through the same code as `nishiki-worker replay`, and the
//! resulting table is compared with its golden snapshot.
//!
//! - `cargo test --test it fixtures::`: compare;
//! - `UPDATE_GOLDEN=1 cargo test --test it fixtures::`: rewrite the goldens
//!   (review the diff);
//! - `REGENERATE_FIXTURES=1 cargo test --test it fixtures:: -- --ignored
//!   regenerate`: rebuild the tables and re-capture the stream fixtures from
//!   DynamoDB Local (service writes done the way the service does them, read
//!   back with `capture`); then update the goldens.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use nishiki_cli::{KEYS, Nishiki};
use nishiki_worker::app::App;
use nishiki_worker::config::{Config, ManualClock};
use nishiki_worker::items::Item;
use nishiki_worker::keys::{ContainerId, FoodId, GroupId, ItemKey, Job, UserId};
use serde_json::{Value, json};
use support::{Drain, TestTable};
use worker_engine::store::{DynamoStore, ItemWriter};
use worker_engine::stream::SequenceNumber;
use worker_toolkit::cli::capture::{CaptureArgs, capture};
use worker_toolkit::cli::replay::{ReplayArgs, replay};
use worker_toolkit::cli::target::{AppTable, EndpointOpts, TableOpts, Target};
use worker_toolkit::replay::snapshot::{load_items, read_snapshot, snapshot_text, write_snapshot};
use worker_toolkit::stream_reader::{StartAt, StreamTail};

fn events_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("events")
}

/// One entry of `events/manifest.json`.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
struct Fixture {
    name: String,
    about: String,
    /// Event files, relative to `events/`, replayed in order.
    events: Vec<String>,
    /// The table the events make sense against, relative to `events/`.
    snapshot: String,
    now: String,
    #[serde(rename = "applyWrites")]
    apply_writes: bool,
    /// `--env NAME=VALUE` settings.
    #[serde(default)]
    env: Vec<String>,
    /// The table after the replay, relative to `events/`.
    golden: String,
}

fn manifest() -> Vec<Fixture> {
    let text =
        std::fs::read_to_string(events_dir().join("manifest.json")).expect("events/manifest.json");
    let v: Value = serde_json::from_str(&text).expect("manifest is JSON");
    serde_json::from_value(v["fixtures"].clone()).expect("manifest shape")
}

fn args_for(f: &Fixture, table: &TestTable, with_snapshot: bool) -> ReplayArgs {
    let dir = events_dir();
    ReplayArgs {
        files: f.events.iter().map(|e| dir.join(e)).collect(),
        snapshot: with_snapshot.then(|| dir.join(&f.snapshot)),
        apply_writes: f.apply_writes,
        now: Some(f.now.parse().expect("manifest now is RFC 3339")),
        write_snapshot: None,
        dry_run: false,
        json: false,
        env: f.env.clone(),
        table: TableOpts {
            endpoint_url: Some(table.endpoint.clone()),
            table: vec![table.name.clone()],
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn every_fixture_replays_to_its_golden_twice() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let fixtures = manifest();
    assert!(fixtures.len() >= 19, "the manifest lists every fixture");
    let mut problems = Vec::new();
    for f in &fixtures {
        let table = support::nishiki_table().await;
        let target =
            Target::connect(&table.endpoint, &table.name, &AppTable::of::<Nishiki>()).await;
        let first = replay::<Nishiki>(&target, &args_for(f, &table, true))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let once = snapshot_text(&table.snapshot().await, KEYS);
        for file in &first.files {
            if file.lambda_failed() {
                problems.push(format!(
                    "{}: {} failed: {:?}",
                    f.name, file.file, file.error
                ));
            }
        }
        replay::<Nishiki>(&target, &args_for(f, &table, false))
            .await
            .unwrap_or_else(|e| panic!("{} (second run): {e}", f.name));
        let twice = snapshot_text(&table.snapshot().await, KEYS);
        if once != twice {
            problems.push(format!(
                "{}: replaying the events a second time changed the table (not idempotent)",
                f.name
            ));
        }
        let golden = events_dir().join(&f.golden);
        if update {
            std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
            let same = std::fs::read_to_string(&golden).ok().as_deref() == Some(once.as_str());
            if !same {
                std::fs::write(&golden, &once).unwrap();
            }
        } else {
            let expected = std::fs::read_to_string(&golden)
                .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", golden.display()));
            if expected != once {
                problems.push(format!(
                    "{}: the table after the replay differs from {} (if the change is intended: UPDATE_GOLDEN=1 cargo test --test it fixtures::)",
                    f.name, f.golden
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every file under `events/stream` and `events/schedule` is replayed by
/// some manifest entry, every snapshot and golden named exists.
#[test]
fn manifest_covers_every_fixture() {
    let dir = events_dir();
    let fixtures = manifest();
    let used: BTreeSet<String> = fixtures.iter().flat_map(|f| f.events.clone()).collect();
    for sub in ["stream", "schedule"] {
        for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
            let name = format!("{sub}/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(
                used.contains(&name),
                "{name} is not in events/manifest.json"
            );
        }
    }
    for f in &fixtures {
        for p in f.events.iter().chain([&f.snapshot, &f.golden]) {
            assert!(dir.join(p).is_file(), "{}: {p} does not exist", f.name);
        }
    }
    let names: BTreeSet<&str> = fixtures.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names.len(), fixtures.len(), "fixture names are unique");
}

/// Stream fixtures have the exact shape Lambda delivers (what `cargo lambda
/// invoke --data-file` and `sam local invoke -e` pass on), schedule fixtures
/// one of the two EventBridge shapes.
#[test]
fn fixtures_are_shaped_as_lambda_delivers() {
    let dir = events_dir();
    let mut stream_files = 0;
    for entry in std::fs::read_dir(dir.join("stream")).unwrap() {
        let path = entry.unwrap().path();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let name = path.display().to_string();
        let records = v["Records"].as_array().unwrap_or_else(|| panic!("{name}"));
        for (i, r) in records.iter().enumerate() {
            for field in [
                "eventID",
                "eventName",
                "eventVersion",
                "eventSource",
                "eventSourceARN",
                "awsRegion",
            ] {
                assert!(r[field].is_string(), "{name} #{i}: {field}");
            }
            assert_eq!(r["eventSource"], "aws:dynamodb", "{name} #{i}");
            let ddb = &r["dynamodb"];
            assert!(ddb["Keys"].is_object(), "{name} #{i}: Keys");
            assert!(
                ddb["SequenceNumber"].is_string(),
                "{name} #{i}: SequenceNumber"
            );
            assert!(ddb["SizeBytes"].is_number(), "{name} #{i}: SizeBytes");
            assert_eq!(ddb["StreamViewType"], "NEW_AND_OLD_IMAGES", "{name} #{i}");
            assert!(
                ddb["ApproximateCreationDateTime"].is_number(),
                "{name} #{i}"
            );
        }
        // The typed Lambda event reads every well-formed fixture.
        if !name.contains("malformed") {
            let typed: Result<aws_lambda_events::event::dynamodb::Event, _> =
                serde_json::from_value(normalise_empty_lists(v.clone()));
            assert!(typed.is_ok(), "{name}: {:?}", typed.err());
        }
        stream_files += 1;
    }
    assert!(stream_files >= 10);
    for entry in std::fs::read_dir(dir.join("schedule")).unwrap() {
        let path = entry.unwrap().path();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let tick = worker_engine::schedule::parse_tick::<Job>(&v)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        assert!(file.starts_with(tick.job.as_str()), "{file}");
        assert!(tick.scheduled_time.is_some(), "{file}");
    }
}

/// The typed event rejects the untagged empty lists DynamoDB Local emits;
/// `stream::decode` accepts them. Tag them for the typed check.
fn normalise_empty_lists(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if matches!(
                        k.as_str(),
                        "L" | "M" | "S" | "N" | "SS" | "NS" | "BS" | "B" | "BOOL" | "NULL"
                    ) {
                        walk_typed(x);
                    } else if x.as_array().is_some_and(Vec::is_empty) {
                        *x = json!({"L": []});
                    } else {
                        walk(x);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    fn walk_typed(v: &mut Value) {
        match v {
            Value::Array(a) => a.iter_mut().for_each(walk),
            Value::Object(_) => walk(v),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

// ---------------------------------------------------------------------------
// Regeneration: the household the fixtures play in, and the service's writes.
// ---------------------------------------------------------------------------

const NOW: &str = "2024-03-25T09:00:00Z";
/// The table name the captures are made on (it appears in eventSourceARN).
const CAPTURE_TABLE: &str = "nishiki-table-local-db";

fn uid(s: &str) -> UserId {
    s.parse().unwrap()
}
fn gid(s: &str) -> GroupId {
    s.parse().unwrap()
}
fn cid(s: &str) -> ContainerId {
    s.parse().unwrap()
}
fn fid(s: &str) -> FoodId {
    s.parse().unwrap()
}

struct Household {
    alice: UserId,
    bob: UserId,
    carol: UserId,
    home: GroupId,
    flat: GroupId,
    office: GroupId,
    fridge: ContainerId,
    freezer: ContainerId,
    pantry: ContainerId,
    office_fridge: ContainerId,
    veg_box: ContainerId,
}

fn household() -> Household {
    Household {
        alice: uid("a11ce000-0000-4000-8000-000000000001"),
        bob: uid("b0b00000-0000-4000-8000-000000000002"),
        carol: uid("ca201000-0000-4000-8000-000000000003"),
        home: gid("9e000000-0000-4000-8000-00000000a001"),
        flat: gid("9e000000-0000-4000-8000-00000000a002"),
        office: gid("9e000000-0000-4000-8000-00000000a003"),
        fridge: cid("c0000000-0000-4000-8000-0000000c0001"),
        freezer: cid("c0000000-0000-4000-8000-0000000c0002"),
        pantry: cid("c0000000-0000-4000-8000-0000000c0003"),
        office_fridge: cid("c0000000-0000-4000-8000-0000000c0004"),
        veg_box: cid("c0000000-0000-4000-8000-0000000c0005"),
    }
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn item(key: &ItemKey, attrs: Vec<(&str, AttributeValue)>) -> Item {
    let mut i = key.to_attributes();
    for (k, v) in attrs {
        i.insert(k.to_owned(), v);
    }
    i
}

/// A food map exactly as the service writes it (absent values are NULL).
fn food(
    id: &str,
    name: &str,
    qty: Option<&str>,
    unit: Option<&str>,
    cat: &str,
    expiry: Option<&str>,
) -> AttributeValue {
    let opt_s = |v: Option<&str>| v.map_or(AttributeValue::Null(true), s);
    AttributeValue::M(
        [
            ("FoodId".to_owned(), s(fid(id).to_string())),
            ("Name".to_owned(), s(name)),
            ("Unit".to_owned(), opt_s(unit)),
            (
                "Quantity".to_owned(),
                qty.map_or(AttributeValue::Null(true), |q| AttributeValue::N(q.into())),
            ),
            ("Category".to_owned(), s(cat)),
            ("Expiry".to_owned(), opt_s(expiry)),
            ("CreatedAt".to_owned(), s("2024-03-20T18:30:12.345Z")),
        ]
        .into(),
    )
}

const MILK: &str = "f0000000-0000-4000-8000-0000000f0001";
const EGGS: &str = "f0000000-0000-4000-8000-0000000f0002";
const RICE: &str = "f0000000-0000-4000-8000-0000000f0003";
const CHEESE: &str = "f0000000-0000-4000-8000-0000000f0004";
const PASTA: &str = "f0000000-0000-4000-8000-0000000f0005";
const PEAS: &str = "f0000000-0000-4000-8000-0000000f0006";
const COFFEE: &str = "f0000000-0000-4000-8000-0000000f0007";
const YOGURT: &str = "f0000000-0000-4000-8000-0000000f0008";
const SPINACH: &str = "f0000000-0000-4000-8000-0000000f0009";

fn fridge_foods() -> Vec<AttributeValue> {
    vec![
        food(
            MILK,
            "Milk",
            Some("1"),
            Some("l"),
            "dairy",
            Some("2024-03-26T00:00:00.000Z"),
        ),
        food(
            EGGS,
            "Eggs",
            Some("6"),
            Some("pcs"),
            "unselected",
            Some("2024-03-24T12:00:00.000Z"),
        ),
        food(RICE, "Rice", None, None, "unselected", None),
        food(
            CHEESE,
            "Cheese",
            Some("200"),
            Some("g"),
            "dairy",
            Some("2024-04-20T00:00:00.000Z"),
        ),
    ]
}

fn container(id: ContainerId, name: &str, foods: Vec<AttributeValue>) -> Item {
    item(
        &ItemKey::Container(id),
        vec![
            ("ContainerName", s(name)),
            ("Foods", AttributeValue::L(foods)),
        ],
    )
}

fn invitation(g: GroupId, hash: &str, expiry: &str) -> Item {
    item(
        &ItemKey::InvitationLink(g),
        vec![
            ("InvitationLinkHash", s(hash)),
            ("LinkExpiryDatetime", s(expiry)),
        ],
    )
}

const FLAT_HASH: &str = "5d41402abc4b2a76b9719d911017c592";

/// The service's items of the household, in the order the service would
/// have written them.
fn service_items() -> Vec<Item> {
    let h = household();
    let user = |u: UserId, name: &str, mail: &str| {
        item(
            &ItemKey::User(u),
            vec![("UserName", s(name)), ("EMailAddress", s(mail))],
        )
    };
    let member = |u: UserId, g: GroupId| {
        item(
            &ItemKey::Membership { user: u, group: g },
            vec![("GroupId", s(g.to_string()))],
        )
    };
    let group = |g: GroupId, name: &str| item(&ItemKey::Group(g), vec![("GroupName", s(name))]);
    let link = |g: GroupId, c: ContainerId| {
        item(
            &ItemKey::ContainerLink {
                group: g,
                container: c,
            },
            vec![("ContainerId", s(c.to_string()))],
        )
    };
    vec![
        item(
            &ItemKey::Category,
            vec![(
                "Category",
                AttributeValue::L(
                    ["vegetables", "dairy", "unselected"]
                        .iter()
                        .map(|n| AttributeValue::M([("name".to_owned(), s(*n))].into()))
                        .collect(),
                ),
            )],
        ),
        user(h.alice, "Alice", "alice@example.com"),
        user(h.bob, "Bob", "bob@example.com"),
        user(h.carol, "Carol", "carol@example.com"),
        group(h.home, "Home"),
        member(h.alice, h.home),
        member(h.bob, h.home),
        group(h.flat, "Carol's flat"),
        member(h.carol, h.flat),
        group(h.office, "Office"),
        member(h.alice, h.office),
        member(h.carol, h.office),
        container(h.fridge, "Fridge", fridge_foods()),
        link(h.home, h.fridge),
        container(
            h.freezer,
            "Freezer",
            vec![food(
                PEAS,
                "Peas",
                Some("1"),
                Some("bag"),
                "vegetables",
                Some("2024-09-01T00:00:00.000Z"),
            )],
        ),
        link(h.home, h.freezer),
        container(
            h.pantry,
            "Pantry",
            vec![food(
                PASTA,
                "Pasta",
                Some("500"),
                Some("g"),
                "unselected",
                Some("2024-03-27T12:00:00.000Z"),
            )],
        ),
        link(h.flat, h.pantry),
        container(
            h.office_fridge,
            "Office fridge",
            vec![food(
                COFFEE,
                "Coffee beans",
                Some("1"),
                Some("kg"),
                "unselected",
                Some("2024-03-25T17:00:00.000Z"),
            )],
        ),
        link(h.office, h.office_fridge),
        invitation(
            h.home,
            "7f3c2a1b9e8d4c6a5b0f1e2d3c4b5a69",
            "2024-03-25T20:00:00.000Z",
        ),
        invitation(h.flat, FLAT_HASH, "2024-03-20T10:00:00.000Z"),
    ]
}

/// A table named [`CAPTURE_TABLE`] (its name is in the captured events) on
/// the lent DynamoDB Local, created fresh; keep the lease with the table.
async fn capture_table() -> (worker_testkit::LocalLease, TestTable) {
    let local = worker_testkit::lease_local().await;
    let table = TestTable::create(
        &local.endpoint_url(),
        CAPTURE_TABLE,
        &nishiki_worker::schema::nishiki(),
    )
    .await;
    (local, table)
}

fn app(table: &TestTable, now: &str) -> App {
    let now: DateTime<Utc> = now.parse().unwrap();
    App::new(
        table.store.clone(),
        Config::for_table(&table.name),
        Arc::new(ManualClock::new(now)),
    )
}

/// The last sequence number in the table's stream so far.
async fn last_sequence(table: &TestTable) -> Option<SequenceNumber> {
    let arn = table.store.stream_arn().await.unwrap().unwrap();
    let client = worker_toolkit::stream_reader::local_client(&table.endpoint);
    let mut tail = StreamTail::new(client, arn, StartAt::TrimHorizon);
    tail.poll()
        .await
        .unwrap()
        .into_iter()
        .filter_map(|(_, c)| c.sequence_number)
        .max()
}

/// A household table, then the service's writes of one scenario, captured
/// with `capture` into `events/stream/<name>.json`.
async fn capture_scenario<F, Fut>(name: &str, redact: bool, writes: F) -> PathBuf
where
    F: FnOnce(Arc<DynamoStore>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (_local, table) = capture_table().await;
    let items = read_snapshot(&events_dir().join("tables/household.json"), KEYS).unwrap();
    load_items(table.store.clone(), items, 4, None)
        .await
        .unwrap();
    let after = last_sequence(&table).await;
    writes(table.store.clone()).await;
    let out = events_dir().join(format!("stream/{name}.json"));
    let target = Target::connect(&table.endpoint, &table.name, &AppTable::of::<Nishiki>()).await;
    let args = CaptureArgs {
        out: out.clone(),
        after_sequence: after,
        since: None,
        shard: None,
        from_sequence: None,
        to_sequence: None,
        redact,
        endpoint: EndpointOpts {
            endpoint_url: table.endpoint.clone(),
            table: vec![table.name.clone()],
            ..Default::default()
        },
        ..Default::default()
    };
    let captured = capture(&target, &args).await.unwrap();
    assert!(captured.records > 0, "{name}: nothing captured");
    out
}

fn edit_json(path: &Path, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
}

async fn put(store: &DynamoStore, item: Item) {
    store.put(item, None).await.unwrap();
}

async fn delete(store: &DynamoStore, key: &ItemKey) {
    store.delete(&key.to_attributes(), None).await.unwrap();
}

fn schedule_files(job: Job, time: &str) {
    let dir = events_dir().join("schedule");
    std::fs::create_dir_all(&dir).unwrap();
    let scheduler = json!({"job": job.as_str(), "scheduledTime": time});
    let rule = json!({
        "version": "0",
        "id": "4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": time,
        "region": "eu-west-1",
        "resources": [format!("arn:aws:events:eu-west-1:123456789012:rule/nishiki-worker-{}", job.as_str())],
        "detail": {}
    });
    for (shape, v) in [("scheduler", scheduler), ("rule", rule)] {
        std::fs::write(
            dir.join(format!("{}.{shape}.json", job.as_str())),
            serde_json::to_string_pretty(&v).unwrap() + "\n",
        )
        .unwrap();
    }
}

#[tokio::test]
#[ignore = "rewrites events/: REGENERATE_FIXTURES=1 cargo test --test it -- --ignored fixtures::regenerate"]
async fn regenerate_fixtures() {
    if std::env::var_os("REGENERATE_FIXTURES").is_none() {
        eprintln!("set REGENERATE_FIXTURES=1 to rewrite events/");
        return;
    }
    let h = household();
    let dir = events_dir();
    std::fs::create_dir_all(dir.join("tables")).unwrap();
    std::fs::create_dir_all(dir.join("stream")).unwrap();

    // The service's items alone (what a table looks like before the worker).
    let service = service_items();
    write_snapshot(&dir.join("tables/service-only.json"), &service, KEYS).unwrap();

    // The household as it is with the worker running: the service's writes
    // one by one, the worker following the stream.
    {
        let (_local, table) = capture_table().await;
        let mut drain = Drain::new(&table).await;
        for i in &service {
            put(&table.store, i.clone()).await;
        }
        drain.run(&app(&table, NOW)).await;
        write_snapshot(
            &dir.join("tables/household.json"),
            &table.snapshot().await,
            KEYS,
        )
        .unwrap();
    }

    // Drift: the service's known inconsistencies, no worker; an audit two
    // days ago recorded them.
    {
        let (_local, table) = capture_table().await;
        let items = read_snapshot(&dir.join("tables/household.json"), KEYS).unwrap();
        load_items(table.store.clone(), items, 4, None)
            .await
            .unwrap();
        let st = &table.store;
        // The office was deleted: its container, its group; memberships and
        // the link stay behind.
        delete(st, &ItemKey::Container(h.office_fridge)).await;
        delete(st, &ItemKey::Group(h.office)).await;
        // Bob deleted his account: his membership stays behind.
        delete(st, &ItemKey::User(h.bob)).await;
        // The freezer was deleted; its link delete was lost.
        delete(st, &ItemKey::Container(h.freezer)).await;
        // Carol left her flat: the group has no member any more.
        delete(
            st,
            &ItemKey::Membership {
                user: h.carol,
                group: h.flat,
            },
        )
        .await;
        app(&table, "2024-03-23T03:00:00Z")
            .run_job(Job::Audit, None)
            .await
            .unwrap();
        write_snapshot(
            &dir.join("tables/drift.json"),
            &table.snapshot().await,
            KEYS,
        )
        .unwrap();
    }

    // Stream fixtures, captured.
    let _ = std::fs::remove_dir_all(dir.join("stream"));
    std::fs::create_dir_all(dir.join("stream")).unwrap();
    capture_scenario("group-deleted", false, |st| async move {
        // The service deletes the containers, the invitation, the group.
        delete(&st, &ItemKey::Container(h.fridge)).await;
        delete(&st, &ItemKey::Container(h.freezer)).await;
        delete(&st, &ItemKey::InvitationLink(h.home)).await;
        delete(&st, &ItemKey::Group(h.home)).await;
    })
    .await;
    let h = household();
    capture_scenario("user-deleted", true, |st| async move {
        // Carol is the only member of her flat: the service deletes it, then her.
        delete(&st, &ItemKey::Container(h.pantry)).await;
        delete(&st, &ItemKey::InvitationLink(h.flat)).await;
        delete(&st, &ItemKey::Group(h.flat)).await;
        delete(&st, &ItemKey::User(h.carol)).await;
    })
    .await;
    let h = household();
    capture_scenario("container-deleted", false, |st| async move {
        // The container item goes; the link delete never happened.
        delete(&st, &ItemKey::Container(h.freezer)).await;
    })
    .await;
    let h = household();
    capture_scenario("last-members-left", false, |st| async move {
        delete(
            &st,
            &ItemKey::Membership {
                user: h.alice,
                group: h.office,
            },
        )
        .await;
        delete(
            &st,
            &ItemKey::Membership {
                user: h.carol,
                group: h.office,
            },
        )
        .await;
    })
    .await;
    let h = household();
    capture_scenario("invitation-created", false, |st| async move {
        put(
            &st,
            invitation(
                h.office,
                "9b74c9897bac770ffc029102a200c5de",
                "2024-03-26T08:59:58.123Z",
            ),
        )
        .await;
    })
    .await;
    let h = household();
    capture_scenario("invitation-renewed", false, |st| async move {
        // A renewal keeps the hash and moves the expiry to now + 24 h.
        put(
            &st,
            invitation(h.flat, FLAT_HASH, "2024-03-26T09:00:00.000Z"),
        )
        .await;
    })
    .await;
    let h = household();
    let ttl = capture_scenario("invitation-ttl-removed", false, |st| async move {
        delete(&st, &ItemKey::InvitationLink(h.flat)).await;
    })
    .await;
    // DynamoDB Local has no TTL process: the removal is marked as the
    // service principal's, exactly as DynamoDB writes TTL deletions.
    edit_json(&ttl, |v| {
        for r in v["Records"].as_array_mut().unwrap() {
            r["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
        }
    });
    let h = household();
    capture_scenario("container-foods-changed", false, |st| async move {
        // The app rewrites the whole container: Milk 1 → 2 l, Eggs eaten,
        // Cheese now expires sooner, Yogurt added.
        let foods = vec![
            food(
                MILK,
                "Milk",
                Some("2"),
                Some("l"),
                "dairy",
                Some("2024-03-26T00:00:00.000Z"),
            ),
            food(RICE, "Rice", None, None, "unselected", None),
            food(
                CHEESE,
                "Cheese",
                Some("200"),
                Some("g"),
                "dairy",
                Some("2024-03-27T00:00:00.000Z"),
            ),
            food(
                YOGURT,
                "Yogurt",
                Some("4"),
                Some("pcs"),
                "dairy",
                Some("2024-03-25T18:00:00.000Z"),
            ),
        ];
        put(&st, container(h.fridge, "Fridge", foods)).await;
    })
    .await;
    let h = household();
    capture_scenario("container-created", false, |st| async move {
        put(
            &st,
            container(
                h.veg_box,
                "Vegetable box",
                vec![food(
                    SPINACH,
                    "Spinach",
                    Some("1"),
                    Some("bag"),
                    "vegetables",
                    Some("2024-03-26T12:00:00.000Z"),
                )],
            ),
        )
        .await;
        put(
            &st,
            item(
                &ItemKey::ContainerLink {
                    group: h.flat,
                    container: h.veg_box,
                },
                vec![("ContainerId", s(h.veg_box.to_string()))],
            ),
        )
        .await;
    })
    .await;
    let h = household();
    let malformed = capture_scenario("malformed-record-in-batch", false, |st| async move {
        put(
            &st,
            container(
                h.pantry,
                "Pantry",
                vec![food(
                    PASTA,
                    "Pasta",
                    Some("250"),
                    Some("g"),
                    "unselected",
                    Some("2024-03-27T12:00:00.000Z"),
                )],
            ),
        )
        .await;
        delete(&st, &ItemKey::Container(h.freezer)).await;
    })
    .await;
    // One record in the middle of the good batch does not decode: a copy of
    // the first with an attribute value that is not DynamoDB JSON.
    edit_json(&malformed, |v| {
        let records = v["Records"].as_array_mut().unwrap();
        let mut bad = records[0].clone();
        bad["eventID"] = json!(format!("{}-malformed", bad["eventID"].as_str().unwrap()));
        bad["dynamodb"]["NewImage"]["ContainerName"] = json!({"STRING": "Pantry"});
        records.insert(1, bad);
    });
    let h = household();
    let untagged = capture_scenario("untagged-empty-list", false, |st| async move {
        // Carol used up the pasta: the pantry is empty.
        put(&st, container(h.pantry, "Pantry", vec![])).await;
    })
    .await;
    // DynamoDB Local drops the type tag of empty lists in stream images.
    edit_json(&untagged, |v| {
        for r in v["Records"].as_array_mut().unwrap() {
            if let Some(foods) = r["dynamodb"]["NewImage"].get_mut("Foods") {
                *foods = json!([]);
            }
        }
    });

    // Schedule ticks, both shapes.
    let _ = std::fs::remove_dir_all(dir.join("schedule"));
    schedule_files(Job::SweepInvitations, "2024-03-25T09:00:00Z");
    schedule_files(Job::Audit, "2024-03-25T03:00:00Z");
    schedule_files(Job::FlagExpiring, "2024-03-26T00:05:00Z");
    schedule_files(Job::Backfill, "2024-03-25T09:00:00Z");

    // The manifest.
    let stream = |name: &str, about: &str, env: &[&str]| Fixture {
        name: name.to_owned(),
        about: about.to_owned(),
        events: vec![format!("stream/{name}.json")],
        snapshot: "tables/household.json".into(),
        now: NOW.into(),
        apply_writes: true,
        env: env.iter().map(|s| s.to_string()).collect(),
        golden: format!("golden/{name}.json"),
    };
    let tick = |job: Job, shape: &str, snapshot: &str, now: &str, about: &str| Fixture {
        name: format!("{}-{shape}", job.as_str()),
        about: about.to_owned(),
        events: vec![format!("schedule/{}.{shape}.json", job.as_str())],
        snapshot: format!("tables/{snapshot}.json"),
        now: now.to_owned(),
        apply_writes: false,
        env: vec![],
        golden: format!("golden/tick-{}.json", job.as_str()),
    };
    let mut fixtures = vec![
        stream(
            "group-deleted",
            "The service deletes the Home group (containers, invitation, group item); the cascade removes the memberships, links and flags it leaves behind.",
            &[],
        ),
        stream(
            "user-deleted",
            "Carol deletes her account: the service deletes her solo group and her user item; the cascade removes her memberships (captured with --redact).",
            &[],
        ),
        stream(
            "container-deleted",
            "The freezer's container item is deleted but its link is not: the link and the container's reminders are removed.",
            &[],
        ),
        stream(
            "last-members-left",
            "Both members leave the Office group: an EmptyGroup suspect is recorded for the audit (never deleted here).",
            &[],
        ),
        stream(
            "invitation-created",
            "A new invitation link; with INVITATION_TTL=on the worker stamps WorkerExpiresAt.",
            &["INVITATION_TTL=on"],
        ),
        stream(
            "invitation-renewed",
            "An expired link is renewed (same hash, expiry moved): with INVITATION_TTL=on the new expiry is stamped.",
            &["INVITATION_TTL=on"],
        ),
        stream(
            "invitation-ttl-removed",
            "DynamoDB TTL removed an expired link (REMOVE by the service principal): counted as a TTL removal, nothing else.",
            &["INVITATION_TTL=on"],
        ),
        stream(
            "container-foods-changed",
            "The fridge is rewritten: a quantity change (no write), a food removed, an expiry moved into the window, a food added.",
            &[],
        ),
        stream(
            "container-created",
            "A new container and its link: reminders from the container, the flag once the link exists.",
            &[],
        ),
        stream(
            "malformed-record-in-batch",
            "A good batch with one record that does not decode: it is skipped, the others are handled.",
            &[],
        ),
        stream(
            "untagged-empty-list",
            "The pantry is emptied; DynamoDB Local wrote Foods as an untagged []: read as an empty list, the pasta's flag and reminders go.",
            &[],
        ),
    ];
    for shape in ["scheduler", "rule"] {
        fixtures.push(tick(
            Job::SweepInvitations,
            shape,
            "household",
            NOW,
            "The invitation sweep deletes the flat's link that expired on 2024-03-20.",
        ));
        fixtures.push(tick(
            Job::Audit,
            shape,
            "drift",
            NOW,
            "The audit repairs the drift it recorded two days earlier.",
        ));
        fixtures.push(tick(
            Job::FlagExpiring,
            shape,
            "household",
            "2024-03-26T00:05:00Z",
            "The daily expiry tick the next morning: the milk expired at midnight.",
        ));
        fixtures.push(tick(
            Job::Backfill,
            shape,
            "service-only",
            NOW,
            "The backfill flags every food of a table the worker never saw.",
        ));
    }
    let manifest = json!({
        "about": "Fixtures replayed by tests/it/fixtures.rs: each entry loads `snapshot`, replays `events` with `--now` (and `--apply-writes`, `--env` as given) and must leave the table equal to `golden`. Regenerate with REGENERATE_FIXTURES=1 cargo test --test it -- --ignored fixtures::regenerate, then UPDATE_GOLDEN=1 cargo test --test it fixtures::.",
        "fixtures": fixtures,
    });
    std::fs::write(
        dir.join("manifest.json"),
        serde_json::to_string_pretty(&manifest).unwrap() + "\n",
    )
    .unwrap();
}
