//! `chat-worker`: the chat worker's command line ([`chat_cli::Chat`]).

fn main() -> std::process::ExitCode {
    worker_toolkit::cli::main::<chat_cli::Chat>()
}
