//! Serialisable, readable views of what a stream batch did, for the
//! command line's output (`--json` and text).

use serde::Serialize;

use super::ddbjson::key_text;
use worker_engine::stream::{BatchReport, RecordStatus};
use worker_engine::stream::{RecordError, StreamChange};

/// One record's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordLine {
    /// Position of the record in its batch, from 0.
    pub index: usize,
    /// `INSERT`, `MODIFY`, `REMOVE` or `REMOVE (TTL)`; `None` when the
    /// record did not decode.
    pub event_name: Option<String>,
    /// `PK/SK`, when it could be read.
    pub key: Option<String>,
    /// The record's `SequenceNumber`, when it has one.
    pub sequence_number: Option<String>,
    /// The record's `eventID`, when it has one.
    pub event_id: Option<String>,
    /// `handled`, `skipped`, `foreign` (not the app's, skipped), `rejected`
    /// (failed permanently, skipped),
    /// `malformed`, `failed`, `environment-fault` or `not-attempted`.
    pub outcome: &'static str,
    /// What the worker said of it: what it did, or why it skipped or failed
    /// it (empty when it said nothing).
    pub detail: String,
}

impl RecordLine {
    /// `#i EVENT key → outcome: detail`.
    pub fn line(&self) -> String {
        format!(
            "#{} {} {} → {}{}",
            self.index,
            self.event_name.as_deref().unwrap_or("?"),
            self.key.as_deref().unwrap_or("(no key)"),
            self.outcome,
            if self.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", self.detail)
            }
        )
    }
}

/// The lines of a batch report; `decoded` (the same batch, decoded) gives
/// each record's key as `PK/SK`.
pub fn record_lines(
    report: &BatchReport,
    decoded: &[Result<StreamChange, RecordError>],
    key_attributes: (&str, &str),
) -> Vec<RecordLine> {
    report
        .records
        .iter()
        .map(|r| {
            let change = decoded.get(r.index).and_then(|d| d.as_ref().ok());
            let (outcome, detail) = match &r.status {
                RecordStatus::Handled { detail } => ("handled", detail.clone()),
                RecordStatus::Skipped { reason } => ("skipped", reason.clone()),
                RecordStatus::Foreign { reason } => ("foreign", reason.clone()),
                RecordStatus::Rejected { reason } => ("rejected", reason.clone()),
                RecordStatus::Malformed { reason } => ("malformed", reason.clone()),
                RecordStatus::Failed { reason } => ("failed", reason.clone()),
                RecordStatus::Environment { reason } => ("environment-fault", reason.clone()),
                RecordStatus::NotAttempted { reason } => ("not-attempted", reason.clone()),
            };
            RecordLine {
                index: r.index,
                event_name: r.kind.map(|k| k.to_string()),
                key: change
                    .map(|c| key_text(&c.keys, key_attributes))
                    .or_else(|| r.keys.clone()),
                sequence_number: r.sequence_number.as_ref().map(|s| s.to_string()),
                event_id: r.event_id.clone(),
                outcome,
                detail,
            }
        })
        .collect()
}
