//! The archive service and the worker at the same time, on DynamoDB Local
//! (issue 29, "decisions that hold at write time").
//!
//! A seeded model of the service ([`Service`]) issues requests from
//! [`TASKS`] tasks at once: files archived (a sixth under the unpadded
//! spelling a lenient writer uses), deleted, archived again, moved to
//! another vault by a rewrite of the copy read before; unzips requested,
//! done (an `Unzipped` item; a quarter followed by a request written late),
//! cancelled, unzipped copies removed. Times come from a small pool (two
//! years, two months, three days), so requests meet on the same files, days
//! and lookup items. Bursts conflict on purpose:
//!
//! - a file deleted while written again (one to three times, under either
//!   spelling): its unlisting is decided from the file being gone;
//! - the files of a day deleted while another file of that day is
//!   archived: the day's removal from its month is decided from the day
//!   being empty;
//! - an unzip requested while its file is removed;
//! - an unzipped copy removed after a random pause, or as soon as the
//!   client sees its file flagged, while the worker finishes its request
//!   (a delete decided from the copy existing);
//! - a file rewritten from a copy read before while it is unzipped;
//! - a file archived again once the client saw it unzipped (the last
//!   request of every task, so that its `Unzipped` item outlives the run).
//!
//! Meanwhile the worker follows the stream in real time ([`Followers`]:
//! batches split by partition key into `factor` lanes handled at once, as a
//! `ParallelizationFactor` of 1 and of 10 does), and the scheduled jobs run
//! beside it ([`scheduler`]: `expire-unzipped` on the service's clock, with
//! a retention of [`RETENTION_HOURS`], and `rebuild-lookup` now and then,
//! as an operator may start it). Then the stream is drained to quiet, the
//! jobs run across their grace periods (the injected clock moved past the
//! retention, then past the stuck threshold; a last `rebuild-lookup` must
//! find nothing to do), and:
//!
//! - **nothing the service still shows as live was unlisted or deleted by
//!   the worker**: every write the worker landed is checked against the
//!   service's own log of writes, each with the time it was in flight
//!   ([`WorkerLog::add`], [`definitely_live`]): no file's entry removed from its
//!   day while the file was live under one of its spellings for the whole
//!   write, no lookup level removed from its parent while it listed
//!   something, no `Unzipping` request deleted while no `Unzipped` item
//!   finishing it (same `KeyName`, created at or after it) could exist, no
//!   `Unzipped` item deleted before its retention or without its
//!   `UnzippedFileExpired` event, and no file written or deleted by the
//!   worker except for its `IsUnzipped` flag;
//! - **every invariant the app documents** holds once the stream is quiet,
//!   and again after the jobs ([`check`]): the date lookup is exactly the
//!   lookup of the files present (canonical lists, no stale or missing
//!   entry); every file was written by the service (the flag's update
//!   never creates one); a file's `IsUnzipped` is true exactly while an
//!   `Unzipped` item of its `KeyName` exists; no `Unzipping` request is
//!   left that an `Unzipped` item finishes; after the jobs, no `Unzipped`
//!   item past its retention, the stuck requests reported, no checkpoint
//!   left.
//!
//! A problem is reported with the timeline of the writes on the keys
//! involved (service and worker, in milliseconds from the run's start).
//!
//! Seed 1 in `scripts/test`, at factor 1 and at factor 10 (one test each,
//! run side by side). Their length is DynamoDB Local's: [`TASKS`] and
//! [`OPS_PER_TASK`] set it. The soak, in the long run, runs seeds 2 and 3
//! (`SOAK_SEEDS=<n>`: 2 to n) at each factor (every seed runs, the problems
//! of all are reported together): `SOAK_SEEDS=<n> cargo test -p
//! archive-worker --test it concurrent:: -- --include-ignored`; each run
//! prints its counts and timings (`--nocapture`).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use archive_worker::config::Settings;
use archive_worker::items::{self, ArchivedFile, Stage, UnzipItem};
use archive_worker::keys::{self, Child, FileTime, ItemKey, Job, LookupKey};
use archive_worker::schema::schema;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, NaiveDate, Utc};
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::Value;
use support::{expected_lookup, key_name, lookup_items};
use worker_engine::RecordingPublisher;
use worker_engine::Worker;
use worker_engine::clock::ManualClock;
use worker_engine::item::Item;
use worker_engine::schedule::JobReport;
use worker_engine::store::GuardedOp;
use worker_engine::store::{Expr, Key, Store, WriteOutcome};
use worker_testkit::TestTable;
use worker_testkit::follow::{CI_SEED, Followers, Mapping, Tail, quiet, service_tasks, soak_seeds};
use worker_testkit::written::{Kind, Landed, definitely_absent, definitely_live};
use worker_toolkit::layers::{Answer, Call, RecordingStore};

/// Service tasks in flight.
const TASKS: usize = 8;
/// Requests per task.
const OPS_PER_TASK: usize = 14;
/// The service's clock moves this many seconds per unzip item it creates.
const STEP: i64 = 300;
/// `UNZIPPED_RETENTION_HOURS` and `UNZIP_STUCK_HOURS` of the run: short,
/// so that unzipped copies expire while the service still works on them.
const RETENTION_HOURS: u64 = 3;
const STUCK_HOURS: u64 = 6;
const BUS: &str = "archive-bus";

fn t0() -> DateTime<Utc> {
    support::now()
}

fn at(epoch: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(epoch, 0).expect("a time")
}

// ---------------------------------------------------------------------------
// Writes on one clock: the service's and the worker's
// ---------------------------------------------------------------------------

/// An item's key as written: `(PK, SK)`. A file has one per spelling.
type Raw = (String, String);

fn raw(item: &Item) -> Raw {
    let s = |n: &str| match item.get(n) {
        Some(AttributeValue::S(s) | AttributeValue::N(s)) => s.clone(),
        _ => String::new(),
    };
    (s(keys::PK), s(keys::SK))
}

/// A write that landed, with the time it was in flight.
#[derive(Debug, Clone)]
struct Write {
    key: Raw,
    kind: Kind,
    start: Instant,
    end: Instant,
    who: &'static str,
    note: String,
}

impl Landed for Write {
    fn span(&self) -> (Kind, Instant, Instant) {
        (self.kind, self.start, self.end)
    }
}

/// An entry the worker removed from a lookup item's `SavedDate`.
#[derive(Debug, Clone)]
struct Removal {
    parent: LookupKey,
    child: Child,
    start: Instant,
    end: Instant,
}

/// An `Unzipped` or `Unzipping` item the worker deleted.
#[derive(Debug, Clone)]
struct UnzipDelete {
    stage: Stage,
    created: i64,
    /// The `KeyName` the delete was conditional on.
    key_name: Option<String>,
    /// The injected clock when it was sent.
    now: DateTime<Utc>,
    start: Instant,
    end: Instant,
}

/// What the worker wrote, as it landed.
#[derive(Default)]
struct WorkerLog {
    /// Every write that landed (lookup items: Put while it lists something).
    writes: Mutex<Vec<Write>>,
    removals: Mutex<Vec<Removal>>,
    unzip_deletes: Mutex<Vec<UnzipDelete>>,
    /// Writes the worker must never make.
    never: Mutex<Vec<String>>,
    /// Guarded writes a guard stopped (the decision went stale).
    withheld: AtomicUsize,
    /// Conditional writes whose own condition failed.
    refused: AtomicUsize,
    flags: AtomicUsize,
}

/// One write of a request, as the worker meant it.
enum Planned {
    Lookup {
        key: LookupKey,
        /// The list it was read with (its condition); `None`: unconditional.
        before: Option<Vec<String>>,
        /// The list written (empty: deleted).
        after: Vec<String>,
    },
    UnzipDelete {
        stage: Stage,
        created: i64,
        key_name: Option<String>,
    },
    Flag {
        key: Raw,
        value: Option<bool>,
    },
    Checkpoint,
    Never(String),
}

fn list_of(v: Option<&AttributeValue>) -> Vec<String> {
    match v {
        Some(AttributeValue::L(values)) => values
            .iter()
            .filter_map(|v| v.as_s().ok().cloned())
            .collect(),
        _ => Vec::new(),
    }
}

/// The `SavedDate` a lookup write was read with, from its condition
/// (`#sd = :seen`, or absent / without a list).
fn seen_of(condition: Option<&Expr>) -> Option<Vec<String>> {
    let c = condition?;
    match c.values.get(":seen") {
        Some(v) => Some(list_of(Some(v))),
        None if c.text.contains("attribute_not_exists") => Some(Vec::new()),
        None => None,
    }
}

fn plan(op: &GuardedOp) -> Planned {
    let target = op.target();
    let condition = op.condition();
    match ItemKey::from_item(target) {
        Ok(ItemKey::Checkpoint(_)) => Planned::Checkpoint,
        Ok(ItemKey::Lookup(key)) => Planned::Lookup {
            key,
            before: seen_of(condition),
            after: match op {
                GuardedOp::Put { item, .. } => list_of(item.get(keys::SAVED_DATE)),
                GuardedOp::Delete { .. } => Vec::new(),
                GuardedOp::Update { update, .. } => list_of(update.values.get(":list")),
            },
        },
        Ok(ItemKey::Unzipped { created } | ItemKey::Unzipping { created })
            if matches!(op, GuardedOp::Delete { .. }) =>
        {
            let stage = match UnzipItem::from_item(target) {
                Some(u) => u.stage,
                None => unreachable!("an unzip key"),
            };
            Planned::UnzipDelete {
                stage,
                created,
                key_name: condition
                    .and_then(|c| c.values.get(":kn"))
                    .and_then(|v| v.as_s().ok().cloned()),
            }
        }
        Ok(ItemKey::File(_)) => match op {
            GuardedOp::Update { update, .. }
                if update.names.values().all(|n| n == keys::IS_UNZIPPED) =>
            {
                Planned::Flag {
                    key: raw(target),
                    value: update
                        .values
                        .values()
                        .next()
                        .and_then(|v| v.as_bool().ok().copied()),
                }
            }
            other => Planned::Never(format!("a write of a file other than its flag: {other:?}")),
        },
        _ => Planned::Never(format!("a write the worker never makes: {op:?}")),
    }
}

impl WorkerLog {
    /// Log the writes of the worker's recorded `calls` that landed, each
    /// with the time it was in flight and the injected clock when it was
    /// sent.
    fn add(&self, calls: &[Call]) {
        for call in calls {
            let ops = call.asked.ops();
            if ops.is_empty() {
                continue;
            }
            let landed = match &call.answer {
                Ok(Answer::Written(WriteOutcome::Applied) | Answer::Batch(_)) => ops.len(),
                Ok(Answer::Written(WriteOutcome::ConditionFailed)) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    0
                }
                Ok(Answer::Guarded(r)) => {
                    if r.withheld > 0 {
                        self.withheld.fetch_add(1, Ordering::Relaxed);
                    }
                    self.refused.fetch_add(r.refused, Ordering::Relaxed);
                    // The archive's guarded writes are one op each (a shared
                    // transaction lands whole or is sent again op by op).
                    if r.applied == ops.len() {
                        ops.len()
                    } else if ops.len() == 1 {
                        0
                    } else {
                        r.applied
                    }
                }
                _ => 0,
            };
            for op in ops.iter().take(landed) {
                self.landed(op, call.at, call.sent, call.answered);
            }
        }
    }

    /// Log `op`, a write that landed: in flight from `start` to `end`, sent
    /// when the injected clock said `now`.
    fn landed(&self, op: &GuardedOp, now: DateTime<Utc>, start: Instant, end: Instant) {
        let log = self;
        let write = |key: Raw, kind: Kind, note: String| Write {
            key,
            kind,
            start,
            end,
            who: "worker",
            note,
        };
        match plan(op) {
            Planned::Checkpoint => {}
            Planned::Never(what) => log.never.lock().unwrap().push(what),
            Planned::Lookup { key, before, after } => {
                let Some(before) = before else {
                    log.never.lock().unwrap().push(format!(
                        "lookup item {key} written without the list it was read with"
                    ));
                    return;
                };
                let kept: BTreeSet<&String> = after.iter().collect();
                for entry in before.iter().filter(|e| !kept.contains(e)) {
                    if let Ok(child) = key.child(entry) {
                        log.removals.lock().unwrap().push(Removal {
                            parent: key,
                            child,
                            start,
                            end,
                        });
                    }
                }
                let kind = if after.is_empty() {
                    Kind::Delete
                } else {
                    Kind::Put
                };
                log.writes.lock().unwrap().push(write(
                    raw(&key.key()),
                    kind,
                    format!("{before:?} -> {after:?}"),
                ));
            }
            Planned::UnzipDelete {
                stage,
                created,
                key_name,
            } => {
                log.writes.lock().unwrap().push(write(
                    raw(op.target()),
                    Kind::Delete,
                    format!("delete if KeyName = {key_name:?}"),
                ));
                log.unzip_deletes.lock().unwrap().push(UnzipDelete {
                    stage,
                    created,
                    key_name,
                    now,
                    start,
                    end,
                });
            }
            Planned::Flag { key, value } => {
                log.flags.fetch_add(1, Ordering::Relaxed);
                log.writes.lock().unwrap().push(write(
                    key,
                    Kind::Put,
                    format!("IsUnzipped = {value:?}"),
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------
// The service model
// ---------------------------------------------------------------------------

/// The pool of file times: two years, two months, three days, six times a
/// day (every one with an unpadded spelling of its own).
fn pool_time(rng: &mut StdRng) -> FileTime {
    let date = NaiveDate::from_ymd_opt(
        [2023, 2024][rng.random_range(0..2)],
        rng.random_range(1..=2),
        rng.random_range(1..=3),
    )
    .expect("a date");
    on_day(date, rng)
}

fn on_day(date: NaiveDate, rng: &mut StdRng) -> FileTime {
    FileTime::new(date, rng.random_range(0..2), rng.random_range(0..3), 0).expect("a time")
}

/// The key a file is written under: canonical, or unpadded.
fn spelling(t: FileTime, unpadded: bool) -> Key {
    let spellings = t.spellings();
    spellings[usize::from(unpadded).min(spellings.len() - 1)].clone()
}

fn file_item(t: FileTime, key: &Key, vault: &str) -> Item {
    let mut item = ArchivedFile {
        time: t,
        key_name: Some(key_name(t)),
        is_unzipped: Some(false),
        vault: Some(vault.to_owned()),
    }
    .to_item();
    item.extend(key.clone());
    item
}

fn unzip_item(stage: Stage, created: i64, key_name: &str) -> Item {
    UnzipItem {
        stage,
        created,
        key_name: Some(key_name.to_owned()),
    }
    .to_item()
}

fn pause(ms: u64) -> tokio::time::Sleep {
    tokio::time::sleep(Duration::from_millis(ms))
}

struct Service {
    store: Arc<dyn Store>,
    started: Instant,
    log: Mutex<Vec<Write>>,
    /// The service's clock: `base + seq * STEP`.
    base: i64,
    seq: AtomicI64,
    /// `CreatedDate`s taken (both unzip partitions).
    used: Mutex<BTreeSet<i64>>,
    /// What the service believes it has (to pick its next targets only;
    /// the checks read the table and the logs).
    files: Mutex<BTreeMap<FileTime, Key>>,
    requests: Mutex<Vec<(i64, String)>>,
    unzipped: Mutex<Vec<(i64, String)>>,
    /// The `KeyName` of every `Unzipped` item the service wrote.
    unzipped_names: Mutex<BTreeMap<i64, String>>,
    ops: Mutex<BTreeMap<&'static str, usize>>,
}

impl Service {
    fn new(store: Arc<dyn Store>, started: Instant) -> Self {
        Service {
            store,
            started,
            log: Mutex::default(),
            base: t0().timestamp(),
            seq: AtomicI64::new(0),
            used: Mutex::default(),
            files: Mutex::default(),
            requests: Mutex::default(),
            unzipped: Mutex::default(),
            unzipped_names: Mutex::default(),
            ops: Mutex::default(),
        }
    }

    /// The service's time now.
    fn now(&self) -> i64 {
        self.base + self.seq.load(Ordering::SeqCst) * STEP
    }

    fn count(&self, op: &'static str) {
        *self.ops.lock().unwrap().entry(op).or_default() += 1;
    }

    /// A fresh `CreatedDate`, `back` steps before the service's time.
    fn created(&self, rng: &mut StdRng, back: i64) -> i64 {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        loop {
            let c = self.base + (seq - back) * STEP + rng.random_range(0..STEP);
            if self.used.lock().unwrap().insert(c) {
                return c;
            }
        }
    }

    fn logged(&self, key: Raw, kind: Kind, start: Instant, note: String) {
        self.log.lock().unwrap().push(Write {
            key,
            kind,
            start,
            end: Instant::now(),
            who: "service",
            note,
        });
    }

    async fn put(&self, item: Item) {
        let note = match items::is_unzipped(&item) {
            Some(flag) => format!("IsUnzipped = {flag}"),
            None => items::key_name(&item).unwrap_or_default().to_owned(),
        };
        let key = raw(&item);
        let start = Instant::now();
        self.store.put(item, None).await.expect("service put");
        self.logged(key, Kind::Put, start, note);
    }

    async fn delete(&self, key: &Key) {
        let start = Instant::now();
        self.store.delete(key, None).await.expect("service delete");
        self.logged(raw(key), Kind::Delete, start, String::new());
    }

    fn some_file(&self, rng: &mut StdRng) -> Option<(FileTime, Key)> {
        let files = self.files.lock().unwrap();
        let n = files.len();
        (n > 0).then(|| {
            let (t, k) = files.iter().nth(rng.random_range(0..n)).expect("a file");
            (*t, k.clone())
        })
    }

    fn pick<T: Clone>(list: &Mutex<Vec<T>>, rng: &mut StdRng) -> Option<T> {
        let list = list.lock().unwrap();
        (!list.is_empty()).then(|| list[rng.random_range(0..list.len())].clone())
    }

    async fn archive(&self, t: FileTime, unpadded: bool) {
        let key = spelling(t, unpadded);
        self.put(file_item(t, &key, "vault-1")).await;
        self.files.lock().unwrap().insert(t, key);
    }

    async fn delete_file(&self, t: FileTime, key: &Key) {
        self.delete(key).await;
        let mut files = self.files.lock().unwrap();
        if files.get(&t) == Some(key) {
            files.remove(&t);
        }
    }

    /// Move a file to the other vault: the copy read, written back after
    /// `ms` with its `Vault` changed (and the rest as it was read).
    async fn rewrite_from_copy(&self, key: &Key, ms: u64) {
        let read = self.store.get(key, true).await.expect("service get");
        let Some(mut item) = read else { return };
        pause(ms).await;
        let vault = match items::string(&item, keys::VAULT) {
            Some("vault-1") => "vault-2",
            _ => "vault-1",
        };
        item.insert(keys::VAULT.into(), AttributeValue::S(vault.into()));
        self.put(item).await;
    }

    async fn request(&self, created: i64, k: &str) {
        self.put(unzip_item(Stage::Unzipping, created, k)).await;
        self.requests.lock().unwrap().push((created, k.to_owned()));
    }

    async fn unzip_done(&self, created: i64, k: &str) {
        self.unzipped_names
            .lock()
            .unwrap()
            .insert(created, k.to_owned());
        self.put(unzip_item(Stage::Unzipped, created, k)).await;
        self.unzipped.lock().unwrap().push((created, k.to_owned()));
    }

    async fn remove_unzipped(&self, created: i64) {
        self.delete(&ItemKey::Unzipped { created }.key()).await;
        self.unzipped.lock().unwrap().retain(|(c, _)| *c != created);
    }

    async fn cancel(&self, created: i64) {
        self.delete(&ItemKey::Unzipping { created }.key()).await;
        self.requests.lock().unwrap().retain(|(c, _)| *c != created);
    }

    /// A file to work on: one the service has, else a new one.
    async fn a_file(&self, rng: &mut StdRng) -> (FileTime, Key) {
        if let Some(f) = self.some_file(rng) {
            return f;
        }
        let t = pool_time(rng);
        self.archive(t, false).await;
        (t, spelling(t, false))
    }

    /// One request (or burst) of the service, chosen by `rng`.
    async fn step(&self, rng: &mut StdRng) {
        let dice = rng.random_range(0..100);
        match dice {
            0..=25 => {
                let t = pool_time(rng);
                let unpadded = rng.random_bool(0.15);
                self.count("archive a file");
                self.archive(t, unpadded).await;
            }
            26..=33 => {
                let (t, key) = self.a_file(rng).await;
                self.count("delete a file");
                self.delete_file(t, &key).await;
            }
            34..=43 => {
                let t = match self.some_file(rng) {
                    Some((t, _)) if rng.random_bool(0.9) => t,
                    _ => pool_time(rng),
                };
                let created = self.created(rng, 0);
                self.count("request an unzip");
                self.request(created, &key_name(t)).await;
            }
            44..=53 => {
                let k = match Self::pick(&self.requests, rng) {
                    Some((_, k)) => k,
                    None => key_name(self.a_file(rng).await.0),
                };
                let created = self.created(rng, 0);
                self.count("unzip done");
                self.unzip_done(created, &k).await;
                if rng.random_bool(0.25) {
                    // A request written late: created before the unzip it
                    // led to.
                    let late = self.created(rng, 2);
                    self.count("request written late");
                    self.request(late, &k).await;
                }
            }
            54..=57 => {
                if let Some((created, _)) = Self::pick(&self.unzipped, rng) {
                    self.count("remove an unzipped copy");
                    self.remove_unzipped(created).await;
                }
            }
            58..=60 => {
                if let Some((created, _)) = Self::pick(&self.requests, rng) {
                    self.count("cancel a request");
                    self.cancel(created).await;
                }
            }
            61..=66 => {
                let (_, key) = self.a_file(rng).await;
                let ms = rng.random_range(0..30);
                self.count("move a file to another vault");
                self.rewrite_from_copy(&key, ms).await;
            }
            67..=74 => {
                // A file deleted while written again, one to three times,
                // sometimes under its other spelling.
                let (t, key) = self.a_file(rng).await;
                let again = spelling(t, rng.random_bool(0.3));
                let cycles = rng.random_range(1..=3);
                let pauses: Vec<u64> = (0..2 * cycles).map(|_| rng.random_range(0..300)).collect();
                self.count("burst: file deleted while written again");
                for i in 0..cycles {
                    tokio::join!(self.delete(&key), async {
                        pause(pauses[2 * i]).await;
                        self.put(file_item(t, &again, "vault-1")).await;
                    });
                    pause(pauses[2 * i + 1]).await;
                }
                self.files.lock().unwrap().insert(t, again);
            }
            75..=80 => {
                // The files of a day deleted while another file of that day
                // is archived.
                let (t, _) = self.a_file(rng).await;
                let day: Vec<(FileTime, Key)> = self
                    .files
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(f, _)| f.date() == t.date())
                    .map(|(f, k)| (*f, k.clone()))
                    .collect();
                let new = on_day(t.date(), rng);
                let ms = rng.random_range(0..300);
                self.count("burst: a day emptied while a file is archived on it");
                tokio::join!(
                    futures::future::join_all(
                        day.iter()
                            .filter(|(f, _)| *f != new)
                            .map(|(f, k)| self.delete_file(*f, k))
                    ),
                    async {
                        pause(ms).await;
                        self.archive(new, false).await;
                    }
                );
            }
            81..=86 => {
                // An unzip requested while its file is removed.
                let (t, key) = self.a_file(rng).await;
                let created = self.created(rng, 0);
                let k = key_name(t);
                self.count("burst: unzip requested while its file is removed");
                tokio::join!(self.request(created, &k), self.delete_file(t, &key));
            }
            87..=93 => {
                // An unzipped copy removed while the worker finishes its
                // request: after a random pause, or as soon as the client
                // sees the file unzipped (the worker flags the file right
                // before it deletes the request).
                let (t, key) = self.a_file(rng).await;
                let k = key_name(t);
                let request = self.created(rng, 0);
                let created = self.created(rng, 0);
                let ms = rng.random_range(0..400);
                let when_seen = rng.random_bool(0.5);
                self.count("burst: unzipped copy removed while its request is finished");
                self.request(request, &k).await;
                self.unzip_done(created, &k).await;
                if when_seen {
                    self.until_seen_unzipped(&key, 10).await;
                } else {
                    pause(ms).await;
                }
                self.remove_unzipped(created).await;
            }
            _ => {
                // A file rewritten from a copy read before while it is
                // unzipped.
                let (t, key) = self.a_file(rng).await;
                let created = self.created(rng, 0);
                let ms = rng.random_range(0..1_000);
                let k = key_name(t);
                self.count("burst: file rewritten from a copy while unzipped");
                tokio::join!(
                    self.rewrite_from_copy(&key, ms),
                    self.unzip_done(created, &k)
                );
            }
        }
    }

    /// The client reading the file at `key` every `every_ms` until it
    /// shows `IsUnzipped = true` (at most 5 s); whether it did.
    async fn until_seen_unzipped(&self, key: &Key, every_ms: u64) -> bool {
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            let read = self.store.get(key, true).await.expect("service get");
            match read.as_ref().and_then(items::is_unzipped) {
                Some(true) => return true,
                Some(false) => pause(every_ms).await,
                None => return false,
            }
        }
        false
    }

    /// A file archived again (a retried upload, sometimes after a delete,
    /// sometimes under its other spelling) once the client saw it unzipped:
    /// the service writes `IsUnzipped = false` while an `Unzipped` item of
    /// its `KeyName` exists.
    async fn archived_again_once_unzipped(&self, rng: &mut StdRng) {
        let (t, key) = self.a_file(rng).await;
        let created = self.created(rng, 0);
        let ms = rng.random_range(0..200);
        let delete_first = rng.random_bool(0.5);
        let unpadded = rng.random_bool(0.2);
        self.count("burst: file archived again once unzipped");
        self.unzip_done(created, &key_name(t)).await;
        if self.until_seen_unzipped(&key, 50).await {
            self.count("(the client saw it unzipped)");
        }
        pause(ms).await;
        if delete_first {
            self.delete_file(t, &key).await;
        }
        self.archive(t, unpadded).await;
    }

    /// The write on `key` (either side's) that completed last.
    fn last_write(&self, worker: &WorkerLog, key: &Raw) -> Option<Write> {
        let service = self.log.lock().unwrap();
        let ours = worker.writes.lock().unwrap();
        service
            .iter()
            .chain(ours.iter())
            .filter(|w| &w.key == key)
            .max_by_key(|w| w.end)
            .cloned()
    }

    /// The writes of both sides on `keys`, in time order (for a problem's
    /// report).
    fn timeline(&self, worker: &WorkerLog, keys: &[Raw]) -> String {
        let service = self.log.lock().unwrap();
        let ours = worker.writes.lock().unwrap();
        let mut all: Vec<&Write> = service
            .iter()
            .chain(ours.iter())
            .filter(|w| keys.contains(&w.key))
            .collect();
        all.sort_by_key(|w| w.start);
        let ms = |i: Instant| i.duration_since(self.started).as_secs_f64() * 1000.0;
        all.iter()
            .rev()
            .take(16)
            .rev()
            .map(|w| {
                format!(
                    "\n    {:>9.1}..{:>9.1} ms {:<7} {:?} {}/{} {}",
                    ms(w.start),
                    ms(w.end),
                    w.who,
                    w.kind,
                    w.key.0,
                    w.key.1,
                    w.note
                )
            })
            .collect()
    }
}

// ---------------------------------------------------------------------------
// The scheduled jobs
// ---------------------------------------------------------------------------

/// Runs of the scheduled jobs.
#[derive(Debug, Default)]
struct Runs {
    expire: usize,
    rebuild: usize,
    /// Runs that failed (a transient error) and were run again.
    failed: usize,
}

/// One job until a run completes (a failed run is run again, as Lambda
/// retries a failed asynchronous invocation).
async fn run_job(worker: &Worker<Job>, job: Job, runs: &mut Runs) -> JobReport<Job> {
    for _ in 0..30 {
        match worker.run_job(job, None).await {
            Ok(report) if report.complete => {
                match job {
                    Job::ExpireUnzipped => runs.expire += 1,
                    Job::RebuildLookup => runs.rebuild += 1,
                }
                return report;
            }
            Ok(_) => {}
            Err(e) => {
                runs.failed += 1;
                eprintln!("{job} failed ({e}); again");
                pause(20).await;
            }
        }
    }
    panic!("{job} kept failing");
}

/// The jobs beside the service: `expire-unzipped` on the service's clock,
/// and every third time a `rebuild-lookup`, until stopped.
async fn scheduler(
    worker: Arc<Worker<Job>>,
    clock: ManualClock,
    service: Arc<Service>,
    stop: Arc<AtomicBool>,
) -> Runs {
    let mut runs = Runs::default();
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        pause(200).await;
        clock.set(at(service.now()));
        run_job(&worker, Job::ExpireUnzipped, &mut runs).await;
        if n % 3 == 1 {
            run_job(&worker, Job::RebuildLookup, &mut runs).await;
        }
        n += 1;
    }
    runs
}

// ---------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------

/// The table as the checks read it.
struct State {
    /// Files by time, each with the keys it is stored under.
    files: BTreeMap<FileTime, Vec<(Raw, ArchivedFile)>>,
    unzipped: BTreeMap<i64, Option<String>>,
    unzipping: BTreeMap<i64, Option<String>>,
    checkpoints: usize,
}

async fn state(table: &TestTable) -> State {
    let mut s = State {
        files: BTreeMap::new(),
        unzipped: BTreeMap::new(),
        unzipping: BTreeMap::new(),
        checkpoints: 0,
    };
    for item in table.snapshot().await {
        match ItemKey::from_item(&item) {
            Ok(ItemKey::File(t)) => s
                .files
                .entry(t)
                .or_default()
                .push((raw(&item), ArchivedFile::from_item(&item).expect("a file"))),
            Ok(ItemKey::Unzipped { created }) => {
                s.unzipped
                    .insert(created, items::key_name(&item).map(str::to_owned));
            }
            Ok(ItemKey::Unzipping { created }) => {
                s.unzipping
                    .insert(created, items::key_name(&item).map(str::to_owned));
            }
            Ok(ItemKey::Checkpoint(_)) => s.checkpoints += 1,
            _ => {}
        }
    }
    s
}

fn unzip_raw(stage: Stage, created: i64) -> Raw {
    let key = match stage {
        Stage::Unzipped => ItemKey::Unzipped { created },
        Stage::Unzipping => ItemKey::Unzipping { created },
    };
    raw(&key.key())
}

/// The invariants the app documents, on the table as it is (`when`: the
/// point of the run, for the report).
async fn check(
    table: &TestTable,
    service: &Service,
    worker: &WorkerLog,
    when: &str,
) -> (State, Vec<String>) {
    let mut problems = Vec::new();
    let s = state(table).await;

    // The date lookup is exactly the lookup of the files present.
    let want = expected_lookup(s.files.keys().copied());
    let have = lookup_items(table.store.as_ref()).await;
    for pk in want.keys().chain(have.keys()).collect::<BTreeSet<_>>() {
        if want.get(pk) != have.get(pk) {
            let mut keys = vec![(pk.clone(), "0".to_owned())];
            // The files the difference is about.
            for (t, stored) in &s.files {
                if t.pk().starts_with(pk.as_str()) || pk == "root" {
                    keys.extend(stored.iter().map(|(r, _)| r.clone()));
                }
            }
            problems.push(format!(
                "{when}: lookup {pk} lists {:?}, the files make {:?}{}",
                have.get(pk),
                want.get(pk),
                service.timeline(worker, &keys)
            ));
        }
    }

    // Every file was written by the service; its flag is true exactly while
    // an Unzipped item of its KeyName exists.
    let unzipped_names: BTreeSet<&str> =
        s.unzipped.values().flatten().map(String::as_str).collect();
    for stored in s.files.values() {
        for (r, f) in stored {
            let (Some(k), Some(_)) = (&f.key_name, &f.vault) else {
                problems.push(format!(
                    "{when}: file {r:?} not written by the service: {f:?}"
                ));
                continue;
            };
            let want = unzipped_names.contains(k.as_str());
            if f.is_unzipped.unwrap_or(false) != want {
                let mut keys = vec![r.clone()];
                for (c, _) in s.unzipped.iter().filter(|(_, n)| n.as_deref() == Some(k)) {
                    keys.push(unzip_raw(Stage::Unzipped, *c));
                }
                for (c, n) in service.unzipped_names.lock().unwrap().iter() {
                    if n == k {
                        keys.push(unzip_raw(Stage::Unzipped, *c));
                    }
                }
                let why = match service.last_write(worker, r) {
                    Some(w) if w.who == "service" => {
                        "the service wrote the file last, and no record reconciled it since \
                         (the unzip lifecycle follows Unzipped and Unzipping records, not files)"
                    }
                    Some(_) => {
                        "the worker wrote the flag last, decided from Unzipped items that \
                         changed before it landed (the flag update has no guard on them)"
                    }
                    None => "nobody wrote the file",
                };
                problems.push(format!(
                    "{when}: file {}/{} has IsUnzipped {:?}, but an Unzipped item of its KeyName {}: {why}{}",
                    r.0,
                    r.1,
                    f.is_unzipped,
                    if want { "exists" } else { "does not exist" },
                    service.timeline(worker, &keys)
                ));
            }
        }
    }

    // No request left that an Unzipped item finishes.
    for (c, k) in &s.unzipping {
        let finisher = s
            .unzipped
            .iter()
            .find(|(u, n)| *u >= c && n.is_some() && *n == k);
        if let Some((u, _)) = finisher {
            problems.push(format!(
                "{when}: request Unzipping/{c} ({k:?}) left, finished by Unzipped/{u}{}",
                service.timeline(
                    worker,
                    &[
                        unzip_raw(Stage::Unzipping, *c),
                        unzip_raw(Stage::Unzipped, *u)
                    ]
                )
            ));
        }
    }
    (s, problems)
}

/// Every write the worker landed, against the service's log: nothing the
/// service still showed as live was unlisted or deleted.
fn check_log(service: &Service, worker: &WorkerLog, publisher: &RecordingPublisher) -> Vec<String> {
    let mut problems: Vec<String> = worker
        .never
        .lock()
        .unwrap()
        .iter()
        .map(|w| format!("the worker made {w}"))
        .collect();
    let service_log = service.log.lock().unwrap().clone();
    let worker_writes = worker.writes.lock().unwrap().clone();
    let of = |log: &[Write], key: &Raw| -> Vec<Write> {
        log.iter().filter(|w| &w.key == key).cloned().collect()
    };

    for r in worker.removals.lock().unwrap().iter() {
        let (live, keys) = match r.child {
            Child::File(t) => {
                let keys: Vec<Raw> = t.spellings().iter().map(raw).collect();
                let live = keys.iter().any(|k| {
                    let writes = of(&service_log, k);
                    definitely_live(&writes.iter().collect::<Vec<_>>(), r.start, r.end)
                });
                (live, keys)
            }
            Child::Lookup(k) => {
                let key = raw(&k.key());
                let writes = of(&worker_writes, &key);
                let live = definitely_live(&writes.iter().collect::<Vec<_>>(), r.start, r.end);
                (live, vec![key])
            }
        };
        if live {
            let mut keys = keys;
            keys.push(raw(&r.parent.key()));
            problems.push(format!(
                "{} removed from lookup {} while it was live{}",
                match r.child {
                    Child::File(t) => format!("file {t}"),
                    Child::Lookup(k) => format!("lookup item {k}"),
                },
                r.parent,
                service.timeline(worker, &keys)
            ));
        }
    }

    let names = service.unzipped_names.lock().unwrap().clone();
    let announced: BTreeSet<(String, i64)> = publisher
        .sent()
        .iter()
        .filter_map(|e| {
            let d: Value = serde_json::from_str(&e.detail).ok()?;
            Some((
                d["keyName"].as_str()?.to_owned(),
                d["createdDate"].as_i64()?,
            ))
        })
        .collect();
    let all: Vec<Write> = service_log
        .iter()
        .chain(worker_writes.iter())
        .cloned()
        .collect();
    for d in worker.unzip_deletes.lock().unwrap().iter() {
        match d.stage {
            Stage::Unzipping => {
                // Finished by an Unzipped item of its KeyName created at or
                // after it, which must have possibly existed meanwhile.
                let finishers: Vec<i64> = names
                    .iter()
                    .filter(|(c, n)| **c >= d.created && Some(*n) == d.key_name.as_ref())
                    .map(|(c, _)| *c)
                    .collect();
                let possible = finishers.iter().any(|c| {
                    let writes = of(&all, &unzip_raw(Stage::Unzipped, *c));
                    !definitely_absent(&writes.iter().collect::<Vec<_>>(), d.start, d.end)
                });
                if !possible {
                    let mut keys = vec![unzip_raw(Stage::Unzipping, d.created)];
                    keys.extend(finishers.iter().map(|c| unzip_raw(Stage::Unzipped, *c)));
                    problems.push(format!(
                        "request Unzipping/{} ({:?}) deleted while no Unzipped item finishing it existed{}",
                        d.created,
                        d.key_name,
                        service.timeline(worker, &keys)
                    ));
                }
            }
            Stage::Unzipped => {
                let cutoff = d.now.timestamp() - RETENTION_HOURS as i64 * 3600;
                if d.created >= cutoff {
                    problems.push(format!(
                        "Unzipped/{} deleted at {} before its retention",
                        d.created, d.now
                    ));
                }
                let k = d.key_name.clone().unwrap_or_default();
                if !announced.contains(&(k.clone(), d.created)) {
                    problems.push(format!(
                        "Unzipped/{} ({k}) deleted without its UnzippedFileExpired event",
                        d.created
                    ));
                }
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

/// One seed at one parallelization factor: its problems, if any.
async fn run(seed: u64, factor: usize) -> Result<(), String> {
    let started = Instant::now();
    let table = TestTable::with_schema(&schema()).await;
    let service = Arc::new(Service::new(table.store.clone(), started));
    let clock = ManualClock::new(t0());
    let log = Arc::new(WorkerLog::default());
    let recording =
        Arc::new(RecordingStore::new(table.store.clone()).with_clock(Arc::new(clock.clone())));
    let publisher = Arc::new(RecordingPublisher::default());
    let mut settings = Settings::for_table(&table.name);
    settings.retention_hours = RETENTION_HOURS;
    settings.stuck_hours = STUCK_HOURS;
    settings.event_bus = Some(BUS.into());
    let worker = Arc::new(archive_worker::app::APP.table_worker(
        recording.clone(),
        settings,
        publisher.clone(),
        Arc::new(clock.clone()),
        archive_worker::app::SHARING,
    ));
    let mapping = Mapping::new(factor).idle(Duration::from_millis(20));
    let followers = Followers::start(
        vec![Tail::new(&table).await],
        worker.clone(),
        mapping.clone(),
    );
    let stop_jobs = Arc::new(AtomicBool::new(false));
    let jobs = tokio::spawn(scheduler(
        worker.clone(),
        clock.clone(),
        service.clone(),
        stop_jobs.clone(),
    ));

    service_tasks(TASKS, seed, |_, mut rng| {
        let service = service.clone();
        async move {
            for _ in 0..OPS_PER_TASK {
                service.step(&mut rng).await;
            }
            // The last request: its unzipped copy outlives the run.
            service.archived_again_once_unzipped(&mut rng).await;
        }
    })
    .await;
    let service_time = started.elapsed();
    stop_jobs.store(true, Ordering::SeqCst);
    let mut runs = jobs.await.expect("the scheduler");
    let (mut tails, mut stats) = followers.stop().await;
    stats.add(quiet(&mut tails, worker.as_ref(), &mapping).await);
    let drained = started.elapsed();

    log.add(&recording.take());
    let (quiet_state, mut problems) = check(&table, &service, &log, "once quiet").await;

    // The jobs across their grace periods: past the retention of every
    // unzipped copy, then past the stuck threshold of every request; each
    // followed by the stream to quiet. A last rebuild finds nothing to do.
    let end = service.now() + STEP;
    clock.set(at(end + RETENTION_HOURS as i64 * 3600));
    run_job(&worker, Job::ExpireUnzipped, &mut runs).await;
    stats.add(quiet(&mut tails, worker.as_ref(), &mapping).await);
    clock.set(at(end + STUCK_HOURS as i64 * 3600));
    let expire = run_job(&worker, Job::ExpireUnzipped, &mut runs).await;
    stats.add(quiet(&mut tails, worker.as_ref(), &mapping).await);
    let rebuild = run_job(&worker, Job::RebuildLookup, &mut runs).await;
    stats.add(quiet(&mut tails, worker.as_ref(), &mapping).await);

    log.add(&recording.take());
    let (after, more) = check(&table, &service, &log, "after the jobs").await;
    problems.extend(more);
    if !after.unzipped.is_empty() {
        problems.push(format!(
            "Unzipped items past their retention left: {:?}",
            after.unzipped
        ));
    }
    if expire.details["stuck"] != after.unzipping.len() {
        problems.push(format!(
            "{} requests past the stuck threshold, {} reported",
            after.unzipping.len(),
            expire.details["stuck"]
        ));
    }
    if after.checkpoints > 0 {
        problems.push(format!("{} checkpoint(s) left", after.checkpoints));
    }
    let d = &rebuild.details;
    if d["stale_entries"] != 0 || d["lookup_writes"] != 0 {
        problems.push(format!(
            "the last rebuild found the stream's lookup wrong: {d}"
        ));
    }
    problems.extend(check_log(&service, &log, &publisher));
    if stats.rejected + stats.malformed > 0 {
        problems.push(format!("records rejected: {stats:?}"));
    }

    let ops = service.ops.lock().unwrap().clone();
    let requests: usize = ops
        .iter()
        .filter(|(op, _)| !op.starts_with('('))
        .map(|(_, n)| n)
        .sum();
    let removals = log.removals.lock().unwrap();
    let unlisted = removals
        .iter()
        .filter(|r| matches!(r.child, Child::File(_)))
        .count();
    let deletes = log.unzip_deletes.lock().unwrap();
    let finished = deletes
        .iter()
        .filter(|d| d.stage == Stage::Unzipping)
        .count();
    println!(
        "seed {seed} factor {factor}: {requests} service requests ({} writes), {} files and {} requests left once quiet; \
         {} records, {} invocations, {} retries, {} stream reads again; worker: {unlisted} files unlisted, {} levels unlinked, \
         {finished} requests finished, {} unzipped expired, {} flags written, {} guarded writes withheld, {} conditional writes refused; \
         jobs beside the service: {} expire, {} rebuild, {} failed runs; service {:.1}s, drained at {:.1}s, done {:.1}s\n  {ops:?}",
        service.log.lock().unwrap().len(),
        quiet_state.files.len(),
        quiet_state.unzipping.len(),
        stats.records,
        stats.invocations,
        stats.retries,
        tails[0].failed_reads,
        removals.len() - unlisted,
        deletes.len() - finished,
        log.flags.load(Ordering::Relaxed),
        log.withheld.load(Ordering::Relaxed),
        log.refused.load(Ordering::Relaxed),
        runs.expire,
        runs.rebuild,
        runs.failed,
        service_time.as_secs_f64(),
        drained.as_secs_f64(),
        started.elapsed().as_secs_f64(),
    );
    if problems.is_empty() {
        return Ok(());
    }
    Err(format!(
        "seed {seed} factor {factor}: {} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    ))
}

/// Each of `seeds` at `factor`; the runs with problems reported together.
async fn all_seeds(seeds: Vec<u64>, factor: usize) {
    let mut failed = Vec::new();
    for seed in seeds {
        if let Err(problems) = run(seed, factor).await {
            eprintln!("{problems}");
            failed.push(problems);
        }
    }
    assert!(
        failed.is_empty(),
        "{} run(s) with problems:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_service_and_the_worker_at_once_one_batch_per_shard() {
    all_seeds(vec![CI_SEED], 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_service_and_the_worker_at_once_ten_batches_per_shard() {
    all_seeds(vec![CI_SEED], 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "soak: SOAK_SEEDS=N cargo test -p archive-worker --test it concurrent:: -- --include-ignored"]
async fn soak_one_batch_per_shard() {
    all_seeds(soak_seeds(), 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "soak: SOAK_SEEDS=N cargo test -p archive-worker --test it concurrent:: -- --include-ignored"]
async fn soak_ten_batches_per_shard() {
    all_seeds(soak_seeds(), 10).await;
}
