//! The `shop-worker` command line, assembled from the engine's building
//! blocks (`worker_toolkit::cli`: `replay`, `run`, `table`, `capture`,
//! `dev`), plus `backfill`: the backfill pass run to its end on a table,
//! with a progress bar.

pub mod backfill;

use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use worker_engine::clock::Clock;
use worker_engine::env::ConfigError;
use worker_engine::notify::RecordingPublisher;
use worker_engine::runtime::Worker;
use worker_engine::schema::TableSchema;
use worker_engine::store::Store;
use worker_toolkit::cli::{CliApp, CliError, Command};
use worker_toolkit::replay::redact::Placeholder;

use crate::app::APP;
use crate::config::Settings;
use crate::keys::{self, Job};

/// The table every `--table` falls back to.
pub const LOCAL_TABLE: &str = "shop-table-local";

/// The app's deployment template, relative to the workspace's root: every
/// command with `--template` (`dev`, `run`, `replay`) follows it by default
/// when run there.
pub const TEMPLATE: &str = "infra/shop.yaml";

/// The shop worker, as the engine's command line sees it.
pub struct Shop;

impl CliApp for Shop {
    type Job = Job;
    const NAME: &'static str = "shop-worker";
    const DEFAULT_TABLE: &'static str = LOCAL_TABLE;

    fn schema() -> TableSchema {
        crate::schema::schema()
    }

    /// A user's `email`, its `SKU` (`EMAIL#<email>`) and `name` (a user's
    /// name; products', brands' and categories' names go with it: the
    /// attribute is the same).
    fn personal_attributes() -> Vec<(&'static str, Placeholder)> {
        vec![
            (keys::EMAIL, Placeholder::Email),
            (keys::SKU, Placeholder::Email),
            (keys::NAME, Placeholder::Name),
        ]
    }

    fn local_cron(job: Job) -> &'static str {
        APP.schedule(job).map_or("never", |s| s.local_cron)
    }

    fn template_path() -> Option<&'static str> {
        Some(TEMPLATE)
    }

    fn examples() -> &'static [(&'static str, &'static str)] {
        &[
            (
                "replay",
                "Example:\n  shop-worker replay --snapshot events/shop/tables/shop.json --apply-writes events/shop/stream/products-written.json",
            ),
            (
                "run",
                "Example:\n  shop-worker run stuck-orders --snapshot events/shop/tables/shop.json --now 2024-07-01T00:00:00Z",
            ),
            (
                "dev",
                "Example:\n  shop-worker dev --cron stuck-orders='* * * * *'",
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

const ABOUT: &str = "Run the shop worker locally: replay DynamoDB Streams events and schedule \
ticks through the handlers the Lambda functions run, run a job, backfill a table, live loop.";

const EXAMPLES: &str = "\
Examples:
  # What does the worker derive for these writes? (embedded DynamoDB Local)
  shop-worker replay --snapshot events/shop/tables/shop.json --apply-writes events/shop/stream/products-written.json

  # Orders stuck on a copy of a table, at a fixed time
  shop-worker run stuck-orders --snapshot events/shop/tables/shop.json --now 2024-07-01T00:00:00Z

  # Derive the index attributes of every item of a table you run
  shop-worker backfill --endpoint-url http://127.0.0.1:8000 --table shop";

/// The subcommands: the engine's, and `backfill`.
// Parsed once per process: the engine's variant being larger costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum ShopCommand {
    #[command(flatten)]
    Engine(Command),
    /// Derive the index attributes of every item of a table (the backfill
    /// job to its end, with a progress bar).
    Backfill(backfill::BackfillArgs),
}

impl ShopCommand {
    pub async fn run(self) -> Result<std::process::ExitCode, CliError> {
        match self {
            ShopCommand::Engine(c) => c.run::<Shop>().await,
            ShopCommand::Backfill(args) => backfill::run(args).await,
        }
    }
}

/// `shop-worker`: the command line.
#[derive(Debug, Parser)]
#[command(name = "shop-worker", version, about = ABOUT, after_long_help = EXAMPLES)]
pub struct Cli {
    /// More log output on stderr (-v: info, -vv: debug; RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: ShopCommand,
}

/// The command line with the app's defaults: [`LOCAL_TABLE`] for every
/// `--table`, the app's jobs for `run`.
pub fn command() -> clap::Command {
    worker_toolkit::cli::with_app_defaults::<Shop>(Cli::command())
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
        let cli = parse_from(["shop-worker", "run", "stuck-orders"]).unwrap();
        let ShopCommand::Engine(Command::Run(run)) = cli.command else {
            panic!("run");
        };
        assert_eq!(run.table.table, LOCAL_TABLE);
        let e = parse_from(["shop-worker", "run", "vacuum"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stuck-orders"), "{e}");
        let cli = parse_from(["shop-worker", "backfill"]).unwrap();
        let ShopCommand::Backfill(b) = cli.command else {
            panic!("backfill");
        };
        assert_eq!(b.table.table, LOCAL_TABLE);
        let schedules = worker_toolkit::cli::dev::schedules::<Shop>(&[]).unwrap();
        let crons: Vec<(&str, &str)> = schedules
            .iter()
            .map(|(j, c, _)| (j.as_str(), c.as_str()))
            .collect();
        assert_eq!(
            crons,
            [
                ("audit", "0 3 * * *"),
                ("stuck-orders", "0 * * * *"),
                ("backfill", "never")
            ]
        );
    }

    #[test]
    fn the_default_template_is_the_apps_own() {
        assert_eq!(Shop::template_path(), Some("infra/shop.yaml"));
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        assert!(root.join(TEMPLATE).is_file());
    }
}
