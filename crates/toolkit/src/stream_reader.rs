//! Reading a table's DynamoDB Stream through the Streams API, the way
//! Lambda's event source mapping does: every shard, parents before children,
//! in order within a shard, remembering the last sequence number read per
//! shard. Used by `capture`, the `dev` loop and the tests that drain the
//! stream through the handler. Free of any app's specifics.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use aws_sdk_dynamodbstreams::Client;
use aws_sdk_dynamodbstreams::types::{OperationType, Record, ShardIteratorType};
use chrono::{DateTime, Utc};

use worker_engine::item::Item;
use worker_engine::store::StoreError;
use worker_engine::stream::{ChangeKind, SequenceNumber, StreamChange};

/// A Streams API client for a local endpoint (same rules as
/// [`worker_engine::store::local_client`]).
pub fn local_client(endpoint_url: &str) -> Client {
    let config = aws_sdk_dynamodbstreams::Config::builder()
        .behavior_version(aws_sdk_dynamodbstreams::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodbstreams::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodbstreams::config::Credentials::new(
            "local",
            "local",
            None,
            None,
            "worker-local",
        ))
        .endpoint_url(endpoint_url)
        .http_client(worker_engine::aws::https_client())
        .build();
    Client::from_conf(config)
}

/// A Streams API client from the environment (AWS), optionally at an endpoint.
pub async fn client(endpoint_url: Option<&str>) -> Client {
    match endpoint_url {
        Some(url) if url.starts_with("http://127.0.0.1") || url.starts_with("http://localhost") => {
            local_client(url)
        }
        _ => {
            let mut loader = worker_engine::aws::defaults();
            if let Some(url) = endpoint_url {
                loader = loader.endpoint_url(url);
            }
            Client::new(&loader.load().await)
        }
    }
}

/// The stream's view type as DescribeStream states it
/// (`StreamDescription.StreamViewType`: `NEW_AND_OLD_IMAGES`, `NEW_IMAGE`,
/// `OLD_IMAGE`, `KEYS_ONLY`); `None` when the answer states none. What a
/// record of the stream carries, whatever the app expects.
pub async fn stream_view_type(
    client: &Client,
    stream_arn: &str,
) -> Result<Option<String>, StoreError> {
    let out = client
        .describe_stream()
        .stream_arn(stream_arn)
        // The view is the stream's; one shard keeps the answer small.
        .limit(1)
        .send()
        .await
        .map_err(|e| err("DescribeStream", e))?;
    Ok(out
        .stream_description
        .and_then(|d| d.stream_view_type)
        .map(|v| v.as_str().to_owned()))
}

/// Where a reader starts in shards it has not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartAt {
    /// The oldest record still retained (24 h).
    TrimHorizon,
    /// Only records written from now on.
    Latest,
    /// Records after this sequence number (in the shard holding it; other
    /// shards from the trim horizon, skipping records not newer than it).
    After(SequenceNumber),
    /// Records created at or after this time (filtered on
    /// `ApproximateCreationDateTime`).
    Since(DateTime<Utc>),
}

/// Follows one stream, shard by shard.
pub struct StreamTail {
    client: Client,
    stream_arn: String,
    start: StartAt,
    /// Last sequence number handed out, per shard.
    positions: HashMap<String, SequenceNumber>,
    /// Shards read to their end (closed and drained).
    finished: HashSet<String>,
}

/// A Streams API failure, its whole error chain in the message.
fn err(operation: &'static str, e: impl std::error::Error) -> StoreError {
    let message = aws_smithy_types::error::display::DisplayErrorContext(e).to_string();
    if message.contains("ResourceNotFound") || message.contains("not found") {
        StoreError::NotFound { operation, message }
    } else {
        StoreError::Transient {
            operation,
            code: "StreamsApi".into(),
            message,
        }
    }
}

impl StreamTail {
    /// A reader of the stream `stream_arn` through `client`, starting
    /// shards it has not read yet at `start`; nothing is read until asked.
    pub fn new(client: Client, stream_arn: impl Into<String>, start: StartAt) -> Self {
        StreamTail {
            client,
            stream_arn: stream_arn.into(),
            start,
            positions: HashMap::new(),
            finished: HashSet::new(),
        }
    }

    /// The ARN of the stream it follows.
    pub fn stream_arn(&self) -> &str {
        &self.stream_arn
    }

    /// The last sequence number read, per shard.
    pub fn positions(&self) -> impl Iterator<Item = (&String, &SequenceNumber)> {
        self.positions.iter()
    }

    /// Resume shards after these sequence numbers (a checkpoint saved by a
    /// previous reader); other shards start where [`StartAt`] says.
    pub fn resume_after(
        mut self,
        positions: impl IntoIterator<Item = (String, SequenceNumber)>,
    ) -> Self {
        self.positions.extend(positions);
        self
    }

    /// The shards of the stream, parents before children.
    async fn shards(&self) -> Result<Vec<(String, Option<String>)>, StoreError> {
        let mut shards = Vec::new();
        let mut start: Option<String> = None;
        loop {
            let out = self
                .client
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.clone())
                .send()
                .await
                .map_err(|e| err("DescribeStream", e))?;
            let Some(desc) = out.stream_description else {
                break;
            };
            for s in desc.shards.unwrap_or_default() {
                if let Some(id) = s.shard_id {
                    shards.push((id, s.parent_shard_id));
                }
            }
            match desc.last_evaluated_shard_id {
                Some(id) => start = Some(id),
                None => break,
            }
        }
        // Parents first: a shard is placed after its parent when the parent is known.
        let ids: HashSet<String> = shards.iter().map(|(id, _)| id.clone()).collect();
        let mut ordered = Vec::with_capacity(shards.len());
        let mut placed = HashSet::new();
        while ordered.len() < shards.len() {
            let before = ordered.len();
            for (id, parent) in &shards {
                let ready = parent
                    .as_ref()
                    .is_none_or(|p| !ids.contains(p) || placed.contains(p));
                if !placed.contains(id) && ready {
                    placed.insert(id.clone());
                    ordered.push((id.clone(), parent.clone()));
                }
            }
            if ordered.len() == before {
                break;
            }
        }
        Ok(ordered)
    }

    /// Every record not handed out yet, per shard in order, parents first.
    /// Returns `(shard id, change)` pairs.
    pub async fn poll(&mut self) -> Result<Vec<(String, StreamChange)>, StoreError> {
        let mut out = Vec::new();
        for (shard, _) in self.shards().await? {
            if self.finished.contains(&shard) {
                continue;
            }
            let (kind, at) = match (self.positions.get(&shard), &self.start) {
                (Some(seq), _) => (ShardIteratorType::AfterSequenceNumber, Some(seq)),
                (None, StartAt::Latest) => (ShardIteratorType::Latest, None),
                (None, _) => (ShardIteratorType::TrimHorizon, None),
            };
            let mut iterator =
                shard_iterator(&self.client, &self.stream_arn, &shard, kind, at).await?;
            while let Some(it) = iterator.take() {
                let page = get_records(&self.client, it).await?;
                let records = page.records.unwrap_or_default();
                let empty = records.is_empty();
                for r in records {
                    let change = to_change(r, Some(&self.stream_arn));
                    if let Some(seq) = &change.sequence_number {
                        self.positions.insert(shard.clone(), seq.clone());
                    }
                    if self.wanted(&change) {
                        out.push((shard.clone(), change));
                    }
                }
                match page.next_shard_iterator {
                    None => {
                        self.finished.insert(shard.clone());
                    }
                    // An open shard with nothing new: caught up.
                    Some(_) if empty => {}
                    Some(next) => iterator = Some(next),
                }
            }
        }
        Ok(out)
    }

    fn wanted(&self, change: &StreamChange) -> bool {
        match &self.start {
            StartAt::After(seq) => change.sequence_number.as_ref().is_some_and(|s| s > seq),
            StartAt::Since(t) => change.approximate_creation.is_none_or(|c| c >= *t),
            _ => true,
        }
    }
}

/// A shard iterator of `kind` (at or after `at` for the sequence-number
/// kinds).
async fn shard_iterator(
    client: &Client,
    stream_arn: &str,
    shard_id: &str,
    kind: ShardIteratorType,
    at: Option<&SequenceNumber>,
) -> Result<Option<String>, StoreError> {
    Ok(client
        .get_shard_iterator()
        .stream_arn(stream_arn)
        .shard_id(shard_id)
        .shard_iterator_type(kind)
        .set_sequence_number(at.map(SequenceNumber::to_string))
        .send()
        .await
        .map_err(|e| err("GetShardIterator", e))?
        .shard_iterator)
}

/// One page of records (up to 1,000) from `iterator`.
async fn get_records(
    client: &Client,
    iterator: String,
) -> Result<aws_sdk_dynamodbstreams::operation::get_records::GetRecordsOutput, StoreError> {
    client
        .get_records()
        .shard_iterator(iterator)
        .limit(1000)
        .send()
        .await
        .map_err(|e| err("GetRecords", e))
}

fn image(
    m: Option<HashMap<String, aws_sdk_dynamodbstreams::types::AttributeValue>>,
) -> Option<Item> {
    m.filter(|m| !m.is_empty()).map(|m| {
        m.into_iter()
            .map(|(k, v)| {
                let v: serde_dynamo::AttributeValue = v.into();
                (k, v.into())
            })
            .collect()
    })
}

/// A Streams API record as a stream change (the shape Lambda would deliver).
pub fn to_change(r: Record, stream_arn: Option<&str>) -> StreamChange {
    let ttl = r.user_identity.as_ref().is_some_and(|i| {
        i.r#type.as_deref() == Some("Service")
            && i.principal_id.as_deref() == Some("dynamodb.amazonaws.com")
    });
    let kind = match r.event_name {
        Some(OperationType::Insert) => ChangeKind::Insert,
        Some(OperationType::Modify) => ChangeKind::Modify,
        Some(OperationType::Remove) if ttl => ChangeKind::TtlRemove,
        _ => ChangeKind::Remove,
    };
    let rec = r
        .dynamodb
        .unwrap_or_else(|| aws_sdk_dynamodbstreams::types::StreamRecord::builder().build());
    StreamChange {
        event_id: r.event_id.unwrap_or_default(),
        kind,
        sequence_number: rec.sequence_number.as_deref().and_then(|s| s.parse().ok()),
        approximate_creation: rec
            .approximate_creation_date_time
            .and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos())),
        keys: image(rec.keys).unwrap_or_default(),
        old_image: image(rec.old_image),
        new_image: image(rec.new_image),
        event_source_arn: stream_arn.map(Arc::from),
        size_bytes: rec.size_bytes,
        typed: None,
    }
}

/// The records of one shard from `from` to `to` (both included, by
/// sequence number): `GetShardIterator AT_SEQUENCE_NUMBER` then `GetRecords`
/// until a record after `to`, the shard's end, or an empty page (caught up).
/// What an on-failure message names ([`crate::failure_message`]) and
/// `capture --shard` read. The stream keeps records 24 hours: an older
/// range reads as `TrimmedDataAccessException` (an error).
pub async fn read_range(
    client: &Client,
    stream_arn: &str,
    shard_id: &str,
    from: &SequenceNumber,
    to: &SequenceNumber,
) -> Result<Vec<StreamChange>, StoreError> {
    let at = ShardIteratorType::AtSequenceNumber;
    let mut iterator = shard_iterator(client, stream_arn, shard_id, at, Some(from)).await?;
    let mut out = Vec::new();
    while let Some(it) = iterator.take() {
        let page = get_records(client, it).await?;
        let records = page.records.unwrap_or_default();
        if records.is_empty() {
            break;
        }
        for r in records {
            let change = to_change(r, Some(stream_arn));
            match &change.sequence_number {
                Some(seq) if seq > to => return Ok(out),
                Some(seq) if seq < from => {}
                _ => out.push(change),
            }
        }
        iterator = page.next_shard_iterator;
    }
    Ok(out)
}
