//! What a local run takes from the app's deployment template, and the
//! Lambda deadline it meets (`--template`, `--timeout`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use super::{CliApp, CliError};
use crate::template::Deployment;

/// `--template` and `--timeout`.
#[derive(Debug, Clone, Default, Args)]
pub struct DeployOpts {
    /// The deployment template the run follows (function timeouts; for
    /// `dev` also the event source mappings and the schedules). Default:
    /// the app's own template (under infra/), relative to the directory the
    /// command runs in, when the file is there.
    #[arg(long, value_name = "FILE")]
    pub template: Option<PathBuf>,
    /// Seconds an invocation may run, as the Lambda Timeout: handlers stop
    /// DEADLINE_MARGIN_MS before it and leave the rest to the next tick or
    /// retry, as deployed. Default: the template's Timeout of the function;
    /// 0: no deadline.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    pub timeout: Option<f64>,
}

fn parse_timeout(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or_else(|| format!("{s:?} is not a number of seconds (e.g. 120 or 0.5)"))
}

impl DeployOpts {
    /// The template's settings: the `--template` file (an error when it
    /// cannot be read), else the app's template when it exists.
    pub fn deployment<A: CliApp>(&self) -> Result<Option<Deployment>, CliError> {
        let path = match (&self.template, A::TEMPLATE) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) if std::path::Path::new(p).is_file() => PathBuf::from(p),
            _ => return Ok(None),
        };
        Deployment::load(&path)
            .map(Some)
            .map_err(|e| CliError::input(e.file, e.problem))
    }

    /// The time an invocation gets: `--timeout`, else `template` (the
    /// function's Timeout), else none.
    pub fn timeout(&self, template: Option<u64>) -> Option<Duration> {
        match self.timeout {
            Some(t) if t > 0.0 => Some(Duration::from_secs_f64(t)),
            Some(_) => None,
            None => template.map(Duration::from_secs),
        }
    }
}

/// The deadline of an invocation starting now.
pub fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now() + t)
}

/// `120 s` / `no deadline`, for headers.
pub fn describe_timeout(timeout: Option<Duration>) -> String {
    match timeout {
        Some(t) => format!("timeout {} s", t.as_secs_f64()),
        None => "no deadline".to_owned(),
    }
}
