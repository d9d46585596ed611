//! `archive-worker`: the archive worker's command line ([`archive_cli::Archive`]).

fn main() -> std::process::ExitCode {
    worker_toolkit::cli::main::<archive_cli::Archive>()
}
