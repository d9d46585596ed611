//! The `archive-worker` command line, assembled from the engine's building
//! blocks (`worker_toolkit::cli`): replay captured events through the
//! Lambda handlers and read what changed, run a job by hand, manage a
//! table, capture a table's stream, run a local event-source loop.

use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser};
use worker_engine::clock::Clock;
use worker_engine::env::ConfigError;
use worker_engine::runtime::Worker;
use worker_engine::schema::TableSchema;
use worker_engine::store::Store;
use worker_toolkit::cli::{CliApp, Command};
use worker_toolkit::replay::redact::Placeholder;

use crate::app::APP;
use crate::config::Settings;
use crate::keys::Job;
use crate::notify::RecordingPublisher;

/// The table every `--table` falls back to.
pub const LOCAL_TABLE: &str = "archive-table-local";

/// The archive worker, as the engine's command line sees it.
pub struct Archive;

impl CliApp for Archive {
    type Job = Job;
    const NAME: &'static str = "archive-worker";
    const DEFAULT_TABLE: &'static str = LOCAL_TABLE;

    fn schema() -> TableSchema {
        crate::schema::schema()
    }

    /// No attribute of the archive table is personal data (dates, object
    /// keys, vault names).
    fn personal_attributes() -> Vec<(&'static str, Placeholder)> {
        Vec::new()
    }

    fn template_path() -> Option<&'static str> {
        Some("infra/archive.yaml")
    }

    fn checkpoint_key(job: Job) -> Option<worker_engine::store::Key> {
        Some(crate::keys::checkpoint(job))
    }

    fn local_cron(job: Job) -> &'static str {
        APP.schedule(job).map_or("never", |s| s.local_cron)
    }

    fn examples() -> &'static [(&'static str, &'static str)] {
        &[
            (
                "replay",
                "Example:\n  archive-worker replay --apply-writes --now 2024-03-25T00:00:00Z events/archive/stream/files-archived.json",
            ),
            (
                "run",
                "Example:\n  archive-worker run expire-unzipped --snapshot events/archive/tables/archive.json --now 2024-03-25T00:00:00Z",
            ),
            (
                "dev",
                "Example:\n  archive-worker dev --cron expire-unzipped='* * * * *'",
            ),
        ]
    }

    /// Configured from `lookup` like Lambda; a local run never publishes
    /// (events are recorded and dropped).
    fn worker(
        store: Arc<dyn Store>,
        lookup: &dyn Fn(&str) -> Option<String>,
        clock: Arc<dyn Clock>,
    ) -> Result<Worker<Job>, ConfigError> {
        let settings = Settings::from_lookup(lookup)?;
        Ok(crate::app::worker(
            store,
            settings,
            Arc::new(RecordingPublisher::default()),
            clock,
        ))
    }
}

const ABOUT: &str = "Run the archive worker locally: replay DynamoDB Streams events and schedule \
ticks through the handlers the Lambda functions run, run a job, manage a table, live loop.";

const EXAMPLES: &str = "\
Examples:
  # What does archiving these files do to the date lookup? (embedded DynamoDB Local)
  archive-worker replay --apply-writes events/archive/stream/files-archived.json

  # Expire unzipped files on a copy of a table, at a fixed time
  archive-worker run expire-unzipped --snapshot events/archive/tables/archive.json --now 2024-03-25T00:00:00Z

  # Rebuild the lookup of a table you run
  archive-worker run rebuild-lookup --endpoint-url http://127.0.0.1:8000 --table archive";

/// `archive-worker`: the command line.
#[derive(Debug, Parser)]
#[command(name = "archive-worker", version, about = ABOUT, after_long_help = EXAMPLES)]
pub struct Cli {
    /// More log output on stderr (-v: info, -vv: debug; RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The command line with the app's defaults: [`LOCAL_TABLE`] for every
/// `--table`, the app's jobs for `run`.
pub fn command() -> clap::Command {
    worker_toolkit::cli::with_app_defaults::<Archive>(Cli::command())
}

/// Parse the process's arguments (exits with usage on error).
pub fn parse() -> Cli {
    Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit())
}

/// Parse arguments (`args[0]` is the program name).
pub fn parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::from_arg_matches(&command().try_get_matches_from(args)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
        let cli = parse_from(["archive-worker", "run", "rebuild-lookup"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("run");
        };
        assert_eq!(run.table.table, LOCAL_TABLE);
        let e = parse_from(["archive-worker", "run", "vacuum"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("expire-unzipped"), "{e}");
        let schedules = worker_toolkit::cli::dev::schedules::<Archive>(&[]).unwrap();
        let crons: Vec<(&str, &str)> = schedules
            .iter()
            .map(|(j, c, _)| (j.as_str(), c.as_str()))
            .collect();
        assert_eq!(
            crons,
            [
                ("expire-unzipped", "0 * * * *"),
                ("rebuild-lookup", "never")
            ]
        );
    }

    #[test]
    fn the_default_template_is_the_apps_own() {
        let path = Archive::template_path();
        assert_eq!(path, Some("infra/archive.yaml"));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert!(root.join(path.unwrap()).is_file());
    }
}
