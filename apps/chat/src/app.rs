//! The chat worker: [`APP`] describes it once, [`worker`] assembles it for
//! Lambda ([`worker_from_env`]), the command line and the tests alike.
//!
//! One stream function serves the six tables' streams (one event source
//! mapping each): a record goes to the handlers of the table its
//! `eventSourceARN` names ([`TableHandler`]).

use std::sync::Arc;

use lambda_runtime::Error;
use worker_engine::AppSpec;
use worker_engine::Worker;
use worker_engine::clock::Clock;
use worker_engine::lambda::Deployment;
use worker_engine::metrics::WriteCounter;
use worker_engine::store::Transactions;
use worker_engine::{self, Grants};

use crate::config::{self, Settings};
use crate::keys::Job;
use crate::schema::Table;
use crate::{cascade, members, requests};

/// What a handler or job does on one table (the template grants each
/// function exactly these, table by table).
pub type TableAccess = worker_engine::TableAccess<Table>;

/// A stream handler, with the table whose records it handles.
pub use worker_engine::TableHandler;

/// The six tables' stores.
pub type Stores = worker_engine::Stores<Table>;

/// The actions and indexes, per table, of the stream function (`None`) or
/// of a job's schedule function.
pub fn table_access(job: Option<Job>) -> Grants<Table> {
    TableAccess::grants(&match job {
        None => vec![
            requests::STREAM_TABLES,
            members::STREAM_TABLES,
            cascade::STREAM_TABLES,
        ],
        Some(Job::ExpireRequests) => vec![requests::EXPIRE_TABLES],
        Some(Job::AuditRequests) => vec![requests::AUDIT_TABLES],
    })
}

/// A job of the chat worker, described once.
pub type JobSpec = worker_engine::JobSpec<Job, Deps, dyn TableHandler<Table>>;

/// The chat worker: its common variables and its jobs, in the order their
/// stream handlers see a change.
pub const APP: AppSpec<Job, Deps, dyn TableHandler<Table>> = AppSpec {
    name: "chat-worker",
    namespace: "ChatWorker",
    env: config::COMMON_ENV,
    jobs: &[&requests::SPEC, &members::SPEC, &cascade::SPEC],
    schema: || Table::ChatRequests.schema(),
    checkpoint: |job| Some(crate::keys::checkpoint(job)),
    // Each image read as the handlers read it, as the event is read.
    decode: worker_engine::stream::decode_views::<crate::images::Image>,
};

/// What the handlers and jobs are built from.
pub struct Deps {
    /// One store per table (by [`Table`]), named as in
    /// `settings.tables`.
    pub stores: Stores,
    /// Transactions over the tables (by name: `settings.tables`).
    pub tx: Arc<dyn Transactions>,
    /// The settings, read from the environment once (the tables' names and
    /// the jobs' own).
    pub settings: Settings,
    /// Where the time comes from: an acceptance's `JoinedAt` and its
    /// notification's time (a fixed clock in tests and with `--now`).
    pub clock: Arc<dyn Clock>,
    /// The stream handlers' writes (and conflicts), by metric.
    pub writes: Arc<WriteCounter>,
}

/// The worker over `stores`: every job registered, each table's records
/// routed to its handlers by the table their `eventSourceARN` names.
pub fn worker(
    stores: Stores,
    tx: Arc<dyn Transactions>,
    settings: Settings,
    clock: Arc<dyn Clock>,
) -> Worker<Job> {
    let deps = Deps {
        stores,
        tx,
        settings,
        clock: clock.clone(),
        writes: Arc::default(),
    };
    let s = &deps.settings;
    APP.worker_on_tables(&deps, &s.tables, clock, &s.common)
        .with_writes_metric(requests::REQUEST_CONFLICTS)
        .with_write_counter(deps.writes)
}

/// The worker as Lambda runs it (`lambda::Deployment`), every table on the
/// home store's client and counters.
pub async fn worker_from_env() -> Result<Worker<Job>, Error> {
    let settings = Settings::from_env()?;
    let deployed = Deployment::of(&settings.common)?;
    let stores = Stores::on_client(&deployed.store, &settings.tables);
    let tx = Arc::new(deployed.store.clone());
    let clock = deployed.clock.clone();
    Ok(deployed.finish(worker(stores, tx, settings, clock)))
}
