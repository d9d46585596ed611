//! Configuration from the environment (Lambda) or any lookup (tests, the
//! command line's `--env`): the app's own variables below, and those every
//! app reads (the endpoint, deadline margin, stream concurrency, pinned
//! job, parking table, logs: `worker_engine::settings`; the app's README
//! lists them all).
//!
//! | variable | default | read by | meaning |
//! |---|---|---|---|
//! | `TABLE_NAME` | (required) | all | the shop table |
//! | `STUCK_STATUSES` | `PENDING,PAID` | stuck-orders | the statuses an order can be stuck in |
//! | `STUCK_AFTER_HOURS` | `48` | stuck-orders | an order unchanged this long in one of them is stuck |
//! | `NOTIFY_EVENT_BUS` | (off) | stuck-orders | EventBridge bus of `OrderStuck` events |
//!
//! [`COMMON_ENV`] (`worker_engine::settings`) and each job's `SPEC`
//! declare the same list with who reads each variable.

use crate::keys::Job;
use crate::stuck::StuckSettings;

/// A variable the shop worker reads: its name, default, meaning and which
/// function reads it (the rows of the table above).
pub type EnvVar = worker_engine::EnvVar<Job>;

/// What `TABLE_NAME` names.
const TABLE: &str = "the shop table";

/// The variables every function reads, whatever its jobs.
pub const COMMON_ENV: &[EnvVar] = worker_engine::common_env!(Job, TABLE);

/// Everything the worker is configured with: the common settings and
/// its one job's, [`StuckSettings`] (dereferenced: `settings.event_bus`).
pub type Settings = worker_engine::settings::Settings<Job, StuckSettings>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The shop's own variables (the common ones: `worker_engine::settings`).
    #[test]
    fn settings_from_the_environment() {
        let settings = |vars| Settings::from_lookup(&worker_testkit::env::lookup(vars));
        let s = settings(&[("TABLE_NAME", "shop")]).unwrap();
        assert_eq!(s, Settings::for_table("shop"));
        assert_eq!(s.statuses, ["PENDING", "PAID"]);
        assert_eq!(s.after_hours, 48);
        let s = settings(&[
            ("TABLE_NAME", "shop"),
            ("STUCK_STATUSES", " SHIPPED , PAID ,"),
            ("STUCK_AFTER_HOURS", "6"),
            ("NOTIFY_EVENT_BUS", "bus"),
        ])
        .unwrap();
        assert_eq!(s.statuses, ["SHIPPED", "PAID"]);
        assert_eq!(s.after_hours, 6);
        assert_eq!(s.event_bus.as_deref(), Some("bus"));
        assert_eq!(settings(&[]).unwrap_err().name, "TABLE_NAME");
        let e = settings(&[("TABLE_NAME", "t"), ("STUCK_AFTER_HOURS", "2d")]).unwrap_err();
        assert_eq!(e.name, "STUCK_AFTER_HOURS");
        let e = settings(&[("TABLE_NAME", "t"), ("STUCK_STATUSES", "A#B")]).unwrap_err();
        assert_eq!(e.name, "STUCK_STATUSES");
    }
}
