//! Environment faults, for every app: each fixture of an app's manifest is
//! run through the code of `<app> replay` in a broken deployment, and
//! wherever the worker reached the store it must stop with an environment
//! fault ([`worker_engine::FailureKind::Environment`]): never reject
//! (and so park) or skip a record the working deployment handles.
//!
//! The deployments ([`Broken`]):
//! - every request denied, as DynamoDB answers a role whose policy lacks
//!   the action ([`FaultKind::AccessDenied`] from a [`FaultProxy`]);
//! - the table deleted under the worker (`ResourceNotFoundException`);
//! - the table created without its indexes (a `Query` on an index that
//!   does not exist).
//!
//! Each fixture's files run one by one on a working table, once, then on a
//! broken one in each deployment (the three side by side), all loaded with
//! the fixture's snapshot and without the service's writes (a denied table
//! cannot take them); the proxy in front of a broken table counts the
//! requests of each file, and each file's broken run is judged against its
//! working run.

use std::path::Path;

use worker_engine::metrics::{ENVIRONMENT_FAULTS, MetricValue};
use worker_engine::schema::TableSchema;
use worker_engine::stream::RecordStatus;
use worker_toolkit::cli::CliApp;
use worker_toolkit::cli::replay::{FileReport, ReplayArgs, load_snapshot, replay};
use worker_toolkit::cli::target::{AppTable, TableOpts, Target};

use crate::TestTable;
use crate::fault_proxy::{FaultConfig, FaultKind, FaultPlan, FaultProxy};

/// What this check reads of a manifest entry.
#[derive(Debug, serde::Deserialize)]
struct Fixture {
    name: String,
    events: Vec<String>,
    snapshot: String,
    now: String,
    #[serde(default)]
    env: Vec<String>,
}

fn manifest(dir: &Path) -> Vec<Fixture> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).expect("the manifest is JSON");
    serde_json::from_value(v["fixtures"].clone()).expect("entries with a snapshot")
}

/// A deployment that is wrong in one way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Every request is denied (`AccessDeniedException`).
    Denied,
    /// The table was deleted.
    TableMissing,
    /// The table has none of its indexes.
    IndexesMissing,
}

impl Broken {
    /// Every broken deployment, in the order
    /// [`every_fixture_stops_on_environment_faults`] returns
    /// them.
    pub const ALL: [Broken; 3] = [Broken::Denied, Broken::TableMissing, Broken::IndexesMissing];
}

/// What the broken runs did, over a manifest.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Files that stopped with an environment fault.
    pub faults: usize,
    /// Files run.
    pub files: usize,
    /// What went wrong (empty: the worker behaved).
    pub problems: Vec<String>,
}

fn args(files: Vec<std::path::PathBuf>, f: &Fixture, endpoint: &str, table: &str) -> ReplayArgs {
    ReplayArgs {
        files,
        now: Some(f.now.parse().expect("an RFC 3339 time")),
        env: f.env.clone(),
        table: TableOpts {
            endpoint_url: Some(endpoint.to_owned()),
            table: vec![table.to_owned()],
            ..Default::default()
        },
        ..Default::default()
    }
}

/// A status that means "the record was not handled, for good".
fn gave_up(status: &RecordStatus) -> bool {
    matches!(
        status,
        RecordStatus::Rejected { .. } | RecordStatus::Malformed { .. }
    )
}

/// One broken run of a file against the working run of the same file.
fn judge(
    name: &str,
    good: &FileReport<impl worker_engine::schedule::JobName>,
    bad: &FileReport<impl worker_engine::schedule::JobName>,
    requests: u64,
    index_requests: u64,
    broken: Broken,
    out: &mut Outcome,
) {
    out.files += 1;
    if bad.environment_fault.is_some() {
        out.faults += 1;
    }
    let bad_records = bad.batch.as_ref().map(|b| &b.records[..]).unwrap_or(&[]);
    let good_records = good.batch.as_ref().map(|b| &b.records[..]).unwrap_or(&[]);
    for (i, r) in bad_records.iter().enumerate() {
        let was = good_records.get(i).map(|g| &g.status);
        if gave_up(&r.status) && !was.is_some_and(gave_up) {
            out.problems.push(format!(
                "{name} ({broken:?}): record #{i} {:?} given up on, but handled by a working deployment: {:?}",
                r.keys, r.status
            ));
        }
    }
    if let Some(b) = &bad.batch
        && b.parked > 0
    {
        out.problems
            .push(format!("{name} ({broken:?}): {} records parked", b.parked));
    }
    let changed = bad_records
        .iter()
        .zip(good_records)
        .any(|(b, g)| b.status != g.status)
        || match (&bad.job, &good.job) {
            // A run stopped at its deadline (a loaded machine) says how far
            // it got, which the other run's summary cannot match.
            (Some(b), Some(g)) => b.complete && g.complete && b.summary != g.summary,
            (b, g) => b.is_some() != g.is_some(),
        }
        || bad.error.is_some();
    let must_fault = match broken {
        // Every request failed: any request at all is a fault.
        Broken::Denied | Broken::TableMissing => requests > 0,
        // Only a request on an index failed: any request that named one.
        // (Not "an outcome changed": a job whose concurrent steps may
        // group their writes differently reports other counts from run to
        // run, with no index involved.)
        Broken::IndexesMissing => index_requests > 0,
    };
    // A job that works around the fault (a Scan for a missing index) must
    // still say so through the metric the alarm watches.
    let reported = bad.job.as_ref().is_some_and(|j| {
        j.metrics.iter().any(|m| {
            m.name == ENVIRONMENT_FAULTS && matches!(m.value, MetricValue::One(v) if v > 0.0)
        })
    });
    if reported {
        out.faults += 1;
    }
    if must_fault && bad.environment_fault.is_none() && !reported {
        out.problems.push(format!(
            "{name} ({broken:?}): {requests} requests ({index_requests} on an index), {} — but no environment fault (records: {:?}; job: {:?}; error: {:?}; the working deployment's job: {:?})",
            if changed { "an outcome changed" } else { "same outcomes" },
            bad_records.iter().map(|r| &r.status).collect::<Vec<_>>(),
            bad.job.as_ref().map(|j| (&j.summary, j.complete)),
            bad.error,
            good.job.as_ref().map(|j| (&j.summary, j.complete)),
        ));
    }
}

/// Run every fixture of `dir`'s manifest in each [`Broken`] deployment;
/// panics listing every problem. Returns how many files stopped with an
/// environment fault, by deployment.
pub async fn every_fixture_stops_on_environment_faults<A: CliApp>(
    dir: &Path,
) -> Vec<(Broken, Outcome)> {
    let app = AppTable::of::<A>();
    let fixtures = manifest(dir);
    // The working deployment, once: each fixture's files run in turn on a
    // table loaded with its snapshot. Every broken deployment is judged
    // against these runs.
    let mut good_runs = Vec::new();
    for f in &fixtures {
        let good_table = TestTable::with_schema(&A::schema()).await;
        let good = Target::connect(&good_table.endpoint, &good_table.name, &app).await;
        load_snapshot(&good, &dir.join(&f.snapshot))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let mut runs = Vec::new();
        for file in &f.events {
            let run = replay::<A>(
                &good,
                &args(
                    vec![dir.join(file)],
                    f,
                    &good_table.endpoint,
                    &good_table.name,
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("{}: {file}: {e}", f.name));
            runs.push(run.files.into_iter().next().expect("one file, one report"));
        }
        good_runs.push(runs);
    }
    // The broken deployments side by side: each has tables of its own.
    let outcomes = futures::future::join_all(Broken::ALL.map(|broken| {
        let (app, fixtures, good_runs) = (&app, &fixtures, &good_runs);
        async move {
            let schema = match broken {
                Broken::IndexesMissing => TableSchema {
                    indexes: Vec::new(),
                    local_indexes: Vec::new(),
                    ..A::schema()
                },
                _ => A::schema(),
            };
            let mut out = Outcome::default();
            for (f, good_runs) in fixtures.iter().zip(good_runs) {
                // The broken table, behind a proxy that counts (and denies).
                let bad_table = TestTable::with_schema(&schema).await;
                let proxy = FaultProxy::start(&bad_table.endpoint, FaultConfig::none())
                    .await
                    .expect("the proxy starts");
                let bad = Target::connect(&proxy.endpoint_url(), &bad_table.name, app).await;
                load_snapshot(&bad, &dir.join(&f.snapshot))
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", f.name));
                match broken {
                    Broken::Denied => proxy.set_plan(FaultPlan::Always(FaultKind::AccessDenied)),
                    Broken::TableMissing => bad_table
                        .store
                        .client()
                        .delete_table()
                        .table_name(&bad_table.name)
                        .send()
                        .await
                        .map(|_| ())
                        .expect("delete the table"),
                    Broken::IndexesMissing => {}
                }
                for (file, good_run) in f.events.iter().zip(good_runs) {
                    let name = format!("{}: {file}", f.name);
                    let before = proxy.stats();
                    let bad_run = replay::<A>(
                        &bad,
                        &args(
                            vec![dir.join(file)],
                            f,
                            &proxy.endpoint_url(),
                            &bad_table.name,
                        ),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("{name} ({broken:?}): {e}"));
                    let after = proxy.stats();
                    judge(
                        &name,
                        good_run,
                        &bad_run.files[0],
                        after.requests - before.requests,
                        after.index_requests - before.index_requests,
                        broken,
                        &mut out,
                    );
                }
            }
            eprintln!(
                "{broken:?}: {} of {} files stopped with an environment fault",
                out.faults, out.files
            );
            (broken, out)
        }
    }))
    .await;
    let problems: Vec<&String> = outcomes.iter().flat_map(|(_, o)| &o.problems).collect();
    assert!(
        problems.is_empty(),
        "{}",
        problems
            .iter()
            .map(|p| p.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    outcomes
}

/// A test failure unless, in every broken deployment but
/// [`Broken::IndexesMissing`] (where an app may read no index), some
/// fixture met the fault.
pub fn assert_every_fault_met(outcomes: &[(Broken, Outcome)]) {
    for (broken, out) in outcomes {
        if *broken != Broken::IndexesMissing {
            assert!(out.faults > 0, "{broken:?}: no fixture met the fault");
        }
    }
}
