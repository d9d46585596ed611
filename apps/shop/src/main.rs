//! `shop-worker`: the command line (see `shop_worker::cli`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = shop_worker::cli::parse();
    worker_engine::cli::init_logging(cli.verbose);
    worker_engine::cli::main_with(cli.command.run())
}
