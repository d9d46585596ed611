//! `<app> completions SHELL`: a shell completion script for the app's
//! command line (clap_complete), on stdout.

use std::process::ExitCode;

use clap::Args;

use super::{CliApp, CliError};

/// Options of `completions`.
#[derive(Debug, Clone, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

/// `<app> completions SHELL`.
pub async fn run<A: CliApp>(args: CompletionsArgs) -> Result<ExitCode, CliError> {
    let mut cmd = super::command::<A>();
    clap_complete::generate(args.shell, &mut cmd, A::NAME, &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
