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
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Filter, Layer, SubscriberExt};
use tracing_subscriber::registry::Registry;
use tracing_subscriber::util::SubscriberInitExt;

/// Output format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

/// The filter from `RUST_LOG` (`level` and `target=level` directives,
/// comma-separated), else `info`. A `tracing_subscriber::filter::Targets`,
/// not an `EnvFilter`: its span and field directives need the regex engine,
/// about 1 MB of each Lambda `bootstrap`; a `RUST_LOG` it cannot read
/// falls back to `info`.
pub fn env_filter() -> Targets {
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO))
}

/// The JSON subscriber Lambda uses, writing to `writer` (tests pass a
/// capturing writer and any filter, e.g. an `EnvFilter`): no timestamp
/// (CloudWatch stamps each line), the current span and the span list on
/// every line.
pub fn json_subscriber<F, W>(filter: F, writer: W) -> impl Subscriber + Send + Sync + 'static
where
    F: Filter<Registry> + Send + Sync + 'static,
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .without_time()
            .with_filter(filter),
    )
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
            let _ = tracing_subscriber::registry()
                .with(
                    tracing_subscriber::fmt::layer()
                        .with_writer(std::io::stderr)
                        .with_target(false)
                        .with_filter(env_filter()),
                )
                .try_init();
        }
    }
}
