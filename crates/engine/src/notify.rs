//! Publishing events: a small [`EventPublisher`] trait, the EventBridge
//! implementation ([`EventBridgePublisher`], `aws-sdk-eventbridge`) and a
//! [`RecordingPublisher`] for tests and local runs.
//!
//! An app's scheduled jobs use it to announce what they did (one entry
//! per event, at least once).
//!
//! - entries go out in `PutEvents` calls of at most 10 entries (the API
//!   limit); entries EventBridge rejects one by one come back in
//!   [`PublishReport::rejected`] (by index), the others were accepted;
//! - a call that fails as a whole is a [`NotifyError`]; error texts carry
//!   the API's codes and messages, never an entry's detail.

use std::sync::Mutex;

use async_trait::async_trait;
use aws_sdk_eventbridge::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_eventbridge::types::PutEventsRequestEntry;

/// `PutEvents` accepts at most this many entries per call.
pub const MAX_ENTRIES_PER_CALL: usize = 10;

/// One event to put on a bus. Serialized with EventBridge's field names
/// (`Source`, `DetailType`, ...), so a job can keep entries not yet sent
/// in its checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct EventEntry {
    /// The event's `source`: who sent it (the app), what rules match on.
    pub source: String,
    /// The event's `detail-type`: what happened, the other field rules
    /// match on.
    pub detail_type: String,
    /// The name or ARN of the bus it goes to.
    pub event_bus_name: String,
    /// The event's `detail`: a JSON object, as text.
    pub detail: String,
}

/// What a publish call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishReport {
    /// Entries accepted.
    pub sent: usize,
    /// Indexes (into the entries given) of those rejected, with the code.
    pub rejected: Vec<(usize, String)>,
}

/// Why a `PutEvents` call failed as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "EventBridge PutEvents failed ({code}): {message} (check NOTIFY_EVENT_BUS and events:PutEvents)"
)]
pub struct NotifyError {
    /// EventBridge's error code (`AccessDeniedException`); `transport` when
    /// the call got no answer.
    pub code: String,
    /// EventBridge's message, or the SDK's description of the failure.
    pub message: String,
}

/// Puts events on a bus.
#[async_trait]
pub trait EventPublisher: Send + Sync {
    /// Send every entry, in calls of at most [`MAX_ENTRIES_PER_CALL`]. A
    /// call failing as a whole stops with an error (earlier calls' entries
    /// were sent).
    async fn publish(&self, entries: &[EventEntry]) -> Result<PublishReport, NotifyError>;
}

/// The `aws-sdk-eventbridge` publisher; its client is loaded from the
/// environment on first use, so one that never publishes costs nothing.
#[derive(Debug, Default)]
pub struct EventBridgePublisher {
    client: tokio::sync::OnceCell<aws_sdk_eventbridge::Client>,
}

impl EventBridgePublisher {
    /// A publisher on `client` instead of the environment's (another
    /// endpoint or credentials, e.g. a local EventBridge in tests).
    pub fn with_client(client: aws_sdk_eventbridge::Client) -> Self {
        EventBridgePublisher {
            client: tokio::sync::OnceCell::new_with(Some(client)),
        }
    }
}

#[async_trait]
impl EventPublisher for EventBridgePublisher {
    async fn publish(&self, entries: &[EventEntry]) -> Result<PublishReport, NotifyError> {
        let client = self
            .client
            .get_or_init(|| async {
                let config = crate::aws::lambda_config(None);
                aws_sdk_eventbridge::Client::new(&config)
            })
            .await;
        let mut report = PublishReport::default();
        for (n, chunk) in entries.chunks(MAX_ENTRIES_PER_CALL).enumerate() {
            let request = chunk
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
            let out = client
                .put_events()
                .set_entries(Some(request))
                .send()
                .await
                .map_err(failure)?;
            // Result entries are in request order; a rejected one has a code.
            for i in 0..chunk.len() {
                match out.entries().get(i).and_then(|r| r.error_code()) {
                    Some(code) => report
                        .rejected
                        .push((n * MAX_ENTRIES_PER_CALL + i, code.to_owned())),
                    None => report.sent += 1,
                }
            }
        }
        Ok(report)
    }
}

fn failure<E, R>(err: SdkError<E, R>) -> NotifyError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    NotifyError {
        code: err.code().unwrap_or("transport").to_owned(),
        message: err.message().map(str::to_owned).unwrap_or_else(|| {
            aws_smithy_types::error::display::DisplayErrorContext(&err).to_string()
        }),
    }
}

/// Records the entries instead of sending them (tests, local runs). Can
/// be told to fail the next calls, or to reject entries whose detail
/// contains a text.
#[derive(Debug, Default)]
pub struct RecordingPublisher {
    sent: Mutex<Vec<EventEntry>>,
    fail_next: Mutex<u32>,
    reject: Mutex<Option<String>>,
}

impl RecordingPublisher {
    /// Every entry accepted so far, in order.
    pub fn sent(&self) -> Vec<EventEntry> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Fail the next `calls` publish calls.
    pub fn fail_next(&self, calls: u32) {
        *self.fail_next.lock().unwrap_or_else(|e| e.into_inner()) = calls;
    }

    /// Reject (one by one) the entries whose detail contains `text`.
    pub fn reject_containing(&self, text: &str) {
        *self.reject.lock().unwrap_or_else(|e| e.into_inner()) = Some(text.to_owned());
    }
}

#[async_trait]
impl EventPublisher for RecordingPublisher {
    async fn publish(&self, entries: &[EventEntry]) -> Result<PublishReport, NotifyError> {
        {
            let mut fail = self.fail_next.lock().unwrap_or_else(|e| e.into_inner());
            if *fail > 0 {
                *fail -= 1;
                return Err(NotifyError {
                    code: "InjectedFailure".into(),
                    message: "the recording publisher was told to fail".into(),
                });
            }
        }
        let reject = self
            .reject
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut report = PublishReport::default();
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        for (i, e) in entries.iter().enumerate() {
            if reject.as_deref().is_some_and(|r| e.detail.contains(r)) {
                report.rejected.push((i, "InjectedRejection".into()));
            } else {
                sent.push(e.clone());
                report.sent += 1;
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: usize) -> EventEntry {
        EventEntry {
            source: "app.worker".into(),
            detail_type: "Test".into(),
            event_bus_name: "bus".into(),
            detail: format!("{{\"n\":{n}}}"),
        }
    }

    #[tokio::test]
    async fn the_recording_publisher_records_rejects_and_fails_on_request() {
        let p = RecordingPublisher::default();
        let entries: Vec<_> = (0..3).map(entry).collect();
        assert_eq!(p.publish(&entries).await.unwrap().sent, 3);
        p.reject_containing("\"n\":1");
        let r = p.publish(&entries).await.unwrap();
        assert_eq!((r.sent, r.rejected.len(), r.rejected[0].0), (2, 1, 1));
        p.fail_next(1);
        assert!(p.publish(&entries).await.is_err());
        assert_eq!(p.sent().len(), 5);
    }
}
