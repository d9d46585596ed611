//! Logging setup: JSON lines for Lambda (CloudWatch), text for the CLI.
//!
//! Lambda's advanced logging controls are honoured: the function's
//! `LoggingConfig` (`LogFormat: JSON`, `ApplicationLogLevel`) reaches the
//! process as `AWS_LAMBDA_LOG_FORMAT` (`JSON` or `Text`) and
//! `AWS_LAMBDA_LOG_LEVEL` (`TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR`,
//! `FATAL`). `LOG_FORMAT=text|json` and `RUST_LOG` (local runs) take
//! precedence over them; without any, the filter is `info`.
//!
//! Every invocation runs in an `invocation` span (`invocation_span`):
//! `cold_start` (true on the process's first invocation) and `trace_id`
//! (the X-Ray trace id, `_X_AMZN_TRACE_ID`), so every line an invocation
//! writes carries both.
//!
//! A JSON line is `{"level", "fields": {"message", ...}, "target", "span",
//! "spans"}`: `span` is the innermost span and `spans` every span from the
//! outermost in, each with its fields. On the stream path that is Lambda's
//! `Lambda runtime invoke` span (`requestId`), the engine's `batch` span
//! (`size`, `first_sequence_number`, `last_sequence_number`) and the
//! `record` span (`index`, `event_id`, `sequence_number`, `key`,
//! `outcome`); on the schedule path a `job` span (`job`, `source`). No line
//! carries attribute values: keys are the encoded `PK`/`SK` only (ids), and
//! e-mail addresses and user names never appear (`tests/it/observability.rs`).
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
    /// One JSON object per line, to stderr: what Lambda and CloudWatch
    /// Logs Insights read (the bootstraps' default).
    Json,
    /// Plain human-readable lines, to stderr, for a terminal.
    Text,
}

/// The filter from `RUST_LOG` (`level` and `target=level` directives,
/// comma-separated), else `AWS_LAMBDA_LOG_LEVEL`, else `info`. A
/// `tracing_subscriber::filter::Targets`, not an `EnvFilter`: its span and
/// field directives need the regex engine, about 1 MB of each Lambda
/// `bootstrap`; a `RUST_LOG` it cannot read falls back to the Lambda level.
pub(crate) fn env_filter() -> Targets {
    std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<Targets>().ok())
        .unwrap_or_else(|| {
            filter_directive(std::env::var("AWS_LAMBDA_LOG_LEVEL").ok().as_deref())
                .parse::<Targets>()
                .unwrap_or_else(|_| Targets::new().with_default(LevelFilter::INFO))
        })
}

/// The filter directive of a Lambda application log level (`FATAL` has no
/// tracing level: `error`); anything else: `info`.
pub(crate) fn filter_directive(lambda_level: Option<&str>) -> &'static str {
    match lambda_level.map(str::to_ascii_uppercase).as_deref() {
        Some("TRACE") => "trace",
        Some("DEBUG") => "debug",
        Some("WARN") => "warn",
        Some("ERROR") | Some("FATAL") => "error",
        _ => "info",
    }
}

/// The log format: `LOG_FORMAT` (`json`/`text`), else Lambda's
/// `AWS_LAMBDA_LOG_FORMAT` (`JSON`/`Text`), else `default`.
pub(crate) fn log_format(
    log_format: Option<&str>,
    lambda_format: Option<&str>,
    default: LogFormat,
) -> LogFormat {
    let parse = |v: &str| match v.to_ascii_lowercase().as_str() {
        "json" => Some(LogFormat::Json),
        "text" => Some(LogFormat::Text),
        _ => None,
    };
    log_format
        .and_then(parse)
        .or_else(|| lambda_format.and_then(parse))
        .unwrap_or(default)
}

/// The span of one Lambda invocation: every line written inside carries
/// `cold_start` and `trace_id` (the X-Ray trace id, when tracing is on).
pub(crate) fn invocation_span(cold_start: bool, trace_id: Option<&str>) -> tracing::Span {
    tracing::info_span!("invocation", cold_start, trace_id)
}

/// The X-Ray trace id of the invocation: the context's, else
/// `_X_AMZN_TRACE_ID` (Lambda sets it per invocation).
pub fn trace_id(from_context: Option<&str>) -> Option<String> {
    from_context
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .or_else(|| {
            std::env::var("_X_AMZN_TRACE_ID")
                .ok()
                .filter(|t| !t.is_empty())
        })
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
    let format = log_format(
        std::env::var("LOG_FORMAT").ok().as_deref(),
        std::env::var("AWS_LAMBDA_LOG_FORMAT").ok().as_deref(),
        default,
    );
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    #[test]
    fn lambda_log_controls_map_to_filters_and_formats() {
        assert_eq!(filter_directive(Some("DEBUG")), "debug");
        assert_eq!(filter_directive(Some("FATAL")), "error");
        assert_eq!(filter_directive(Some("warn")), "warn");
        assert_eq!(filter_directive(None), "info");
        assert_eq!(filter_directive(Some("loud")), "info");
        let d = LogFormat::Text;
        assert_eq!(log_format(None, Some("JSON"), d), LogFormat::Json);
        assert_eq!(
            log_format(None, Some("Text"), LogFormat::Json),
            LogFormat::Text
        );
        assert_eq!(log_format(Some("text"), Some("JSON"), d), LogFormat::Text);
        assert_eq!(log_format(None, None, d), d);
    }

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn every_line_of_an_invocation_carries_cold_start_and_trace_id() {
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber =
            json_subscriber(Targets::new().with_default(LevelFilter::INFO), move || {
                writer.clone()
            });
        // A second dispatcher alive: the interest of a callsite a parallel
        // test reaches first is every registered dispatcher's, this
        // capture's too, not that thread's (none) alone.
        let _anchor = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        tracing::subscriber::with_default(subscriber, || {
            let span = invocation_span(true, Some("Root=1-5759e988-bd862e3fe1be46a994272793"));
            let _in = span.enter();
            let inner = tracing::info_span!("batch", size = 2);
            let _b = inner.enter();
            tracing::info!("one");
            tracing::warn!("two");
        });
        let text = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let parsed: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(parsed.len(), 2);
        for line in parsed {
            let invocation = line["spans"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == "invocation")
                .cloned()
                .unwrap_or_else(|| panic!("{line}"));
            assert_eq!(invocation["cold_start"], true);
            assert_eq!(
                invocation["trace_id"],
                "Root=1-5759e988-bd862e3fe1be46a994272793"
            );
        }
    }
}
