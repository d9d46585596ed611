//! `<app> local start|stop|status`: a DynamoDB Local that stays up between
//! commands, for the flows that take `--endpoint-url` (table, capture, dev,
//! redrive, checkpoints). The same installer as the embedded one
//! ([`crate::local`]); the tables are kept on disk unless `--in-memory`.
//!
//! `start` prints the line that points every command (and the Lambda
//! functions, under `cargo lambda watch`) at it, on stdout:
//!
//! ```text
//! $ eval "$(<app> local start)"
//! DynamoDB Local runs at http://127.0.0.1:8000 (pid 4242, tables in .cache/dynamodb-local/data) ...
//! $ echo $AWS_ENDPOINT_URL_DYNAMODB
//! http://127.0.0.1:8000
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::{CliApp, CliError};
use crate::local::{self, Server};

/// Options of `local`.
#[derive(Debug, Clone, Args)]
pub struct LocalArgs {
    /// `start`, `stop` or `status`.
    #[command(subcommand)]
    pub command: LocalCommand,
}

/// What `local` does.
#[derive(Debug, Clone, Subcommand)]
pub enum LocalCommand {
    /// Start a DynamoDB Local in the background (installed on first use)
    /// and print the `export` line that points every command at it.
    Start(StartArgs),
    /// Stop the DynamoDB Local that `local start` started.
    Stop,
    /// Say whether one runs, and where (exit 1 when none does).
    Status,
}

/// Options of `local start`.
#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    /// The port it listens on (127.0.0.1).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Where the tables are kept between restarts. Default: `data` in
    /// DynamoDB Local's install directory.
    #[arg(long, value_name = "DIR", conflicts_with = "in_memory")]
    pub data_dir: Option<PathBuf>,
    /// Keep the tables in memory: they are gone once it stops.
    #[arg(long)]
    pub in_memory: bool,
}

/// The line that points the SDK (and so every command and function) at
/// `server`.
pub fn export_line(server: &Server) -> String {
    format!(
        "export {}={}",
        worker_engine::aws::DYNAMODB_ENDPOINT_URL,
        server.endpoint
    )
}

fn describe(server: &Server) -> String {
    let tables = match &server.data {
        Some(dir) => format!("tables in {}", dir.display()),
        None => "tables in memory".to_owned(),
    };
    format!(
        "{} (pid {}, {tables}, log {})",
        server.endpoint,
        server.pid,
        server.log.display()
    )
}

/// `<app> local ...`.
pub async fn run<A: CliApp>(args: LocalArgs) -> Result<ExitCode, CliError> {
    let dir = local::default_install_dir();
    match args.command {
        LocalCommand::Start(start) => {
            let data =
                (!start.in_memory).then(|| start.data_dir.unwrap_or_else(|| dir.join("data")));
            let (server, started) = Server::start(&dir, start.port, data.as_deref()).await?;
            if started {
                eprintln!("DynamoDB Local runs at {}", describe(&server));
            } else {
                eprintln!("DynamoDB Local already runs at {}", describe(&server));
            }
            eprintln!(
                "point this shell at it with the line below (or `eval \"$({} local start)\"`); stop it with `{} local stop`",
                A::NAME,
                A::NAME
            );
            println!("{}", export_line(&server));
            Ok(ExitCode::SUCCESS)
        }
        LocalCommand::Stop => {
            match Server::stop(&dir) {
                Some(server) => eprintln!("stopped DynamoDB Local at {}", server.endpoint),
                None => eprintln!(
                    "no DynamoDB Local started by `{} local start` runs",
                    A::NAME
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
        LocalCommand::Status => match Server::running(&dir) {
            Some(server) => {
                eprintln!("DynamoDB Local runs at {}", describe(&server));
                println!("{}", export_line(&server));
                Ok(ExitCode::SUCCESS)
            }
            None => {
                eprintln!(
                    "no DynamoDB Local runs: start one with `{} local start`",
                    A::NAME
                );
                Ok(ExitCode::FAILURE)
            }
        },
    }
}
