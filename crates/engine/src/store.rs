//! The store adapter over `aws-sdk-dynamodb`: the only module that talks to
//! DynamoDB. Free of any app's specifics: it works on raw items and raw keys.
//!
//! **One call shape.** Every operation on the table is a [`Request`] (one
//! variant per operation, holding its arguments as the typed method takes
//! them) answered by a [`Reply`]. A [`Store`] implements one method,
//! [`Store::call`]:
//!
//! - [`DynamoStore`] answers each variant with the DynamoDB request of its
//!   name, one arm per variant;
//! - a layer over another store ([`Coalescing`], the toolkit's
//!   recording store and dry run, the test kit's fault and race layers)
//!   matches the variants it changes and passes every other one on in one
//!   line, `other => self.inner.call(other).await`;
//! - the typed methods callers use are written once, for every store, on
//!   top of `call`: [`ItemReader`] (`get`, `get_many`), [`ItemWriter`]
//!   (`put`, `delete`, `update`), [`QueryStore`] (`query_page`,
//!   `scan_page`, `query_partitions`, and `query_all` / `scan_all`, which
//!   follow the pages), [`BatchWriter`] (`batch_write`). [`Store`] is all of
//!   them, so `&dyn Store` and `Arc<dyn Store>` offer every method, and a
//!   `&DynamoStore` still goes where a `&dyn QueryStore` is asked for;
//! - an operation answered by other operations is written once too, for the
//!   store or layer that wants it: [`query_partitions_by_pages`]
//!   (QueryPartitions as QueryPages).
//!
//! **Adding a store method** takes, all in this module: a [`Request`]
//! variant (a [`Reply`] variant too if its answer is new) and its line in
//! [`Request::is_write`]; its arm in [`DynamoStore`]'s `call`; the typed
//! method in its trait and that trait's blanket impl. Layers pass the new
//! request on untouched, except those whose job is every request: the
//! compiler points at the test kit's fault layer and the toolkit's
//! recording store (`worker_toolkit::layers`), which say what each request
//! touches, and a dry run refuses a write it has not been taught to plan
//! rather than send it.
//!
//! Semantics every store keeps:
//!
//! - a request is answered by the reply its variant names; another reply
//!   is a layer's bug, which the typed methods report as a permanent
//!   [`StoreError`] (code `MismatchedReply`);
//! - conditional writes return [`WriteOutcome::ConditionFailed`], a typed
//!   outcome, never an error string;
//! - [`StoreError::is_retryable`] tells throttling, 5xx and timeouts (retry
//!   the record) from permanent failures;
//! - BatchWriteItem goes in chunks of 25 (BatchGetItem in chunks of 100)
//!   with bounded exponential backoff and jitter on `UnprocessedItems`
//!   (`UnprocessedKeys`); an item is never silently dropped;
//! - [`Coalescing`] merges concurrent point reads, whole-partition
//!   queries and unconditional batch writes into shared BatchGetItem,
//!   PartiQL and BatchWriteItem requests;
//! - every request's consumed capacity is counted in [`StoreMetrics`].

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeValue, ConsumedCapacity, DeleteRequest, KeysAndAttributes, PutRequest,
    ReturnConsumedCapacity, WriteRequest,
};
use serde::Serialize;

use crate::item::Item;
use crate::schema::{DEFAULT_KEY, KeySchema, TableSchema};
pub use guarded::{Guard, GuardedOp, GuardedReport, GuardedWriter};

pub(crate) mod coalesce;
pub(crate) mod guarded;
pub(crate) mod multi;
pub(crate) mod transact;

pub use coalesce::{Coalescing, Gathered};
pub use transact::{TransactOp, TransactOutcome, Transactions};

/// A raw primary key (the key attributes only).
pub type Key = HashMap<String, AttributeValue>;

/// Why a DynamoDB call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Throttling, a 5xx, a timeout or a connection failure: retry later.
    #[error("DynamoDB {operation} failed transiently ({code}): {message}")]
    Transient {
        /// The DynamoDB operation that failed (`GetItem`, `Query`, ...).
        operation: &'static str,
        /// The service's error code (`ThrottlingException`); `transport`
        /// when the call got no answer (a timeout, a dropped connection).
        code: String,
        /// The service's message, or the SDK's description of the failure.
        message: String,
    },
    /// The table or an index does not exist.
    #[error(
        "DynamoDB {operation}: {message} (create it with the worker's `table create` command, or check --table / TABLE_NAME)"
    )]
    NotFound {
        /// The DynamoDB operation that failed.
        operation: &'static str,
        /// The service's message (names the missing table or index).
        message: String,
    },
    /// A request the service rejects (validation, access): retrying will not help.
    #[error("DynamoDB {operation} rejected ({code}): {message}")]
    Permanent {
        /// The DynamoDB operation that failed.
        operation: &'static str,
        /// The service's error code (`ValidationException`,
        /// `AccessDeniedException`, ...): [`StoreError::kind`] reads it.
        code: String,
        /// The service's message.
        message: String,
    },
    /// BatchWriteItem (BatchGetItem) still had unprocessed items (keys)
    /// after every retry.
    #[error("{operation} left {remaining} item(s) unprocessed after {attempts} attempts")]
    Unprocessed {
        /// `BatchWriteItem` or `BatchGetItem`.
        operation: &'static str,
        /// Items (keys) of the last request still unprocessed.
        remaining: usize,
        /// Requests sent for them, the first included
        /// ([`Backoff::max_attempts`]).
        attempts: u32,
    },
}

impl StoreError {
    /// Whether the same call may succeed later (the record must be retried).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            StoreError::Transient { .. } | StoreError::Unprocessed { .. }
        )
    }

    /// Which of the three kinds of failure this is
    /// ([`crate::error::FailureKind`]): a missing table or index, a denied
    /// request, a bad credential or a table whose key schema is not the
    /// app's are the environment's; a throttle, 5xx or dropped connection
    /// is transient; any other rejection is the record's (an item too
    /// large, a value the service refuses).
    pub fn kind(&self) -> crate::error::FailureKind {
        use crate::error::FailureKind;
        match self {
            StoreError::Transient { .. } | StoreError::Unprocessed { .. } => FailureKind::Transient,
            StoreError::NotFound { .. } => FailureKind::Environment,
            StoreError::Permanent { code, message, .. }
                if ENVIRONMENT_CODES.contains(&code.as_str())
                    || self.is_missing_index()
                    || is_schema_mismatch(message) =>
            {
                FailureKind::Environment
            }
            StoreError::Permanent { .. } => FailureKind::Record,
        }
    }

    /// Whether the deployment, not the record, is at fault
    /// ([`Self::kind`]).
    pub(crate) fn is_environment(&self) -> bool {
        self.kind() == crate::error::FailureKind::Environment
    }

    /// Whether the error says a queried index does not exist.
    pub fn is_missing_index(&self) -> bool {
        match self {
            StoreError::NotFound { message, .. } | StoreError::Permanent { message, .. } => {
                let m = message.to_ascii_lowercase();
                m.contains("index") && (m.contains("not") || m.contains("no "))
            }
            _ => false,
        }
    }

    fn from_sdk<E, R>(operation: &'static str, err: SdkError<E, R>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + HttpStatus,
    {
        let code = err.code().unwrap_or("").to_owned();
        let message = err.message().map(str::to_owned).unwrap_or_else(|| {
            aws_smithy_types::error::display::DisplayErrorContext(&err).to_string()
        });
        let status = err.raw_response().map(HttpStatus::status_code);
        classify(operation, &code, status, message, &err)
    }
}

/// Access to an HTTP status without naming the SDK's response type.
pub(crate) trait HttpStatus {
    fn status_code(&self) -> u16;
}

impl HttpStatus for aws_smithy_runtime_api::http::Response {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

const TRANSIENT_CODES: [&str; 8] = [
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionConflictException",
    "LimitExceededException",
];

/// Error codes that say the deployment is wrong (the identity, its
/// credentials, its permissions or its encryption key), whatever the
/// request: [`StoreError::kind`] calls them the environment's.
const ENVIRONMENT_CODES: [&str; 17] = [
    "AccessDeniedException",
    "AccessDenied",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "IncompleteSignatureException",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "ExpiredToken",
    "ExpiredTokenException",
    "KMSAccessDeniedException",
    "KMSDisabledException",
    "KMSInvalidStateException",
    "KMSNotFoundException",
    // The SDK could not build the request: no region or no credentials.
    "ConstructionFailure",
];

/// A key the table does not have: the table is not the one the app was
/// built for (wrong `TABLE_NAME`, or a table created with other keys).
fn is_schema_mismatch(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("key element does not match the schema") || m.contains("missing the key")
}

fn classify<E, R>(
    operation: &'static str,
    code: &str,
    status: Option<u16>,
    message: String,
    err: &SdkError<E, R>,
) -> StoreError {
    let transport = matches!(
        err,
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_)
    );
    if transport || TRANSIENT_CODES.contains(&code) || status.is_some_and(|s| s >= 500) {
        let code = if code.is_empty() {
            "transport".to_owned()
        } else {
            code.to_owned()
        };
        return StoreError::Transient {
            operation,
            code,
            message,
        };
    }
    if code == "ResourceNotFoundException" {
        return StoreError::NotFound { operation, message };
    }
    if matches!(err, SdkError::ConstructionFailure(_)) {
        return StoreError::Permanent {
            operation,
            code: "ConstructionFailure".to_owned(),
            message,
        };
    }
    let code = match status {
        // A denial without a code the SDK could read (an HTML 403 from a
        // proxy or gateway in the way) is a denial all the same.
        Some(401 | 403) if code.is_empty() => "AccessDenied",
        _ => code,
    };
    StoreError::Permanent {
        operation,
        code: code.to_owned(),
        message,
    }
}

/// Outcome of a conditional write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum WriteOutcome {
    /// The write took effect (its condition, if any, held).
    Applied,
    /// The condition did not hold; nothing was written.
    ConditionFailed,
}

/// An expression with its placeholders (`#name`, `:value`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expr {
    /// The expression as DynamoDB reads it, with `#name` and `:value`
    /// placeholders.
    pub text: String,
    /// `#placeholder` to attribute name ([`Expr::name`]).
    pub names: HashMap<String, String>,
    /// `:placeholder` to value ([`Expr::value`]).
    pub values: Item,
}

impl Expr {
    /// An expression of `text` with nothing bound yet: bind its
    /// placeholders with [`Expr::name`] and [`Expr::value`].
    pub fn new(text: impl Into<String>) -> Self {
        Expr {
            text: text.into(),
            ..Default::default()
        }
    }
    /// Bind `#placeholder` to an attribute name.
    pub fn name(mut self, placeholder: &str, attribute: &str) -> Self {
        self.names
            .insert(placeholder.to_owned(), attribute.to_owned());
        self
    }
    /// Bind `:placeholder` to a value.
    pub fn value(mut self, placeholder: &str, value: AttributeValue) -> Self {
        self.values.insert(placeholder.to_owned(), value);
        self
    }
    /// Bind `:placeholder` to a string value.
    pub fn string(self, placeholder: &str, value: impl Into<String>) -> Self {
        self.value(placeholder, AttributeValue::S(value.into()))
    }
    /// `attribute_exists(#k)` on the given key attribute: the item exists.
    pub fn exists(key_attribute: &str) -> Self {
        Expr::new("attribute_exists(#cond_k)").name("#cond_k", key_attribute)
    }
    /// `attribute_not_exists(#k)`: the item does not exist.
    pub fn not_exists(key_attribute: &str) -> Self {
        Expr::new("attribute_not_exists(#cond_k)").name("#cond_k", key_attribute)
    }
    /// `SET #A = :A`: one attribute set to `value` (placeholders named
    /// after the attribute: a dry run's line reads as the request).
    pub fn set(attribute: &str, value: AttributeValue) -> Self {
        let p = placeholder(attribute);
        Expr::new(format!("SET #{p} = :{p}"))
            .name(&format!("#{p}"), attribute)
            .value(&format!(":{p}"), value)
    }
    /// `#A = :A_eq`: the attribute holds `value` (false when the item is
    /// gone). Its value placeholder is not [`Expr::set`]'s: an update may
    /// set the attribute it is conditioned on.
    pub fn equals(attribute: &str, value: AttributeValue) -> Self {
        let p = placeholder(attribute);
        Expr::new(format!("#{p} = :{p}_eq"))
            .name(&format!("#{p}"), attribute)
            .value(&format!(":{p}_eq"), value)
    }
    /// The attribute is as a decision read it: [`Expr::equals`] the value
    /// `seen`, or `attribute_not_exists` when it had none.
    pub fn unchanged(attribute: &str, seen: Option<&AttributeValue>) -> Self {
        match seen {
            Some(v) => Expr::equals(attribute, v.clone()),
            None => {
                let p = placeholder(attribute);
                Expr::new(format!("attribute_not_exists(#{p})")).name(&format!("#{p}"), attribute)
            }
        }
    }
    /// Join two expressions with AND (placeholders must not clash).
    pub fn and(mut self, other: Expr) -> Self {
        self.text = format!("({}) AND ({})", self.text, other.text);
        self.names.extend(other.names);
        self.values.extend(other.values);
        self
    }
}

/// A placeholder named after `attribute`: its letters, digits and `_`,
/// anything else `_`.
fn placeholder(attribute: &str) -> String {
    attribute
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// A Query request (one page at a time).
#[derive(Debug, Clone, Default)]
pub struct QuerySpec {
    /// The secondary index to query; `None`: the table itself.
    pub index: Option<String>,
    /// `KeyConditionExpression`: the partition (and sort-key range) read.
    pub key_condition: Expr,
    /// `FilterExpression`, applied after the read: filtered-out items still
    /// consume capacity and count in [`Page::scanned_count`].
    pub filter: Option<Expr>,
    /// `ProjectionExpression` (the attributes returned); `None`: all of them.
    pub projection: Option<Expr>,
    /// Strongly consistent read (not allowed on a global secondary index;
    /// twice the read capacity).
    pub consistent: bool,
    /// Items evaluated per page, before the filter; `None`: up to 1 MB.
    pub limit: Option<i32>,
    /// Ascending sort-key order. `Default` gives `false` (descending);
    /// the constructors set `true`.
    pub forward: bool,
}

/// The key condition of a whole-partition query ([`QuerySpec::partition`]).
const PARTITION_CONDITION: &str = "#pk = :pk";

impl QuerySpec {
    /// All items of one partition (`#pk = :pk`).
    pub fn partition(key_attribute: &str, value: &str) -> Self {
        Self::partition_of(key_attribute, AttributeValue::S(value.to_owned()))
    }

    /// All items of one partition, whatever the key's type.
    pub fn partition_of(key_attribute: &str, value: AttributeValue) -> Self {
        QuerySpec {
            key_condition: Expr::new(PARTITION_CONDITION)
                .name("#pk", key_attribute)
                .value(":pk", value),
            forward: true,
            ..Default::default()
        }
    }
    /// The items of one partition whose sort key is below `upper`
    /// (`#pk = :pk AND #sk < :upper`), in sort-key order: what is due by a
    /// time kept in the sort key.
    pub fn below(partition: (&str, AttributeValue), sort_key: &str, upper: AttributeValue) -> Self {
        let (key_attribute, value) = partition;
        QuerySpec {
            key_condition: Expr::new("#pk = :pk AND #sk < :upper")
                .name("#pk", key_attribute)
                .name("#sk", sort_key)
                .value(":pk", value)
                .value(":upper", upper),
            forward: true,
            ..Default::default()
        }
    }

    /// The same query on the secondary index `index`.
    pub fn on_index(mut self, index: &str) -> Self {
        self.index = Some(index.to_owned());
        self
    }

    /// For a plain whole-partition read (as built by [`QuerySpec::partition`]:
    /// no filter, projection or limit): the partition key attribute and
    /// value.
    pub fn as_partition(&self) -> Option<(&str, &AttributeValue)> {
        let k = &self.key_condition;
        if k.text != PARTITION_CONDITION
            || k.names.len() != 1
            || k.values.len() != 1
            || self.filter.is_some()
            || self.projection.is_some()
            || self.limit.is_some()
        {
            return None;
        }
        Some((k.names.get("#pk")?.as_str(), k.values.get(":pk")?))
    }
}

/// Whole partitions read together ([`QueryStore::query_partitions`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Partitions {
    /// One list per requested value, in the order of the request.
    pub items: Vec<Vec<Item>>,
    /// Read capacity units consumed.
    pub consumed_capacity: f64,
}

/// A Scan request (one page of one segment at a time).
#[derive(Debug, Clone, Default)]
pub struct ScanSpec {
    /// The secondary index to scan; `None`: the table itself.
    pub index: Option<String>,
    /// `FilterExpression`, applied after the read (filtered-out items still
    /// consume capacity).
    pub filter: Option<Expr>,
    /// `ProjectionExpression` (the attributes returned); `None`: all of them.
    pub projection: Option<Expr>,
    /// `(segment, total_segments)` for parallel scans.
    pub segment: Option<(i32, i32)>,
    /// Strongly consistent read (twice the read capacity).
    pub consistent: bool,
    /// Items evaluated per page, before the filter; `None`: up to 1 MB.
    pub limit: Option<i32>,
}

/// One page of a Query or Scan.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The items that passed the filter, in the order DynamoDB returned them.
    pub items: Vec<Item>,
    /// Where the next page starts; `None` when this was the last page.
    pub last_evaluated_key: Option<Key>,
    /// Read capacity units this page consumed.
    pub consumed_capacity: f64,
    /// Items read before the filter (`ScannedCount`): above `items.len()`
    /// when the filter dropped some.
    pub scanned_count: i32,
}

/// A write inside a batch.
#[derive(Debug, Clone, PartialEq)]
pub enum WriteOp {
    /// Put the whole item (it replaces any item of the same key).
    Put(Item),
    /// Delete the item of this key (nothing happens when there is none).
    Delete(Key),
}

impl WriteOp {
    /// [`key_id`] of the key this op writes.
    pub(crate) fn key_id(&self, key_attributes: (&str, &str)) -> String {
        match self {
            WriteOp::Put(item) => key_id(item, key_attributes),
            WriteOp::Delete(key) => key_id(key, key_attributes),
        }
    }
}

/// What a batch write did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BatchWriteReport {
    /// Ops written, after ops on the same key were collapsed (the last wins).
    pub items: usize,
    /// BatchWriteItem requests sent, retries included (25 ops per request).
    pub requests: u32,
    /// Ops sent again because DynamoDB left them unprocessed (each retry
    /// counts them again).
    pub retried_items: usize,
    /// Write capacity units consumed, over every request.
    pub consumed_capacity: f64,
}

/// Bounded exponential backoff with full jitter.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// Requests sent at most, the first included, before giving up with
    /// [`StoreError::Unprocessed`]. Default 8.
    pub max_attempts: u32,
    /// Upper bound of the first retry's delay; doubles with every retry.
    /// Default 50 ms.
    pub base: Duration,
    /// Upper bound of any delay. Default 5 s.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            max_attempts: 8,
            base: Duration::from_millis(50),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempt` (1-based): uniformly random in
    /// `[0, min(max, base * 2^(attempt-1))]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let cap = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20))
            .min(self.max);
        let nanos = cap.as_nanos().min(u128::from(u64::MAX)) as u64;
        Duration::from_nanos(if nanos == 0 {
            0
        } else {
            rand::random_range(0..=nanos)
        })
    }
}

/// One request to a store: an operation and its arguments, borrowed or
/// owned as the typed methods take them. A store answers it with the
/// [`Reply`] named after each variant below.
#[derive(Debug)]
pub enum Request<'a> {
    /// A point read ([`ItemReader::get`]); answered by [`Reply::Item`].
    Get {
        /// The item's primary key.
        key: &'a Key,
        /// Strongly consistent read.
        consistent: bool,
    },
    /// Several point reads ([`ItemReader::get_many`]); answered by
    /// [`Reply::Items`], one per key in the order of `keys` (a key may
    /// repeat).
    GetMany {
        /// The primary keys, in the order the answers follow.
        keys: &'a [Key],
        /// Strongly consistent reads.
        consistent: bool,
    },
    /// A put, optionally conditional ([`ItemWriter::put`]); answered by
    /// [`Reply::Written`].
    Put {
        /// The whole item, key attributes included.
        item: Item,
        /// `ConditionExpression`; `None`: unconditional.
        condition: Option<Expr>,
    },
    /// A delete, optionally conditional ([`ItemWriter::delete`]); answered
    /// by [`Reply::Written`].
    Delete {
        /// The item's primary key.
        key: &'a Key,
        /// `ConditionExpression`; `None`: unconditional.
        condition: Option<Expr>,
    },
    /// UpdateItem with an update expression (`SET ...`), optionally
    /// conditional ([`ItemWriter::update`]); answered by [`Reply::Written`].
    Update {
        /// The item's primary key.
        key: &'a Key,
        /// `UpdateExpression` (`SET ...`, `REMOVE ...`).
        update: Expr,
        /// `ConditionExpression`; `None`: unconditional.
        condition: Option<Expr>,
    },
    /// One page of a query ([`QueryStore::query_page`]); answered by
    /// [`Reply::Page`].
    QueryPage {
        /// The query.
        spec: &'a QuerySpec,
        /// Where the page starts (the previous page's
        /// [`Page::last_evaluated_key`]); `None`: the first page.
        start: Option<Key>,
    },
    /// One page of a scan ([`QueryStore::scan_page`]); answered by
    /// [`Reply::Page`].
    ScanPage {
        /// The scan.
        spec: &'a ScanSpec,
        /// Where the page starts (the previous page's
        /// [`Page::last_evaluated_key`]); `None`: the first page.
        start: Option<Key>,
    },
    /// Every item of several partitions ([`QueryStore::query_partitions`]);
    /// answered by [`Reply::Partitions`], one list per value in the order
    /// of `values`.
    QueryPartitions {
        /// The secondary index to read; `None`: the table itself.
        index: Option<&'a str>,
        /// The partition key attribute (of the index, when there is one).
        attribute: &'a str,
        /// One partition key value per partition read.
        values: &'a [AttributeValue],
        /// Strongly consistent reads.
        consistent: bool,
    },
    /// Bulk unconditional writes ([`BatchWriter::batch_write`]); answered
    /// by [`Reply::Batch`].
    BatchWrite {
        /// The writes, in any number (sent 25 per request; ops on the same
        /// key collapse, the last wins).
        ops: Vec<WriteOp>,
    },
    /// Writes that take effect only while the facts they were decided from
    /// still hold ([`GuardedWriter::write_guarded`]); answered by
    /// [`Reply::Guarded`].
    WriteGuarded {
        /// The facts that must still hold (checked, not written).
        guards: &'a [Guard],
        /// The writes, all or none.
        ops: Vec<GuardedOp>,
    },
}

impl Request<'_> {
    /// Whether the request may change the table (a dry run must not pass
    /// it on).
    pub fn is_write(&self) -> bool {
        match self {
            Request::Get { .. }
            | Request::GetMany { .. }
            | Request::QueryPage { .. }
            | Request::ScanPage { .. }
            | Request::QueryPartitions { .. } => false,
            Request::Put { .. }
            | Request::Delete { .. }
            | Request::Update { .. }
            | Request::BatchWrite { .. }
            | Request::WriteGuarded { .. } => true,
        }
    }
}

/// A store's answer to a [`Request`] (each request variant names its
/// reply). A reply of another variant is a bug in a layer; the typed
/// methods turn it into a [`StoreError::Permanent`] (code
/// `MismatchedReply`) rather than panic in the middle of a batch.
#[derive(Debug)]
pub enum Reply {
    /// To [`Request::Get`]: the item, if it exists.
    Item(Option<Item>),
    /// To [`Request::GetMany`]: one answer per key asked.
    Items(Vec<Option<Item>>),
    /// To [`Request::Put`], [`Request::Delete`] and [`Request::Update`].
    Written(WriteOutcome),
    /// To [`Request::QueryPage`] and [`Request::ScanPage`].
    Page(Page),
    /// To [`Request::QueryPartitions`].
    Partitions(Partitions),
    /// To [`Request::BatchWrite`].
    Batch(BatchWriteReport),
    /// To [`Request::WriteGuarded`].
    Guarded(GuardedReport),
}

impl Reply {
    /// The error for this reply given to the typed method `method`, which
    /// expects another variant.
    fn mismatch(self, method: &'static str) -> StoreError {
        StoreError::Permanent {
            operation: method,
            code: "MismatchedReply".into(),
            message: format!("a store layer answered {method} with another kind of reply"),
        }
    }
}

/// A store: something that answers every [`Request`], one request per call
/// ([`DynamoStore`], or a layer over another store). Implement
/// [`Store::call`] only: the typed methods ([`ItemReader`],
/// [`ItemWriter`], [`QueryStore`], [`BatchWriter`]) are implemented for
/// every store on top of it (blanket impls; they cannot be written by
/// hand), and a `&dyn Store` offers them all.
///
/// A handler's write, decided from what it read, lands only while the
/// item is as it was read (a condition on it); and a layer that counts the
/// puts of the store below it:
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use worker_engine::{AttributeValue, Expr, Item, Store, WriteOutcome, async_trait};
/// use worker_engine::store::{DynamoStore, ItemWriter, Reply, Request, StoreError, local_client};
///
/// /// Sets a note's `TitleKey` unless its `Title` changed since it was read.
/// async fn set_title_key(store: &dyn Store, note: &Item) -> Result<bool, StoreError> {
///     let Some(AttributeValue::S(title)) = note.get("Title") else { return Ok(false) };
///     let mut item = note.clone();
///     item.insert("TitleKey".into(), AttributeValue::S(title.to_lowercase()));
///     let unchanged = Expr::new("#t = :t").name("#t", "Title").string(":t", title);
///     Ok(store.put(item, Some(unchanged)).await? == WriteOutcome::Applied)
/// }
///
/// /// A layer: it matches the requests it cares about and passes each on.
/// struct CountPuts<S> { inner: S, puts: AtomicUsize }
///
/// #[async_trait]
/// impl<S: Store> Store for CountPuts<S> {
///     async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
///         if let Request::Put { .. } = &request {
///             self.puts.fetch_add(1, Ordering::Relaxed);
///         }
///         self.inner.call(request).await
///     }
/// }
///
/// // Nothing is sent until a method is called (the SDK client connects then).
/// let dynamo = DynamoStore::new(local_client("http://127.0.0.1:8000"), "notes");
/// let store: Arc<dyn Store> = Arc::new(CountPuts { inner: dynamo, puts: AtomicUsize::new(0) });
/// let note = Item::new();
/// let _write = set_title_key(store.as_ref(), &note); // a future, not polled here
/// ```
#[async_trait]
pub trait Store: ItemReader + ItemWriter + QueryStore + BatchWriter + GuardedWriter {
    /// Answer `request` with its [`Reply`]. A layer matches the variants it
    /// changes and passes every other one on as it is
    /// (`other => self.inner.call(other).await`).
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError>;
}

/// Point reads. Implemented for every [`Store`], through [`Store::call`].
#[async_trait]
pub trait ItemReader: Send + Sync {
    /// The item of `key`, or `None` when there is none (GetItem; strongly
    /// consistent when `consistent`). Errors: the [`StoreError`] of the
    /// request, whose [`StoreError::kind`] says whether to retry.
    async fn get(&self, key: &Key, consistent: bool) -> Result<Option<Item>, StoreError>;

    /// Several point reads; the answers follow the order of `keys` (a key
    /// may repeat). [`DynamoStore`] sends BatchGetItem (100 keys per
    /// request).
    async fn get_many(
        &self,
        keys: &[Key],
        consistent: bool,
    ) -> Result<Vec<Option<Item>>, StoreError>;
}

/// Single-item writes, optionally conditional. Implemented for every
/// [`Store`], through [`Store::call`].
#[async_trait]
pub trait ItemWriter: Send + Sync {
    /// PutItem: write the whole item, replacing any of the same key. With a
    /// `condition` that does not hold, nothing is written and the outcome is
    /// [`WriteOutcome::ConditionFailed`] (not an error).
    async fn put(&self, item: Item, condition: Option<Expr>) -> Result<WriteOutcome, StoreError>;
    /// DeleteItem: delete the item of `key` (applied when there is none,
    /// too). With a `condition` that does not hold, nothing is deleted and
    /// the outcome is [`WriteOutcome::ConditionFailed`].
    async fn delete(&self, key: &Key, condition: Option<Expr>) -> Result<WriteOutcome, StoreError>;
    /// UpdateItem with an update expression (`SET ...`), optionally conditional.
    async fn update(
        &self,
        key: &Key,
        update: Expr,
        condition: Option<Expr>,
    ) -> Result<WriteOutcome, StoreError>;
}

/// Paged reads. Implemented for every [`Store`], through [`Store::call`];
/// [`QueryStore::query_all`] and [`QueryStore::scan_all`] follow the pages.
#[async_trait]
pub trait QueryStore: Send + Sync {
    /// One page of a query, from `start` (`None`: the first page); the
    /// page's [`Page::last_evaluated_key`] is the next page's `start`.
    async fn query_page(&self, spec: &QuerySpec, start: Option<Key>) -> Result<Page, StoreError>;
    /// One page of a scan, from `start` (`None`: the first page); the
    /// page's [`Page::last_evaluated_key`] is the next page's `start`.
    async fn scan_page(&self, spec: &ScanSpec, start: Option<Key>) -> Result<Page, StoreError>;

    /// Every item of several partitions (`attribute = value` on the table,
    /// or on `index`), one list per value. [`DynamoStore`] sends one PartiQL
    /// `SELECT * ... WHERE attribute IN [..]` per 50 values;
    /// [`query_partitions_by_pages`] queries each partition.
    async fn query_partitions(
        &self,
        index: Option<&str>,
        attribute: &str,
        values: &[AttributeValue],
        consistent: bool,
    ) -> Result<Partitions, StoreError>;

    /// Every item a query returns, following pagination.
    async fn query_all(&self, spec: &QuerySpec) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self.query_page(spec, start).await?;
            items.extend(page.items);
            match page.last_evaluated_key {
                Some(k) => start = Some(k),
                None => return Ok(items),
            }
        }
    }

    /// Every item a scan returns, following pagination.
    async fn scan_all(&self, spec: &ScanSpec) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self.scan_page(spec, start).await?;
            items.extend(page.items);
            match page.last_evaluated_key {
                Some(k) => start = Some(k),
                None => return Ok(items),
            }
        }
    }
}

/// Bulk unconditional writes. Implemented for every [`Store`], through
/// [`Store::call`].
#[async_trait]
pub trait BatchWriter: Send + Sync {
    /// Write every op, unconditionally and not atomically: 25 per request,
    /// ops on the same key collapsed (the last wins), unprocessed ones
    /// retried with [`Backoff`]. Errors: [`StoreError::Unprocessed`] when
    /// some are still unprocessed after every attempt (earlier ones are
    /// written), or the failure of a request.
    async fn batch_write(&self, ops: Vec<WriteOp>) -> Result<BatchWriteReport, StoreError>;
}

#[async_trait]
impl<S: Store + ?Sized> ItemReader for S {
    async fn get(&self, key: &Key, consistent: bool) -> Result<Option<Item>, StoreError> {
        match self.call(Request::Get { key, consistent }).await? {
            Reply::Item(item) => Ok(item),
            other => Err(other.mismatch("get")),
        }
    }

    async fn get_many(
        &self,
        keys: &[Key],
        consistent: bool,
    ) -> Result<Vec<Option<Item>>, StoreError> {
        match self.call(Request::GetMany { keys, consistent }).await? {
            Reply::Items(items) => Ok(items),
            other => Err(other.mismatch("get_many")),
        }
    }
}

#[async_trait]
impl<S: Store + ?Sized> ItemWriter for S {
    async fn put(&self, item: Item, condition: Option<Expr>) -> Result<WriteOutcome, StoreError> {
        match self.call(Request::Put { item, condition }).await? {
            Reply::Written(outcome) => Ok(outcome),
            other => Err(other.mismatch("put")),
        }
    }

    async fn delete(&self, key: &Key, condition: Option<Expr>) -> Result<WriteOutcome, StoreError> {
        match self.call(Request::Delete { key, condition }).await? {
            Reply::Written(outcome) => Ok(outcome),
            other => Err(other.mismatch("delete")),
        }
    }

    async fn update(
        &self,
        key: &Key,
        update: Expr,
        condition: Option<Expr>,
    ) -> Result<WriteOutcome, StoreError> {
        let request = Request::Update {
            key,
            update,
            condition,
        };
        match self.call(request).await? {
            Reply::Written(outcome) => Ok(outcome),
            other => Err(other.mismatch("update")),
        }
    }
}

#[async_trait]
impl<S: Store + ?Sized> QueryStore for S {
    async fn query_page(&self, spec: &QuerySpec, start: Option<Key>) -> Result<Page, StoreError> {
        match self.call(Request::QueryPage { spec, start }).await? {
            Reply::Page(page) => Ok(page),
            other => Err(other.mismatch("query_page")),
        }
    }

    async fn scan_page(&self, spec: &ScanSpec, start: Option<Key>) -> Result<Page, StoreError> {
        match self.call(Request::ScanPage { spec, start }).await? {
            Reply::Page(page) => Ok(page),
            other => Err(other.mismatch("scan_page")),
        }
    }

    async fn query_partitions(
        &self,
        index: Option<&str>,
        attribute: &str,
        values: &[AttributeValue],
        consistent: bool,
    ) -> Result<Partitions, StoreError> {
        let request = Request::QueryPartitions {
            index,
            attribute,
            values,
            consistent,
        };
        match self.call(request).await? {
            Reply::Partitions(partitions) => Ok(partitions),
            other => Err(other.mismatch("query_partitions")),
        }
    }
}

#[async_trait]
impl<S: Store + ?Sized> BatchWriter for S {
    async fn batch_write(&self, ops: Vec<WriteOp>) -> Result<BatchWriteReport, StoreError> {
        match self.call(Request::BatchWrite { ops }).await? {
            Reply::Batch(report) => Ok(report),
            other => Err(other.mismatch("batch_write")),
        }
    }
}

#[async_trait]
impl<S: Store + ?Sized> GuardedWriter for S {
    async fn write_guarded(
        &self,
        guards: &[Guard],
        ops: Vec<GuardedOp>,
    ) -> Result<GuardedReport, StoreError> {
        match self.call(Request::WriteGuarded { guards, ops }).await? {
            Reply::Guarded(report) => Ok(report),
            other => Err(other.mismatch("write_guarded")),
        }
    }
}

/// [`Request::GetMany`] answered by `store`'s own point reads, one key
/// after the other, in the order of `keys`: for a store without a batch
/// read, or a layer whose [`Request::Get`] arm must see every key.
#[cfg(test)]
pub(crate) async fn get_one_by_one<S: Store + ?Sized>(
    store: &S,
    keys: &[Key],
    consistent: bool,
) -> Result<Vec<Option<Item>>, StoreError> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        out.push(store.get(key, consistent).await?);
    }
    Ok(out)
}

/// [`Request::QueryPartitions`] answered by `store`'s own queries: each
/// partition queried in turn ([`QuerySpec::partition_of`]), following
/// pagination. For a store without a multi-partition read, or a layer whose
/// [`Request::QueryPage`] arm must see every partition
/// ([`Coalescing`] shares them with other callers).
pub async fn query_partitions_by_pages<S: Store + ?Sized>(
    store: &S,
    index: Option<&str>,
    attribute: &str,
    values: &[AttributeValue],
    consistent: bool,
) -> Result<Partitions, StoreError> {
    let mut out = Partitions::default();
    for value in values {
        let mut spec = QuerySpec::partition_of(attribute, value.clone());
        spec.consistent = consistent;
        spec.index = index.map(str::to_owned);
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = store.query_page(&spec, start).await?;
            out.consumed_capacity += page.consumed_capacity;
            items.extend(page.items);
            match page.last_evaluated_key {
                Some(k) => start = Some(k),
                None => break,
            }
        }
        out.items.push(items);
    }
    Ok(out)
}

/// One BatchWriteItem call: send up to 25 requests, return the unprocessed
/// ones and the consumed capacity. The retry loop ([`write_in_batches`]) is
/// written against this so that it can be exercised on its own.
#[async_trait]
pub trait BatchSender: Send + Sync {
    /// Send `requests` (at most 25) in one request; returns the ones the
    /// service left unprocessed and the write capacity units consumed.
    async fn send_batch(
        &self,
        requests: Vec<WriteRequest>,
    ) -> Result<(Vec<WriteRequest>, f64), StoreError>;
}

/// The retry schedule of one batch request's unprocessed items or keys:
/// bounded exponential backoff with jitter, then [`StoreError::Unprocessed`].
struct Unprocessed {
    operation: &'static str,
    backoff: Backoff,
    attempt: u32,
}

impl Unprocessed {
    fn new(operation: &'static str, backoff: Backoff) -> Self {
        Unprocessed {
            operation,
            backoff,
            attempt: 0,
        }
    }

    /// Call before each send of `pending` items: waits before a retry, fails
    /// when the attempts are spent. True when this send is a retry.
    async fn before_send(&mut self, pending: usize) -> Result<bool, StoreError> {
        let retry = self.attempt > 0;
        if retry {
            if self.attempt >= self.backoff.max_attempts {
                return Err(StoreError::Unprocessed {
                    operation: self.operation,
                    remaining: pending,
                    attempts: self.attempt,
                });
            }
            tokio::time::sleep(self.backoff.delay(self.attempt)).await;
        }
        self.attempt += 1;
        Ok(retry)
    }
}

/// Write every op in chunks of 25, retrying `UnprocessedItems` with bounded
/// exponential backoff and jitter. Ops on the same key are collapsed (the
/// last one wins), as BatchWriteItem rejects duplicate keys in one request.
pub async fn write_in_batches<S: BatchSender + ?Sized>(
    sender: &S,
    key_attributes: (&str, &str),
    ops: Vec<WriteOp>,
    backoff: Backoff,
) -> Result<BatchWriteReport, StoreError> {
    let ops = dedupe_by_key(key_attributes, ops);
    let mut report = BatchWriteReport {
        items: ops.len(),
        ..Default::default()
    };
    let requests: Vec<WriteRequest> = ops.into_iter().map(to_write_request).collect();
    for chunk in requests.chunks(25) {
        let mut pending = chunk.to_vec();
        let mut retries = Unprocessed::new("BatchWriteItem", backoff);
        while !pending.is_empty() {
            if retries.before_send(pending.len()).await? {
                report.retried_items += pending.len();
            }
            report.requests += 1;
            let (unprocessed, consumed) = sender.send_batch(pending).await?;
            report.consumed_capacity += consumed;
            pending = unprocessed;
        }
    }
    Ok(report)
}

pub(crate) fn dedupe_by_key(key_attributes: (&str, &str), ops: Vec<WriteOp>) -> Vec<WriteOp> {
    let mut last: HashMap<String, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        last.insert(op.key_id(key_attributes), i);
    }
    ops.into_iter()
        .enumerate()
        .filter(|(i, op)| last.get(&op.key_id(key_attributes)) == Some(i))
        .map(|(_, op)| op)
        .collect()
}

/// The identity of a key (or of an item's key) as a string: the values of
/// the key attributes, for grouping and deduplicating.
pub(crate) fn key_id(m: &HashMap<String, AttributeValue>, (pk, sk): (&str, &str)) -> String {
    format!("{:?}\u{1f}{:?}", m.get(pk), m.get(sk))
}

fn to_write_request(op: WriteOp) -> WriteRequest {
    match op {
        WriteOp::Put(item) => WriteRequest::builder()
            .put_request(
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .expect("item is set"),
            )
            .build(),
        WriteOp::Delete(key) => WriteRequest::builder()
            .delete_request(
                DeleteRequest::builder()
                    .set_key(Some(key))
                    .build()
                    .expect("key is set"),
            )
            .build(),
    }
}

/// Request counts and consumed capacity, for reports and benchmarks.
#[derive(Debug, Default)]
pub struct StoreMetrics {
    requests: [AtomicU64; 11],
    read_milli: AtomicU64,
    write_milli: AtomicU64,
    /// Index names a Query or Scan asked for (recorded before sending, so a
    /// request on a missing index counts: IAM is checked before that).
    indexes: std::sync::Mutex<Vec<(Operation, String)>>,
}

/// The operations counted by [`StoreMetrics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A point read ([`ItemReader::get`]).
    GetItem = 0,
    /// A single-item put ([`ItemWriter::put`]).
    PutItem = 1,
    /// A single-item delete ([`ItemWriter::delete`]).
    DeleteItem = 2,
    /// A single-item update ([`ItemWriter::update`]).
    UpdateItem = 3,
    /// One page of a query.
    Query = 4,
    /// One page of a scan.
    Scan = 5,
    /// One request of a batch write (up to 25 items), retries included.
    BatchWriteItem = 6,
    /// One request of several point reads (up to 100 keys), retries
    /// included.
    BatchGetItem = 7,
    /// A PartiQL SELECT (IAM action `dynamodb:PartiQLSelect`).
    ExecuteStatement = 8,
    /// Any other request; the engine's stores count none today.
    Other = 9,
    /// A transaction (guarded writes, an app's own transactions).
    TransactWriteItems = 10,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct MetricsSnapshot {
    /// `GetItem` requests.
    pub get_item: u64,
    /// `PutItem` requests.
    pub put_item: u64,
    /// `DeleteItem` requests.
    pub delete_item: u64,
    /// `UpdateItem` requests.
    pub update_item: u64,
    /// `Query` requests (one per page).
    pub query: u64,
    /// `Scan` requests (one per page).
    pub scan: u64,
    /// `BatchWriteItem` requests, retries included.
    pub batch_write_item: u64,
    /// `BatchGetItem` requests, retries included.
    pub batch_get_item: u64,
    /// PartiQL SELECTs ([`QueryStore::query_partitions`]).
    pub execute_statement: u64,
    /// `TransactWriteItems` requests (guarded writes, transactions).
    pub transact_write_items: u64,
    /// Read capacity units consumed, as DynamoDB reported them (a request
    /// whose answer reports none adds 0).
    pub read_capacity: f64,
    /// Write capacity units consumed, as DynamoDB reported them.
    pub write_capacity: f64,
}

impl MetricsSnapshot {
    /// Counters accumulated since `earlier`.
    pub fn since(&self, earlier: &MetricsSnapshot) -> MetricsSnapshot {
        MetricsSnapshot {
            get_item: self.get_item - earlier.get_item,
            put_item: self.put_item - earlier.put_item,
            delete_item: self.delete_item - earlier.delete_item,
            update_item: self.update_item - earlier.update_item,
            query: self.query - earlier.query,
            scan: self.scan - earlier.scan,
            batch_write_item: self.batch_write_item - earlier.batch_write_item,
            batch_get_item: self.batch_get_item - earlier.batch_get_item,
            execute_statement: self.execute_statement - earlier.execute_statement,
            transact_write_items: self.transact_write_items - earlier.transact_write_items,
            read_capacity: self.read_capacity - earlier.read_capacity,
            write_capacity: self.write_capacity - earlier.write_capacity,
        }
    }
    /// Read requests of any kind.
    pub fn read_requests(&self) -> u64 {
        self.get_item + self.batch_get_item + self.query + self.scan + self.execute_statement
    }
    /// Requests of any kind.
    pub fn requests(&self) -> u64 {
        self.read_requests() + self.write_requests()
    }
    /// Write requests of any kind.
    pub fn write_requests(&self) -> u64 {
        self.put_item
            + self.delete_item
            + self.update_item
            + self.batch_write_item
            + self.transact_write_items
    }
}

impl StoreMetrics {
    /// Count one request of `op` and the capacity it consumed (`None`: the
    /// answer reported none).
    pub fn record(&self, op: Operation, consumed: Option<&ConsumedCapacity>) {
        self.requests[op as usize].fetch_add(1, Ordering::Relaxed);
        if let Some(c) = consumed {
            self.add_capacity(op, c.capacity_units().unwrap_or(0.0));
        }
    }

    /// Count one batch request (BatchGetItem, BatchWriteItem) and the
    /// capacity of every table it touched; returns that capacity.
    fn record_batch(&self, op: Operation, consumed: &[ConsumedCapacity]) -> f64 {
        self.requests[op as usize].fetch_add(1, Ordering::Relaxed);
        let units = consumed.iter().filter_map(|c| c.capacity_units()).sum();
        self.add_capacity(op, units);
        units
    }

    fn add_capacity(&self, op: Operation, units: f64) {
        let milli = (units * 1000.0).round() as u64;
        match op {
            Operation::GetItem
            | Operation::BatchGetItem
            | Operation::ExecuteStatement
            | Operation::Query
            | Operation::Scan => self.read_milli.fetch_add(milli, Ordering::Relaxed),
            _ => self.write_milli.fetch_add(milli, Ordering::Relaxed),
        };
    }

    /// Note that `op` (a Query or Scan) asked for the index `index`.
    pub(crate) fn record_index(&self, op: Operation, index: &str) {
        let mut seen = self.indexes.lock().expect("metrics lock");
        if !seen.iter().any(|(o, i)| *o == op && i == index) {
            seen.push((op, index.to_owned()));
        }
    }

    /// The distinct (operation, index name) pairs requested so far.
    pub fn indexes(&self) -> Vec<(Operation, String)> {
        self.indexes.lock().expect("metrics lock").clone()
    }

    /// The counters now; [`MetricsSnapshot::since`] gives what happened
    /// between two snapshots.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let r = |op: Operation| self.requests[op as usize].load(Ordering::Relaxed);
        MetricsSnapshot {
            get_item: r(Operation::GetItem),
            put_item: r(Operation::PutItem),
            delete_item: r(Operation::DeleteItem),
            update_item: r(Operation::UpdateItem),
            query: r(Operation::Query),
            scan: r(Operation::Scan),
            batch_write_item: r(Operation::BatchWriteItem),
            batch_get_item: r(Operation::BatchGetItem),
            execute_statement: r(Operation::ExecuteStatement),
            transact_write_items: r(Operation::TransactWriteItems),
            read_capacity: self.read_milli.load(Ordering::Relaxed) as f64 / 1000.0,
            write_capacity: self.write_milli.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}

/// Build a DynamoDB client. With an endpoint (DynamoDB Local), missing
/// region and credentials default to `us-east-1` and dummy keys, so no AWS
/// account is needed.
pub async fn client(endpoint_url: Option<&str>) -> Client {
    let mut loader = crate::aws::defaults();
    if let Some(url) = endpoint_url {
        loader = loader.endpoint_url(url);
        if std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none()
        {
            loader = loader.region(aws_config::Region::new("us-east-1"));
        }
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none()
            && std::env::var_os("AWS_PROFILE").is_none()
        {
            loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
                "local",
                "local",
                None,
                None,
                "worker-local",
            ));
        }
    }
    Client::new(&loader.load().await)
}

/// The client of a Lambda function: [`crate::aws::lambda_config`] (region
/// and credentials from Lambda's environment variables only).
pub fn lambda_client(endpoint_url: Option<&str>) -> Client {
    Client::new(&crate::aws::lambda_config(endpoint_url))
}

/// A client for a local endpoint that reads nothing from the environment:
/// region `us-east-1`, dummy static credentials, no instance metadata.
pub fn local_client(endpoint_url: &str) -> Client {
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local",
            "local",
            None,
            None,
            "worker-local",
        ))
        .endpoint_url(endpoint_url)
        .http_client(crate::aws::https_client())
        .build();
    Client::from_conf(config)
}

/// The DynamoDB implementation of every store trait, for one table.
#[derive(Debug, Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    key_attributes: (String, String),
    backoff: Backoff,
    metrics: Arc<StoreMetrics>,
}

impl DynamoStore {
    /// A store for `table`, whose key attributes are the single-table
    /// convention's `PK`/`SK` ([`DEFAULT_KEY`]; see [`Self::with_key`]).
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        DynamoStore {
            client,
            table: table.into(),
            key_attributes: key_names(DEFAULT_KEY),
            backoff: Backoff::default(),
            metrics: Arc::default(),
        }
    }

    /// The table's key attributes, when they are not `PK`/`SK`.
    pub fn with_key(mut self, key: KeySchema) -> Self {
        self.key_attributes = key_names(key);
        self
    }

    /// The name of the table this store reads and writes.
    pub fn table(&self) -> &str {
        &self.table
    }
    /// The DynamoDB client, for requests the store does not make.
    pub fn client(&self) -> &Client {
        &self.client
    }
    /// The requests and capacity of this store (shared by its clones).
    pub fn metrics(&self) -> &StoreMetrics {
        &self.metrics
    }
    /// The table's (partition, sort) key attribute names; `PK`/`SK` unless
    /// set with [`Self::with_key`].
    pub fn key_attributes(&self) -> (&str, &str) {
        (&self.key_attributes.0, &self.key_attributes.1)
    }

    /// Create the table from the schema and wait until it is active.
    pub async fn create_table(&self, schema: &TableSchema) -> Result<(), StoreError> {
        schema
            .create_table(self.client.create_table().table_name(&self.table))
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("CreateTable", e))?;
        for _ in 0..600 {
            let d = self
                .client
                .describe_table()
                .table_name(&self.table)
                .send()
                .await
                .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
            let active =
                d.table().and_then(|t| t.table_status()).map(|s| s.as_str()) == Some("ACTIVE");
            if active {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(StoreError::Transient {
            operation: "CreateTable",
            code: "Timeout".into(),
            message: "table did not become ACTIVE within 60 s".into(),
        })
    }

    /// Delete the table.
    pub async fn delete_table(&self) -> Result<(), StoreError> {
        self.client
            .delete_table()
            .table_name(&self.table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DeleteTable", e))?;
        Ok(())
    }

    /// The table's item count and size in bytes as DescribeTable reports
    /// them (DynamoDB refreshes both about every six hours).
    pub async fn table_size(&self) -> Result<(i64, i64), StoreError> {
        let d = self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        let t = d.table();
        Ok((
            t.and_then(|t| t.item_count()).unwrap_or(0),
            t.and_then(|t| t.table_size_bytes()).unwrap_or(0),
        ))
    }

    /// The ARN of the table's latest stream, if it has one.
    pub async fn stream_arn(&self) -> Result<Option<String>, StoreError> {
        let d = self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", e))?;
        Ok(d.table()
            .and_then(|t| t.latest_stream_arn())
            .map(str::to_owned))
    }
}

fn key_names(key: KeySchema) -> (String, String) {
    let (pk, sk) = key.names();
    (pk.to_owned(), sk.to_owned())
}

fn condition_failed<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> bool {
    err.code() == Some("ConditionalCheckFailedException")
}

impl DynamoStore {
    /// A Query or Scan response as a counted [`Page`].
    fn page(
        &self,
        op: Operation,
        consumed: Option<ConsumedCapacity>,
        scanned_count: i32,
        last_evaluated_key: Option<Key>,
        items: Option<Vec<Item>>,
    ) -> Page {
        self.metrics.record(op, consumed.as_ref());
        Page {
            consumed_capacity: consumed.and_then(|c| c.capacity_units).unwrap_or(0.0),
            scanned_count,
            last_evaluated_key: last_evaluated_key.filter(|k| !k.is_empty()),
            items: items.unwrap_or_default(),
        }
    }

    /// A single-item write's result: counted, and a failed condition as a
    /// typed outcome.
    fn write_outcome<O, E, R>(
        &self,
        op: Operation,
        name: &'static str,
        result: Result<O, SdkError<E, R>>,
        consumed: impl FnOnce(&O) -> Option<&ConsumedCapacity>,
    ) -> Result<WriteOutcome, StoreError>
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug + HttpStatus,
    {
        match result {
            Ok(out) => {
                self.metrics.record(op, consumed(&out));
                Ok(WriteOutcome::Applied)
            }
            Err(e) if condition_failed(&e) => {
                self.metrics.record(op, None);
                Ok(WriteOutcome::ConditionFailed)
            }
            Err(e) => Err(StoreError::from_sdk(name, e)),
        }
    }
}

/// Point reads: GetItem, BatchGetItem.
impl DynamoStore {
    async fn get_item(&self, key: &Key, consistent: bool) -> Result<Option<Item>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key.clone()))
            .consistent_read(consistent)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", e))?;
        self.metrics
            .record(Operation::GetItem, out.consumed_capacity());
        Ok(out.item)
    }

    async fn batch_get_item(
        &self,
        keys: &[Key],
        consistent: bool,
    ) -> Result<Vec<Option<Item>>, StoreError> {
        let id = |m: &Key| key_id(m, self.key_attributes());
        let mut distinct: Vec<Key> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for key in keys {
            if seen.insert(id(key)) {
                distinct.push(key.clone());
            }
        }
        let mut found: HashMap<String, Item> = HashMap::new();
        for chunk in distinct.chunks(100) {
            let mut pending = chunk.to_vec();
            let mut retries = Unprocessed::new("BatchGetItem", self.backoff);
            while !pending.is_empty() {
                retries.before_send(pending.len()).await?;
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(pending))
                    .consistent_read(consistent)
                    .build()
                    .expect("keys are set");
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, request)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .map_err(|e| StoreError::from_sdk("BatchGetItem", e))?;
                self.metrics
                    .record_batch(Operation::BatchGetItem, out.consumed_capacity());
                for item in out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    found.insert(id(&item), item);
                }
                pending = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table))
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
        }
        Ok(keys.iter().map(|k| found.get(&id(k)).cloned()).collect())
    }
}

/// Single-item writes: PutItem, DeleteItem, UpdateItem.
impl DynamoStore {
    async fn put_item(
        &self,
        item: Item,
        condition: Option<Expr>,
    ) -> Result<WriteOutcome, StoreError> {
        let mut req = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        if let Some(c) = condition {
            req = req
                .condition_expression(c.text)
                .set_expression_attribute_names(non_empty(c.names))
                .set_expression_attribute_values(non_empty(c.values));
        }
        self.write_outcome(Operation::PutItem, "PutItem", req.send().await, |out| {
            out.consumed_capacity()
        })
    }

    async fn delete_item(
        &self,
        key: &Key,
        condition: Option<Expr>,
    ) -> Result<WriteOutcome, StoreError> {
        let mut req = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(key.clone()))
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        if let Some(c) = condition {
            req = req
                .condition_expression(c.text)
                .set_expression_attribute_names(non_empty(c.names))
                .set_expression_attribute_values(non_empty(c.values));
        }
        self.write_outcome(
            Operation::DeleteItem,
            "DeleteItem",
            req.send().await,
            |out| out.consumed_capacity(),
        )
    }

    async fn update_item(
        &self,
        key: &Key,
        update: Expr,
        condition: Option<Expr>,
    ) -> Result<WriteOutcome, StoreError> {
        let mut names = update.names;
        let mut values = update.values;
        let mut req = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key.clone()))
            .update_expression(update.text)
            .return_consumed_capacity(ReturnConsumedCapacity::Total);
        if let Some(c) = condition {
            names.extend(c.names);
            values.extend(c.values);
            req = req.condition_expression(c.text);
        }
        let req = req
            .set_expression_attribute_names(non_empty(names))
            .set_expression_attribute_values(non_empty(values));
        self.write_outcome(
            Operation::UpdateItem,
            "UpdateItem",
            req.send().await,
            |out| out.consumed_capacity(),
        )
    }
}

fn non_empty<V>(m: HashMap<String, V>) -> Option<HashMap<String, V>> {
    (!m.is_empty()).then_some(m)
}

fn merge_exprs(exprs: [Option<&Expr>; 3]) -> (HashMap<String, String>, Item) {
    let mut names = HashMap::new();
    let mut values = HashMap::new();
    for e in exprs.into_iter().flatten() {
        names.extend(e.names.clone());
        values.extend(e.values.clone());
    }
    (names, values)
}

/// Paged reads: Query, Scan, and PartiQL SELECT for whole partitions.
impl DynamoStore {
    async fn query(&self, spec: &QuerySpec, start: Option<Key>) -> Result<Page, StoreError> {
        let (names, values) = merge_exprs([
            Some(&spec.key_condition),
            spec.filter.as_ref(),
            spec.projection.as_ref(),
        ]);
        if let Some(index) = &spec.index {
            self.metrics.record_index(Operation::Query, index);
        }
        let out = self
            .client
            .query()
            .table_name(&self.table)
            .set_index_name(spec.index.clone())
            .key_condition_expression(&spec.key_condition.text)
            .set_filter_expression(spec.filter.as_ref().map(|f| f.text.clone()))
            .set_projection_expression(spec.projection.as_ref().map(|p| p.text.clone()))
            .set_expression_attribute_names(non_empty(names))
            .set_expression_attribute_values(non_empty(values))
            .consistent_read(spec.consistent)
            .set_limit(spec.limit)
            .scan_index_forward(spec.forward)
            .set_exclusive_start_key(start)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("Query", e))?;
        Ok(self.page(
            Operation::Query,
            out.consumed_capacity,
            out.scanned_count,
            out.last_evaluated_key,
            out.items,
        ))
    }

    async fn scan(&self, spec: &ScanSpec, start: Option<Key>) -> Result<Page, StoreError> {
        let (names, values) = merge_exprs([spec.filter.as_ref(), spec.projection.as_ref(), None]);
        if let Some(index) = &spec.index {
            self.metrics.record_index(Operation::Scan, index);
        }
        let out = self
            .client
            .scan()
            .table_name(&self.table)
            .set_index_name(spec.index.clone())
            .set_filter_expression(spec.filter.as_ref().map(|f| f.text.clone()))
            .set_projection_expression(spec.projection.as_ref().map(|p| p.text.clone()))
            .set_expression_attribute_names(non_empty(names))
            .set_expression_attribute_values(non_empty(values))
            .consistent_read(spec.consistent)
            .set_limit(spec.limit)
            .set_segment(spec.segment.map(|s| s.0))
            .set_total_segments(spec.segment.map(|s| s.1))
            .set_exclusive_start_key(start)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("Scan", e))?;
        Ok(self.page(
            Operation::Scan,
            out.consumed_capacity,
            out.scanned_count,
            out.last_evaluated_key,
            out.items,
        ))
    }

    async fn select_partitions(
        &self,
        index: Option<&str>,
        attribute: &str,
        values: &[AttributeValue],
        consistent: bool,
    ) -> Result<Partitions, StoreError> {
        let source = match index {
            Some(index) => {
                self.metrics
                    .record_index(Operation::ExecuteStatement, index);
                format!("\"{}\".\"{}\"", self.table, index)
            }
            None => format!("\"{}\"", self.table),
        };
        let id = |v: &AttributeValue| format!("{v:?}");
        let mut by_value: HashMap<String, Vec<Item>> = HashMap::new();
        let mut distinct: Vec<AttributeValue> = Vec::new();
        for v in values {
            if let std::collections::hash_map::Entry::Vacant(e) = by_value.entry(id(v)) {
                e.insert(Vec::new());
                distinct.push(v.clone());
            }
        }
        let mut consumed = 0.0;
        // PartiQL allows at most 50 partition key values in one IN.
        for chunk in distinct.chunks(50) {
            let statement = format!(
                "SELECT * FROM {source} WHERE \"{}\" IN [{}]",
                attribute.replace('"', "\"\""),
                vec!["?"; chunk.len()].join(", ")
            );
            let mut token = None;
            loop {
                let out = self
                    .client
                    .execute_statement()
                    .statement(&statement)
                    .set_parameters(Some(chunk.to_vec()))
                    .set_consistent_read(consistent.then_some(true))
                    .set_next_token(token)
                    .return_consumed_capacity(ReturnConsumedCapacity::Total)
                    .send()
                    .await
                    .map_err(|e| StoreError::from_sdk("ExecuteStatement", e))?;
                self.metrics
                    .record(Operation::ExecuteStatement, out.consumed_capacity());
                consumed += out
                    .consumed_capacity()
                    .and_then(|c| c.capacity_units())
                    .unwrap_or(0.0);
                for item in out.items.unwrap_or_default() {
                    if let Some(list) = item.get(attribute).and_then(|v| by_value.get_mut(&id(v))) {
                        list.push(item);
                    }
                }
                token = out.next_token;
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(Partitions {
            items: values
                .iter()
                .map(|v| by_value.get(&id(v)).cloned().unwrap_or_default())
                .collect(),
            consumed_capacity: consumed,
        })
    }
}

#[async_trait]
impl BatchSender for DynamoStore {
    async fn send_batch(
        &self,
        requests: Vec<WriteRequest>,
    ) -> Result<(Vec<WriteRequest>, f64), StoreError> {
        let out = self
            .client
            .batch_write_item()
            .request_items(&self.table, requests)
            .return_consumed_capacity(ReturnConsumedCapacity::Total)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("BatchWriteItem", e))?;
        let consumed = self
            .metrics
            .record_batch(Operation::BatchWriteItem, out.consumed_capacity());
        let unprocessed = out
            .unprocessed_items
            .and_then(|mut m| m.remove(&self.table))
            .unwrap_or_default();
        Ok((unprocessed, consumed))
    }
}

/// Each request goes to DynamoDB as the request of its name; one arm per
/// [`Request`] variant, and nothing else implements an operation.
#[async_trait]
impl Store for DynamoStore {
    async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
        Ok(match request {
            Request::Get { key, consistent } => Reply::Item(self.get_item(key, consistent).await?),
            Request::GetMany { keys, consistent } => {
                Reply::Items(self.batch_get_item(keys, consistent).await?)
            }
            Request::Put { item, condition } => {
                Reply::Written(self.put_item(item, condition).await?)
            }
            Request::Delete { key, condition } => {
                Reply::Written(self.delete_item(key, condition).await?)
            }
            Request::Update {
                key,
                update,
                condition,
            } => Reply::Written(self.update_item(key, update, condition).await?),
            Request::QueryPage { spec, start } => Reply::Page(self.query(spec, start).await?),
            Request::ScanPage { spec, start } => Reply::Page(self.scan(spec, start).await?),
            Request::QueryPartitions {
                index,
                attribute,
                values,
                consistent,
            } => Reply::Partitions(
                self.select_partitions(index, attribute, values, consistent)
                    .await?,
            ),
            Request::BatchWrite { ops } => Reply::Batch(
                write_in_batches(self, self.key_attributes(), ops, self.backoff).await?,
            ),
            Request::WriteGuarded { guards, ops } => {
                Reply::Guarded(self.write_guarded_in_transactions(guards, ops).await?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let b = Backoff {
            max_attempts: 5,
            base: Duration::from_millis(10),
            max: Duration::from_millis(100),
        };
        for attempt in 1..40 {
            let cap = Duration::from_millis(10 * (1u64 << (attempt - 1).min(20))).min(b.max);
            assert!(b.delay(attempt) <= cap);
        }
        let distinct: std::collections::HashSet<_> = (0..50).map(|_| b.delay(4)).collect();
        assert!(distinct.len() > 1, "delays must be jittered");
    }

    #[test]
    fn duplicate_keys_collapse_to_the_last_op() {
        let key = |pk: &str| {
            Key::from([
                ("PK".to_owned(), AttributeValue::S(pk.into())),
                ("SK".to_owned(), AttributeValue::S("x".into())),
            ])
        };
        let mut put = key("a");
        put.insert("V".into(), AttributeValue::N("1".into()));
        let ops = vec![
            WriteOp::Put(put),
            WriteOp::Delete(key("b")),
            WriteOp::Delete(key("a")),
        ];
        let out = dedupe_by_key(("PK", "SK"), ops);
        assert_eq!(
            out,
            vec![WriteOp::Delete(key("b")), WriteOp::Delete(key("a"))]
        );
    }

    #[test]
    fn expressions_combine_placeholders() {
        let e = Expr::exists("PK").and(
            Expr::new("#e = :e")
                .name("#e", "ValidUntil")
                .string(":e", "x"),
        );
        assert_eq!(e.text, "(attribute_exists(#cond_k)) AND (#e = :e)");
        assert_eq!(e.names.len(), 2);
        assert_eq!(e.values.len(), 1);
    }

    #[test]
    fn one_attribute_expressions_name_their_placeholders_after_it() {
        let set = Expr::set("Title-Key", AttributeValue::S("a".into()));
        assert_eq!(set.text, "SET #Title_Key = :Title_Key");
        assert_eq!(set.names["#Title_Key"], "Title-Key");
        assert_eq!(set.values[":Title_Key"], AttributeValue::S("a".into()));
        let n = AttributeValue::N("3".into());
        let seen = Expr::unchanged("Count", Some(&n));
        assert_eq!(seen.text, "#Count = :Count_eq");
        assert_eq!(seen.values[":Count_eq"], n);
        let none = Expr::unchanged("Count", None);
        assert_eq!(none.text, "attribute_not_exists(#Count)");
        assert!(none.values.is_empty());
        // An update conditioned on the attribute it sets keeps both values.
        let mut both = Expr::set("Count", AttributeValue::N("4".into())).values;
        both.extend(seen.values);
        assert_eq!(both.len(), 2);
    }

    /// A store over fixed items keyed by `PK`: point reads, and whole
    /// partitions one item per page; every other request gets a wrong
    /// reply.
    struct Fixed(Vec<Item>);

    fn item(pk: &str, group: &str) -> Item {
        Item::from([
            ("PK".to_owned(), AttributeValue::S(pk.into())),
            ("G".to_owned(), AttributeValue::S(group.into())),
        ])
    }

    #[async_trait]
    impl Store for Fixed {
        async fn call(&self, request: Request<'_>) -> Result<Reply, StoreError> {
            match request {
                Request::Get { key, .. } => Ok(Reply::Item(
                    self.0
                        .iter()
                        .find(|i| i.get("PK") == key.get("PK"))
                        .cloned(),
                )),
                Request::GetMany { keys, consistent } => get_one_by_one(self, keys, consistent)
                    .await
                    .map(Reply::Items),
                Request::QueryPage { spec, start } => {
                    let (attribute, value) = spec.as_partition().expect("a partition");
                    let mut items = self.0.iter().filter(|i| i.get(attribute) == Some(value));
                    let after = start.as_ref().and_then(|k| k.get("PK"));
                    if after.is_some() {
                        items.find(|i| i.get("PK") == after);
                    }
                    let page: Vec<Item> = items.take(1).cloned().collect();
                    let last_evaluated_key = page
                        .first()
                        .map(|i| Key::from([("PK".to_owned(), i.get("PK").cloned().expect("PK"))]));
                    Ok(Reply::Page(Page {
                        items: page,
                        last_evaluated_key,
                        consumed_capacity: 0.5,
                        scanned_count: 1,
                    }))
                }
                Request::QueryPartitions {
                    index,
                    attribute,
                    values,
                    consistent,
                } => query_partitions_by_pages(self, index, attribute, values, consistent)
                    .await
                    .map(Reply::Partitions),
                _ => Ok(Reply::Item(None)),
            }
        }
    }

    #[tokio::test]
    async fn typed_methods_are_calls_and_derived_ones_follow_them() {
        let store = Fixed(vec![item("a", "x"), item("b", "y"), item("c", "x")]);
        let store: &dyn Store = &store;
        let key = |pk: &str| Key::from([("PK".to_owned(), AttributeValue::S(pk.into()))]);
        assert_eq!(
            store.get(&key("b"), true).await.unwrap(),
            Some(item("b", "y"))
        );
        let many = store
            .get_many(&[key("c"), key("z"), key("c")], false)
            .await
            .unwrap();
        assert_eq!(many, vec![Some(item("c", "x")), None, Some(item("c", "x"))]);

        let all = store
            .query_all(&QuerySpec::partition("G", "x"))
            .await
            .unwrap();
        assert_eq!(all, vec![item("a", "x"), item("c", "x")]);
        let values = ["y", "x", "none"].map(|v| AttributeValue::S(v.into()));
        let found = store
            .query_partitions(None, "G", &values, true)
            .await
            .unwrap();
        assert_eq!(
            found.items,
            vec![
                vec![item("b", "y")],
                vec![item("a", "x"), item("c", "x")],
                vec![]
            ]
        );
        // Pages read: y twice (an item, then the empty last page), x three
        // times, none once.
        assert_eq!(found.consumed_capacity, 3.0);
    }

    #[tokio::test]
    async fn a_reply_of_another_kind_is_a_permanent_error() {
        let err = Fixed(Vec::new())
            .put(item("a", "x"), None)
            .await
            .unwrap_err();
        assert!(!err.is_retryable());
        assert!(matches!(
            err,
            StoreError::Permanent { operation: "put", ref code, .. } if code == "MismatchedReply"
        ));
    }

    #[test]
    fn metrics_count_requests_and_capacity() {
        let m = StoreMetrics::default();
        let before = m.snapshot();
        let c = ConsumedCapacity::builder().capacity_units(0.5).build();
        m.record(Operation::Query, Some(&c));
        m.record(
            Operation::PutItem,
            Some(&ConsumedCapacity::builder().capacity_units(1.0).build()),
        );
        let d = m.snapshot().since(&before);
        assert_eq!((d.query, d.put_item), (1, 1));
        assert_eq!(d.read_capacity, 0.5);
        assert_eq!(d.write_capacity, 1.0);
        assert_eq!(d.write_requests(), 1);
    }
}
