//! The `nishiki-worker` command line: replay captured events against a real
//! engine and read what changed, run a scheduled job by hand, manage a
//! table, capture a table's stream, and run a local event-source loop.
//!
//! One module per subcommand, each with its clap `Args` struct and a `run`
//! function; [`target`] opens the table (an embedded DynamoDB Local by
//! default), [`events`] reads event files, [`output`] renders shared parts.
//! The generic machinery lives in [`worker_engine::replay`].

pub mod capture;
pub mod dev;
pub mod events;
pub mod output;
pub mod replay;
pub mod run;
pub mod table;
pub mod target;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use worker_engine::local::LocalError;
use worker_engine::replay::snapshot::SnapshotError;
use worker_engine::store::StoreError;

/// Exit status when a command ran but a record or a job failed.
pub const EXIT_FAILURES: u8 = 3;

const ABOUT: &str = "Debug the Nishiki worker locally: replay captured DynamoDB Streams events and \
schedule ticks through the same handlers the Lambda functions run, and read what they did to the table.";

const LONG_ABOUT_TAIL: &str = "\
Every command that needs a table starts its own in-memory DynamoDB Local by default (installed on \
first use), creates the table from the schema in code, and stops it at the end. Point it at another \
table with --endpoint-url URL --table NAME (a DynamoDB Local you run, or AWS with credentials from \
the environment).

Exit status: 0 success; 1 error (bad input, no table, DynamoDB unreachable); 2 bad usage; \
3 the command ran but a record failed (batchItemFailures) or a job failed.";

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

/// The `nishiki-worker` command line.
#[derive(Debug, Parser)]
#[command(
    name = "nishiki-worker",
    version,
    about = ABOUT,
    long_about = format!("{ABOUT}\n\n{LONG_ABOUT_TAIL}"),
    after_long_help = EXAMPLES,
    propagate_version = true
)]
pub struct Cli {
    /// More log output on stderr (-v: info, -vv: debug; RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run event files through the worker's handlers and show what changed.
    Replay(replay::ReplayArgs),
    /// Run one scheduled job now.
    Run(run::RunArgs),
    /// Create, snapshot or load a table on any endpoint.
    Table(table::TableArgs),
    /// Write a table's DynamoDB Stream as a Lambda DynamoDB Streams event.
    Capture(capture::CaptureArgs),
    /// Local event-source loop: the worker reacts live to writes to a table.
    Dev(dev::DevArgs),
}

/// Why a command failed; displayed as one line (`error: ...`).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file given on the command line is unusable.
    #[error("{file}: {problem}")]
    Input { file: String, problem: String },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    #[error(
        "table {table:?} does not exist at {endpoint}: run `nishiki-worker table create --endpoint-url {endpoint} --table {table}` (or check --table)"
    )]
    NoTable { endpoint: String, table: String },
    #[error(
        "table {table:?} at {endpoint} has no stream: enable a NEW_AND_OLD_IMAGES stream on it (`nishiki-worker table create` makes tables with one)"
    )]
    NoStream { endpoint: String, table: String },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("cannot start DynamoDB Local: {0}")]
    Local(#[from] LocalError),
    /// Options that do not fit together, or a value the parser let through.
    #[error("{0}")]
    Usage(String),
}

impl CliError {
    pub fn input(file: impl std::fmt::Display, problem: impl Into<String>) -> Self {
        CliError::Input {
            file: file.to_string(),
            problem: problem.into(),
        }
    }
}

/// Install the log subscriber of the command line: text on stderr, `warn`
/// by default (RUST_LOG overrides).
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

/// Run a parsed command line; `Ok` carries the exit status.
pub async fn run(cli: Cli) -> Result<ExitCode, CliError> {
    match cli.command {
        Command::Replay(args) => replay::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Table(args) => table::run(args).await,
        Command::Capture(args) => capture::run(args).await,
        Command::Dev(args) => dev::run(args).await,
    }
}

/// A time as RFC 3339 with `Z` (`2024-03-25T09:00:00Z`).
pub fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Parse `--now`: RFC 3339, e.g. `2024-03-25T09:00:00Z`.
pub fn parse_now(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .map_err(|_| format!("{s:?} is not an RFC 3339 time; use e.g. 2024-03-25T09:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn now_parses_rfc3339_only() {
        assert!(parse_now("2024-03-25T09:00:00Z").is_ok());
        assert!(parse_now("2024-03-25T09:00:00+09:00").is_ok());
        let e = parse_now("yesterday").unwrap_err();
        assert!(e.contains("RFC 3339"), "{e}");
    }
}
