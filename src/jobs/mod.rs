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

use crate::config::Config;
use crate::keys::{GroupId, ItemKey, Job};
use crate::worker::{Change, ChangeHandler};
use worker_engine::store::{Store, StoreError};

/// What every job is built from: the table (`stream_store` for the
/// stream handlers, sharing a batch's requests), the configuration
/// (`settings`), the publisher of the expiry notifications and the
/// handlers' write counter (`worker_engine::app`).
pub type JobDeps = worker_engine::TableDeps<Config>;

/// A job of the Nishiki worker, described once (see [`worker_engine::JobSpec`]):
/// each job's module holds its `SPEC`.
pub type JobSpec = worker_engine::JobSpec<Job, JobDeps, dyn ChangeHandler<Change>>;

/// The Nishiki worker: its common variables and its jobs. Registering a
/// job is one line here; everything else about it is in its `SPEC`.
pub const APP: worker_engine::AppSpec<Job, JobDeps, dyn ChangeHandler<Change>> =
    worker_engine::AppSpec {
        name: "nishiki-worker",
        namespace: "NishikiWorker",
        env: crate::config::COMMON_ENV,
        // In the order their stream handlers see a change.
        jobs: &[&invitations::SPEC, &relationships::SPEC, &expiry::SPEC],
        schema: crate::schema::nishiki,
        checkpoint: |job| Some(crate::keys::ItemKey::Checkpoint(job).to_attributes()),
        // Each image typed as the event is read (`worker::Reader`).
        decode: crate::worker::decode_event,
    };

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

#[cfg(test)]
mod tests {
    //! The deployed functions derived from [`APP`] (`APP.functions()`):
    //! one per job, actions sorted and specific, variables as declared.
    use super::*;
    use worker_testkit::deploy::{Deployed, STREAM_FUNCTION};

    #[test]
    fn the_description_is_consistent() {
        APP.check().unwrap();
    }

    #[test]
    fn every_job_has_exactly_one_function() {
        let functions = APP.functions();
        for job in Job::ALL {
            assert_eq!(functions.iter().filter(|f| f.job == Some(job)).count(), 1);
            assert_eq!(APP.function_of(job).binary, "schedule");
        }
        assert_eq!(functions.iter().filter(|f| f.reads_stream).count(), 1);
        assert_eq!(APP.stream_function().logical_id, STREAM_FUNCTION);
    }

    #[test]
    fn actions_are_sorted_specific_and_cover_fallbacks() {
        for f in &APP.functions() {
            let mut sorted = f.dynamodb_actions.to_vec();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted, f.dynamodb_actions, "{}", f.logical_id);
            assert!(f.dynamodb_actions.iter().all(|a| !a.contains('*')));
            for fb in &f.fallbacks {
                assert!(f.dynamodb_actions.contains(&fb.action), "{}", fb.action);
            }
        }
    }

    #[test]
    fn env_vars_follow_the_config_declaration() {
        let stream = APP.stream_function().env_vars;
        assert!(stream.contains(&"TABLE_NAME") && stream.contains(&"INVITATION_TTL"));
        assert!(!stream.contains(&"WORKER_JOB") && !stream.contains(&"DYNAMODB_ENDPOINT_URL"));
        let audit = APP.function_of(Job::Audit).env_vars;
        assert!(audit.contains(&"WORKER_JOB") && audit.contains(&"AUDIT_GRACE_SECS"));
        assert!(!audit.contains(&"NOTIFY_EVENT_BUS"));
        assert!(
            APP.function_of(Job::FlagExpiring)
                .env_vars
                .contains(&"NOTIFY_EVENT_BUS")
        );
    }
}
