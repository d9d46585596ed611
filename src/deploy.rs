//! What each deployed Lambda function needs, derived from the jobs'
//! descriptions ([`crate::jobs::APP`]): the DynamoDB actions it calls, the
//! indexes it queries or scans, the environment variables it reads and its
//! other permissions. `infra/template.yaml` is checked against this by
//! `tests/it/infra.rs`, and this against the code by running every fixture and
//! job on DynamoDB Local and recording what the store was asked to do
//! ([`worker_engine::store::StoreMetrics`]).
//!
//! One schedule function per job (same `schedule` bootstrap, pinned with
//! `WORKER_JOB`): each gets only its job's permissions, its own timeout,
//! memory, log group and alarms, and a tick for another job is refused
//! ([`crate::app::EventError::WrongJob`]).

use crate::jobs::APP;
use crate::keys::Job;

pub use worker_engine::deploy::{
    PUT_EVENTS_ACTION, STREAM_FUNCTION, STREAM_READ_ACTIONS, action_of,
};
pub use worker_engine::job::Fallback;

/// One deployed function of the Nishiki worker.
pub type FunctionSpec = worker_engine::deploy::FunctionSpec<Job>;

/// The stream consumer: every job's stream handler.
pub fn stream() -> FunctionSpec {
    APP.stream_function()
}

/// Every deployed function: the stream function, then one per job.
pub fn functions() -> Vec<FunctionSpec> {
    APP.functions()
}

/// The schedule function of a job.
pub fn for_job(job: Job) -> FunctionSpec {
    APP.function_of(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_is_consistent() {
        APP.check().unwrap();
    }

    #[test]
    fn every_job_has_exactly_one_function() {
        let functions = functions();
        for job in Job::ALL {
            assert_eq!(functions.iter().filter(|f| f.job == Some(job)).count(), 1);
            assert_eq!(for_job(job).binary, "schedule");
        }
        assert_eq!(functions.iter().filter(|f| f.reads_stream).count(), 1);
        assert_eq!(stream().logical_id, STREAM_FUNCTION);
    }

    #[test]
    fn actions_are_sorted_specific_and_cover_fallbacks() {
        for f in &functions() {
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
        let stream = stream().env_vars;
        assert!(stream.contains(&"TABLE_NAME") && stream.contains(&"INVITATION_TTL"));
        assert!(!stream.contains(&"WORKER_JOB") && !stream.contains(&"DYNAMODB_ENDPOINT_URL"));
        let audit = for_job(Job::Audit).env_vars;
        assert!(audit.contains(&"WORKER_JOB") && audit.contains(&"AUDIT_GRACE_SECS"));
        assert!(!audit.contains(&"NOTIFY_EVENT_BUS"));
        assert!(
            for_job(Job::FlagExpiring)
                .env_vars
                .contains(&"NOTIFY_EVENT_BUS")
        );
    }
}
