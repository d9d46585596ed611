//! What each deployed Lambda function needs, as the code knows it: the
//! DynamoDB actions it calls, the indexes it queries or scans, the
//! environment variables it reads (from [`crate::config::ENV_VARS`]) and its
//! other permissions. `infra/template.yaml` is checked against this by
//! `tests/infra.rs`, and this against the code by running every fixture and
//! job on DynamoDB Local and recording what the store was asked to do
//! ([`worker_engine::store::StoreMetrics`]).
//!
//! One schedule function per job (same `schedule` bootstrap, pinned with
//! `WORKER_JOB`): each gets only its job's permissions, its own timeout,
//! memory, log group and alarms, and a tick for another job is refused
//! ([`crate::app::EventError::WrongJob`]).

use crate::config::{ENV_VARS, ReadBy};
use crate::keys::Job;
use crate::schema::{GROUP_AND_CONTAINER_INDEX, INVITATION_EXPIRY_INDEX, USER_AND_GROUP_INDEX};
use worker_engine::store::Operation;

/// The stream read actions of a DynamoDB event source mapping.
pub const STREAM_READ_ACTIONS: [&str; 4] = [
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];

/// The EventBridge action of `NOTIFY_EVENT_BUS` (`src/notify.rs`).
pub const PUT_EVENTS_ACTION: &str = "events:PutEvents";

/// An action a function may call that the fixtures do not necessarily
/// exercise, and why it is granted anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fallback {
    pub action: &'static str,
    pub why: &'static str,
}

/// One deployed function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSpec {
    /// The function's logical id in `infra/template.yaml`.
    pub logical_id: &'static str,
    /// The binary (`bootstrap`) it runs: `stream` or `schedule`.
    pub binary: &'static str,
    /// The job a schedule function is pinned to (`WORKER_JOB`).
    pub job: Option<Job>,
    /// DynamoDB data actions on the table (sorted).
    pub dynamodb_actions: &'static [&'static str],
    /// Indexes it queries or scans (their ARNs are granted, no others).
    pub indexes: &'static [&'static str],
    /// Actions granted for a path the fixtures may not take.
    pub fallbacks: &'static [Fallback],
    /// Reads the table's stream (event source mapping).
    pub reads_stream: bool,
    /// Publishes to `NOTIFY_EVENT_BUS` when it is set.
    pub publishes_events: bool,
}

impl FunctionSpec {
    /// The environment variables the template sets for this function: those
    /// [`ENV_VARS`] says it reads (local-only variables excluded).
    pub fn env_vars(&self) -> Vec<&'static str> {
        ENV_VARS
            .iter()
            .filter(|v| !v.read_by.contains(&ReadBy::LocalOnly) && v.is_read_by(self.job))
            .map(|v| v.name)
            .collect()
    }
}

/// The DynamoDB action of a store operation.
pub fn action_of(op: Operation) -> &'static str {
    match op {
        Operation::GetItem => "dynamodb:GetItem",
        Operation::PutItem => "dynamodb:PutItem",
        Operation::DeleteItem => "dynamodb:DeleteItem",
        Operation::UpdateItem => "dynamodb:UpdateItem",
        Operation::Query => "dynamodb:Query",
        Operation::Scan => "dynamodb:Scan",
        Operation::BatchWriteItem => "dynamodb:BatchWriteItem",
        Operation::BatchGetItem => "dynamodb:BatchGetItem",
        Operation::ExecuteStatement => "dynamodb:PartiQLSelect",
        Operation::Other => "dynamodb:Other",
    }
}

/// The stream consumer: cascades (consistent reads, conditional deletes,
/// index reads for members and links), invitation TTL stamps, expiry flags
/// and reminders. Its partition reads, on the table and on the indexes, are
/// PartiQL SELECTs (the coalescing store's shared requests), so it needs no
/// Query.
pub const STREAM: FunctionSpec = FunctionSpec {
    logical_id: "StreamFunction",
    binary: "stream",
    job: None,
    dynamodb_actions: &[
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
        "dynamodb:DeleteItem",
        "dynamodb:PartiQLSelect",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
    ],
    indexes: &[USER_AND_GROUP_INDEX, GROUP_AND_CONTAINER_INDEX],
    fallbacks: &[],
    reads_stream: true,
    publishes_events: false,
};

/// The invitation-link sweep.
pub const SWEEP_INVITATIONS: FunctionSpec = FunctionSpec {
    logical_id: "SweepInvitationsFunction",
    binary: "schedule",
    job: Some(Job::SweepInvitations),
    dynamodb_actions: &[
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:Scan",
    ],
    indexes: &[INVITATION_EXPIRY_INDEX],
    fallbacks: &[
        Fallback {
            action: "dynamodb:Scan",
            why: "the sweep scans the table while the InvitationLinkExpiry index is missing or not ACTIVE yet (migration)",
        },
        Fallback {
            action: "dynamodb:PutItem",
            why: "a fallback scan cut short by the deadline saves where it resumes (WorkerCheckpoint/sweep-invitations)",
        },
    ],
    reads_stream: false,
    publishes_events: false,
};

/// The relationship audit.
pub const AUDIT: FunctionSpec = FunctionSpec {
    logical_id: "AuditFunction",
    binary: "schedule",
    job: Some(Job::Audit),
    dynamodb_actions: &[
        "dynamodb:BatchWriteItem",
        "dynamodb:DeleteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:Scan",
    ],
    indexes: &[USER_AND_GROUP_INDEX, GROUP_AND_CONTAINER_INDEX],
    fallbacks: &[],
    reads_stream: false,
    publishes_events: false,
};

/// The daily expiry tick.
pub const FLAG_EXPIRING: FunctionSpec = FunctionSpec {
    logical_id: "FlagExpiringFunction",
    binary: "schedule",
    job: Some(Job::FlagExpiring),
    dynamodb_actions: &[
        "dynamodb:BatchWriteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
    ],
    indexes: &[GROUP_AND_CONTAINER_INDEX],
    fallbacks: &[],
    reads_stream: false,
    publishes_events: true,
};

/// The on-demand expiry backfill.
pub const BACKFILL: FunctionSpec = FunctionSpec {
    logical_id: "BackfillFunction",
    binary: "schedule",
    job: Some(Job::Backfill),
    dynamodb_actions: &[
        "dynamodb:BatchWriteItem",
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:Query",
        "dynamodb:Scan",
    ],
    indexes: &[GROUP_AND_CONTAINER_INDEX],
    fallbacks: &[],
    reads_stream: false,
    publishes_events: false,
};

/// Every deployed function.
pub const FUNCTIONS: [FunctionSpec; 5] =
    [STREAM, SWEEP_INVITATIONS, AUDIT, FLAG_EXPIRING, BACKFILL];

/// The schedule function of a job.
pub fn for_job(job: Job) -> &'static FunctionSpec {
    FUNCTIONS
        .iter()
        .find(|f| f.job == Some(job))
        .expect("every job has a function")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_has_exactly_one_function() {
        for job in Job::ALL {
            assert_eq!(FUNCTIONS.iter().filter(|f| f.job == Some(job)).count(), 1);
            assert_eq!(for_job(job).binary, "schedule");
        }
        assert_eq!(FUNCTIONS.iter().filter(|f| f.reads_stream).count(), 1);
    }

    #[test]
    fn actions_are_sorted_specific_and_cover_fallbacks() {
        for f in &FUNCTIONS {
            let mut sorted = f.dynamodb_actions.to_vec();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted, f.dynamodb_actions, "{}", f.logical_id);
            assert!(f.dynamodb_actions.iter().all(|a| !a.contains('*')));
            for fb in f.fallbacks {
                assert!(f.dynamodb_actions.contains(&fb.action), "{}", fb.action);
            }
        }
    }

    #[test]
    fn env_vars_follow_the_config_declaration() {
        let stream = STREAM.env_vars();
        assert!(stream.contains(&"TABLE_NAME") && stream.contains(&"INVITATION_TTL"));
        assert!(!stream.contains(&"WORKER_JOB") && !stream.contains(&"DYNAMODB_ENDPOINT_URL"));
        let audit = AUDIT.env_vars();
        assert!(audit.contains(&"WORKER_JOB") && audit.contains(&"AUDIT_GRACE_SECS"));
        assert!(!audit.contains(&"NOTIFY_EVENT_BUS"));
        assert!(FLAG_EXPIRING.env_vars().contains(&"NOTIFY_EVENT_BUS"));
    }
}
