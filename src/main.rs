//! The `nishiki-worker` command line (see `nishiki_worker::cli`): parse the
//! arguments, run the command, print an error as one line and exit non-zero.

use std::process::ExitCode;

use clap::Parser;
use nishiki_worker::cli::{self, Cli};

fn main() -> ExitCode {
    let args = Cli::parse();
    cli::init_logging(args.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
