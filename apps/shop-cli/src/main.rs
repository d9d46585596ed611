//! `shop-worker`: the shop worker's command line ([`shop_cli::Shop`]).

fn main() -> std::process::ExitCode {
    worker_toolkit::cli::main::<shop_cli::Shop>()
}
