//! Logging setup: JSON lines for Lambda (CloudWatch), text for the CLI.
//! `RUST_LOG` filters (default `info`); `LOG_FORMAT=text|json` overrides.
//!
//! A JSON line is `{"level", "fields": {"message", ...}, "target", "span",
//! "spans"}`: `span` is the innermost span and `spans` every span from the
//! outermost in, each with its fields. On the stream path that is Lambda's
//! `Lambda runtime invoke` span (`requestId`), the engine's `batch` span
//! (`size`, `first_sequence_number`, `last_sequence_number`) and the
//! `record` span (`index`, `event_id`, `sequence_number`, `key`,
//! `outcome`); on the schedule path a `job` span (`job`, `source`). No line
//! carries attribute values: keys are the encoded `PK`/`SK` only (ids), and
//! e-mail addresses and user names never appear (`tests/observability.rs`).
//! Metrics are separate: CloudWatch Embedded Metric Format lines on stdout.

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// The filter from `RUST_LOG`, else `info`.
pub fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
}

/// The JSON subscriber Lambda uses, writing to `writer` (tests pass a
/// capturing writer): no timestamp (CloudWatch stamps each line), the
/// current span and the span list on every line.
pub fn json_subscriber<W>(filter: EnvFilter, writer: W) -> impl Subscriber + Send + Sync + 'static
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .json()
        .with_current_span(true)
        .with_span_list(true)
        .without_time()
        .finish()
}

/// Install the global subscriber once; later calls do nothing.
pub fn init(default: LogFormat) {
    let format = match std::env::var("LOG_FORMAT").as_deref() {
        Ok("json") => LogFormat::Json,
        Ok("text") => LogFormat::Text,
        _ => default,
    };
    match format {
        LogFormat::Json => {
            let _ = json_subscriber(env_filter(), std::io::stderr).try_init();
        }
        LogFormat::Text => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(env_filter())
                .with_writer(std::io::stderr)
                .with_target(false)
                .try_init();
        }
    }
}
