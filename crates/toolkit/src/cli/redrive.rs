//! `<app> redrive`: run parked records ([`worker_engine::park`]) through the
//! current handlers, and replay the batches the stream mapping gave up on
//! from its on-failure destination ([`crate::failure_message`]).
//!
//! - `redrive` alone: every parked record is run again. A record now
//!   handled (or skipped) is removed from the parking table; one that fails
//!   again stays, with the new reason and one more redrive counted.
//! - `--failure-message FILE` (repeatable) / `--queue-url URL` (SQS): each
//!   message's shard and sequence range is read from the table's stream
//!   (while the stream still holds it, 24 hours) and run; a record that
//!   fails for good is parked (with its shard). With `--queue-url` every
//!   message of the queue is read (each hidden while the command works), a
//!   message is deleted once every record of its range was handled or
//!   parked, and every other one is made visible again at the end: a dry
//!   run leaves the queue as it was. A range that cannot be read (its shard
//!   is gone, its records are trimmed) is reported and its message left;
//!   the run goes on with the others.
//! - `--s3 s3://BUCKET/PREFIX`: the invocation records Lambda wrote to an
//!   S3 on-failure destination carry the batch itself, so nothing is read
//!   from the stream: each object's records are run, and the object deleted
//!   once every record in it was handled or parked. An object that is not
//!   an invocation record is reported and left.
//! - `--park` (with a destination): the records are copied into the parking
//!   table as they are, handlers not run; a record parked already keeps its
//!   first copy and is counted as such.
//!
//! The SQS and S3 clients: [`endpoints`] (the queue URL's own server,
//! `--sqs-endpoint-url`/`--s3-endpoint-url`, the SDK's `AWS_ENDPOINT_URL_*`
//! variables, `--region`, `--profile`).
//!
//! With `--apply` on DynamoDB Local the parking table is created when
//! missing. Without `--apply` nothing is created or written (nor deleted):
//! the handlers run over a dry-run store (reads from the table, writes
//! recorded), a missing parking table is reported (nothing is parked in it)
//! and the run goes on, and the command prints what each record would do.
//! Exit status [`super::EXIT_FAILURES`] when a record still fails, or a
//! message or object is left.

mod bucket;
pub mod endpoints;
mod queue;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use futures::StreamExt;
use serde_json::{Value, json};

use super::replay::worker;
use super::target::{
    AppTable, EndpointOpts, RemoteWriteOpts, Scope, Target, is_local, refuse_remote_writes,
};
use super::{CliApp, CliError, EXIT_FAILURES};
use crate::failure_message::{self, FailureRange};
use crate::layers::DryRunStore;
use crate::stream_reader::read_range;
use worker_engine::Worker;
use worker_engine::park::{
    self, Origin, PARKING_TABLE_ENV, ParkedRecord, Parking, ParkingSettings,
};
use worker_engine::schedule::JobName;
use worker_engine::store::{DynamoStore, StoreError};
use worker_engine::stream::{BatchReport, RecordStatus};
use worker_engine::stream::{SequenceNumber, decode_record_with, encode_event};

pub use bucket::S3Location;
pub use queue::VISIBILITY_TIMEOUT;

/// Records run through the worker at once (Lambda's largest batch of a
/// DynamoDB stream is 10,000; 1,000 keeps a report readable).
const CHUNK: usize = 1000;
/// Conditional puts to the parking table in flight at once.
const PARK_CONCURRENCY: usize = 16;

/// Options of `redrive`.
#[derive(Debug, Clone, Args)]
pub struct RedriveArgs {
    /// Replay for real: write the handlers' changes, remove handled records
    /// from the parking table, park what fails for good, delete the
    /// messages (objects) whose records are all handled or parked. Without
    /// it, a dry run prints what would happen and creates, writes and
    /// deletes nothing.
    #[arg(long)]
    pub apply: bool,
    /// The parking table (default: the PARKING_TABLE variable). With
    /// --apply on DynamoDB Local a missing one is created; a dry run only
    /// reports it missing (nothing parked in it) and goes on.
    #[arg(long, value_name = "NAME")]
    pub parking_table: Option<String>,
    /// An on-failure message of the stream mapping (JSON: one message, a
    /// list, or `aws sqs receive-message` output); its range is replayed
    /// instead of the parked records. Repeatable.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["queue_url", "s3"])]
    pub failure_message: Vec<PathBuf>,
    /// Read every on-failure message of this SQS queue (the mapping's
    /// on-failure destination) and replay its range; with --apply, a
    /// message is deleted once its records are handled or parked. The
    /// others (all, in a dry run) are made visible again at the end.
    #[arg(long, value_name = "URL", conflicts_with = "s3")]
    pub queue_url: Option<String>,
    /// SQS endpoint of --queue-url. Default: AWS_ENDPOINT_URL_SQS, else the
    /// queue URL's own server when it is not AWS (moto, LocalStack), else
    /// AWS_ENDPOINT_URL, else AWS in the region the queue URL names.
    #[arg(long, value_name = "URL", requires = "queue_url")]
    pub sqs_endpoint_url: Option<String>,
    /// Replay the invocation records an S3 on-failure destination holds
    /// under this prefix (Lambda writes them under
    /// aws/lambda/<mapping UUID>/<shard id>/...): each carries its batch's
    /// records, so the stream's 24 hours do not matter. With --apply, an
    /// object is deleted once its records are handled or parked.
    #[arg(long, value_name = "s3://BUCKET/PREFIX")]
    pub s3: Option<String>,
    /// S3 endpoint of --s3 (path-style addressing when it is not AWS).
    /// Default: AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else AWS.
    #[arg(long, value_name = "URL", requires = "s3")]
    pub s3_endpoint_url: Option<String>,
    /// With --failure-message/--queue-url/--s3: copy every record of the
    /// batches into the parking table without running the handlers (the
    /// fix is not ready, and the stream keeps records only 24 hours);
    /// redrive them later.
    #[arg(long)]
    pub park: bool,
    /// Set a worker configuration variable (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = super::replay::env_pair)]
    pub env: Vec<String>,
    /// The app's table and its endpoint (the parking table is on the same
    /// endpoint).
    #[command(flatten)]
    pub endpoint: EndpointOpts,
    /// Whether `--apply` may write to a table not on this machine.
    #[command(flatten)]
    pub remote: RemoteWriteOpts,
}

/// What happened (or would happen) to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Handled (or skipped: nothing to do).
    Handled {
        /// What the handler did (`skipped: <reason>` for a record skipped).
        detail: String,
    },
    /// Failed for good: kept parked (a parked record), parked now (a
    /// failed batch's record, `--apply`), would be parked (a dry run).
    FailedAgain {
        /// Why it failed.
        reason: String,
    },
    /// Failed for good, or copied with `--park`, and found in the parking
    /// table already: the first copy is kept.
    AlreadyParked {
        /// Why it failed, or why it was copied (`--park`).
        reason: String,
    },
    /// Failed transiently or not attempted (kept parked / not parked).
    Retry {
        /// Why it failed, or why it was not attempted.
        reason: String,
    },
    /// Failed and not parked: not this app's record, or the parking table
    /// refused it. Its message (object) is left for another run.
    NotParked {
        /// Why it failed, and why it could not be parked.
        reason: String,
    },
    /// Copied to the parking table as it is, handlers not run (`--park`).
    Parked {
        /// The reason stored with it (given up on by the event source
        /// mapping, and the mapping's condition).
        reason: String,
    },
}

/// One record's line in a redrive report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedriveEntry {
    /// The ARN of the stream the record came from.
    pub stream_arn: String,
    /// The record's sequence number (empty when it has none).
    pub sequence_number: String,
    /// The item's key, `PK/SK`, when it could be read.
    pub key: Option<String>,
    /// The reason it was parked (parked records only).
    pub parked_for: Option<String>,
    /// What happened (or would happen) to it.
    pub verdict: Verdict,
}

/// What a redrive did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedriveReport {
    /// It was run with `--apply` (otherwise a dry run: nothing written,
    /// parked or deleted).
    pub applied: bool,
    /// One entry per record, in the order run.
    pub entries: Vec<RedriveEntry>,
    /// Parked records removed (handled now).
    pub removed: usize,
    /// Parked records kept with a new reason.
    pub kept: usize,
    /// Records of failed batches parked now (the conditional put applied).
    pub parked: usize,
    /// Records of failed batches found parked already (the conditional put
    /// failed: the first copy is kept).
    pub already_parked: usize,
    /// Writes the handlers would send (a dry run; 0 with `--apply`).
    pub planned_writes: usize,
}

impl RedriveReport {
    /// Records handled (or skipped: nothing to do).
    pub fn handled(&self) -> usize {
        self.count(|v| matches!(v, Verdict::Handled { .. }))
    }

    /// Records that failed and are not parked (transient failures, records
    /// the parking table refused): their batch is not done.
    pub fn failing(&self) -> usize {
        self.count(|v| matches!(v, Verdict::Retry { .. } | Verdict::NotParked { .. }))
    }

    /// Records that are (or would be) parked: failed for good, or `--park`.
    pub fn to_park(&self) -> usize {
        self.count(|v| {
            matches!(
                v,
                Verdict::FailedAgain { .. }
                    | Verdict::Parked { .. }
                    | Verdict::AlreadyParked { .. }
            )
        })
    }

    /// Whether a record still fails (is not handled).
    pub fn failed(&self) -> bool {
        self.entries
            .iter()
            .any(|e| !matches!(e.verdict, Verdict::Handled { .. }))
    }

    fn count(&self, f: impl Fn(&Verdict) -> bool) -> usize {
        self.entries.iter().filter(|e| f(&e.verdict)).count()
    }

    /// `N handled, N parked, N already parked, N failed` (what `--apply`
    /// did).
    pub fn counts(&self) -> String {
        format!(
            "{} handled, {} parked, {} already parked, {} failed",
            self.handled(),
            self.parked,
            self.already_parked,
            self.failing()
        )
    }

    fn absorb(&mut self, other: &RedriveReport) {
        self.entries.extend(other.entries.iter().cloned());
        self.removed += other.removed;
        self.kept += other.kept;
        self.parked += other.parked;
        self.already_parked += other.already_parked;
        self.planned_writes += other.planned_writes;
    }
}

/// The verdict of one parked record in a batch report.
fn verdict(status: &RecordStatus) -> Verdict {
    match status {
        RecordStatus::Handled { detail } => Verdict::Handled {
            detail: detail.clone(),
        },
        RecordStatus::Skipped { reason } => Verdict::Handled {
            detail: format!("skipped: {reason}"),
        },
        RecordStatus::Foreign { reason } => Verdict::FailedAgain {
            reason: format!("not this app's: {reason}"),
        },
        RecordStatus::Rejected { reason } | RecordStatus::Malformed { reason } => {
            Verdict::FailedAgain {
                reason: reason.clone(),
            }
        }
        RecordStatus::Failed { reason }
        | RecordStatus::Environment { reason }
        | RecordStatus::NotAttempted { reason } => Verdict::Retry {
            reason: reason.clone(),
        },
    }
}

/// The verdict of one record of a failed batch: what fails for good and
/// can be parked ([`RecordStatus::parkable_reason`]) is `FailedAgain`; a
/// record that is not this app's cannot be parked.
fn batch_verdict(status: &RecordStatus) -> Verdict {
    match status {
        RecordStatus::Foreign { reason } => Verdict::NotParked {
            reason: format!("not this app's: {reason}"),
        },
        other => verdict(other),
    }
}

/// Run an event through the worker: its report, and the writes a dry run
/// planned for the whole event.
async fn run_event<J: JobName>(
    worker: &Worker<J>,
    event: &Value,
    dry: Option<&DryRunStore>,
) -> Result<(BatchReport, usize), CliError> {
    let report = worker
        .handle_stream(event, None)
        .await
        .map_err(|e| CliError::Usage(format!("cannot run the records: {e}")))?;
    if let Some(fault) = &report.environment_fault {
        return Err(CliError::Environment(fault.clone()));
    }
    let planned = dry.map(|d| d.take_planned().len()).unwrap_or(0);
    Ok((report, planned))
}

/// Run every parked record through `worker`. With `apply`, a record now
/// handled is removed and one that fails again is kept with the new
/// reason; without, the parking table is only read.
pub async fn redrive_parked<J: JobName>(
    worker: &Worker<J>,
    dry: Option<&DryRunStore>,
    parking: &Parking,
    apply: bool,
) -> Result<RedriveReport, CliError> {
    let parked = parking.list().await?;
    let mut out = RedriveReport {
        applied: apply,
        ..Default::default()
    };
    for chunk in parked.chunks(CHUNK) {
        let event = json!({"Records": chunk.iter().map(|p| p.record.clone()).collect::<Vec<_>>()});
        let (report, planned) = run_event(worker, &event, dry).await?;
        out.planned_writes += planned;
        for (p, r) in chunk.iter().zip(&report.records) {
            let verdict = verdict(&r.status);
            if apply {
                match &verdict {
                    Verdict::Handled { .. } => {
                        parking.remove(p).await?;
                        out.removed += 1;
                    }
                    Verdict::FailedAgain { reason }
                    | Verdict::AlreadyParked { reason }
                    | Verdict::Retry { reason }
                    | Verdict::NotParked { reason }
                    | Verdict::Parked { reason } => {
                        parking.keep(p, reason).await?;
                        out.kept += 1;
                    }
                }
            }
            out.entries.push(RedriveEntry {
                stream_arn: p.stream_arn.clone(),
                sequence_number: p.sequence_number.clone(),
                key: p.key.clone().or_else(|| r.keys.clone()),
                parked_for: Some(p.reason.clone()),
                verdict,
            });
        }
    }
    Ok(out)
}

/// Park each record (conditional puts, [`PARK_CONCURRENCY`] at once), in
/// order: `Ok(true)` parked now, `Ok(false)` parked already.
async fn park_all(parking: &Parking, records: &[ParkedRecord]) -> Vec<Result<bool, StoreError>> {
    futures::stream::iter(records)
        .map(|p| parking.park(p))
        .buffered(PARK_CONCURRENCY)
        .collect()
        .await
}

/// The sequence number of a record as delivered (`""` without one).
fn raw_sequence_number(raw: &Value) -> String {
    raw["dynamodb"]["SequenceNumber"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// What one failed batch's records go through: the handlers (parking what
/// fails for good with `apply`), or straight into the parking table
/// (`park`).
pub struct Replay<'a, J: JobName> {
    /// The worker whose handlers run the records.
    pub worker: &'a Worker<J>,
    /// The dry-run store the worker writes through (without `apply`);
    /// `None`: its writes go to the table.
    pub dry: Option<&'a DryRunStore>,
    /// The parking table; `None`: none is set (nothing can be parked).
    pub parking: Option<&'a Parking>,
    /// The table's key attribute names (the rendered key of a record).
    pub keys: (&'static str, &'static str),
    /// `--park`: copy the records into the parking table, handlers not
    /// run.
    pub park: bool,
    /// `--apply`: write for real (otherwise a dry run).
    pub apply: bool,
}

impl<J: JobName> Replay<'_, J> {
    /// Replay the records of one failed batch (as Lambda delivered them,
    /// in order) of `shard_id`. `Err`: the batch cannot be run at all (its
    /// records are not a DynamoDB Streams event).
    pub async fn batch(
        &self,
        records: &[Value],
        stream_arn: &str,
        shard_id: &str,
        condition: Option<&str>,
    ) -> Result<RedriveReport, CliError> {
        let mut out = RedriveReport {
            applied: self.apply,
            ..Default::default()
        };
        match (self.park, self.parking) {
            (true, Some(parking)) => {
                out = park_records(parking, self.keys, records, shard_id, condition, self.apply)
                    .await;
            }
            _ => {
                for chunk in records.chunks(CHUNK) {
                    self.run_records(chunk, stream_arn, shard_id, &mut out)
                        .await?;
                }
            }
        }
        Ok(out)
    }

    /// Run records through the worker; with `apply`, park what fails for
    /// good.
    async fn run_records(
        &self,
        chunk: &[Value],
        stream_arn: &str,
        shard_id: &str,
        out: &mut RedriveReport,
    ) -> Result<(), CliError> {
        let event = json!({ "Records": chunk });
        let (report, planned) = run_event(self.worker, &event, self.dry).await?;
        out.planned_writes += planned;
        let mut verdicts: Vec<Verdict> = report
            .records
            .iter()
            .map(|r| batch_verdict(&r.status))
            .collect();
        if self.apply
            && let Some(parking) = self.parking
        {
            let (at, to_park): (Vec<usize>, Vec<ParkedRecord>) = park::records_to_park(
                &report,
                chunk,
                Some(shard_id),
                Origin::FailureMessage,
                chrono::Utc::now(),
            )
            .into_iter()
            .unzip();
            for (i, result) in at.into_iter().zip(park_all(parking, &to_park).await) {
                let reason = match &verdicts[i] {
                    Verdict::FailedAgain { reason } => reason.clone(),
                    _ => continue,
                };
                verdicts[i] = match result {
                    Ok(true) => {
                        out.parked += 1;
                        Verdict::FailedAgain { reason }
                    }
                    Ok(false) => {
                        out.already_parked += 1;
                        Verdict::AlreadyParked { reason }
                    }
                    Err(e) => Verdict::NotParked {
                        reason: format!("{reason}; could not be parked: {e}"),
                    },
                };
            }
        }
        for (r, verdict) in report.records.iter().zip(verdicts) {
            out.entries.push(RedriveEntry {
                stream_arn: stream_arn.to_owned(),
                sequence_number: r
                    .sequence_number
                    .as_ref()
                    .map(SequenceNumber::to_string)
                    .unwrap_or_else(|| {
                        chunk
                            .get(r.index)
                            .map(raw_sequence_number)
                            .unwrap_or_default()
                    }),
                key: r.keys.clone(),
                parked_for: None,
                verdict,
            });
        }
        Ok(())
    }
}

/// `--park`: copy every record of a failed batch (as Lambda delivered
/// them) into the parking table as it is, handlers not run (with `apply`;
/// else only listed). The reason says the mapping gave up on it; `keys`:
/// the table's key attribute names (for the rendered key).
pub async fn park_records(
    parking: &Parking,
    keys: (&str, &str),
    records: &[Value],
    shard_id: &str,
    condition: Option<&str>,
    apply: bool,
) -> RedriveReport {
    let mut out = RedriveReport {
        applied: apply,
        ..Default::default()
    };
    let reason = format!(
        "given up on by the event source mapping ({})",
        condition.unwrap_or("on-failure message")
    );
    let now = chrono::Utc::now();
    let parked: Vec<ParkedRecord> = records
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let change = decode_record_with(i, raw, keys).ok();
            let key = change.as_ref().map(|c| c.key_string(keys));
            let mut p = ParkedRecord::of_record(
                raw,
                change.as_ref().map(|c| c.event_id.as_str()),
                change.as_ref().and_then(|c| c.sequence_number.as_ref()),
                key.as_deref(),
                &reason,
                now,
            );
            p.shard_id = Some(shard_id.to_owned());
            p.origin = Origin::FailureMessage;
            p
        })
        .collect();
    let results = if apply {
        park_all(parking, &parked).await
    } else {
        Vec::new()
    };
    for (i, p) in parked.into_iter().enumerate() {
        let verdict = match results.get(i) {
            None => Verdict::Parked {
                reason: reason.clone(),
            },
            Some(Ok(true)) => {
                out.parked += 1;
                Verdict::Parked {
                    reason: reason.clone(),
                }
            }
            Some(Ok(false)) => {
                out.already_parked += 1;
                Verdict::AlreadyParked {
                    reason: reason.clone(),
                }
            }
            Some(Err(e)) => Verdict::NotParked {
                reason: format!("could not be parked: {e}"),
            },
        };
        out.entries.push(RedriveEntry {
            stream_arn: p.stream_arn,
            sequence_number: p.sequence_number,
            key: p.key,
            parked_for: None,
            verdict,
        });
    }
    out
}

/// Read a failure message's range from the stream and copy every record
/// into the parking table, handlers not run ([`park_records`]). A range
/// that cannot be read is an error saying why ([`read_failure_range`]).
pub async fn park_range(
    streams: &aws_sdk_dynamodbstreams::Client,
    keys: (&str, &str),
    parking: &Parking,
    range: &FailureRange,
    apply: bool,
) -> Result<RedriveReport, CliError> {
    let records = read_failure_range(streams, range)
        .await
        .map_err(|why| CliError::Usage(format!("{}: {why}", describe_range(range))))?;
    Ok(park_records(
        parking,
        keys,
        &records,
        &range.shard_id,
        range.condition.as_deref(),
        apply,
    )
    .await)
}

/// Read a failure message's range from the stream and run it through
/// `worker`. With `apply`, what fails for good is parked (with its shard).
/// A range that cannot be read is an error saying why.
pub async fn redrive_range<J: JobName>(
    worker: &Worker<J>,
    dry: Option<&DryRunStore>,
    streams: &aws_sdk_dynamodbstreams::Client,
    parking: Option<&Parking>,
    range: &FailureRange,
    apply: bool,
) -> Result<RedriveReport, CliError> {
    let records = read_failure_range(streams, range)
        .await
        .map_err(|why| CliError::Usage(format!("{}: {why}", describe_range(range))))?;
    let replay = Replay {
        worker,
        dry,
        parking,
        keys: worker_engine::schema::DEFAULT_KEY.names(),
        park: false,
        apply,
    };
    replay
        .batch(
            &records,
            &range.stream_arn,
            &range.shard_id,
            range.condition.as_deref(),
        )
        .await
}

/// The service's error code and message in an SDK error's text
/// (`ResourceNotFoundException: Shard does not exist` of `... service error:
/// ResourceNotFoundException: Shard does not exist: ... (ServiceError {...})`);
/// `None` when it is not a service's answer.
fn service_error(text: &str) -> Option<String> {
    let rest = text.split_once("service error: ")?.1;
    if let Some(unhandled) = rest.strip_prefix("unhandled error (") {
        let code = unhandled.split(')').next()?;
        let message = unhandled
            .split_once("message: \"")
            .and_then(|(_, m)| m.split('"').next())
            .filter(|m| !m.is_empty());
        return Some(match message {
            Some(m) => format!("{code}: {m}"),
            None => code.to_owned(),
        });
    }
    let head = rest.split(" (ServiceError").next()?;
    let mut parts = head.splitn(3, ": ");
    let code = parts.next().filter(|c| !c.is_empty())?;
    Some(match parts.next() {
        Some(message) => format!("{code}: {message}"),
        None => code.to_owned(),
    })
}

/// Why a failure message's range cannot be read from the stream: its shard
/// is gone, its records are trimmed (the stream keeps them 24 hours), or
/// the stream cannot be read.
fn unreadable(range: &FailureRange, e: &StoreError) -> String {
    let text = e.to_string();
    let answer = service_error(&text).unwrap_or(text);
    match e {
        StoreError::NotFound { .. } => format!(
            "shard {} is not in the stream (the shard is gone, or the stream was replaced): {answer}",
            range.shard_id
        ),
        _ if answer.contains("TrimmedDataAccess") => {
            format!("its records are trimmed from the stream (older than 24 hours): {answer}")
        }
        // GetShardIterator refuses a sequence number the shard does not hold.
        _ if answer.contains("ValidationException") && answer.contains("SequenceNumber") => {
            format!(
                "its first record {} is not in shard {} (trimmed, or not this shard's): {answer}",
                range.start, range.shard_id
            )
        }
        _ => format!("cannot read it from the stream: {answer}"),
    }
}

/// The records of a failure message's range, read from the stream (as
/// Lambda would deliver them); `Err` says why it cannot be read, the first
/// record of the range no longer in the shard included.
pub async fn read_failure_range(
    streams: &aws_sdk_dynamodbstreams::Client,
    range: &FailureRange,
) -> Result<Vec<Value>, String> {
    let changes = read_range(
        streams,
        &range.stream_arn,
        &range.shard_id,
        &range.start,
        &range.end,
    )
    .await
    .map_err(|e| unreadable(range, &e))?;
    match changes.first().and_then(|c| c.sequence_number.as_ref()) {
        Some(first) if *first == range.start => {}
        Some(first) => {
            return Err(format!(
                "its first record {} is no longer in the shard (trimmed: the stream keeps records 24 hours; the shard starts at {first} now)",
                range.start
            ));
        }
        None => {
            return Err(format!(
                "no record of it is left in shard {} (trimmed: the stream keeps records 24 hours)",
                range.shard_id
            ));
        }
    }
    let event = encode_event(&changes, Some(&range.stream_arn));
    Ok(event["Records"].as_array().cloned().unwrap_or_default())
}

/// The parking table of the command: `--parking-table`, else
/// `PARKING_TABLE` (through `--env` or the environment).
fn parking_settings(args: &RedriveArgs, table: &str) -> Result<Option<ParkingSettings>, CliError> {
    let lookup = super::replay::worker_env(table, &args.env)?;
    let mut settings = ParkingSettings::from_env(&worker_engine::Env::new(&lookup))
        .map_err(|e| CliError::Usage(e.to_string()))?;
    if let Some(table) = &args.parking_table {
        let retention = settings
            .as_ref()
            .map(|s| s.retention_days)
            .unwrap_or(park::DEFAULT_RETENTION_DAYS);
        settings = Some(ParkingSettings {
            table: table.clone(),
            retention_days: retention,
        });
    }
    Ok(settings)
}

/// Whether the parking table exists.
async fn parking_table_exists(
    client: &aws_sdk_dynamodb::Client,
    settings: &ParkingSettings,
) -> Result<bool, CliError> {
    let store = DynamoStore::new(client.clone(), &settings.table).with_key(park::KEY);
    match store.stream_arn().await {
        Ok(_) => Ok(true),
        Err(StoreError::NotFound { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Make sure of the parking table before a redrive; whether it is there.
/// A missing one is created with `--apply` on DynamoDB Local (in AWS the
/// app's template creates it). A dry run creates nothing: a missing table
/// is reported (nothing is parked in it) and the run goes on.
async fn prepare_parking_table(
    client: &aws_sdk_dynamodb::Client,
    settings: &ParkingSettings,
    endpoint: &str,
    apply: bool,
) -> Result<bool, CliError> {
    if parking_table_exists(client, settings).await? {
        return Ok(true);
    }
    match (apply, is_local(endpoint)) {
        (true, true) => {
            let store = DynamoStore::new(client.clone(), &settings.table).with_key(park::KEY);
            store.create_table(&park::schema()).await?;
            Ok(true)
        }
        (true, false) => Ok(false),
        (false, local) => {
            println!(
                "parking table {} does not exist at {endpoint}: nothing is parked in it, and a dry run creates nothing ({})",
                settings.table,
                if local {
                    "--apply creates it"
                } else {
                    "the app's template creates it; --apply cannot park without it"
                }
            );
            Ok(false)
        }
    }
}

fn print_report(title: &str, report: &RedriveReport) {
    println!("{title}: {} record(s)", report.entries.len());
    for e in &report.entries {
        let key = e.key.as_deref().unwrap_or("?");
        let what = match (&e.verdict, report.applied) {
            (Verdict::Handled { detail }, false) => format!("would be handled: {detail}"),
            (Verdict::Handled { detail, .. }, true) => format!("handled: {detail}"),
            // A record of a failed batch was never parked.
            (Verdict::FailedAgain { reason }, false) if e.parked_for.is_none() => {
                format!("would fail and be parked: {reason}")
            }
            (Verdict::FailedAgain { reason }, true) if e.parked_for.is_none() => {
                format!("failed, parked: {reason}")
            }
            (Verdict::FailedAgain { reason }, false) => format!("would fail again: {reason}"),
            (Verdict::FailedAgain { reason }, true) => format!("failed again, kept: {reason}"),
            (Verdict::AlreadyParked { reason }, _) => {
                format!("already parked (the first copy is kept): {reason}")
            }
            (Verdict::Retry { reason }, _) => format!("failed transiently: {reason}"),
            (Verdict::NotParked { reason }, false) => {
                format!("would fail, cannot be parked: {reason}")
            }
            (Verdict::NotParked { reason }, true) => format!("failed, not parked: {reason}"),
            (Verdict::Parked { reason }, false) => format!("would be parked: {reason}"),
            (Verdict::Parked { reason }, true) => format!("parked: {reason}"),
        };
        let parked = e
            .parked_for
            .as_deref()
            .map(|r| format!(" (parked for: {r})"))
            .unwrap_or_default();
        println!("  {} [{key}] {what}{parked}", e.sequence_number);
    }
    if !report.applied {
        println!(
            "{} write(s) planned by the handlers (none sent)",
            report.planned_writes
        );
    }
}

/// `shardId-… 1..9 (RetryAttemptsExhausted)`.
fn describe_range(range: &FailureRange) -> String {
    format!(
        "{} {}..{} ({})",
        range.shard_id,
        range.start,
        range.end,
        range.condition.as_deref().unwrap_or("failure message")
    )
}

/// What a run over failed batches (messages, objects) did.
#[derive(Default)]
struct Totals {
    /// Batches seen (messages, objects).
    batches: usize,
    /// Batches that cannot be read or run.
    unusable: usize,
    /// Batches done: deleted (`--apply`), or that would be.
    done: usize,
    report: RedriveReport,
}

impl Totals {
    /// Print one batch's report and count it; whether it is done (every
    /// record handled or parked).
    fn batch(&mut self, title: &str, outcome: Result<RedriveReport, String>) -> bool {
        self.batches += 1;
        match outcome {
            Err(reason) => {
                println!("{title}: cannot be replayed: {reason}");
                self.unusable += 1;
                false
            }
            Ok(report) => {
                print_report(title, &report);
                if report.applied {
                    println!("{}", report.counts());
                }
                let done = report.failing() == 0;
                self.done += usize::from(done);
                self.report.absorb(&report);
                done
            }
        }
    }

    /// The closing lines; `noun`: `message(s)`, `object(s)`.
    fn print(&self, noun: &str, applied: bool) {
        let r = &self.report;
        let records = r.entries.len();
        if applied {
            println!(
                "total: {} {noun}, {records} record(s): {}",
                self.batches,
                r.counts()
            );
        } else {
            println!(
                "total: {} {noun}, {records} record(s): {} would be handled, {} would be parked, {} would fail; {} cannot be replayed",
                self.batches,
                r.handled(),
                r.to_park(),
                r.failing(),
                self.unusable
            );
        }
    }

    /// Whether the run ends with [`EXIT_FAILURES`]: a batch is not done
    /// (a dry run: a record would not be handled).
    fn failed(&self, applied: bool) -> bool {
        self.unusable > 0 || self.done < self.batches || (!applied && self.report.failed())
    }
}

/// The failed batches of the command's destination, replayed.
async fn replay_destinations<J: JobName>(
    args: &RedriveArgs,
    target: &Target,
    replay: &Replay<'_, J>,
) -> Result<bool, CliError> {
    if let Some(url) = &args.s3 {
        return replay_bucket(args, url, replay).await;
    }
    let streams = target.streams_client().await;
    if let Some(url) = &args.queue_url {
        return replay_queue(args, url, &streams, replay).await;
    }
    replay_failure_files(args, &streams, replay).await
}

/// How a batch's title marks a dry run.
fn mode(args: &RedriveArgs) -> &'static str {
    if args.apply { "" } else { " (dry run)" }
}

/// The objects under `--s3`, each replayed and deleted once done.
async fn replay_bucket<J: JobName>(
    args: &RedriveArgs,
    url: &str,
    replay: &Replay<'_, J>,
) -> Result<bool, CliError> {
    let location = S3Location::parse(url)?;
    let bucket = bucket::Bucket::new(
        location,
        args.s3_endpoint_url.as_deref(),
        &args.endpoint.aws,
    )
    .await;
    eprintln!("reading {} at {}", bucket.location, bucket.endpoint);
    let keys = bucket.keys().await?;
    println!("{} object(s) under {}", keys.len(), bucket.location);
    let mut totals = Totals::default();
    let mut deleted = 0;
    for key in &keys {
        let (title, outcome) = replay_object(args, &bucket, key, replay).await?;
        match (args.apply, totals.batch(&title, outcome)) {
            (true, true) => {
                bucket.delete(key).await?;
                deleted += 1;
                println!("  object deleted");
            }
            (true, false) => println!("  object left in the bucket"),
            (false, true) => println!("  object would be deleted"),
            (false, false) => println!("  object would be left in the bucket"),
        }
    }
    totals.print("object(s)", args.apply);
    if args.apply {
        println!(
            "{} object(s) deleted, {} left in the bucket",
            deleted,
            keys.len() - deleted
        );
    }
    if !args.apply && !keys.is_empty() {
        println!("nothing written or deleted; run again with --apply to replay them");
    }
    Ok(totals.failed(args.apply))
}

/// The object `key`'s batch replayed: its title, and what the replay did
/// (`Err`: why it cannot be replayed).
async fn replay_object<J: JobName>(
    args: &RedriveArgs,
    bucket: &bucket::Bucket,
    key: &str,
    replay: &Replay<'_, J>,
) -> Result<(String, Result<RedriveReport, String>), CliError> {
    let url = bucket.location.url_of(key);
    let mode = mode(args);
    Ok(match bucket.read(key).await? {
        Err(reason) => (
            format!("redrive{mode} of {url}"),
            Err(format!(
                "not an invocation record of a DynamoDB stream: {reason}"
            )),
        ),
        Ok(record) => (
            format!("redrive{mode} of {url} ({})", describe_range(&record.range)),
            replay
                .batch(
                    &record.records,
                    &record.range.stream_arn,
                    &record.range.shard_id,
                    record.range.condition.as_deref(),
                )
                .await
                .map_err(|e| e.to_string()),
        ),
    })
}

/// The messages of `--queue-url`, each replayed and deleted once done;
/// whatever happens, those not deleted are made visible again.
async fn replay_queue<J: JobName>(
    args: &RedriveArgs,
    url: &str,
    streams: &aws_sdk_dynamodbstreams::Client,
    replay: &Replay<'_, J>,
) -> Result<bool, CliError> {
    let q = queue::Queue::new(
        url.to_owned(),
        args.sqs_endpoint_url.as_deref(),
        &args.endpoint.aws,
    )
    .await;
    eprintln!("reading {} at {}", q.url, q.endpoint);
    let mut messages = q.receive_all().await?;
    messages.sort_by(stream_order);
    println!("{} message(s) in {}", messages.len(), q.url);
    let mut deleted: HashSet<String> = HashSet::new();
    let mut totals = Totals::default();
    let run = async {
        for m in &messages {
            let (title, outcome) = replay_message(args, m, streams, replay).await;
            match (args.apply, totals.batch(&title, outcome)) {
                (true, true) => {
                    q.delete(m).await?;
                    deleted.insert(m.id.clone());
                    println!("  message deleted from the queue");
                }
                (true, false) => println!("  message left in the queue"),
                (false, true) => println!("  message would be deleted from the queue"),
                (false, false) => println!("  message would be left in the queue"),
            }
        }
        Ok::<(), CliError>(())
    }
    .await;
    // Whatever happened: what is not deleted is visible again.
    let left: Vec<&queue::Message> = messages
        .iter()
        .filter(|m| !deleted.contains(&m.id))
        .collect();
    let released = q.release(&left).await;
    run?;
    let released = released?;
    totals.print("message(s)", args.apply);
    if args.apply {
        println!(
            "{} message(s) deleted from the queue, {released} left in it (visible again)",
            deleted.len()
        );
    } else {
        println!("the queue is as it was: {released} message(s) visible again");
        if !messages.is_empty() {
            println!("nothing written or deleted; run again with --apply to replay them");
        }
    }
    Ok(totals.failed(args.apply))
}

/// The message `m`'s range read from the stream and replayed: its title,
/// and what the replay did (`Err`: why it cannot be replayed).
async fn replay_message<J: JobName>(
    args: &RedriveArgs,
    m: &queue::Message,
    streams: &aws_sdk_dynamodbstreams::Client,
    replay: &Replay<'_, J>,
) -> (String, Result<RedriveReport, String>) {
    let mode = mode(args);
    match &m.range {
        Err(reason) => (
            format!("redrive{mode} of message {}", m.id),
            Err(format!(
                "not an on-failure message of a DynamoDB stream: {reason}"
            )),
        ),
        Ok(range) => (
            format!("redrive{mode} of {}", describe_range(range)),
            replay_range(replay, streams, range).await,
        ),
    }
}

/// Stream order within a shard; what is not an on-failure message last.
fn stream_order(a: &queue::Message, b: &queue::Message) -> std::cmp::Ordering {
    match (&a.range, &b.range) {
        (Ok(a), Ok(b)) => {
            (&a.stream_arn, &a.shard_id, &a.start).cmp(&(&b.stream_arn, &b.shard_id, &b.start))
        }
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => a.id.cmp(&b.id),
    }
}

/// The ranges of the `--failure-message` files, each read from the stream
/// and replayed.
async fn replay_failure_files<J: JobName>(
    args: &RedriveArgs,
    streams: &aws_sdk_dynamodbstreams::Client,
    replay: &Replay<'_, J>,
) -> Result<bool, CliError> {
    let mut ranges: Vec<FailureRange> = Vec::new();
    for file in &args.failure_message {
        let text = std::fs::read_to_string(file)
            .map_err(|e| CliError::input(file.display(), format!("cannot read: {e}")))?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| CliError::input(file.display(), format!("not JSON: {e}")))?;
        ranges.extend(
            failure_message::parse_all(&v)
                .map_err(|e| CliError::input(file.display(), e.to_string()))?,
        );
    }
    if ranges.is_empty() {
        println!("no failure message: nothing to redrive");
        return Ok(false);
    }
    let mut totals = Totals::default();
    for range in &ranges {
        let outcome = replay_range(replay, streams, range).await;
        totals.batch(
            &format!("redrive{} of {}", mode(args), describe_range(range)),
            outcome,
        );
    }
    totals.print("message(s)", args.apply);
    if !args.apply {
        println!("nothing written; run again with --apply to replay them");
    }
    Ok(totals.failed(args.apply))
}

/// Read a failure message's range from the stream and replay it.
async fn replay_range<J: JobName>(
    replay: &Replay<'_, J>,
    streams: &aws_sdk_dynamodbstreams::Client,
    range: &FailureRange,
) -> Result<RedriveReport, String> {
    let records = read_failure_range(streams, range).await?;
    replay
        .batch(
            &records,
            &range.stream_arn,
            &range.shard_id,
            range.condition.as_deref(),
        )
        .await
        .map_err(|e| e.to_string())
}

/// `<app> redrive`.
pub async fn run<A: CliApp>(args: RedriveArgs) -> Result<ExitCode, CliError> {
    if args.apply {
        refuse_remote_writes(
            Some(&args.endpoint.endpoint_url),
            args.remote,
            "redrive --apply",
        )?;
    }
    let (app, table) = AppTable::of::<A>().named(&args.endpoint.table, Scope::Every)?;
    let target = Target::open_endpoint(&args.endpoint, &app, &table).await?;
    if args.apply {
        target.announce_writes().await;
    }
    let (worker, dry) = worker::<A>(&target, None, !args.apply, &args.env)?;
    let dry = dry.as_deref();
    let client = if is_local(&target.endpoint) {
        worker_engine::store::local_client(&target.endpoint)
    } else {
        worker_engine::store::client(Some(&target.endpoint)).await
    };
    let settings = parking_settings(&args, &table)?;
    let parking_there = match &settings {
        Some(s) => prepare_parking_table(&client, s, &target.endpoint, args.apply).await?,
        None => false,
    };
    let destination =
        !args.failure_message.is_empty() || args.queue_url.is_some() || args.s3.is_some();
    if !destination {
        let parking = settings.map(|s| Parking::dynamo(client, &s));
        return redrive_parked_command(&args, &worker, dry, parking, parking_there).await;
    }
    if args.park && settings.is_none() {
        return Err(CliError::Usage(format!(
            "--park needs the parking table: pass --parking-table NAME or set {PARKING_TABLE_ENV}"
        )));
    }
    if args.apply && settings.is_none() {
        return Err(CliError::Usage(format!(
            "--apply parks what fails for good: pass --parking-table NAME or set {PARKING_TABLE_ENV}"
        )));
    }
    if let (true, false, Some(s)) = (args.apply, parking_there, &settings) {
        return Err(CliError::Usage(format!(
            "parking table {} does not exist at {}: --apply parks what fails for good there (the app's template creates it)",
            s.table, target.endpoint
        )));
    }
    let parking = settings.map(|s| Parking::dynamo(client, &s));
    let replay = Replay {
        worker: &worker,
        dry,
        parking: parking.as_ref(),
        keys: target.keys(),
        park: args.park,
        apply: args.apply,
    };
    let failed = replay_destinations(&args, &target, &replay).await?;
    Ok(if failed {
        ExitCode::from(EXIT_FAILURES)
    } else {
        ExitCode::SUCCESS
    })
}

/// `redrive` without a destination: the parked records.
async fn redrive_parked_command<J: JobName>(
    args: &RedriveArgs,
    worker: &Worker<J>,
    dry: Option<&DryRunStore>,
    parking: Option<Parking>,
    parking_there: bool,
) -> Result<ExitCode, CliError> {
    if args.park {
        return Err(CliError::Usage(
            "--park copies failed batches: give --failure-message FILE, --queue-url URL or --s3 s3://BUCKET/PREFIX".into(),
        ));
    }
    let parking = parking.ok_or_else(|| {
        CliError::Usage(format!(
            "no parking table: pass --parking-table NAME or set {PARKING_TABLE_ENV}"
        ))
    })?;
    // A dry run's missing parking table holds nothing (reported).
    let report = if parking_there || args.apply {
        redrive_parked(worker, dry, &parking, args.apply).await?
    } else {
        RedriveReport::default()
    };
    if report.entries.is_empty() {
        println!("nothing parked: nothing to redrive");
        return Ok(ExitCode::SUCCESS);
    }
    let mode = if args.apply { "" } else { " (dry run)" };
    print_report(&format!("redrive{mode} of parked records"), &report);
    if args.apply {
        println!(
            "{} handled and removed, {} kept (with the new reason)",
            report.removed, report.kept
        );
    } else {
        println!("nothing written; run again with --apply to replay them");
    }
    Ok(if report.failed() {
        ExitCode::from(EXIT_FAILURES)
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_error_is_its_code_and_message() {
        let not_found = "DynamoDB GetShardIterator: service error: ResourceNotFoundException: Shard does not exist: ResourceNotFoundException: Shard does not exist (ServiceError(ServiceError { source: ResourceNotFoundException { .. } })) (create it with the worker's `table create` command)";
        assert_eq!(
            service_error(not_found).as_deref(),
            Some("ResourceNotFoundException: Shard does not exist")
        );
        let unhandled = r#"DynamoDB GetShardIterator failed transiently (StreamsApi): service error: unhandled error (ValidationException): Error { code: "ValidationException", message: "1 validation error detected", aws_request_id: "x" }"#;
        assert_eq!(
            service_error(unhandled).as_deref(),
            Some("ValidationException: 1 validation error detected")
        );
        assert_eq!(
            service_error("dispatch failure: io error: connection refused"),
            None
        );
    }

    #[test]
    fn an_unreadable_range_says_why_in_a_line() {
        let range = failure_message::parse(&json!({"DDBStreamBatchInfo": {
            "shardId": "shardId-1", "startSequenceNumber": "1", "endSequenceNumber": "2",
            "streamArn": "arn:s"}}))
        .unwrap();
        let gone = StoreError::NotFound {
            operation: "GetShardIterator",
            message:
                "service error: ResourceNotFoundException: Shard does not exist (ServiceError(..))"
                    .into(),
        };
        assert_eq!(
            unreadable(&range, &gone),
            "shard shardId-1 is not in the stream (the shard is gone, or the stream was replaced): ResourceNotFoundException: Shard does not exist"
        );
        let trimmed = StoreError::Transient {
            operation: "GetRecords",
            code: "StreamsApi".into(),
            message: "service error: TrimmedDataAccessException: The operation attempted to read past the oldest stream record in a shard. (ServiceError(..))".into(),
        };
        assert!(
            unreadable(&range, &trimmed).starts_with("its records are trimmed from the stream (older than 24 hours): TrimmedDataAccessException: The operation"),
            "{}",
            unreadable(&range, &trimmed)
        );
        let invalid = StoreError::Transient {
            operation: "GetShardIterator",
            code: "StreamsApi".into(),
            message: r#"service error: unhandled error (ValidationException): Error { code: "ValidationException", message: "Invalid SequenceNumber for the shard" }"#.into(),
        };
        assert_eq!(
            unreadable(&range, &invalid),
            "its first record 1 is not in shard shardId-1 (trimmed, or not this shard's): ValidationException: Invalid SequenceNumber for the shard"
        );
    }

    #[test]
    fn a_batch_is_done_once_every_record_is_handled_or_parked() {
        let entry = |verdict| RedriveEntry {
            stream_arn: "s".into(),
            sequence_number: "1".into(),
            key: None,
            parked_for: None,
            verdict,
        };
        let reason = || "r".to_owned();
        let mut report = RedriveReport {
            applied: true,
            parked: 1,
            already_parked: 1,
            entries: vec![
                entry(Verdict::Handled { detail: reason() }),
                entry(Verdict::FailedAgain { reason: reason() }),
                entry(Verdict::AlreadyParked { reason: reason() }),
            ],
            ..Default::default()
        };
        assert_eq!(
            report.counts(),
            "1 handled, 1 parked, 1 already parked, 0 failed"
        );
        assert_eq!(report.failing(), 0);
        report
            .entries
            .push(entry(Verdict::NotParked { reason: reason() }));
        report
            .entries
            .push(entry(Verdict::Retry { reason: reason() }));
        assert_eq!(
            report.counts(),
            "1 handled, 1 parked, 1 already parked, 2 failed"
        );
        // Foreign records cannot be parked: the batch is not done.
        let foreign = RecordStatus::Foreign { reason: reason() };
        assert!(matches!(batch_verdict(&foreign), Verdict::NotParked { .. }));
        assert!(matches!(verdict(&foreign), Verdict::FailedAgain { .. }));
    }
}
