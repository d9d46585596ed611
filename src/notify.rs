//! Publishing events to Amazon EventBridge: a small [`EventPublisher`] trait,
//! the `aws-sdk-eventbridge` implementation ([`EventBridgePublisher`]) and a
//! [`RecordingPublisher`] for tests and dry runs.
//!
//! The expiry job uses it to announce newly flagged foods (detail-type
//! `FoodsNearingExpiry`, see `jobs::expiry`); nothing here knows Nishiki.
//!
//! - entries go out in `PutEvents` calls of at most 10 entries (the API
//!   limit);
//! - an entry EventBridge rejects comes back in [`PublishReport::failed`]
//!   with its error code, so the caller can keep it for a later attempt;
//! - a failed call is a [`NotifyError`], [`NotifyError::is_retryable`] for
//!   throttling, 5xx and transport failures.
//!
//! Error texts carry codes and messages of the API, never an entry's detail.

use std::sync::Mutex;

use async_trait::async_trait;
use aws_sdk_eventbridge::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use serde::{Deserialize, Serialize};

/// `PutEvents` accepts at most this many entries per call.
pub const MAX_ENTRIES_PER_CALL: usize = 10;

/// One event to put on a bus.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EventEntry {
    pub source: String,
    pub detail_type: String,
    pub event_bus_name: String,
    /// The event's `detail`, a JSON object as text.
    pub detail: String,
}

/// An entry EventBridge did not accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedEntry {
    pub entry: EventEntry,
    /// EventBridge's error code for this entry (e.g. `ThrottlingException`).
    pub code: String,
}

/// What a [`EventPublisher::publish`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Entries accepted.
    pub sent: usize,
    /// `PutEvents` calls made.
    pub calls: usize,
    /// Entries rejected one by one (the others were accepted).
    pub failed: Vec<FailedEntry>,
}

/// Why a `PutEvents` call failed as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotifyError {
    /// Throttling, a 5xx or a transport failure: try again later.
    #[error("EventBridge PutEvents failed transiently ({code}): {message}")]
    Transient { code: String, message: String },
    /// Rejected (validation, access, missing bus): retrying will not help.
    #[error(
        "EventBridge PutEvents rejected ({code}): {message} (check NOTIFY_EVENT_BUS and the function's events:PutEvents permission)"
    )]
    Permanent { code: String, message: String },
}

impl NotifyError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, NotifyError::Transient { .. })
    }
}

/// Puts events on a bus.
#[async_trait]
pub trait EventPublisher: Send + Sync {
    /// Send every entry (in calls of at most [`MAX_ENTRIES_PER_CALL`]).
    /// Entries rejected one by one are returned in the report; a call that
    /// fails as a whole stops the publishing with an error (entries of
    /// earlier calls were sent).
    async fn publish(&self, entries: &[EventEntry]) -> Result<PublishReport, NotifyError>;
}

/// The `aws-sdk-eventbridge` publisher. The client is built on first use
/// from the environment (region, credentials), so constructing one costs
/// nothing when no event is ever published.
#[derive(Debug, Default)]
pub struct EventBridgePublisher {
    client: tokio::sync::OnceCell<aws_sdk_eventbridge::Client>,
}

impl EventBridgePublisher {
    /// A publisher whose client is loaded from the environment on first use.
    pub fn from_env() -> Self {
        EventBridgePublisher::default()
    }

    async fn client(&self) -> &aws_sdk_eventbridge::Client {
        self.client
            .get_or_init(|| async {
                let config = worker_engine::aws::lambda_config(None);
                aws_sdk_eventbridge::Client::new(&config)
            })
            .await
    }
}

#[async_trait]
impl EventPublisher for EventBridgePublisher {
    async fn publish(&self, entries: &[EventEntry]) -> Result<PublishReport, NotifyError> {
        let client = self.client().await;
        let mut report = PublishReport::default();
        for chunk in entries.chunks(MAX_ENTRIES_PER_CALL) {
            let request: Vec<PutEventsRequestEntry> = chunk
                .iter()
                .map(|e| {
                    PutEventsRequestEntry::builder()
                        .source(&e.source)
                        .detail_type(&e.detail_type)
                        .event_bus_name(&e.event_bus_name)
                        .detail(&e.detail)
                        .build()
                })
                .collect();
            report.calls += 1;
            let out = client
                .put_events()
                .set_entries(Some(request))
                .send()
                .await
                .map_err(classify)?;
            // Result entries are in request order; a failed one has an error code.
            for (i, entry) in chunk.iter().enumerate() {
                match out.entries().get(i).and_then(|r| r.error_code()) {
                    Some(code) => report.failed.push(FailedEntry {
                        entry: entry.clone(),
                        code: code.to_owned(),
                    }),
                    None => report.sent += 1,
                }
            }
        }
        Ok(report)
    }
}

fn classify<E, R>(err: SdkError<E, R>) -> NotifyError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let code = err.code().unwrap_or("").to_owned();
    let message = err
        .message()
        .map(str::to_owned)
        .unwrap_or_else(|| aws_smithy_types::error::display::DisplayErrorContext(&err).to_string());
    let transport = matches!(
        err,
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_)
    );
    let transient_code = matches!(
        code.as_str(),
        "ThrottlingException" | "InternalException" | "InternalFailure" | "ServiceUnavailable"
    );
    if transport || transient_code {
        NotifyError::Transient {
            code: if code.is_empty() {
                "transport".into()
            } else {
                code
            },
            message,
        }
    } else {
        NotifyError::Permanent { code, message }
    }
}

/// Records the entries instead of sending them (tests, dry runs). Can be
/// told to reject the next calls.
#[derive(Debug, Default)]
pub struct RecordingPublisher {
    sent: Mutex<Vec<EventEntry>>,
    fail_next: Mutex<u32>,
}

impl RecordingPublisher {
    pub fn new() -> Self {
        RecordingPublisher::default()
    }

    /// Every entry accepted so far, in order.
    pub fn sent(&self) -> Vec<EventEntry> {
        self.sent.lock().expect("sent lock").clone()
    }

    /// Make the next `calls` publish calls fail transiently.
    pub fn fail_next(&self, calls: u32) {
        *self.fail_next.lock().expect("fail lock") = calls;
    }
}

#[async_trait]
impl EventPublisher for RecordingPublisher {
    async fn publish(&self, entries: &[EventEntry]) -> Result<PublishReport, NotifyError> {
        {
            let mut fail = self.fail_next.lock().expect("fail lock");
            if *fail > 0 {
                *fail -= 1;
                return Err(NotifyError::Transient {
                    code: "InjectedFailure".into(),
                    message: "recording publisher told to fail".into(),
                });
            }
        }
        self.sent
            .lock()
            .expect("sent lock")
            .extend(entries.iter().cloned());
        Ok(PublishReport {
            sent: entries.len(),
            calls: entries.len().div_ceil(MAX_ENTRIES_PER_CALL),
            failed: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: usize) -> EventEntry {
        EventEntry {
            source: "nishiki.worker".into(),
            detail_type: "Test".into(),
            event_bus_name: "bus".into(),
            detail: format!("{{\"n\":{n}}}"),
        }
    }

    #[tokio::test]
    async fn recording_publisher_records_in_order_and_fails_on_request() {
        let p = RecordingPublisher::new();
        let entries: Vec<_> = (0..12).map(entry).collect();
        let r = p.publish(&entries).await.unwrap();
        assert_eq!((r.sent, r.calls), (12, 2));
        assert_eq!(p.sent(), entries);
        p.fail_next(1);
        let e = p.publish(&entries[..1]).await.unwrap_err();
        assert!(e.is_retryable());
        assert_eq!(p.sent().len(), 12);
        p.publish(&entries[..1]).await.unwrap();
        assert_eq!(p.sent().len(), 13);
    }

    #[test]
    fn errors_say_what_to_check() {
        let e = NotifyError::Permanent {
            code: "ResourceNotFoundException".into(),
            message: "Event bus nope does not exist.".into(),
        };
        assert!(!e.is_retryable());
        assert!(e.to_string().contains("NOTIFY_EVENT_BUS"), "{e}");
    }
}
