//! The worker's jobs; each job's rules live in one place (a file, or a
//! directory for the larger ones).
//!
//! - [`relationships`]: stream cascades and the scheduled audit;
//! - [`invitations`]: the expired invitation-link sweep (and optional TTL);
//! - [`expiry`]: food-expiry flags, reminders, the daily tick and backfill.
//!
//! Each job registers its stream handler and its scheduled jobs here.

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

/// Every stream handler, in the order they see a change.
pub fn handlers(deps: &JobDeps) -> Vec<Arc<dyn ChangeHandler>> {
    let _ = deps;
    let handlers: Vec<Arc<dyn ChangeHandler>> = vec![
        // registered by each job
        Arc::new(invitations::InvitationTtl::new(deps)),
        Arc::new(relationships::RelationshipHandler::new(deps)),
        Arc::new(expiry::ExpiryHandler::new(deps)),
    ];
    handlers
}

/// Every scheduled job.
pub fn scheduled(deps: &JobDeps) -> Vec<Arc<dyn ScheduledJob<Job>>> {
    let _ = deps;
    let jobs: Vec<Arc<dyn ScheduledJob<Job>>> = vec![
        // registered by each job
        Arc::new(invitations::SweepInvitations::new(deps)),
        Arc::new(relationships::AuditJob::new(deps)),
        Arc::new(expiry::FlagExpiringJob::new(deps)),
        Arc::new(expiry::BackfillJob::new(deps)),
    ];
    jobs
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
