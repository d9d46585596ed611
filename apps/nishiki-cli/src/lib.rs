//! `nishiki-worker`, Nishiki's command line: worker-toolkit's (replay
//! captured events against a real engine and read what changed, run a
//! scheduled job by hand, manage a table, capture a table's stream, run a
//! local event-source loop), with what only Nishiki knows.

use nishiki_worker::config::{Config, ConfigError};
use nishiki_worker::jobs::{APP, JobDeps};
use nishiki_worker::keys::Job;
use nishiki_worker::worker::{Change, ChangeHandler};
use worker_engine::AppSpec;
use worker_engine::Worker;
use worker_toolkit::cli::tables::WorkerParts;
use worker_toolkit::cli::{CliApp, CliError, NoExtra, replay};
use worker_toolkit::replay::redact::Placeholder;

/// The table used when `--table` is not given.
pub const DEFAULT_TABLE: &str = "nishiki-table-local-db";

/// The key attributes of the table, for the engine's replay machinery.
pub const KEYS: (&str, &str) = (nishiki_worker::keys::PK, nishiki_worker::keys::SK);

/// The worker's configuration for a local run on `table`: the Lambda
/// variables from `--env NAME=VALUE`, else the process environment;
/// notifications off (a local run never publishes).
pub fn worker_config(table: &str, env: &[String]) -> Result<Config, CliError> {
    let lookup = replay::worker_env(table, env)?;
    let mut config = Config::from_lookup(&lookup)
        .map_err(|e| CliError::Usage(format!("worker configuration: {e}")))?;
    config.expiry.notify_event_bus = None;
    Ok(config)
}

/// The Nishiki worker, as the toolkit's command line sees it.
pub struct Nishiki;

impl CliApp for Nishiki {
    type Job = Job;
    type Deps = JobDeps;
    type Handler = dyn ChangeHandler<Change>;
    type Extra = NoExtra;
    const APP: &'static AppSpec<Job, JobDeps, dyn ChangeHandler<Change>> = &APP;
    const DEFAULT_TABLE: &'static str = DEFAULT_TABLE;
    const ABOUT: &'static str = ABOUT;
    const DETAILS: Option<&'static str> = Some(DETAILS);
    const TEMPLATE: Option<&'static str> = Some("infra/template.yaml");
    const EXAMPLES: &'static str = EXAMPLES;

    fn personal_attributes() -> Vec<(&'static str, Placeholder)> {
        vec![
            (
                nishiki_worker::items::attr::EMAIL_ADDRESS,
                Placeholder::Email,
            ),
            (nishiki_worker::items::attr::USER_NAME, Placeholder::Name),
            (
                nishiki_worker::items::attr::GROUP_NAME,
                Placeholder::Label("group"),
            ),
            (
                nishiki_worker::items::attr::CONTAINER_NAME,
                Placeholder::Label("container"),
            ),
            // A food's name, inside a container's Foods (and on flags).
            (
                nishiki_worker::items::attr::FOOD_NAME,
                Placeholder::Label("food"),
            ),
            // A link hash is a bearer secret: whoever has it joins the group.
            (
                nishiki_worker::items::attr::INVITATION_LINK_HASH,
                Placeholder::Label("invitation"),
            ),
        ]
    }

    fn examples() -> Vec<(String, String)> {
        [
            ("replay", REPLAY_EXAMPLES),
            ("run", RUN_EXAMPLES),
            ("capture", CAPTURE_EXAMPLES),
            ("dev", DEV_EXAMPLES),
        ]
        .map(|(sub, text)| (sub.to_owned(), text.to_owned()))
        .into()
    }

    fn worker(p: WorkerParts<'_>) -> Result<Worker<Job>, ConfigError> {
        let mut config = Config::from_lookup(p.lookup)?;
        // A local run never publishes.
        config.expiry.notify_event_bus = None;
        Ok(nishiki_worker::app::App::new(p.store, config, p.clock).into_worker())
    }
}

const ABOUT: &str = "Debug the Nishiki worker locally: replay captured DynamoDB Streams events and \
schedule ticks through the same handlers the Lambda functions run, and read what they did to the table.";

const DETAILS: &str = "\
Every command that needs a table starts its own in-memory DynamoDB Local by default (installed on \
first use), creates the table from the schema in code, and stops it at the end. Point it at another \
table with --endpoint-url URL --table NAME (a DynamoDB Local you run, or AWS with credentials from \
the environment, --profile, --region). A command that writes refuses an endpoint that is not on this \
machine unless --allow-remote-writes is given (run and replay do a dry run there instead).";

const EXAMPLES: &str = "\
Examples:
  # What does a group deletion do? (embedded DynamoDB Local, fixed clock)
  nishiki-worker replay --snapshot events/tables/household.json --apply-writes \\
      --now 2024-03-25T09:00:00Z events/stream/group-deleted.json

  # Run the audit on a copy of a table and keep the result
  nishiki-worker run audit --snapshot prod-copy.json --write-snapshot after.json

  # Capture a local table's stream (personal data replaced) and replay it elsewhere
  nishiki-worker capture --endpoint-url http://127.0.0.1:8000 --table t --redact --out cap.json
  nishiki-worker replay --apply-writes cap.json

  # Live loop: the worker reacts to every write made to the table
  nishiki-worker dev --snapshot events/tables/household.json";

const REPLAY_EXAMPLES: &str = "\
Examples:
  nishiki-worker replay --snapshot events/tables/household.json --now 2024-03-25T09:00:00Z \\
      --apply-writes events/stream/group-deleted.json
  nishiki-worker replay --json --dry-run --snapshot t.json captured.json
  nishiki-worker replay --endpoint-url http://127.0.0.1:8000 --table my-table events/schedule/audit.scheduler.json
  nishiki-worker replay --env INVITATION_TTL=on --env EXPIRY_TIME_ZONE=Asia/Tokyo events/stream/invitation-created.json";

const RUN_EXAMPLES: &str = "\
Examples:
  nishiki-worker run sweep-invitations --snapshot events/tables/household.json --now 2024-03-25T09:00:00Z
  nishiki-worker run backfill --endpoint-url https://dynamodb.eu-west-1.amazonaws.com \\
      --table nishiki-table-prod-db --profile prod --allow-remote-writes
  nishiki-worker run audit --endpoint-url http://127.0.0.1:8000 --table my-table --dry-run --env AUDIT_GRACE_SECS=0";

const CAPTURE_EXAMPLES: &str = "\
Examples:
  nishiki-worker capture --endpoint-url http://127.0.0.1:8000 --table t --out events/stream/x.json
  nishiki-worker capture --endpoint-url https://dynamodb.eu-west-1.amazonaws.com \\
      --table nishiki-table-prod-db --since 2024-03-25T08:00:00Z --redact --out incident.json";

const DEV_EXAMPLES: &str = "\
Settings and schedules come from infra/template.yaml (run from the repository root) or --template;
reading starts at its TRIM_HORIZON. Without one: reading starts at LATEST, sweep-invitations
*/15 * * * *, audit 0 3 * * *, flag-expiring 5 0 * * * (UTC), backfill never.

Examples:
  # Embedded DynamoDB Local seeded from a snapshot (its writes not handled); write to it from
  # another terminal
  nishiki-worker dev --snapshot events/tables/household.json --starting-position latest
  nishiki-worker table load --endpoint-url http://127.0.0.1:PORT more-items.json

  # Your own DynamoDB Local, small batches, audit every minute
  nishiki-worker dev --endpoint-url http://127.0.0.1:8000 --table t --batch-size 10 \\
      --bisect --cron audit='* * * * *' --env INVITATION_TTL=on

  # Keep the stream position across restarts: a restart handles what was written meanwhile
  nishiki-worker dev --endpoint-url http://127.0.0.1:8000 --table t --state-file dev-state.json";

#[cfg(test)]
mod tests {
    use super::*;
    use worker_testkit::cli::check_command_line;
    use worker_toolkit::cli::dev;

    #[test]
    fn command_line_is_consistent() {
        check_command_line::<Nishiki>();
        let e = worker_toolkit::cli::parse_from::<Nishiki, _, _>([
            "nishiki-worker",
            "table",
            "snapshot",
        ])
        .unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::MissingRequiredArgument);
    }

    #[test]
    fn cron_overrides() {
        let schedules = dev::schedules::<Nishiki>;
        let s = schedules(&["audit=*/5 * * * *".into(), "backfill=rate(1 hour)".into()]).unwrap();
        let audit = s.iter().find(|(n, _, _)| n == "audit").unwrap();
        assert_eq!(audit.1, "*/5 * * * *");
        assert!(matches!(
            s.iter().find(|(n, _, _)| n == "backfill").unwrap().2,
            worker_toolkit::replay::dev::Schedule::Every(_)
        ));
        let sweep = s.iter().find(|(n, _, _)| n == "sweep-invitations").unwrap();
        assert_eq!(sweep.1, "*/15 * * * *", "the job's own local schedule");
        assert!(schedules(&["vacuum=* * * * *".into()]).is_err());
        assert!(schedules(&["audit".into()]).is_err());
        let e = schedules(&["audit=61 * * * *".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--cron audit") && e.contains("bad schedule"),
            "{e}"
        );
    }
}
