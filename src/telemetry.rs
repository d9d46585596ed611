//! Logging setup: JSON lines for Lambda (CloudWatch), text for the CLI.
//! `RUST_LOG` filters (default `info`); `LOG_FORMAT=text|json` overrides.

use tracing_subscriber::EnvFilter;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// Install the global subscriber once; later calls do nothing.
pub fn init(default: LogFormat) {
    let format = match std::env::var("LOG_FORMAT").as_deref() {
        Ok("json") => LogFormat::Json,
        Ok("text") => LogFormat::Text,
        _ => default,
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .with_current_span(false)
            .without_time()
            .try_init(),
        LogFormat::Text => builder.with_target(false).try_init(),
    };
}
