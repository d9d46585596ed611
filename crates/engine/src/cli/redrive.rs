//! `<app> redrive`: run parked records ([`crate::park`]) through the
//! current handlers, and turn the stream mapping's on-failure messages
//! ([`crate::failure_message`]) into the records they stand for.
//!
//! - `redrive` alone: every parked record is run again. A record now
//!   handled (or skipped) is removed from the parking table; one that fails
//!   again stays, with the new reason and one more redrive counted.
//! - `--failure-message FILE` (repeatable) / `--queue-url URL`: each
//!   message's shard and sequence range is read from the table's stream
//!   (while the stream still holds it, 24 hours) and run; a record that
//!   fails for good is parked (with its shard). With `--queue-url` a message
//!   is deleted from the queue once every record of its range was handled
//!   or parked.
//!
//! With `--apply` on DynamoDB Local the parking table is created when
//! missing. Without `--apply` nothing is created or written: the handlers
//! run over a dry-run store (reads from the table, writes recorded), a
//! missing parking table is reported (nothing is parked in it) and the run
//! goes on, and the command prints what each record would do. Exit status
//! [`super::EXIT_FAILURES`] when a record still fails.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::replay::worker;
use super::target::{
    AppTable, EndpointOpts, RemoteWriteOpts, Target, is_local, refuse_remote_writes,
};
use super::{CliApp, CliError, EXIT_FAILURES};
use crate::failure_message::{self, FailureRange};
use crate::park::{self, Origin, PARKING_TABLE_ENV, Parking, ParkingSettings};
use crate::runtime::Worker;
use crate::schedule::JobName;
use crate::store::layers::DryRunStore;
use crate::store::{DynamoStore, StoreError};
use crate::stream::decode::encode_event;
use crate::stream::engine::{BatchReport, RecordStatus};
use crate::stream_reader::read_range;

/// Records run through the worker at once (Lambda's largest batch of a
/// DynamoDB stream is 10,000; 1,000 keeps a report readable).
const CHUNK: usize = 1000;

/// Options of `redrive`.
#[derive(Debug, Clone, Args)]
pub struct RedriveArgs {
    /// Replay for real: write the handlers' changes, remove handled records
    /// from the parking table, park what fails for good. Without it, a dry
    /// run prints what would happen and creates and writes nothing.
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
    #[arg(long, value_name = "FILE", conflicts_with = "queue_url")]
    pub failure_message: Vec<PathBuf>,
    /// Read the on-failure messages from this SQS queue (the mapping's
    /// on-failure destination); with --apply, a message is deleted once its
    /// records are handled or parked.
    #[arg(long, value_name = "URL")]
    pub queue_url: Option<String>,
    /// With --failure-message/--queue-url: copy every record of the ranges
    /// into the parking table without running the handlers (the fix is not
    /// ready and the stream keeps records only 24 hours); redrive them
    /// later.
    #[arg(long)]
    pub park: bool,
    /// Set a worker configuration variable (repeatable).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = super::replay::env_pair)]
    pub env: Vec<String>,
    #[command(flatten)]
    pub endpoint: EndpointOpts,
    #[command(flatten)]
    pub remote: RemoteWriteOpts,
}

/// What happened (or would happen) to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Handled (or skipped: nothing to do).
    Handled { detail: String },
    /// Failed for good again (kept parked / parked).
    FailedAgain { reason: String },
    /// Failed transiently or not attempted (kept parked / not parked).
    Retry { reason: String },
    /// Copied to the parking table as it is, handlers not run (`--park`).
    Parked { reason: String },
}

/// One record's line in a redrive report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedriveEntry {
    pub stream_arn: String,
    pub sequence_number: String,
    pub key: Option<String>,
    /// The reason it was parked (parked records only).
    pub parked_for: Option<String>,
    pub verdict: Verdict,
}

/// What a redrive did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedriveReport {
    pub applied: bool,
    pub entries: Vec<RedriveEntry>,
    /// Parked records removed (handled now).
    pub removed: usize,
    /// Parked records kept with a new reason.
    pub kept: usize,
    /// Records of failure ranges parked now.
    pub parked: usize,
    /// Writes the handlers would send (a dry run; 0 with `--apply`).
    pub planned_writes: usize,
}

impl RedriveReport {
    pub fn handled(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e.verdict, Verdict::Handled { .. }))
            .count()
    }

    /// Whether a record still fails.
    pub fn failed(&self) -> bool {
        self.entries
            .iter()
            .any(|e| !matches!(e.verdict, Verdict::Handled { .. }))
    }
}

/// The verdict of one record of a batch report.
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
                    | Verdict::Retry { reason }
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

/// Read a failure message's range from the stream and copy every record
/// into the parking table, handlers not run (with `apply`; else only
/// listed). The reason says the mapping gave up on it; `keys`: the
/// table's key attribute names (for the rendered key).
pub async fn park_range(
    streams: &aws_sdk_dynamodbstreams::Client,
    keys: (&str, &str),
    parking: &Parking,
    range: &FailureRange,
    apply: bool,
) -> Result<RedriveReport, CliError> {
    let changes = read_range(
        streams,
        &range.stream_arn,
        &range.shard_id,
        &range.start,
        &range.end,
    )
    .await?;
    let event = encode_event(&changes, Some(&range.stream_arn));
    let reason = format!(
        "given up on by the event source mapping ({})",
        range.condition.as_deref().unwrap_or("on-failure message")
    );
    let now = chrono::Utc::now();
    let mut out = RedriveReport {
        applied: apply,
        ..Default::default()
    };
    for (raw, change) in event["Records"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(&changes)
    {
        let key = change.key_string(keys);
        let mut p = park::ParkedRecord::of_record(
            raw,
            Some(&change.event_id),
            change.sequence_number.as_ref(),
            Some(&key),
            &reason,
            now,
        );
        p.shard_id = Some(range.shard_id.clone());
        p.origin = Origin::FailureMessage;
        if apply {
            parking.park(&p).await?;
            out.parked += 1;
        }
        out.entries.push(RedriveEntry {
            stream_arn: p.stream_arn,
            sequence_number: p.sequence_number,
            key: Some(key),
            parked_for: None,
            verdict: Verdict::Parked {
                reason: reason.clone(),
            },
        });
    }
    Ok(out)
}

/// Read a failure message's range from the stream and run it through
/// `worker`. With `apply`, what fails for good is parked (with its shard).
pub async fn redrive_range<J: JobName>(
    worker: &Worker<J>,
    dry: Option<&DryRunStore>,
    streams: &aws_sdk_dynamodbstreams::Client,
    parking: Option<&Parking>,
    range: &FailureRange,
    apply: bool,
) -> Result<RedriveReport, CliError> {
    let changes = read_range(
        streams,
        &range.stream_arn,
        &range.shard_id,
        &range.start,
        &range.end,
    )
    .await?;
    let mut out = RedriveReport {
        applied: apply,
        ..Default::default()
    };
    for chunk in changes.chunks(CHUNK) {
        let event = encode_event(chunk, Some(&range.stream_arn));
        let (mut report, planned) = run_event(worker, &event, dry).await?;
        out.planned_writes += planned;
        if apply && let Some(parking) = parking {
            park::park_failures(
                parking,
                &event,
                &mut report,
                Some(&range.shard_id),
                Origin::FailureMessage,
                chrono::Utc::now(),
            )
            .await;
            out.parked += report.parked;
            if report.parking_failed > 0 {
                return Err(CliError::Usage(format!(
                    "{} record(s) of {} failed for good and could not be parked: run again",
                    report.parking_failed, range.shard_id
                )));
            }
        }
        for r in &report.records {
            out.entries.push(RedriveEntry {
                stream_arn: range.stream_arn.clone(),
                sequence_number: r
                    .sequence_number
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
                key: r.keys.clone(),
                parked_for: None,
                verdict: verdict(&r.status),
            });
        }
    }
    Ok(out)
}

/// The parking table of the command: `--parking-table`, else
/// `PARKING_TABLE` (through `--env` or the environment).
fn parking_settings(args: &RedriveArgs) -> Result<Option<ParkingSettings>, CliError> {
    let lookup = super::replay::worker_env(&args.endpoint.table, &args.env)?;
    let mut settings = ParkingSettings::from_env(&crate::env::Env::new(&lookup))
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
            // A record of a failure message's range was never parked.
            (Verdict::FailedAgain { reason }, false) if e.parked_for.is_none() => {
                format!("would fail and be parked: {reason}")
            }
            (Verdict::FailedAgain { reason }, true) if e.parked_for.is_none() => {
                format!("failed, parked: {reason}")
            }
            (Verdict::FailedAgain { reason }, false) => format!("would fail again: {reason}"),
            (Verdict::FailedAgain { reason }, true) => format!("failed again, kept: {reason}"),
            (Verdict::Retry { reason }, _) => format!("failed transiently: {reason}"),
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

/// `<app> redrive`.
pub async fn run<A: CliApp>(args: RedriveArgs) -> Result<ExitCode, CliError> {
    if args.apply {
        refuse_remote_writes(
            Some(&args.endpoint.endpoint_url),
            args.remote,
            "redrive --apply",
        )?;
    }
    let target = Target::open_endpoint(&args.endpoint, &AppTable::of::<A>()).await?;
    if args.apply {
        target.announce_writes().await;
    }
    let (worker, dry) = worker::<A>(&target, None, !args.apply, &args.env)?;
    let dry = dry.as_deref();
    let client = if is_local(&target.endpoint) {
        crate::store::local_client(&target.endpoint)
    } else {
        crate::store::client(Some(&target.endpoint)).await
    };
    let settings = parking_settings(&args)?;
    let parking_there = match &settings {
        Some(s) => prepare_parking_table(&client, s, &target.endpoint, args.apply).await?,
        None => false,
    };
    let parking = settings.map(|s| Parking::dynamo(client, &s));
    let mode = if args.apply { "" } else { " (dry run)" };
    let mut failed = false;

    if args.failure_message.is_empty() && args.queue_url.is_none() {
        if args.park {
            return Err(CliError::Usage(
                "--park copies on-failure messages' ranges: give --failure-message FILE or --queue-url URL".into(),
            ));
        }
        let parking = parking.ok_or_else(|| {
            CliError::Usage(format!(
                "no parking table: pass --parking-table NAME or set {PARKING_TABLE_ENV}"
            ))
        })?;
        // A dry run's missing parking table holds nothing (reported).
        let report = if parking_there || args.apply {
            redrive_parked(&worker, dry, &parking, args.apply).await?
        } else {
            RedriveReport::default()
        };
        if report.entries.is_empty() {
            println!("nothing parked: nothing to redrive");
            return Ok(ExitCode::SUCCESS);
        }
        print_report(&format!("redrive{mode} of parked records"), &report);
        if args.apply {
            println!(
                "{} handled and removed, {} kept (with the new reason)",
                report.removed, report.kept
            );
        } else {
            println!("nothing written; run again with --apply to replay them");
        }
        failed = report.failed();
    } else {
        if args.park && parking.is_none() {
            return Err(CliError::Usage(format!(
                "--park needs the parking table: pass --parking-table NAME or set {PARKING_TABLE_ENV}"
            )));
        }
        if args.apply && parking.is_none() {
            return Err(CliError::Usage(format!(
                "--apply parks what fails for good: pass --parking-table NAME or set {PARKING_TABLE_ENV}"
            )));
        }
        let streams = target.streams_client().await;
        let mut messages: Vec<(Option<String>, FailureRange)> = Vec::new();
        for file in &args.failure_message {
            let text = std::fs::read_to_string(file)
                .map_err(|e| CliError::input(file.display(), format!("cannot read: {e}")))?;
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| CliError::input(file.display(), format!("not JSON: {e}")))?;
            let ranges = failure_message::parse_all(&v)
                .map_err(|e| CliError::input(file.display(), e.to_string()))?;
            messages.extend(ranges.into_iter().map(|r| (None, r)));
        }
        let queue = match &args.queue_url {
            Some(url) => Some(queue::Queue::new(url.clone()).await),
            None => None,
        };
        if let Some(q) = &queue {
            messages.extend(q.receive_all(!args.apply).await?);
        }
        if messages.is_empty() {
            println!("no failure message: nothing to redrive");
        }
        for (receipt, range) in &messages {
            let report = match (&parking, args.park) {
                (Some(parking), true) => {
                    park_range(&streams, target.keys(), parking, range, args.apply).await?
                }
                _ => {
                    redrive_range(&worker, dry, &streams, parking.as_ref(), range, args.apply)
                        .await?
                }
            };
            print_report(
                &format!(
                    "redrive{mode} of {} {}..{} ({})",
                    range.shard_id,
                    range.start,
                    range.end,
                    range.condition.as_deref().unwrap_or("failure message")
                ),
                &report,
            );
            let retry = report
                .entries
                .iter()
                .any(|e| matches!(e.verdict, Verdict::Retry { .. }));
            if args.apply {
                println!("{} handled, {} parked", report.handled(), report.parked);
            }
            if report.entries.is_empty() {
                println!("  no record of this range is left in the stream (older than 24 h?)");
            }
            failed |= retry || (!args.apply && report.failed());
            if let (Some(q), Some(receipt), true, false) = (&queue, receipt, args.apply, retry) {
                q.delete(receipt).await?;
                println!("  message deleted from the queue");
            }
        }
        if !args.apply && !messages.is_empty() {
            println!("nothing written; run again with --apply to replay them");
        }
    }
    Ok(if failed {
        ExitCode::from(EXIT_FAILURES)
    } else {
        ExitCode::SUCCESS
    })
}

/// The on-failure queue (SQS), read with the AWS SDK.
mod queue {
    use super::*;

    pub struct Queue {
        client: aws_sdk_sqs::Client,
        url: String,
    }

    impl Queue {
        pub async fn new(url: String) -> Self {
            let config = crate::aws::defaults().load().await;
            Queue {
                client: aws_sdk_sqs::Client::new(&config),
                url,
            }
        }

        /// Every message of the queue with its receipt handle. A dry run
        /// (`peek`) leaves them visible (visibility timeout 0) and stops
        /// when a message comes again.
        pub async fn receive_all(
            &self,
            peek: bool,
        ) -> Result<Vec<(Option<String>, FailureRange)>, CliError> {
            let mut out = Vec::new();
            let mut seen = std::collections::HashSet::new();
            loop {
                let mut req = self
                    .client
                    .receive_message()
                    .queue_url(&self.url)
                    .max_number_of_messages(10)
                    .wait_time_seconds(1);
                if peek {
                    req = req.visibility_timeout(0);
                }
                let page = req.send().await.map_err(|e| {
                    CliError::Usage(format!(
                        "cannot read {}: {}",
                        self.url,
                        aws_smithy_types::error::display::DisplayErrorContext(e)
                    ))
                })?;
                let messages = page.messages.unwrap_or_default();
                let mut new = 0;
                for m in messages {
                    let id = m.message_id.clone().unwrap_or_default();
                    if !seen.insert(id.clone()) {
                        continue;
                    }
                    new += 1;
                    let body: Value = serde_json::from_str(m.body.as_deref().unwrap_or(""))
                        .map_err(|e| {
                            CliError::input(&self.url, format!("message {id} is not JSON: {e}"))
                        })?;
                    let range = failure_message::parse(&body)
                        .map_err(|e| CliError::input(&self.url, format!("message {id}: {e}")))?;
                    out.push((m.receipt_handle, range));
                }
                if new == 0 {
                    return Ok(out);
                }
            }
        }

        pub async fn delete(&self, receipt: &str) -> Result<(), CliError> {
            self.client
                .delete_message()
                .queue_url(&self.url)
                .receipt_handle(receipt)
                .send()
                .await
                .map_err(|e| {
                    CliError::Usage(format!(
                        "cannot delete a message of {}: {}",
                        self.url,
                        aws_smithy_types::error::display::DisplayErrorContext(e)
                    ))
                })?;
            Ok(())
        }
    }
}
