//! The Nishiki worker's metrics: the engine's EMF lines
//! ([`worker_engine::metrics`]) under the namespace `NishikiWorker`, plus
//! what its jobs declare in their descriptions ([`crate::jobs::APP`]):
//!
//! | name | unit | from |
//! |---|---|---|
//! | `ItemsRepaired` | Count | stream: writes of the relationship cascade; `audit`: its repair writes |
//! | `ExpiryWrites`, `InvitationWrites` | Count | stream: writes of the expiry handler (flags, reminders) and the invitation TTL stamp |
//! | `LinksSwept` | Count | `sweep-invitations`: links deleted |
//! | `FoodsFlagged` | Count | `flag-expiring`: flags written (new and refreshed) |
//!
//! Each stream handler's writes count under the metric its job declares
//! (the engine's router counts them: `APP.table_worker`); each scheduled
//! job's report carries its metrics,
//! typed ([`worker_engine::schedule::JobReport::metrics`]).

use crate::jobs::APP;
use crate::keys::Job;
use worker_engine::HandlerError;
use worker_engine::schedule::JobReport;
use worker_engine::store::MetricsSnapshot;
use worker_engine::stream::BatchReport;

pub use worker_engine::metrics::{
    CapturedLines, Emitter, HandlerWrites, MAX_VALUES, Metric, MetricValue, Unit, WriteCounter,
    stream_lags_ms,
};

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = APP.namespace;

/// The EMF writer of a Lambda function (stdout, named by
/// `AWS_LAMBDA_FUNCTION_NAME`, else `binary`).
pub fn emitter_from_env(binary: &str) -> Emitter {
    Emitter::stdout_from_env(NAMESPACE, binary)
}

/// The metrics of one stream invocation: the engine's record counts and
/// lag, every job's stream writes (0 when it wrote nothing), the store's.
pub fn stream_metrics(
    report: &BatchReport,
    lags_ms: &[f64],
    writes: &HandlerWrites,
    store: Option<&MetricsSnapshot>,
) -> Vec<Metric> {
    let mut m = worker_engine::metrics::batch_metrics(report, lags_ms);
    for s in APP.stream_specs() {
        let n = writes.get(s.writes_metric).copied().unwrap_or(0);
        m.push(Metric::count(s.writes_metric, n));
    }
    m.extend(
        store
            .map(worker_engine::metrics::store_metrics)
            .unwrap_or_default(),
    );
    m
}

/// The metrics of one schedule invocation (`Err`: the job failed).
pub fn job_metrics(
    result: Result<&JobReport<Job>, &HandlerError>,
    store: Option<&MetricsSnapshot>,
) -> Vec<Metric> {
    let mut m = worker_engine::metrics::job_run_metrics(result);
    m.extend(
        store
            .map(worker_engine::metrics::store_metrics)
            .unwrap_or_default(),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(metrics: &[Metric], name: &str) -> Option<f64> {
        metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| match m.value {
                MetricValue::One(x) => x,
                MetricValue::Many(_) => panic!("{name}: a list"),
            })
    }

    #[test]
    fn every_jobs_stream_writes_are_reported() {
        let report = BatchReport {
            handled: 4,
            ..Default::default()
        };
        let writes: HandlerWrites = [
            ("ItemsRepaired".to_owned(), 5),
            ("ExpiryWrites".to_owned(), 2),
        ]
        .into();
        let store = MetricsSnapshot {
            get_item: 3,
            ..Default::default()
        };
        let m = stream_metrics(&report, &[], &writes, Some(&store));
        assert_eq!(get(&m, "RecordsHandled"), Some(4.0));
        assert_eq!(get(&m, "ItemsRepaired"), Some(5.0));
        assert_eq!(get(&m, "ExpiryWrites"), Some(2.0));
        assert_eq!(get(&m, "InvitationWrites"), Some(0.0));
        assert_eq!(get(&m, "DynamoDBRequests"), Some(3.0));
    }

    #[test]
    fn a_failed_job_counts_an_error() {
        let e = HandlerError::invalid("x");
        let m = job_metrics(Err(&e), None);
        assert_eq!(get(&m, "JobErrors"), Some(1.0));
        assert!(get(&m, "JobRuns").is_none());
    }
}
