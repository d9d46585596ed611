//! An app's command line, generic over the app ([`CliApp`]): one clap
//! `Args` struct and one `run` function per subcommand (`replay`, `run`,
//! `table`, `capture`, `dev`, `redrive`, `checkpoints`, `local`,
//! `completions`). Every command that writes passes the one guard
//! [`target::refuse_remote_writes`] before it connects, and
//! [`target::Target::announce_writes`] before its first write.
//!
//! An app's binary is one line, [`main`]; its [`CliApp`] states what the
//! command line cannot know: the table it falls back to, its help texts,
//! the worker of a local run. [`command`] is the app's whole command (its
//! name, help, examples, the toolkit's subcommands and its own
//! [`CliApp::Extra`] ones, the defaults of [`with_app_defaults`]).
//!
//! [`target`] opens the table (an embedded DynamoDB Local by default),
//! [`events`] reads event files, [`output`] renders shared parts. The
//! machinery underneath lives in [`crate::replay`].

// The `Args` structs' doc comments are the command line's help text, read
// by users: URLs and `<placeholders>` stay as they read there.
#![allow(rustdoc::bare_urls, rustdoc::invalid_html_tags)]

pub mod capture;
pub mod checkpoints;
pub mod completions;
pub mod deployment;
pub mod dev;
pub mod events;
pub mod local;
pub mod output;
pub mod redrive;
pub mod replay;
pub mod run;
pub mod table;
pub mod tables;
pub mod target;

use std::future::Future;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

use crate::local::LocalError;
use crate::replay::redact::Placeholder;
use crate::replay::snapshot::SnapshotError;
use worker_engine::AppSpec;
use worker_engine::ConfigError;
use worker_engine::Worker;
use worker_engine::schedule::JobName;
use worker_engine::schema::TableSchema;
use worker_engine::store::StoreError;

/// Exit status when a command ran but a record was not handled (failed,
/// rejected, malformed, not the app's, given up on) or a job failed.
pub const EXIT_FAILURES: u8 = 3;

/// Exit status when every job run succeeded but one stopped at its
/// deadline with work left: run the command again to resume (as the next
/// tick would), until it exits 0.
pub const EXIT_INCOMPLETE: u8 = 4;

/// What every app's `--help` says of its exit status.
pub const EXIT_STATUS_HELP: &str = "\
Exit status:
  0  success: every record handled, every job complete
  1  error: bad input, no table, nothing answers at the endpoint, or an
     environment fault (a missing table or index, access denied, a bad
     credential: the deployment, not the records; nothing was skipped)
  2  bad usage
  3  the command ran but a record was not handled (failed, rejected, malformed,
     not the app's, given up on) or a job failed
  4  a job stopped at its deadline with work left: run the command again to resume";

/// The exit status of a command that ran: [`EXIT_FAILURES`] over
/// [`EXIT_INCOMPLETE`] over success.
pub fn exit_status(failed: bool, incomplete: bool) -> std::process::ExitCode {
    if failed {
        std::process::ExitCode::from(EXIT_FAILURES)
    } else if incomplete {
        std::process::ExitCode::from(EXIT_INCOMPLETE)
    } else {
        std::process::ExitCode::SUCCESS
    }
}

/// What the command line needs to know of an app beyond its
/// [`AppSpec`](CliApp::APP).
pub trait CliApp: Send + Sync + 'static {
    /// The app's jobs.
    type Job: JobName;
    /// What the app's jobs are built from (the `D` of its [`AppSpec`]).
    type Deps: ?Sized + 'static;
    /// Its handlers' type (the `H` of its [`AppSpec`]).
    type Handler: ?Sized + 'static;
    /// Subcommands of the app's own, beside the toolkit's ([`NoExtra`]:
    /// none).
    type Extra: ExtraCommand;
    /// The app, described once: its name, jobs and their schedules.
    const APP: &'static AppSpec<Self::Job, Self::Deps, Self::Handler>;
    /// The command's name, in messages that say what to run next: the
    /// app's name.
    const NAME: &'static str = Self::APP.name;
    /// The table every `--table` falls back to: for an app of several
    /// tables, the target (home) table's default name, which is also its
    /// role in `--table ROLE=NAME`.
    const DEFAULT_TABLE: &'static str;
    /// The variable naming the target table, in the Lambda functions and
    /// on the command line.
    const TABLE_VAR: &'static str = worker_engine::settings::TABLE_NAME;
    /// One line of `--help`.
    const ABOUT: &'static str;
    /// What `--help` adds after [`CliApp::ABOUT`], if anything.
    const DETAILS: Option<&'static str> = None;
    /// The examples after `--help`'s options.
    const EXAMPLES: &'static str;
    /// The table as the app expects it (created on the embedded DynamoDB
    /// Local and by `table create`): by default, its [`AppSpec`]'s.
    fn schema() -> TableSchema {
        (Self::APP.schema)()
    }
    /// Attributes holding personal data, replaced by `capture --redact`
    /// (`Placeholder::Email`, `Placeholder::Name`, ...); none by default.
    fn personal_attributes() -> Vec<(&'static str, Placeholder)> {
        Vec::new()
    }
    /// A job's schedule in the local event-source loop: a 5-field cron in
    /// UTC, or `never`; by default its schedule's `local_cron`.
    fn local_cron(job: Self::Job) -> &'static str {
        Self::APP.schedule(job).map_or("never", |s| s.local_cron)
    }
    /// Examples shown after a subcommand's long help, by subcommand name
    /// (`replay`, `run`, `table`, `capture`, `dev`): by default, the
    /// paragraphs of [`CliApp::EXAMPLES`] that run it ([`examples_of`]).
    fn examples() -> Vec<(String, String)> {
        examples_of(Self::NAME, Self::EXAMPLES)
    }
    /// The app's deployment template, relative to the directory the
    /// command runs in: `dev`, `run` and `replay` take their settings
    /// (mapping, schedules, time zones, timeouts) from it when `--template`
    /// is not given and the file exists. `None`: no template.
    const TEMPLATE: Option<&'static str> = None;
    /// The key of a job's resume checkpoint, if the job keeps one
    /// (`checkpoints list|reset`): by default, its [`AppSpec`]'s.
    fn checkpoint_key(job: Self::Job) -> Option<worker_engine::store::Key> {
        (Self::APP.checkpoint)(job)
    }
    /// The worker of a command ([`tables::WorkerParts`]: the target
    /// table's store, the other tables', transactions, the variables and
    /// the clock). A local run never publishes to a real event bus.
    fn worker(parts: tables::WorkerParts<'_>) -> Result<Worker<Self::Job>, ConfigError>;
    /// The tables the worker serves besides the target table (see
    /// [`tables`]; [`tables::others_of`] for a `TableSet`); none by
    /// default.
    fn other_tables() -> Vec<tables::OtherTable> {
        Vec::new()
    }
}

/// The subcommands every app's command line has: the engine's `Args`. An
/// app's `Parser` holds it as its subcommand
/// (`#[command(subcommand)] command: worker_toolkit::cli::Command`), and its
/// examples come from [`CliApp::examples`].
#[derive(Debug, clap::Subcommand)]
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
    /// Replay parked records (or an on-failure message's range) through the current handlers.
    Redrive(redrive::RedriveArgs),
    /// List the jobs' resume checkpoints, or reset one.
    Checkpoints(checkpoints::CheckpointsArgs),
    /// Start or stop a DynamoDB Local that stays up between commands.
    Local(local::LocalArgs),
    /// Print a shell completion script.
    Completions(completions::CompletionsArgs),
}

impl Command {
    /// Run the command for app `A`; `Ok` carries the exit status.
    pub async fn run<A: CliApp>(self) -> Result<std::process::ExitCode, CliError> {
        match self {
            Command::Replay(args) => replay::run::<A>(args).await,
            Command::Run(args) => run::run::<A>(args).await,
            Command::Table(args) => table::run::<A>(args).await,
            Command::Capture(args) => capture::run::<A>(args).await,
            Command::Dev(args) => dev::run::<A>(args).await,
            Command::Redrive(args) => redrive::run::<A>(args).await,
            Command::Checkpoints(args) => checkpoints::run::<A>(args).await,
            Command::Local(args) => local::run::<A>(args).await,
            Command::Completions(args) => completions::run::<A>(args).await,
        }
    }
}

/// An app's own subcommands beside the toolkit's (a `clap::Subcommand`
/// enum), each run to an exit status.
pub trait ExtraCommand: clap::Subcommand + std::fmt::Debug + Send + 'static {
    /// Run the subcommand; `Ok` carries the exit status ([`exit_status`]),
    /// `Err` is printed as one line and exits 1.
    fn run(self) -> impl Future<Output = Result<ExitCode, CliError>> + Send;
}

/// No subcommand of the app's own.
#[derive(Debug, Clone, Copy)]
pub enum NoExtra {}

impl FromArgMatches for NoExtra {
    fn from_arg_matches(_: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Err(clap::Error::new(clap::error::ErrorKind::InvalidSubcommand))
    }

    fn update_from_arg_matches(&mut self, _: &clap::ArgMatches) -> Result<(), clap::Error> {
        match *self {}
    }
}

impl clap::Subcommand for NoExtra {
    fn augment_subcommands(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn augment_subcommands_for_update(cmd: clap::Command) -> clap::Command {
        cmd
    }

    fn has_subcommand(_: &str) -> bool {
        false
    }
}

impl ExtraCommand for NoExtra {
    async fn run(self) -> Result<ExitCode, CliError> {
        match self {}
    }
}

/// The subcommands of an app: the toolkit's, then its own.
#[derive(Debug, clap::Subcommand)]
// Parsed once per process: the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum AppCommand<E: ExtraCommand> {
    /// One of the toolkit's subcommands (`replay`, `run`, `table`, ...).
    #[command(flatten)]
    Toolkit(Command),
    /// One of the app's own ([`CliApp::Extra`]).
    #[command(flatten)]
    App(E),
}

/// An app's command line; parse it with [`parse_from`] (or [`command`]),
/// which give it the app's name, help and defaults.
#[derive(Debug, clap::Parser)]
#[command(version, propagate_version = true)]
pub struct Cli<E: ExtraCommand> {
    /// More log output on stderr (-v: info, -vv: debug; RUST_LOG overrides).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// The subcommand given.
    #[command(subcommand)]
    pub command: AppCommand<E>,
}

impl<E: ExtraCommand> Cli<E> {
    /// Run the parsed command for app `A`; `Ok` carries the exit status.
    pub async fn run<A: CliApp<Extra = E>>(self) -> Result<ExitCode, CliError> {
        match self.command {
            AppCommand::Toolkit(command) => command.run::<A>().await,
            AppCommand::App(command) => command.run().await,
        }
    }
}

/// The app's whole command: its name, help and examples
/// ([`CliApp::ABOUT`], [`CliApp::DETAILS`], [`CliApp::EXAMPLES`]), every
/// subcommand, and the app's defaults ([`with_app_defaults`]).
pub fn command<A: CliApp>() -> clap::Command {
    let cmd = Cli::<A::Extra>::command()
        .name(A::NAME)
        .bin_name(A::NAME)
        .about(A::ABOUT)
        .after_long_help(A::EXAMPLES);
    let cmd = match A::DETAILS {
        Some(details) => cmd.long_about(format!("{}\n\n{details}", A::ABOUT)),
        None => cmd,
    };
    with_app_defaults::<A>(cmd)
}

/// Parse `args` (`args[0]` is the program name) as app `A`'s command line.
pub fn parse_from<A, I, T>(args: I) -> Result<Cli<A::Extra>, clap::Error>
where
    A: CliApp,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::from_arg_matches(&command::<A>().try_get_matches_from(args)?)
}

/// An app's whole `main`: parse the process's arguments (usage and exit 2
/// on error), install the log subscriber, run the command and exit with
/// its status (an error printed as one line).
pub fn main<A: CliApp>() -> ExitCode {
    let cli = parse_from::<A, _, _>(std::env::args_os()).unwrap_or_else(|e| e.exit());
    init_logging(cli.verbose);
    main_with(cli.run::<A>())
}

/// The job names of an app, for `run`'s `JOB` argument.
pub fn job_names<A: CliApp>() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(A::Job::ALL.iter().map(|j| j.as_str()))
}

/// An app's command with its defaults: every `--table` (at any depth:
/// `table create` too) as the app's tables are named (`table_arg`:
/// [`CliApp::DEFAULT_TABLE`], or roles), the app's job names for
/// `run`'s `JOB`, and its examples ([`CliApp::examples`]). Parse with this command, not the derived one, or the
/// defaults are lost.
pub fn with_app_defaults<A: CliApp>(cmd: clap::Command) -> clap::Command {
    fn with_table<A: CliApp>(cmd: clap::Command) -> clap::Command {
        let cmd = if cmd.get_arguments().any(|a| a.get_id() == "table") {
            let picks = matches!(cmd.get_name(), "snapshot" | "capture");
            cmd.mut_arg("table", |a| table_arg::<A>(a, picks))
        } else {
            cmd
        };
        let names: Vec<String> = cmd
            .get_subcommands()
            .map(|s| s.get_name().to_owned())
            .collect();
        names
            .into_iter()
            .fold(cmd, |cmd, name| cmd.mut_subcommand(name, with_table::<A>))
    }
    let cmd = with_table::<A>(cmd);
    let help = match cmd.get_after_long_help() {
        Some(before) => format!("{before}\n\n{EXIT_STATUS_HELP}"),
        None => EXIT_STATUS_HELP.to_owned(),
    };
    let cmd = cmd.after_long_help(help);
    let cmd = if cmd.find_subcommand("run").is_some() {
        cmd.mut_subcommand("run", |c| {
            c.mut_arg("job", |a| a.value_parser(job_names::<A>()))
        })
    } else {
        cmd
    };
    A::examples().into_iter().fold(cmd, |cmd, (name, text)| {
        if cmd.find_subcommand(&name).is_some() {
            cmd.mut_subcommand(name, |c| c.after_long_help(text))
        } else {
            cmd
        }
    })
}

/// `--table` for app `A`: one name, defaulting to [`CliApp::DEFAULT_TABLE`]
/// and its variable, for an app of one table; `ROLE=NAME` (repeatable)
/// for an app of several, each table's variable being read when the
/// command names its tables ([`tables::name_tables`]). `picks`: the
/// command also takes a bare `ROLE`, the one table it works on.
fn table_arg<A: CliApp>(arg: clap::Arg, picks: bool) -> clap::Arg {
    let others = A::other_tables();
    if others.is_empty() {
        return arg
            .env(A::TABLE_VAR)
            .default_value(A::DEFAULT_TABLE)
            .required(false)
            .action(clap::ArgAction::Set);
    }
    let roles: Vec<String> = std::iter::once((A::DEFAULT_TABLE, A::TABLE_VAR))
        .chain(others.iter().map(|o| (o.default_name, o.var)))
        .map(|(role, var)| format!("{role} ({var})"))
        .collect();
    let pick = if picks {
        "; ROLE alone: only that table"
    } else {
        ""
    };
    arg.env(None)
        .required(false)
        .action(clap::ArgAction::Append)
        .value_name("ROLE=NAME")
        .help(format!(
            "A table by its role (repeatable){pick}. Default: each role's variable, else the role; roles (variables): {}",
            roles.join(", ")
        ))
}

/// Each subcommand's examples in `examples`, the text after an app's
/// `--help` (`Examples:`, then paragraphs of `#` comments and commands):
/// the paragraphs with a command `name SUBCOMMAND ...`, under `Example:`
/// (or `Examples:`, several), by subcommand in order of first use.
pub fn examples_of(name: &str, examples: &str) -> Vec<(String, String)> {
    let body = examples
        .split_once('\n')
        .filter(|(head, _)| head.trim_end().ends_with(':'))
        .map_or(examples, |(_, rest)| rest);
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for paragraph in body.split("\n\n") {
        let runs = paragraph.lines().filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(name)).then(|| words.next()).flatten()
        });
        for sub in runs {
            match out.iter_mut().find(|(s, _)| s == sub) {
                Some((_, ps)) if ps.last() != Some(&paragraph) => ps.push(paragraph),
                Some(_) => {}
                None => out.push((sub.to_owned(), vec![paragraph])),
            }
        }
    }
    out.into_iter()
        .map(|(sub, ps)| {
            let head = if ps.len() > 1 {
                "Examples:"
            } else {
                "Example:"
            };
            (sub, format!("{head}\n{}", ps.join("\n\n")))
        })
        .collect()
}

/// Why a command failed; displayed as one line (`error: ...`).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A file given on the command line is unusable.
    #[error("{file}: {problem}")]
    Input {
        /// The file's path, as given.
        file: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A snapshot file cannot be read or written.
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The target table does not exist at the endpoint.
    #[error(
        "table {table:?} does not exist at {endpoint}: run `{app} table create --endpoint-url {endpoint} --table {table_arg}` (or check --table)"
    )]
    NoTable {
        /// The app's name ([`CliApp::NAME`]), in the command to run.
        app: &'static str,
        /// The DynamoDB endpoint asked.
        endpoint: String,
        /// The table's name.
        table: String,
        /// `--table`'s value that names it: the name, or `ROLE=NAME` for an
        /// app of several tables.
        table_arg: String,
    },
    /// One of the app's other tables ([`CliApp::other_tables`]) is missing.
    #[error(
        "table {table:?} ({var}) does not exist at {endpoint}: run `{app} table create --endpoint-url {endpoint}` with the same table names (it creates every table of the app), or check {var} and --table"
    )]
    NoOtherTable {
        /// The app's name ([`CliApp::NAME`]), in the command to run.
        app: &'static str,
        /// The DynamoDB endpoint asked.
        endpoint: String,
        /// The missing table's name.
        table: String,
        /// The variable that names it.
        var: &'static str,
    },
    /// The table has no stream: `capture` and `dev` read one.
    #[error(
        "table {table:?} at {endpoint} has no stream: enable a NEW_AND_OLD_IMAGES stream on it (`{app} table create` makes tables with one)"
    )]
    NoStream {
        /// The app's name ([`CliApp::NAME`]), in the command to run.
        app: &'static str,
        /// The DynamoDB endpoint asked.
        endpoint: String,
        /// The table's name.
        table: String,
    },
    /// The table's stream does not carry what the app's handlers read
    /// ([`TableSchema::stream_needs`]): `capture` and `dev` refuse it.
    #[error(
        "table {table:?} at {endpoint} has a {view} stream, but {app} needs {accepted} (its handlers read images a {view} record lacks): replace the stream with `aws dynamodb update-table --endpoint-url {endpoint} --table-name {table} --stream-specification StreamEnabled=false` then `aws dynamodb update-table --endpoint-url {endpoint} --table-name {table} --stream-specification StreamEnabled=true,StreamViewType={wanted}`, or create a table with `{app} table create --endpoint-url {endpoint} --table NEW-NAME`"
    )]
    StreamView {
        /// The app's name ([`CliApp::NAME`]), in the commands to run.
        app: &'static str,
        /// The DynamoDB endpoint asked.
        endpoint: String,
        /// The table's name.
        table: String,
        /// The stream's view type (DescribeStream's), or what stands for
        /// a missing one.
        view: Box<str>,
        /// The views the app accepts, `A or B`.
        accepted: Box<str>,
        /// The view to enable.
        wanted: &'static str,
    },
    /// A command that writes was pointed at a table that is not on this
    /// machine without `--allow-remote-writes`.
    #[error(
        "refusing to write to {endpoint} with `{command}`: it is not on this machine. Check --endpoint-url and --table (AWS_ENDPOINT_URL_DYNAMODB, DYNAMODB_ENDPOINT_URL, AWS_ENDPOINT_URL, TABLE_NAME); to write there, add --allow-remote-writes"
    )]
    RemoteWrites {
        /// The command refused, as the user knows it (`dev`, `table create`,
        /// ...).
        command: String,
        /// The endpoint it was pointed at.
        endpoint: String,
    },
    /// Nothing answers at the endpoint.
    #[error(
        "nothing answers at {endpoint} ({reason}): start a DynamoDB Local (`{app} local start` prints its endpoint) or point --endpoint-url (AWS_ENDPOINT_URL_DYNAMODB) at one that runs"
    )]
    Unreachable {
        /// The program's name as run (its file name; `<app>` when unknown),
        /// in the command to run.
        app: String,
        /// The endpoint's address (`http://HOST:PORT`), or `the DynamoDB
        /// endpoint` when the connector's message does not say it.
        endpoint: String,
        /// Why, in a few words (`connection refused`, ...).
        reason: &'static str,
    },
    /// Any other store error, as the store gave it.
    #[error("{0}")]
    Store(StoreError),
    /// The deployment, not the records, is wrong (a missing table or
    /// index, access denied, a bad credential): what makes the function
    /// fail its invocation. Exit status 1.
    #[error(
        "environment fault, nothing parked or skipped (the table, index, credentials or permissions, not the records): {0}"
    )]
    Environment(String),
    /// The embedded DynamoDB Local could not be installed or started.
    #[error("cannot start DynamoDB Local: {0}")]
    Local(#[from] LocalError),
    /// Options that do not fit together, or a value the parser let through.
    #[error("{0}")]
    Usage(String),
}

/// A store error, or [`CliError::Unreachable`] when nothing answered at the
/// endpoint (its address read from the connector's message).
impl From<StoreError> for CliError {
    fn from(e: StoreError) -> Self {
        if let StoreError::Transient { code, message, .. } = &e
            && code == "transport"
            && let Some(reason) = target::unreachable(message)
        {
            let app = std::env::args_os()
                .next()
                .and_then(|a| {
                    std::path::Path::new(&a)
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                })
                .unwrap_or_else(|| "<app>".to_owned());
            return CliError::Unreachable {
                app,
                endpoint: target::connect_address(message).map_or_else(
                    || "the DynamoDB endpoint".to_owned(),
                    |a| format!("http://{a}"),
                ),
                reason,
            };
        }
        CliError::Store(e)
    }
}

impl CliError {
    /// [`CliError::Input`]: `file` (a path, as given) is unusable because
    /// of `problem`.
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

/// Run a command's future on a multi-threaded runtime and turn its result
/// into the process's exit status (an error is printed as one line). A
/// closed stdout (`| head`) ends the command quietly, as it ends `cat`: the
/// default action of SIGPIPE is restored (Rust ignores it, and the next
/// `println!` would panic); an embedded DynamoDB Local stops with the
/// process (its watchdog's lifeline closes).
pub fn main_with<F>(command: F) -> std::process::ExitCode
where
    F: std::future::Future<Output = Result<std::process::ExitCode, CliError>>,
{
    #[cfg(unix)]
    // SAFETY: called before any thread is started; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

pub use worker_engine::clock::rfc3339;

/// Parse `--now`: RFC 3339, e.g. `2024-03-25T09:00:00Z`.
pub fn parse_now(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.to_utc())
        .map_err(|_| format!("{s:?} is not an RFC 3339 time; use e.g. 2024-03-25T09:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_subcommand_gets_the_examples_that_run_it() {
        let text = "\
Examples:
  # Replay a capture
  app replay --apply-writes cap.json

  # A table of your own, then the live loop on it
  app table create --endpoint-url http://127.0.0.1:8000
  app dev --endpoint-url http://127.0.0.1:8000

  # Replay with a snapshot
  app replay --snapshot s.json \\
      cap.json";
        let e = examples_of("app", text);
        let subs: Vec<_> = e.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(subs, ["replay", "table", "dev"]);
        assert_eq!(
            e[0].1,
            "Examples:\n  # Replay a capture\n  app replay --apply-writes cap.json\n\n  \
             # Replay with a snapshot\n  app replay --snapshot s.json \\\n      cap.json"
        );
        assert_eq!(
            e[2].1,
            "Example:\n  # A table of your own, then the live loop on it\n  \
             app table create --endpoint-url http://127.0.0.1:8000\n  \
             app dev --endpoint-url http://127.0.0.1:8000"
        );
        assert!(examples_of("other", text).is_empty());
    }

    #[test]
    fn now_parses_rfc3339_only() {
        assert!(parse_now("2024-03-25T09:00:00Z").is_ok());
        assert!(parse_now("2024-03-25T09:00:00+09:00").is_ok());
        let e = parse_now("yesterday").unwrap_err();
        assert!(e.contains("RFC 3339"), "{e}");
    }
}
