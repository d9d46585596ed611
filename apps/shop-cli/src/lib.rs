//! `shop-worker`: the toolkit's command line, with what only the shop
//! worker knows, and `backfill` (the backfill pass to its end, with a
//! progress bar).

pub mod backfill;

use clap::Subcommand;
use worker_engine::AppSpec;
use worker_engine::ConfigError;
use worker_engine::Worker;
use worker_engine::stream::RecordProcessor;
use worker_toolkit::cli::tables::WorkerParts;
use worker_toolkit::cli::{CliApp, CliError, ExtraCommand};
use worker_toolkit::replay::redact::Placeholder;

use shop_worker::app::{APP, Deps, SHARING};
use shop_worker::keys::{self, Job};

/// The table every `--table` falls back to.
pub const LOCAL_TABLE: &str = "shop-table-local";

/// The shop worker, as the toolkit's command line sees it.
pub struct Shop;

impl CliApp for Shop {
    type Job = Job;
    type Deps = Deps;
    type Handler = dyn RecordProcessor;
    type Extra = ShopCommand;
    const APP: &'static AppSpec<Job, Deps, dyn RecordProcessor> = &APP;
    const DEFAULT_TABLE: &'static str = LOCAL_TABLE;
    const ABOUT: &'static str = ABOUT;
    const TEMPLATE: Option<&'static str> = Some("infra/shop.yaml");
    const EXAMPLES: &'static str = EXAMPLES;

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

    fn worker(p: WorkerParts<'_>) -> Result<Worker<Job>, ConfigError> {
        p.table_worker(&APP, SHARING)
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
  shop-worker backfill --endpoint-url http://127.0.0.1:8000 --table shop

  # The live loop on the embedded DynamoDB Local, the stuck-orders job every minute
  shop-worker dev --cron stuck-orders='* * * * *'";

/// The shop worker's own subcommand, beside the toolkit's.
#[derive(Debug, Subcommand)]
pub enum ShopCommand {
    /// Derive the index attributes of every item of a table (the backfill
    /// job to its end, with a progress bar).
    Backfill(backfill::BackfillArgs),
}

impl ExtraCommand for ShopCommand {
    async fn run(self) -> Result<std::process::ExitCode, CliError> {
        match self {
            ShopCommand::Backfill(args) => backfill::run(args).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use worker_testkit::cli::{check_command_line, local_crons};
    use worker_toolkit::cli::{AppCommand, parse_from};

    #[test]
    fn the_command_line_is_consistent() {
        check_command_line::<Shop>();
        let cli = parse_from::<Shop, _, _>(["shop-worker", "backfill"]).unwrap();
        let AppCommand::App(ShopCommand::Backfill(b)) = cli.command else {
            panic!("backfill");
        };
        assert_eq!(b.table.table, [LOCAL_TABLE]);
        assert_eq!(
            local_crons::<Shop>(),
            [
                ("audit".into(), "0 3 * * *".into()),
                ("stuck-orders".into(), "0 * * * *".into()),
                ("backfill".into(), "never".into())
            ]
        );
    }
}
