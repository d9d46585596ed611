//! The deployed functions of an app, derived from its job descriptions
//! (`worker_engine::AppSpec`, through [`Deployed`]): one stream function running every job's
//! stream handler, and one schedule function per scheduled job (the same
//! `schedule` bootstrap, pinned to its job with `WORKER_JOB`), each with
//! exactly the DynamoDB actions, indexes and variables its jobs declare. An
//! app's template is checked against these, and these against the code by
//! running fixtures and jobs on DynamoDB Local and recording what the store
//! was asked to do (`worker_engine::store::StoreMetrics`). Lambda never
//! runs this: the tests of each app's template do.

use worker_engine::schedule::JobName;
use worker_engine::store::Operation;
use worker_engine::{Access, AppSpec, Fallback, Schedule};

/// The stream read actions of a DynamoDB event source mapping.
pub const STREAM_READ_ACTIONS: [&str; 4] = [
    "dynamodb:DescribeStream",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:ListStreams",
];

/// The EventBridge action of an app's event bus.
pub const PUT_EVENTS_ACTION: &str = "events:PutEvents";

/// The logical id of the stream function in a template.
pub const STREAM_FUNCTION: &str = "StreamFunction";

/// The X-Ray actions of a function with active tracing (X-Ray has no
/// resource-level permissions: granted on `*`).
pub const TRACING_ACTIONS: [&str; 2] = ["xray:PutTelemetryRecords", "xray:PutTraceSegments"];

/// The logical id of the parking table in a template
/// (`worker_engine::park::schema`).
pub const PARKING_TABLE: &str = "ParkingTable";

/// The worker's own metrics every template alarms on, on the stream
/// function: anything failed for good (`RecordsFailed`), anything parked
/// (`RecordsParked`), both `> 0`; and the stream lag
/// (`StreamLagMaxMs`) over a template parameter.
pub const STREAM_ALARM_METRICS: [&str; 3] = ["RecordsFailed", "RecordsParked", "StreamLagMaxMs"];

/// The worker's own metrics every template alarms on, per schedule
/// function: a failed run (`JobErrors > 0`), and runs stopped early
/// ([`JOBS_INCOMPLETE_PERIODS`] periods in a row of `JobsIncomplete`).
pub const JOB_ALARM_METRICS: [&str; 2] = ["JobErrors", "JobsIncomplete"];

/// Periods in a row in which every run of a job stopped early before its
/// `JobsIncomplete` alarm fires (`EvaluationPeriods` = `DatapointsToAlarm`,
/// statistic `Minimum`): one run cut short by the deadline resumes from its
/// checkpoint next tick; several in a row mean it never catches up.
pub const JOBS_INCOMPLETE_PERIODS: u32 = 3;

/// The period (seconds) of a job's worker-metric alarms: the job's own
/// interval, at least an hour (a job that runs more often, or on demand,
/// is judged hourly) and at most a day (`rate(1 day)` and daily jobs), so
/// `JOBS_INCOMPLETE_PERIODS` periods in a row are that many runs
/// (CloudWatch allows up to 7 days of periods of an hour or more).
pub fn alarm_period(schedule: Schedule) -> u32 {
    match schedule {
        Schedule::Daily { .. } => 86_400,
        Schedule::Rate(expr) => rate_seconds(expr).unwrap_or(3_600).clamp(3_600, 86_400),
        Schedule::OnDemand => 3_600,
    }
}

/// The interval of an EventBridge `rate(N unit)` expression, in seconds.
fn rate_seconds(expr: &str) -> Option<u32> {
    let inner = expr.trim().strip_prefix("rate(")?.strip_suffix(')')?;
    let (n, unit) = inner.trim().split_once(' ')?;
    let n: u32 = n.parse().ok()?;
    let unit = match unit.trim().trim_end_matches('s') {
        "minute" => 60,
        "hour" => 3_600,
        "day" => 86_400,
        _ => return None,
    };
    n.checked_mul(unit)
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
        // Guarded writes: the checks; their deletes and puts need
        // `dynamodb:DeleteItem` / `dynamodb:PutItem` beside it.
        Operation::TransactWriteItems => "dynamodb:ConditionCheckItem",
    }
}

/// One deployed function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionSpec<J> {
    /// The function's logical id in the template.
    pub logical_id: &'static str,
    /// The binary (`bootstrap`) it runs: `stream` or `schedule`.
    pub binary: &'static str,
    /// The job a schedule function is pinned to (`WORKER_JOB`).
    pub job: Option<J>,
    /// DynamoDB data actions on the table (sorted, no duplicates).
    pub dynamodb_actions: Vec<&'static str>,
    /// Indexes it queries or scans (sorted).
    pub indexes: Vec<&'static str>,
    /// Actions granted for a path the fixtures may not take.
    pub fallbacks: Vec<Fallback>,
    /// Reads the table's stream (event source mapping).
    pub reads_stream: bool,
    /// Publishes to the app's event bus when it is set.
    pub publishes_events: bool,
    /// The variables the template sets for it.
    pub env_vars: Vec<&'static str>,
}

impl<J: JobName> FunctionSpec<J> {
    fn from_access<'a>(
        logical_id: &'static str,
        binary: &'static str,
        job: Option<J>,
        access: impl IntoIterator<Item = &'a Access>,
        env_vars: Vec<&'static str>,
    ) -> Self {
        let mut f = FunctionSpec {
            logical_id,
            binary,
            job,
            dynamodb_actions: Vec::new(),
            indexes: Vec::new(),
            fallbacks: Vec::new(),
            reads_stream: job.is_none(),
            publishes_events: false,
            env_vars,
        };
        for a in access {
            f.dynamodb_actions.extend(a.dynamodb_actions);
            f.indexes.extend(a.indexes);
            f.fallbacks.extend(a.fallbacks);
            f.publishes_events |= a.publishes_events;
        }
        f.dynamodb_actions.sort_unstable();
        f.dynamodb_actions.dedup();
        f.indexes.sort_unstable();
        f.indexes.dedup();
        f
    }
}

/// An app's deployed functions, from its description.
pub trait Deployed<J: JobName> {
    /// The stream function: every job's stream access, together.
    fn stream_function(&self) -> FunctionSpec<J>;
    /// The schedule function of a job.
    fn function_of(&self, job: J) -> FunctionSpec<J>;
    /// Every deployed function: the stream function, then one per job.
    fn functions(&self) -> Vec<FunctionSpec<J>>;
}

impl<J: JobName, D: ?Sized, H: ?Sized> Deployed<J> for AppSpec<J, D, H> {
    fn stream_function(&self) -> FunctionSpec<J> {
        FunctionSpec::from_access(
            STREAM_FUNCTION,
            "stream",
            None,
            self.stream_specs().map(|s| &s.access),
            self.env_of(None),
        )
    }

    fn function_of(&self, job: J) -> FunctionSpec<J> {
        let s = self
            .schedule(job)
            .unwrap_or_else(|| panic!("job {job} has no schedule (AppSpec::check)"));
        FunctionSpec::from_access(
            s.function,
            "schedule",
            Some(job),
            [&s.access],
            self.env_of(Some(job)),
        )
    }

    fn functions(&self) -> Vec<FunctionSpec<J>> {
        std::iter::once(self.stream_function())
            .chain(J::ALL.iter().map(|j| self.function_of(*j)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_alarm_period_is_its_interval_between_an_hour_and_a_day() {
        let rate = |e| alarm_period(Schedule::Rate(e));
        assert_eq!(rate("rate(15 minutes)"), 3_600);
        assert_eq!(rate("rate(1 hour)"), 3_600);
        assert_eq!(rate("rate(6 hours)"), 21_600);
        assert_eq!(rate("rate(1 day)"), 86_400);
        assert_eq!(rate("rate(7 days)"), 86_400);
        assert_eq!(rate("cron(0 3 * * ? *)"), 3_600);
        assert_eq!(alarm_period(Schedule::OnDemand), 3_600);
        assert_eq!(alarm_period(Schedule::Daily { zone_env: "TZ" }), 86_400);
    }
}
