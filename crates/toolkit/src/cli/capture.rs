//! `<app> capture --out FILE`: read a table's DynamoDB Stream
//! through the Streams API (every shard, parents first, in order) and write
//! the records as the DynamoDB Streams event Lambda would deliver
//! (`eventSourceARN` included), ready for `replay`, `cargo lambda invoke
//! --data-file` or `sam local invoke -e`. `--redact` replaces the app's
//! personal attributes (e-mail addresses, names) with stable placeholders,
//! keeping every id.
//!
//! The event is the stream as it is: every record says the stream's own
//! view type (DescribeStream's `StreamViewType`), and a stream whose view
//! does not carry what the app's handlers read ([`TableSchema::stream_needs`])
//! is refused before anything is read ([`require_stream_view`], which `dev`
//! applies too).

use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::Args;

use super::target::{AppTable, EndpointOpts, Scope, Target};
use super::{CliApp, CliError, parse_now};
use crate::replay::redact::{Placeholder, Redactor};
use crate::stream_reader::{StartAt, StreamTail};
use worker_engine::schema::{StreamView, TableSchema};
use worker_engine::stream::{SequenceNumber, encode_event_as};

/// Options of `capture`.
#[derive(Debug, Clone, Default, Args)]
pub struct CaptureArgs {
    /// Where to write the event.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Only records after this sequence number.
    #[arg(long, value_name = "SEQ", conflicts_with = "since")]
    pub after_sequence: Option<SequenceNumber>,
    /// Only records created at or after this time (RFC 3339). Default: the
    /// whole retention (24 h).
    #[arg(long, value_name = "RFC3339", value_parser = parse_now)]
    pub since: Option<DateTime<Utc>>,
    /// Only this shard, from --from-sequence to --to-sequence (both
    /// included): an on-failure message's `shardId` and range.
    #[arg(long, value_name = "ID", requires_all = ["from_sequence", "to_sequence"], conflicts_with_all = ["after_sequence", "since"])]
    pub shard: Option<String>,
    /// The first sequence number of --shard's range.
    #[arg(long, value_name = "SEQ", requires = "shard")]
    pub from_sequence: Option<SequenceNumber>,
    /// The last sequence number of --shard's range.
    #[arg(long, value_name = "SEQ", requires = "shard")]
    pub to_sequence: Option<SequenceNumber>,
    /// Replace the app's personal attributes (e-mail addresses, names of
    /// people and things, secrets such as link hashes) with stable
    /// placeholders (`user-<n>@example.invalid`, `user-<n>`, `group-<n>`,
    /// ...), also where such a value is part of a key; other ids are kept.
    #[arg(long)]
    pub redact: bool,
    /// Also replace the values of this attribute (repeatable; implies
    /// --redact), e.g. an id a fixture must not carry.
    #[arg(long = "redact-attr", value_name = "NAME")]
    pub redact_attr: Vec<String>,
    /// Make each placeholder a keyed hash of its value (HMAC-SHA256) instead
    /// of a count: the same value gets the same placeholder in every
    /// capture made with the same key, so fixtures redacted apart still
    /// join. Implies --redact.
    #[arg(long, env = "REDACT_KEY", hide_env_values = true, value_name = "KEY")]
    pub redact_key: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The table and its endpoint.
    #[command(flatten)]
    pub endpoint: EndpointOpts,
}

impl CaptureArgs {
    /// Whether any redaction was asked for.
    pub fn redacting(&self) -> bool {
        self.redact || self.redact_key.is_some() || !self.redact_attr.is_empty()
    }
}

/// What a capture wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    /// Records written to the file (every record the stream still held
    /// in the range asked).
    pub records: usize,
    /// Distinct shards those records came from.
    pub shards: usize,
    /// The ARN of the table's stream, as read.
    pub stream_arn: String,
    /// The stream's view type, written into every record.
    pub view: StreamView,
    /// Distinct values replaced by `--redact`.
    pub redacted_values: usize,
}

/// The view type of `table`'s stream at `stream_arn` (DescribeStream), when
/// `schema` accepts it ([`TableSchema::accepts_stream`]); otherwise
/// [`CliError::StreamView`], saying how to give the table a stream the app
/// accepts.
pub async fn require_stream_view(
    client: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
    schema: &TableSchema,
    app: &'static str,
    endpoint: &str,
    table: &str,
) -> Result<StreamView, CliError> {
    let stated = crate::stream_reader::stream_view_type(client, stream_arn).await?;
    if let Some(view) = stated.as_deref().and_then(StreamView::parse)
        && schema.accepts_stream(view)
    {
        return Ok(view);
    }
    let accepted = schema.accepted_streams();
    // What `table create` makes, when the app accepts it.
    let wanted = schema
        .stream
        .filter(|v| schema.accepts_stream(*v))
        .unwrap_or(schema.stream_needs);
    Err(CliError::StreamView {
        app,
        endpoint: endpoint.to_owned(),
        table: table.to_owned(),
        view: stated.as_deref().unwrap_or("(unstated)").into(),
        accepted: accepted
            .iter()
            .map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(" or ")
            .into(),
        wanted: wanted.as_str(),
    })
}

/// Capture the target's stream into `args.out`.
pub async fn capture(target: &Target, args: &CaptureArgs) -> Result<Captured, CliError> {
    let arn = target.stream_arn().await?;
    let view = require_stream_view(
        &target.streams_client().await,
        &arn,
        &target.app.schema,
        target.app.app,
        &target.endpoint,
        &target.table,
    )
    .await?;
    let start = match (&args.after_sequence, args.since) {
        (Some(seq), _) => StartAt::After(seq.clone()),
        (None, Some(t)) => StartAt::Since(t),
        (None, None) => StartAt::TrimHorizon,
    };
    let records = match (&args.shard, &args.from_sequence, &args.to_sequence) {
        (Some(shard), Some(from), Some(to)) => {
            let client = target.streams_client().await;
            let range = crate::stream_reader::read_range(&client, &arn, shard, from, to).await?;
            range.into_iter().map(|c| (shard.clone(), c)).collect()
        }
        _ => {
            let mut tail = StreamTail::new(target.streams_client().await, arn.clone(), start);
            tail.poll().await?
        }
    };
    let mut shards: Vec<&str> = records.iter().map(|(s, _)| s.as_str()).collect();
    shards.sort_unstable();
    shards.dedup();
    let shard_count = shards.len();
    let mut changes: Vec<_> = records.into_iter().map(|(_, c)| c).collect();
    let rules = target.app.personal.iter().copied();
    let mut redactor = match &args.redact_key {
        Some(key) => Redactor::keyed(rules, key.as_bytes()),
        None => Redactor::new(rules),
    };
    for name in &args.redact_attr {
        redactor = redactor.with_rule(name, Placeholder::Label("value"));
    }
    if args.redacting() {
        redactor.redact_changes(&mut changes);
    }
    let event = encode_event_as(&changes, Some(&arn), view);
    let text = serde_json::to_string_pretty(&event).expect("JSON values always serialize");
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::input(args.out.display(), format!("cannot write: {e}")))?;
    }
    std::fs::write(&args.out, text + "\n")
        .map_err(|e| CliError::input(args.out.display(), format!("cannot write: {e}")))?;
    Ok(Captured {
        records: changes.len(),
        shards: shard_count,
        stream_arn: arn,
        view,
        redacted_values: redactor.replaced(),
    })
}

/// `<app> capture`.
pub async fn run<A: CliApp>(args: CaptureArgs) -> Result<ExitCode, CliError> {
    let (app, table) = AppTable::of::<A>().named(&args.endpoint.table, Scope::OneOrEvery)?;
    let target = Target::open_endpoint(&args.endpoint, &app, &table).await?;
    let c = capture(&target, &args).await?;
    if args.json {
        super::output::print_json(&serde_json::json!({
            "file": args.out.display().to_string(),
            "records": c.records,
            "shards": c.shards,
            "streamArn": c.stream_arn,
            "streamViewType": c.view.as_str(),
            "redactedValues": args.redacting().then_some(c.redacted_values),
            "keyedRedaction": args.redact_key.is_some(),
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "captured {} records from {} shard(s) of {} into {}{}",
        c.records,
        c.shards,
        c.stream_arn,
        args.out.display(),
        if args.redacting() {
            format!(" ({} personal values replaced)", c.redacted_values)
        } else {
            String::new()
        }
    );
    Ok(ExitCode::SUCCESS)
}
