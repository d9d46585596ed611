//! `shop-worker`: the command line (see `shop_worker::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = shop_worker::cli::parse();
    worker_toolkit::cli::init_logging(cli.verbose);
    worker_toolkit::cli::main_with(cli.command.run())
}
