//! Configuration from the environment (Lambda) or any lookup (tests, the
//! command line's `--env`).
//!
//! | variable | default | read by | meaning |
//! |---|---|---|---|
//! | `TABLE_NAME` | (required) | all | the shop table |
//! | `AWS_ENDPOINT_URL_DYNAMODB` | AWS | local runs | another endpoint (DynamoDB Local); `DYNAMODB_ENDPOINT_URL` is its alias, `AWS_ENDPOINT_URL` every service's |
//! | `DEADLINE_MARGIN_MS` | `2000` | all | stop this long before the Lambda deadline |
//! | `STREAM_CONCURRENCY` | `1000` | stream | items of a batch handled at once |
//! | `WORKER_JOB` | (any) | schedule | the one job a schedule function runs |
//! | `PARKING_TABLE` | (off) | stream | where records that fail for good are parked (`worker_engine::park`) |
//! | `PARKING_RETENTION_DAYS` | `14` | stream | how long a parked record is kept |
//! | `LOG_FORMAT`, `RUST_LOG` | `json`, `info` | local runs | logs (Lambda: `LoggingConfig`; `worker_engine::telemetry`) |
//! | `STUCK_STATUSES` | `PENDING,PAID` | stuck-orders | the statuses an order can be stuck in |
//! | `STUCK_AFTER_HOURS` | `48` | stuck-orders | an order unchanged this long in one of them is stuck |
//! | `NOTIFY_EVENT_BUS` | (off) | stuck-orders | EventBridge bus of `OrderStuck` events |
//!
//! [`COMMON_ENV`] (`worker_engine::settings`) and each job's `SPEC`
//! declare the same list with who reads each variable.

use worker_engine::env::{ConfigError, Env};
use worker_engine::settings::JobSettings;

use crate::keys::Job;
use crate::stuck::StuckSettings;

pub type EnvVar = worker_engine::job::EnvVar<Job>;

/// What `TABLE_NAME` names.
const TABLE: &str = "the shop table";

/// The variables every function reads, whatever its jobs.
pub const COMMON_ENV: &[EnvVar] = worker_engine::common_env!(Job, TABLE);

/// Everything the worker is configured with: the common settings and
/// [`ShopSettings`].
pub type Settings = worker_engine::settings::Settings<Job, ShopSettings>;

/// The shop worker's own settings: its jobs'.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShopSettings {
    pub stuck: StuckSettings,
}

impl JobSettings for ShopSettings {
    const TABLE: &'static str = TABLE;
    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(ShopSettings {
            stuck: StuckSettings::from_env(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use worker_engine::park::ParkingSettings;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        Settings::from_lookup(&worker_testkit::env::lookup(vars))
    }

    #[test]
    fn settings_from_the_environment() {
        let s = settings(&[("TABLE_NAME", "shop")]).unwrap();
        assert_eq!(s, Settings::for_table("shop"));
        assert_eq!(s.stuck.statuses, ["PENDING", "PAID"]);
        assert_eq!(s.stuck.after_hours, 48);
        let s = settings(&[
            ("TABLE_NAME", "shop"),
            ("WORKER_JOB", "stuck-orders"),
            ("STUCK_STATUSES", " SHIPPED , PAID ,"),
            ("STUCK_AFTER_HOURS", "6"),
            ("NOTIFY_EVENT_BUS", "bus"),
            ("STREAM_CONCURRENCY", "0"),
        ])
        .unwrap();
        assert_eq!(s.common.job, Some(Job::StuckOrders));
        assert_eq!(s.stuck.statuses, ["SHIPPED", "PAID"]);
        assert_eq!(s.stuck.after_hours, 6);
        assert_eq!(s.stuck.event_bus.as_deref(), Some("bus"));
        assert_eq!(s.common.stream_concurrency, 1);
        assert_eq!(
            s.common.parking, None,
            "no PARKING_TABLE: nothing is parked"
        );
        let s = settings(&[("TABLE_NAME", "shop"), ("PARKING_TABLE", "parked")]).unwrap();
        assert_eq!(
            s.common.parking,
            Some(ParkingSettings {
                table: "parked".into(),
                retention_days: 14
            })
        );
        let e = settings(&[]).unwrap_err();
        assert_eq!(e.name, "TABLE_NAME");
        let e = settings(&[("TABLE_NAME", "t"), ("WORKER_JOB", "vacuum")]).unwrap_err();
        assert!(e.to_string().contains("stuck-orders"), "{e}");
        let e = settings(&[("TABLE_NAME", "t"), ("STUCK_AFTER_HOURS", "2d")]).unwrap_err();
        assert_eq!(e.name, "STUCK_AFTER_HOURS");
        let e = settings(&[("TABLE_NAME", "t"), ("STUCK_STATUSES", "A#B")]).unwrap_err();
        assert_eq!(e.name, "STUCK_STATUSES");
    }
}
