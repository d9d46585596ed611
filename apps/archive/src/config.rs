//! Configuration from the environment (Lambda) or any lookup (tests, the
//! command line's `--env`): the app's own variables below, and those every
//! app reads (the endpoint, deadline margin, stream concurrency, pinned
//! job, parking table, logs: `worker_engine::settings`; the app's README
//! lists them all).
//!
//! | variable | default | read by | meaning |
//! |---|---|---|---|
//! | `TABLE_NAME` | (required) | all | the archive table |
//! | `UNZIPPED_RETENTION_HOURS` | `24` | expire-unzipped | unzipped files older than this expire |
//! | `UNZIP_STUCK_HOURS` | `48` | expire-unzipped | unzipping files older than this are reported |
//! | `NOTIFY_EVENT_BUS` | (off) | expire-unzipped | EventBridge bus of `UnzippedFileExpired` events |
//!
//! [`COMMON_ENV`] (`worker_engine::settings`) and each job's `SPEC`
//! declare the same list with who reads each variable.

use crate::keys::Job;
use crate::unzip::UnzipSettings;

/// A variable the archive worker reads: its name, default, meaning and
/// which function reads it (the rows of the table above).
pub type EnvVar = worker_engine::EnvVar<Job>;

/// What `TABLE_NAME` names.
const TABLE: &str = "the archive table";

/// The variables every function reads, whatever its jobs.
pub const COMMON_ENV: &[EnvVar] = worker_engine::common_env!(Job, TABLE);

/// Everything the worker is configured with: the common settings and
/// its one job's, [`UnzipSettings`] (dereferenced: `settings.event_bus`).
pub type Settings = worker_engine::settings::Settings<Job, UnzipSettings>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The archive's own variables (the common ones: `worker_engine::settings`).
    #[test]
    fn settings_from_the_environment() {
        let settings = |vars| Settings::from_lookup(&worker_testkit::env::lookup(vars));
        let s = settings(&[("TABLE_NAME", "archive")]).unwrap();
        assert_eq!(s, Settings::for_table("archive"));
        assert_eq!((s.retention_hours, s.stuck_hours), (24, 48));
        let s = settings(&[
            ("TABLE_NAME", "archive"),
            ("UNZIPPED_RETENTION_HOURS", "6"),
            ("NOTIFY_EVENT_BUS", "bus"),
        ])
        .unwrap();
        assert_eq!(s.retention_hours, 6);
        assert_eq!(s.event_bus.as_deref(), Some("bus"));
        assert_eq!(settings(&[]).unwrap_err().name, "TABLE_NAME");
        let e = settings(&[("TABLE_NAME", "t"), ("UNZIP_STUCK_HOURS", "2d")]).unwrap_err();
        assert_eq!(e.name, "UNZIP_STUCK_HOURS");
    }
}
