//! `nishiki-worker`: Nishiki's command line ([`nishiki_cli::Nishiki`]).

fn main() -> std::process::ExitCode {
    worker_toolkit::cli::main::<nishiki_cli::Nishiki>()
}
