//! The worker's jobs; each job's rules live in one place (a file, or a
//! directory for the larger ones).
//!
//! - [`relationships`]: stream cascades and the scheduled audit;
//! - [`invitations`]: the expired invitation-link sweep (and optional TTL);
//! - [`expiry`]: food-expiry flags, reminders, the daily tick and backfill.
//!
//! Each job describes itself once, in its module's `SPEC` (name, stream
//! handler, scheduled jobs and their schedules, variables, DynamoDB access,
//! metrics); [`APP`] registers them, and configuration, deployment checks
//! and metrics are derived from it.

pub mod expiry;
pub mod invitations;
pub mod relationships;

use std::sync::Arc;

use crate::config::{Clock, Config};
use crate::keys::{GroupId, ItemKey, Job};
use crate::schedule::ScheduledJob;
use crate::worker::ChangeHandler;
use worker_engine::store::{Store, StoreError};

/// What every job is built from.
#[derive(Clone)]
pub struct JobDeps {
    pub store: Arc<dyn Store>,
    pub config: Config,
    pub clock: Arc<dyn Clock>,
}

/// A job of the Nishiki worker, described once (see [`worker_engine::job`]):
/// each job's module holds its `SPEC`.
pub type JobSpec = worker_engine::job::JobSpec<Job, JobDeps, dyn ChangeHandler>;

/// The Nishiki worker: its common variables and its jobs. Registering a
/// job is one line here; everything else about it is in its `SPEC`.
pub const APP: worker_engine::job::AppSpec<Job, JobDeps, dyn ChangeHandler> =
    worker_engine::job::AppSpec {
        name: "nishiki-worker",
        namespace: "NishikiWorker",
        env: crate::config::COMMON_ENV,
        // In the order their stream handlers see a change.
        jobs: &[&invitations::SPEC, &relationships::SPEC, &expiry::SPEC],
        schema: crate::schema::nishiki,
        checkpoint: |job| Some(crate::keys::ItemKey::Checkpoint(job).to_attributes()),
    };

/// Every stream handler, in the order they see a change.
pub fn handlers(deps: &JobDeps) -> Vec<Arc<dyn ChangeHandler>> {
    APP.handlers(deps)
}

/// Every scheduled job.
pub fn scheduled(deps: &JobDeps) -> Vec<Arc<dyn ScheduledJob<Job>>> {
    APP.scheduled(deps)
}

/// Of `groups`, those whose Group item exists (strongly consistent reads,
/// all at once so that a coalescing store sends them in one request). The
/// stream handlers use it to leave a removed group's dependents to that
/// group's cascade.
pub(crate) async fn existing_groups(
    store: &dyn Store,
    groups: Vec<GroupId>,
) -> Result<Vec<GroupId>, StoreError> {
    let checks = groups.into_iter().map(|g| async move {
        let found = store.get(&ItemKey::Group(g).to_attributes(), true).await?;
        Ok::<_, StoreError>(found.map(|_| g))
    });
    Ok(futures::future::try_join_all(checks)
        .await?
        .into_iter()
        .flatten()
        .collect())
}
