//! `archive-worker`: the command line (see `archive_worker::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = archive_worker::cli::parse();
    worker_toolkit::cli::init_logging(cli.verbose);
    worker_toolkit::cli::main_with(cli.command.run::<archive_worker::cli::Archive>())
}
