//! `archive-worker`: the toolkit's command line, with what only the archive
//! worker knows.

use archive_worker::app::{APP, Deps, SHARING};
use archive_worker::keys::Job;
use worker_engine::ConfigError;
use worker_engine::Worker;
use worker_engine::stream::RecordProcessor;
use worker_toolkit::cli::tables::WorkerParts;
use worker_toolkit::cli::{CliApp, NoExtra};

/// The table every `--table` falls back to.
pub const LOCAL_TABLE: &str = "archive-table-local";

/// The archive worker, as the toolkit's command line sees it. No
/// attribute of the archive table is personal data (dates, object keys,
/// vault names): `capture --redact` replaces none.
pub struct Archive;

impl CliApp for Archive {
    type Job = Job;
    type Deps = Deps;
    type Handler = dyn RecordProcessor;
    type Extra = NoExtra;
    const APP: &'static worker_engine::AppSpec<Job, Deps, dyn RecordProcessor> = &APP;
    const DEFAULT_TABLE: &'static str = LOCAL_TABLE;
    const ABOUT: &'static str = "Run the archive worker locally: replay DynamoDB Streams events and schedule \
ticks through the handlers the Lambda functions run, run a job, manage a table, live loop.";
    const TEMPLATE: Option<&'static str> = Some("infra/archive.yaml");
    const EXAMPLES: &'static str = EXAMPLES;

    fn worker(p: WorkerParts<'_>) -> Result<Worker<Job>, ConfigError> {
        p.table_worker(&APP, SHARING)
    }
}

const EXAMPLES: &str = "\
Examples:
  # What does archiving these files do to the date lookup? (embedded DynamoDB Local)
  archive-worker replay --apply-writes events/archive/stream/files-archived.json

  # Expire unzipped files on a copy of a table, at a fixed time
  archive-worker run expire-unzipped --snapshot events/archive/tables/archive.json --now 2024-03-25T00:00:00Z

  # Rebuild the lookup of a table you run
  archive-worker run rebuild-lookup --endpoint-url http://127.0.0.1:8000 --table archive

  # The live loop on the embedded DynamoDB Local, the expiry every minute
  archive-worker dev --cron expire-unzipped='* * * * *'";

#[cfg(test)]
mod tests {
    use super::*;
    use worker_testkit::cli::{check_command_line, local_crons};

    #[test]
    fn the_command_line_is_consistent() {
        check_command_line::<Archive>();
        assert_eq!(
            local_crons::<Archive>(),
            [
                ("expire-unzipped".into(), "0 * * * *".into()),
                ("rebuild-lookup".into(), "never".into())
            ]
        );
    }
}
