//! Parking: a record that fails for good (it does not decode, or a handler
//! rejects it, [`crate::stream::RecordStatus::Malformed`] / [`crate::stream::RecordStatus::Rejected`]) is
//! never just logged and dropped: it is written, whole, to a parking table
//! before the batch is reported handled, so that `redrive` can run it again
//! through the handlers once they are fixed.
//!
//! A parked record holds the raw stream record as Lambda delivered it (both
//! images included), the reason, and its position: the stream ARN, the
//! sequence number, the event id and, when known, the shard (an on-failure
//! message names it; a Lambda batch does not). It is keyed by stream ARN +
//! sequence number and written with a conditional put, so parking the same
//! record twice (Lambda delivers records again) keeps the first copy.
//! Parking that fails turns the record into a batch item failure: Lambda
//! delivers it again, nothing is lost. (A record whose raw JSON exceeds
//! DynamoDB's 400 KB item size cannot be parked: it is retried until the
//! mapping gives up, and its on-failure message names it.)
//!
//! The table ([`schema`]): key `StreamArn` / `SequenceNumber`, no stream,
//! encrypted at rest (the template turns SSE on), and a TTL attribute
//! ([`TTL_ATTRIBUTE`], `PARKING_RETENTION_DAYS` after parking) as its
//! retention. Configured with [`PARKING_TABLE_ENV`]; unset, nothing is
//! parked (local runs).

use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::env::{ConfigError, Env};
use crate::item::Item;
use crate::job::{EnvVar, ReadBy};
use crate::schema::{KeySchema, TableSchema};
use crate::store::{DynamoStore, Expr, ScanSpec, Store, StoreError, WriteOutcome};
use crate::stream::decode::SequenceNumber;
use crate::stream::engine::BatchReport;

/// The variable naming the parking table (unset: nothing is parked).
pub const PARKING_TABLE_ENV: &str = "PARKING_TABLE";
/// The variable giving how many days a parked record is kept.
pub const PARKING_RETENTION_DAYS_ENV: &str = "PARKING_RETENTION_DAYS";
/// Days a parked record is kept unless configured.
pub const DEFAULT_RETENTION_DAYS: u64 = 14;
/// The parking table's key: the stream, then the record's sequence number.
pub const KEY: KeySchema = KeySchema::composite("StreamArn", "SequenceNumber");
/// The TTL attribute (epoch seconds) that retires a parked record.
pub const TTL_ATTRIBUTE: &str = "ExpiresAt";
/// What the stream function does on the parking table.
pub const PARK_ACTIONS: [&str; 1] = ["dynamodb:PutItem"];
/// The stream ARN of a record that came without one (a hand-made event).
pub(crate) const UNKNOWN_STREAM: &str = "unknown-stream";
/// The `RecordsParked` metric.
pub const RECORDS_PARKED: &str = "RecordsParked";

/// The parking table as the engine expects it.
pub fn schema() -> TableSchema {
    TableSchema::new(KEY).without_stream()
}

/// Where parked records go and how long they stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkingSettings {
    /// The parking table's name (`PARKING_TABLE`).
    pub table: String,
    /// Days a parked record stays before its TTL expires it
    /// (`PARKING_RETENTION_DAYS`, at least 1; default
    /// [`DEFAULT_RETENTION_DAYS`]).
    pub retention_days: u64,
}

impl ParkingSettings {
    /// `PARKING_TABLE` and `PARKING_RETENTION_DAYS`, read by the stream
    /// function, as an app lists them among its common variables.
    pub const fn env_vars<J: 'static>() -> [EnvVar<J>; 2] {
        [
            EnvVar {
                name: PARKING_TABLE_ENV,
                read_by: const { &[ReadBy::Stream] },
                default: None,
                meaning: "the parking table of records that fail for good (worker_engine::park)",
            },
            EnvVar {
                name: PARKING_RETENTION_DAYS_ENV,
                read_by: const { &[ReadBy::Stream] },
                default: Some("14"),
                meaning: "parked records expire (TTL) this many days after parking",
            },
        ]
    }

    /// `PARKING_TABLE` (unset or empty: `None`) and `PARKING_RETENTION_DAYS`.
    pub fn from_env(env: &Env) -> Result<Option<Self>, ConfigError> {
        let retention_days = env
            .number(PARKING_RETENTION_DAYS_ENV)?
            .unwrap_or(DEFAULT_RETENTION_DAYS);
        if retention_days == 0 {
            return Err(ConfigError {
                name: PARKING_RETENTION_DAYS_ENV,
                value: "0".into(),
                reason: "expected at least 1 day".into(),
            });
        }
        Ok(env
            .non_empty(PARKING_TABLE_ENV)
            .map(|table| ParkingSettings {
                table,
                retention_days,
            }))
    }
}

/// Where a parked record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A Lambda batch: the engine parked it.
    Batch,
    /// A range the event source mapping gave up on, fetched from the stream.
    FailureMessage,
}

impl Origin {
    /// Its name in the parking table's `Origin` attribute (`batch`,
    /// `failure-message`).
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Batch => "batch",
            Origin::FailureMessage => "failure-message",
        }
    }

    fn parse(s: &str) -> Origin {
        match s {
            "failure-message" => Origin::FailureMessage,
            _ => Origin::Batch,
        }
    }
}

/// One parked record.
#[derive(Debug, Clone, PartialEq)]
pub struct ParkedRecord {
    /// The stream the record came from (its `eventSourceARN`;
    /// `unknown-stream` when it had none, as a hand-made event). The
    /// table's partition key.
    pub stream_arn: String,
    /// The record's sequence number (`event#<id>` when it had none).
    pub sequence_number: String,
    /// The shard it was read from: known for an [`Origin::FailureMessage`]
    /// record only (a Lambda batch does not name its shard).
    pub shard_id: Option<String>,
    /// The record's `eventID`; `None` when it had none.
    pub event_id: Option<String>,
    /// The key attributes, rendered (`PK=…, SK=…`), when known.
    pub key: Option<String>,
    /// The latest reason it failed.
    pub reason: String,
    /// The stream record as delivered (images included).
    pub record: Value,
    /// Who parked it.
    pub origin: Origin,
    /// When it was parked (the worker's clock); its TTL counts from here.
    pub parked_at: DateTime<Utc>,
    /// Redrives that ran it and failed again.
    pub redrives: u64,
}

const STREAM_ARN: &str = "StreamArn";
const SEQUENCE_NUMBER: &str = "SequenceNumber";

impl ParkedRecord {
    /// A record of a batch as parked: `raw` is the record as delivered.
    pub fn of_record(
        raw: &Value,
        event_id: Option<&str>,
        sequence_number: Option<&SequenceNumber>,
        key: Option<&str>,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Self {
        let stream_arn = raw["eventSourceARN"]
            .as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(UNKNOWN_STREAM)
            .to_owned();
        let event_id = event_id
            .map(str::to_owned)
            .or_else(|| raw["eventID"].as_str().map(str::to_owned));
        let sequence_number = match sequence_number {
            Some(seq) => seq.to_string(),
            None => format!("event#{}", event_id.as_deref().unwrap_or("none")),
        };
        ParkedRecord {
            stream_arn,
            sequence_number,
            shard_id: None,
            event_id,
            key: key.map(str::to_owned),
            reason: reason.to_owned(),
            record: raw.clone(),
            origin: Origin::Batch,
            parked_at: now,
            redrives: 0,
        }
    }

    /// The table key.
    pub(crate) fn key_item(&self) -> Item {
        [
            (STREAM_ARN.to_owned(), s(&self.stream_arn)),
            (SEQUENCE_NUMBER.to_owned(), s(&self.sequence_number)),
        ]
        .into()
    }

    /// The item written to the table; expires `retention_days` after
    /// `parked_at`.
    pub fn to_item(&self, retention_days: u64) -> Item {
        let mut item = self.key_item();
        let expires = self.parked_at + chrono::Duration::days(retention_days as i64);
        let mut put = |k: &str, v: AttributeValue| {
            item.insert(k.to_owned(), v);
        };
        put("Reason", s(&self.reason));
        put("Record", s(&self.record.to_string()));
        put("Origin", s(self.origin.as_str()));
        put("ParkedAt", s(&crate::clock::rfc3339(self.parked_at)));
        put(
            TTL_ATTRIBUTE,
            AttributeValue::N(expires.timestamp().to_string()),
        );
        put("Redrives", AttributeValue::N(self.redrives.to_string()));
        if let Some(v) = &self.shard_id {
            put("ShardId", s(v));
        }
        if let Some(v) = &self.event_id {
            put("EventId", s(v));
        }
        if let Some(v) = &self.key {
            put("Key", s(v));
        }
        item
    }

    /// Read an item of the parking table.
    pub fn from_item(item: &Item) -> Result<Self, String> {
        let text = |k: &str| -> Option<String> {
            match item.get(k) {
                Some(AttributeValue::S(v)) => Some(v.clone()),
                _ => None,
            }
        };
        let need = |k: &str| text(k).ok_or_else(|| format!("parked record without {k}"));
        let record: Value = serde_json::from_str(&need("Record")?)
            .map_err(|e| format!("parked record's Record is not JSON: {e}"))?;
        Ok(ParkedRecord {
            stream_arn: need(STREAM_ARN)?,
            sequence_number: need(SEQUENCE_NUMBER)?,
            shard_id: text("ShardId"),
            event_id: text("EventId"),
            key: text("Key"),
            reason: need("Reason")?,
            record,
            origin: Origin::parse(&text("Origin").unwrap_or_default()),
            parked_at: text("ParkedAt")
                .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
                .map(|t| t.to_utc())
                .unwrap_or_default(),
            redrives: match item.get("Redrives") {
                Some(AttributeValue::N(n)) => n.parse().unwrap_or(0),
                _ => 0,
            },
        })
    }

    /// The sequence number, when it is one (for ordering).
    pub fn sequence(&self) -> Option<SequenceNumber> {
        self.sequence_number.parse().ok()
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// The parking table.
#[derive(Clone)]
pub struct Parking {
    store: Arc<dyn Store>,
    retention_days: u64,
}

impl Parking {
    /// The parking table behind `store` (its key `StreamArn`,
    /// `SequenceNumber`: [`schema`]); records expire `retention_days` after
    /// they are parked.
    pub fn new(store: Arc<dyn Store>, retention_days: u64) -> Self {
        Parking {
            store,
            retention_days,
        }
    }

    /// The parking table of `settings` through `client`.
    pub fn dynamo(client: aws_sdk_dynamodb::Client, settings: &ParkingSettings) -> Self {
        let store = DynamoStore::new(client, &settings.table).with_key(KEY);
        Parking::new(Arc::new(store), settings.retention_days)
    }

    /// Park a record. `Ok(true)`: parked now; `Ok(false)`: it was parked
    /// already (the first copy is kept).
    pub async fn park(&self, record: &ParkedRecord) -> Result<bool, StoreError> {
        let outcome = self
            .store
            .put(
                record.to_item(self.retention_days),
                Some(Expr::not_exists(STREAM_ARN)),
            )
            .await?;
        Ok(outcome == WriteOutcome::Applied)
    }

    /// Every parked record, by stream and sequence number.
    pub async fn list(&self) -> Result<Vec<ParkedRecord>, StoreError> {
        let items = self
            .store
            .scan_all(&ScanSpec {
                consistent: true,
                ..Default::default()
            })
            .await?;
        let mut records = Vec::with_capacity(items.len());
        for item in &items {
            match ParkedRecord::from_item(item) {
                Ok(r) => records.push(r),
                Err(reason) => tracing::warn!(reason, "unreadable parked record, left in place"),
            }
        }
        records.sort_by(|a, b| {
            (
                a.stream_arn.as_str(),
                a.sequence(),
                a.sequence_number.as_str(),
            )
                .cmp(&(
                    b.stream_arn.as_str(),
                    b.sequence(),
                    b.sequence_number.as_str(),
                ))
        });
        Ok(records)
    }

    /// Remove a record that was handled (`false`: it was gone already).
    pub async fn remove(&self, record: &ParkedRecord) -> Result<bool, StoreError> {
        let outcome = self
            .store
            .delete(&record.key_item(), Some(Expr::exists(STREAM_ARN)))
            .await?;
        Ok(outcome == WriteOutcome::Applied)
    }

    /// Keep a record that failed again, with the new reason (and one more
    /// redrive counted).
    pub async fn keep(&self, record: &ParkedRecord, reason: &str) -> Result<(), StoreError> {
        let update =
            Expr::new("SET #reason = :reason, #redrives = if_not_exists(#redrives, :zero) + :one")
                .name("#reason", "Reason")
                .name("#redrives", "Redrives")
                .string(":reason", reason)
                .value(":zero", AttributeValue::N("0".into()))
                .value(":one", AttributeValue::N("1".into()));
        self.store
            .update(&record.key_item(), update, Some(Expr::exists(STREAM_ARN)))
            .await?;
        Ok(())
    }
}

/// The records of `report` that failed for good, as they would be
/// parked: each with its position in `report.records`, built from the raw
/// record it came from (`records`: the event's `Records`, as delivered).
pub fn records_to_park(
    report: &BatchReport,
    records: &[Value],
    shard_id: Option<&str>,
    origin: Origin,
    now: DateTime<Utc>,
) -> Vec<(usize, ParkedRecord)> {
    report
        .records
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let reason = r.status.parkable_reason()?;
            let raw = records.get(r.index)?;
            let mut parked = ParkedRecord::of_record(
                raw,
                r.event_id.as_deref(),
                r.sequence_number.as_ref(),
                r.keys.as_deref(),
                reason,
                now,
            );
            parked.shard_id = shard_id.map(str::to_owned);
            parked.origin = origin;
            Some((i, parked))
        })
        .collect()
}

/// Park every record of `report` that failed for good (`event`: the
/// DynamoDB Streams event the report is of, its `Records` as delivered). A record whose parking fails becomes a
/// batch item failure (Lambda delivers it again), or, without a sequence
/// number, the whole batch is retried. Sets `report.parked` and
/// `report.parking_failed`.
pub(crate) async fn park_failures(
    parking: &Parking,
    event: &Value,
    report: &mut BatchReport,
    shard_id: Option<&str>,
    origin: Origin,
    now: DateTime<Utc>,
) {
    let records = event["Records"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let to_park: Vec<(Option<SequenceNumber>, ParkedRecord)> =
        records_to_park(report, records, shard_id, origin, now)
            .into_iter()
            .map(|(i, parked)| (report.records[i].sequence_number.clone(), parked))
            .collect();
    let results = futures::future::join_all(to_park.iter().map(|(_, p)| parking.park(p))).await;
    for ((seq, parked), result) in to_park.iter().zip(results) {
        match result {
            Ok(first) => {
                report.parked += 1;
                tracing::warn!(
                    event_id = parked.event_id.as_deref(),
                    sequence_number = parked.sequence_number.as_str(),
                    key = parked.key.as_deref(),
                    reason = parked.reason.as_str(),
                    already = !first,
                    "stream record parked"
                );
            }
            Err(e) => {
                report.parking_failed += 1;
                if e.is_environment() {
                    // A parking table that is missing or denied: the
                    // deployment is wrong, the invocation fails.
                    report
                        .environment_fault
                        .get_or_insert_with(|| format!("parking table: {e}"));
                }
                tracing::error!(
                    event_id = parked.event_id.as_deref(),
                    sequence_number = parked.sequence_number.as_str(),
                    key = parked.key.as_deref(),
                    error = %e,
                    "cannot park a failed record: reported for a retry"
                );
                match seq {
                    Some(seq) => report.batch_item_failures.push(seq.to_string()),
                    None => report.retry_whole_batch = true,
                }
            }
        }
    }
    // Lambda retries from the lowest reported sequence number.
    report.batch_item_failures.sort_by(|a, b| {
        match (a.parse::<SequenceNumber>(), b.parse::<SequenceNumber>()) {
            (Ok(a), Ok(b)) => a.cmp(&b),
            _ => a.cmp(b),
        }
    });
    report.batch_item_failures.dedup();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn raw() -> Value {
        json!({
            "eventID": "e1",
            "eventName": "MODIFY",
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2024",
            "dynamodb": {
                "Keys": {"PK": {"S": "a"}, "SK": {"S": "b"}},
                "NewImage": {"PK": {"S": "a"}, "SK": {"S": "b"}, "N": {"N": "2"}},
                "OldImage": {"PK": {"S": "a"}, "SK": {"S": "b"}, "N": {"N": "1"}},
                "SequenceNumber": "700"
            }
        })
    }

    #[test]
    fn a_parked_record_round_trips_with_its_images_and_position() {
        let now: DateTime<Utc> = "2024-03-25T09:00:00Z".parse().unwrap();
        let seq: SequenceNumber = "700".parse().unwrap();
        let mut p = ParkedRecord::of_record(
            &raw(),
            Some("e1"),
            Some(&seq),
            Some("PK=a, SK=b"),
            "bad",
            now,
        );
        p.shard_id = Some("shardId-1".into());
        let item = p.to_item(14);
        assert_eq!(
            item["StreamArn"],
            s("arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/2024")
        );
        assert_eq!(item["SequenceNumber"], s("700"));
        let expires = now + chrono::Duration::days(14);
        assert_eq!(
            item[TTL_ATTRIBUTE],
            AttributeValue::N(expires.timestamp().to_string())
        );
        let back = ParkedRecord::from_item(&item).unwrap();
        assert_eq!(back, p);
        assert_eq!(back.record["dynamodb"]["OldImage"]["N"]["N"], "1");
        assert_eq!(back.record["dynamodb"]["NewImage"]["N"]["N"], "2");
    }

    #[test]
    fn a_record_without_arn_or_sequence_number_still_gets_a_key() {
        let now = Utc::now();
        let p = ParkedRecord::of_record(&json!({"eventID": "x"}), None, None, None, "no Keys", now);
        assert_eq!(p.stream_arn, UNKNOWN_STREAM);
        assert_eq!(p.sequence_number, "event#x");
        assert_eq!(p.event_id.as_deref(), Some("x"));
    }

    #[test]
    fn settings_come_from_the_environment() {
        let vars: HashMap<&str, &str> = [("PARKING_TABLE", "w-parking")].into();
        let lookup = |k: &str| vars.get(k).map(|v| v.to_string());
        let s = ParkingSettings::from_env(&Env::new(&lookup))
            .unwrap()
            .unwrap();
        assert_eq!((s.table.as_str(), s.retention_days), ("w-parking", 14));
        let vars: HashMap<&str, &str> =
            [("PARKING_TABLE", "p"), ("PARKING_RETENTION_DAYS", "3")].into();
        let lookup = |k: &str| vars.get(k).map(|v| v.to_string());
        let s = ParkingSettings::from_env(&Env::new(&lookup))
            .unwrap()
            .unwrap();
        assert_eq!(s.retention_days, 3);
        let none = |_: &str| None;
        assert_eq!(ParkingSettings::from_env(&Env::new(&none)).unwrap(), None);
        let zero = |k: &str| (k == "PARKING_RETENTION_DAYS").then(|| "0".to_owned());
        assert!(ParkingSettings::from_env(&Env::new(&zero)).is_err());
    }
}
