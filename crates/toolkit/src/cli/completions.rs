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

/// The app's command as completions see it: the engine's subcommands
/// with the app's defaults (the app's own global flags are not known
/// here).
pub fn command<A: CliApp>() -> clap::Command {
    let cmd = <super::Command as clap::Subcommand>::augment_subcommands(
        clap::Command::new(A::NAME).subcommand_required(true),
    );
    super::with_app_defaults::<A>(cmd)
}

/// `<app> completions SHELL`.
pub async fn run<A: CliApp>(args: CompletionsArgs) -> Result<ExitCode, CliError> {
    let mut cmd = command::<A>();
    clap_complete::generate(args.shell, &mut cmd, A::NAME, &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
