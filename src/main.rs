//! The `nishiki-worker` command line (see `nishiki_worker::cli`): parse the
//! arguments, run the command, print an error as one line and exit non-zero.

use std::process::ExitCode;

use nishiki_worker::cli;

fn main() -> ExitCode {
    let args = cli::parse();
    worker_toolkit::cli::init_logging(args.verbose);
    worker_toolkit::cli::main_with(cli::run(args))
}
