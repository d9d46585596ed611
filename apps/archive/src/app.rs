//! The archive worker: [`APP`] describes it once; `APP.table_worker(..,
//! SHARING)` assembles it over any store (the command line's, the
//! tests'), [`worker_from_env`] as Lambda runs it.

use lambda_runtime::Error;
use worker_engine::AppSpec;
use worker_engine::Worker;
use worker_engine::stream::RecordProcessor;
use worker_engine::{Sharing, TableDeps};

use crate::config::{self, Settings};
use crate::keys::{self, Job};
use crate::{lookup, unzip};

/// A job of the archive worker, described once.
pub type JobSpec = worker_engine::JobSpec<Job, Deps, dyn RecordProcessor>;

/// The archive worker: its common variables and its jobs, in the order
/// their stream handlers see a change.
pub const APP: AppSpec<Job, Deps, dyn RecordProcessor> = AppSpec {
    name: "archive-worker",
    namespace: "ArchiveWorker",
    env: config::COMMON_ENV,
    jobs: &[&lookup::SPEC, &unzip::SPEC],
    schema: crate::schema::schema,
    checkpoint: |job| Some(keys::checkpoint(job)),
    // Each image read as the handlers read it, as the event is read.
    decode: worker_engine::stream::decode_views::<crate::images::Image>,
};

/// What the handlers and jobs are built from: the table, the settings,
/// the publisher and the write counter (`worker_engine::app`).
pub type Deps = TableDeps<Settings>;

/// The stream handlers' concurrent point reads of a batch share BatchGetItem requests.
pub const SHARING: Sharing = Sharing::Coalesced((keys::PK, keys::SK));

/// The worker as Lambda runs it (`lambda::Deployment`), its events to
/// EventBridge.
pub async fn worker_from_env() -> Result<Worker<Job>, Error> {
    Ok(APP.table_worker_from_env(SHARING)?)
}
