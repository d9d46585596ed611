//! Lenient decoding of the DynamoDB Streams event Lambda delivers.
//!
//! The envelope (`{"Records": [...]}`) is checked first; then every record is
//! decoded on its own, so one malformed record becomes an [`RecordError`] in
//! its slot and never fails the whole batch.
//!
//! Each record is read once, straight from the parsed JSON, into what the
//! handlers use; the reading is the one `aws_lambda_events`' `EventRecord`
//! gives (the tests hold the two side by side), made lenient where real
//! engines differ:
//!
//! - DynamoDB Local omits `eventSourceARN` and may omit `awsRegion`,
//!   `SizeBytes` and `eventVersion`;
//! - DynamoDB Local drops the type tag of empty lists and maps: a bare `[]`
//!   attribute value means `{"L": []}` and a bare `{}` means `{"M": {}}`, at
//!   any depth inside `L` and `M`;
//! - `ApproximateCreationDateTime` may be an integer, a fractional number
//!   (`1711143813.123`) or missing. `EventRecord` would turn a missing
//!   value into 1970 (its serde default), and its fractional
//!   reading takes the fraction as nanoseconds scaled by 10⁶ (`.123` becomes
//!   123 µs). Precision kept: milliseconds (truncated).
//!
//! What is not a stream record is rejected with a reason: an event whose
//! records all come from another source (SQS, S3, SNS...) is an
//! [`EnvelopeError::OtherSource`]; in a batch, a record whose `eventSource`
//! is not `aws:dynamodb`, or whose image is over DynamoDB's 400 KB item
//! limit, is a [`RecordError`].
//!
//! Error reasons never contain attribute values: serde messages go through
//! [`redact_quoted`]. Only the key attributes are rendered, as `PK=…, SK=…`.

use std::any::Any;
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;
use std::sync::Arc;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, TimeZone, Utc};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::item::{Item, redact_quoted};
use crate::schema::StreamView;

mod direct;

pub(crate) use direct::AttributeSeed;

/// Key attribute names used when none are configured: `("PK", "SK")`.
pub const DEFAULT_KEY_ATTRIBUTES: (&str, &str) = (
    crate::schema::DEFAULT_KEY.partition_key,
    match crate::schema::DEFAULT_KEY.sort_key {
        Some(sk) => sk,
        None => "",
    },
);

/// `eventSource` of DynamoDB Streams records.
const STREAM_SOURCE: &str = "aws:dynamodb";
/// DynamoDB's item size limit (400 KB); no stream image can be larger.
const MAX_ITEM_BYTES: usize = 400 * 1024;
/// `userIdentity.principalId` of removals done by the TTL process.
const TTL_PRINCIPAL: &str = "dynamodb.amazonaws.com";
/// `awsRegion` written by [`encode_event`] when no ARN names one (what
/// DynamoDB Local reports).
const LOCAL_REGION: &str = "ddblocal";
/// Longest rendered key value or identifier in an error text.
const MAX_RENDERED: usize = 200;
/// The three attribute-map sections of a stream record.
const SECTIONS: [&str; 3] = ["Keys", "NewImage", "OldImage"];

/// What happened to the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// The item was created (`INSERT`): no old image.
    Insert,
    /// The item was changed (`MODIFY`): a write that changes nothing makes
    /// no record.
    Modify,
    /// Deleted by a caller.
    Remove,
    /// Deleted by the TTL process (`userIdentity` is the DynamoDB service).
    TtlRemove,
}

impl ChangeKind {
    /// The `eventName` of the record (`TtlRemove` is a `REMOVE`).
    pub fn event_name(self) -> &'static str {
        match self {
            ChangeKind::Insert => "INSERT",
            ChangeKind::Modify => "MODIFY",
            ChangeKind::Remove | ChangeKind::TtlRemove => "REMOVE",
        }
    }

    /// `Remove` or `TtlRemove`.
    pub fn is_removal(self) -> bool {
        matches!(self, ChangeKind::Remove | ChangeKind::TtlRemove)
    }
}

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChangeKind::TtlRemove => f.write_str("REMOVE (TTL)"),
            other => f.write_str(other.event_name()),
        }
    }
}

/// Why a string is not a stream sequence number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceNumberError {
    /// The string is empty.
    #[error("empty sequence number")]
    Empty,
    /// The string holds something else than the digits `0`-`9`.
    #[error("sequence number is not a string of decimal digits")]
    NotDigits,
}

/// A stream sequence number: a decimal string of up to 40 digits.
///
/// Sequence numbers compare as numbers, not as strings (`"9" < "10"`); they
/// do not fit a `u128`, so the comparison strips leading zeros, then compares
/// lengths, then digits. `Display` and serde give the original string.
/// Equality and hashing agree with the ordering (`"007" == "7"`).
///
/// Up to 30 digits are kept inline, with no allocation (DynamoDB Local
/// writes 21; DynamoDB 21 to 40); longer ones on the heap. The value is
/// then 32 bytes, not the 48 that inline room for 40 would take in every
/// record and every record's error.
#[derive(Clone)]
pub struct SequenceNumber(Digits);

/// Most digits kept inline.
const INLINE_DIGITS: usize = 30;

#[derive(Clone)]
enum Digits {
    Inline { len: u8, bytes: [u8; INLINE_DIGITS] },
    Heap(Box<str>),
}

impl SequenceNumber {
    /// `digits`, already checked to be ASCII digits.
    pub(crate) fn from_digits(digits: &str) -> Self {
        let len = digits.len();
        SequenceNumber(if len <= INLINE_DIGITS {
            let mut bytes = [0; INLINE_DIGITS];
            bytes[..len].copy_from_slice(digits.as_bytes());
            Digits::Inline {
                len: len as u8,
                bytes,
            }
        } else {
            Digits::Heap(digits.into())
        })
    }

    /// The original string.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Digits::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).expect("ASCII digits")
            }
            Digits::Heap(digits) => digits,
        }
    }

    /// The digits without leading zeros (empty for zero).
    fn significant(&self) -> &str {
        self.as_str().trim_start_matches('0')
    }
}

impl FromStr for SequenceNumber {
    type Err = SequenceNumberError;
    fn from_str(s: &str) -> Result<Self, SequenceNumberError> {
        if s.is_empty() {
            return Err(SequenceNumberError::Empty);
        }
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(SequenceNumberError::NotDigits);
        }
        Ok(SequenceNumber::from_digits(s))
    }
}

impl Ord for SequenceNumber {
    fn cmp(&self, other: &Self) -> Ordering {
        let (a, b) = (self.significant(), other.significant());
        a.len().cmp(&b.len()).then_with(|| a.cmp(b))
    }
}

impl PartialOrd for SequenceNumber {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for SequenceNumber {
    fn eq(&self, other: &Self) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for SequenceNumber {}

impl Hash for SequenceNumber {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.significant().hash(state);
    }
}

impl fmt::Debug for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SequenceNumber({})", self.as_str())
    }
}

impl fmt::Display for SequenceNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for SequenceNumber {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for SequenceNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

/// One decoded stream record.
///
/// `Debug` shows the key and the attribute names of the images, never other
/// attribute values.
#[derive(Clone, PartialEq)]
pub struct StreamChange {
    /// The record's `eventID` (never empty): unique per record, what log
    /// lines and reports identify it by.
    pub event_id: String,
    /// What happened to the item.
    pub kind: ChangeKind,
    /// `None` when the engine did not send one (then the record cannot be
    /// reported alone as a batch item failure).
    pub sequence_number: Option<SequenceNumber>,
    /// `None` when the record carries none (not 1970).
    pub approximate_creation: Option<DateTime<Utc>>,
    /// The item's key attributes (never empty).
    pub keys: Item,
    /// `None` when absent or empty.
    pub old_image: Option<Item>,
    /// `None` when absent or empty.
    pub new_image: Option<Item>,
    /// The stream's ARN (`eventSourceARN`); `None` when the record
    /// carries none (a hand-made event). The records of one event that
    /// carry the same ARN share one copy of it.
    pub event_source_arn: Option<Arc<str>>,
    /// The record's size in bytes as DynamoDB reports it (`SizeBytes`);
    /// `None` when absent.
    pub size_bytes: Option<i64>,
    /// The change as an app's [`ChangeReader`] typed it while the event
    /// was read ([`decode_event_bytes_with`]); its images were read into
    /// it, not built: `old_image` and `new_image` are then `None`. `None`
    /// for every other decoding.
    pub typed: Option<Typed>,
}

/// A record's change, typed by an app's [`ChangeReader`] as the event was
/// read: the app gets it back by its type ([`Typed::get`]); the engine
/// only carries it. Clones share it; two are equal when they are one.
#[derive(Clone)]
pub struct Typed(Arc<dyn Any + Send + Sync>);

impl Typed {
    /// Carry `change`.
    pub fn new<T: Any + Send + Sync>(change: T) -> Self {
        Typed(Arc::new(change))
    }

    /// The change, when it is a `T`.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl PartialEq for Typed {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for Typed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Typed(..)")
    }
}

/// An app's reader of typed changes: the engine's byte-level decoder
/// ([`decode_event_bytes_with`]) gives it each image as it reads the event,
/// so that no [`Item`] of an image is built, then the record.
///
/// What the reader refuses (an error, `None`) is not a verdict on the
/// record: the whole event is then decoded into items, as
/// [`decode_event_bytes`] does, and the app decodes those (and says why a
/// record is malformed). So a reader only ever takes the records it reads
/// exactly as the app would read their items; the app's tests hold the two
/// side by side.
pub trait ChangeReader {
    /// What one image becomes.
    type Image;
    /// What one record becomes ([`StreamChange::typed`]).
    type Change: Any + Send + Sync;
    /// The image that `d` deserializes (DynamoDB JSON, as
    /// [`crate::item::text`] reads it) of the item whose key is `keys` (the
    /// record's `Keys`, which come first).
    fn image<'de, D: serde::Deserializer<'de>>(
        &self,
        keys: &Item,
        d: D,
    ) -> Result<Self::Image, D::Error>;
    /// The record's change: `raw` is the record without its images, `old`
    /// and `new` its images as [`Self::image`] read them.
    fn change(
        &self,
        raw: &StreamChange,
        old: Option<Self::Image>,
        new: Option<Self::Image>,
    ) -> Option<Self::Change>;
}

impl StreamChange {
    /// The key rendered as `PK=…, SK=…` (see `render_keys`).
    pub fn key_string(&self, key_attributes: (&str, &str)) -> String {
        render_keys(&self.keys, key_attributes)
    }

    /// The image after the change, or before it for removals.
    #[cfg(test)]
    pub(crate) fn latest_image(&self) -> Option<&Item> {
        self.new_image.as_ref().or(self.old_image.as_ref())
    }
}

impl fmt::Debug for StreamChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn names(image: &Option<Item>) -> Option<Vec<&str>> {
            image.as_ref().map(|item| {
                let mut names: Vec<&str> = item.keys().map(String::as_str).collect();
                names.sort_unstable();
                names
            })
        }
        f.debug_struct("StreamChange")
            .field("event_id", &self.event_id)
            .field("kind", &self.kind)
            .field("sequence_number", &self.sequence_number)
            .field("approximate_creation", &self.approximate_creation)
            .field("keys", &self.key_string(DEFAULT_KEY_ATTRIBUTES))
            .field("old_image_attributes", &names(&self.old_image))
            .field("new_image_attributes", &names(&self.new_image))
            .field("event_source_arn", &self.event_source_arn)
            .field("size_bytes", &self.size_bytes)
            .field("typed", &self.typed.is_some())
            .finish()
    }
}

/// Why one record of a batch does not decode. Carries what could be read of
/// its identity; `reason` never contains an attribute value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "record #{index} (event {}, key {}): {reason}",
    .event_id.as_deref().unwrap_or("?"),
    .keys.as_deref().unwrap_or("?")
)]
pub struct RecordError {
    /// Position in the batch.
    pub index: usize,
    /// The record's `eventID`, when it has one that is a string.
    pub event_id: Option<String>,
    /// The record's sequence number, when it could be read; `None`: the
    /// record cannot be reported alone as a batch item failure.
    pub sequence_number: Option<SequenceNumber>,
    /// Only the key attributes, rendered as `PK=…, SK=…`.
    pub keys: Option<String>,
    /// What is wrong with the record (never an attribute value).
    pub reason: String,
}

/// Why an event is not a DynamoDB Streams batch at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// The payload does not parse as JSON; it holds the parser's message.
    #[error("event is not JSON: {0}")]
    NotJson(String),
    /// The event has no `Records` key: another kind of event.
    #[error("no \"Records\" array: not a DynamoDB Streams event")]
    NoRecords,
    /// `Records` is there but holds something else than an array.
    #[error("\"Records\" is not an array")]
    RecordsNotArray,
    /// Every record names another event source (`eventSource`, or SNS's
    /// `EventSource`): an SQS, S3, SNS, Kinesis... event.
    #[error(
        "event from {0:?}, not a DynamoDB Streams event (expected records with eventSource \"aws:dynamodb\")"
    )]
    OtherSource(String),
}

/// Whether `v` looks like a DynamoDB Streams event: a `Records` array whose
/// records all have `eventSource` `aws:dynamodb` or a `dynamodb` object. An
/// empty `Records` array counts (it decodes to an empty batch).
pub fn is_stream_event(v: &Value) -> bool {
    let Some(records) = v.get("Records").and_then(Value::as_array) else {
        return false;
    };
    records.iter().all(|r| {
        r.get("eventSource").and_then(Value::as_str) == Some("aws:dynamodb")
            || r.get("dynamodb").is_some_and(Value::is_object)
    })
}

/// Parse and decode an event from its raw bytes, as [`decode_event`] would
/// decode its parsed JSON.
///
/// An event of well-formed records is read straight from the bytes, in one
/// pass and without a `Value` (`direct`); one that holds anything else (a
/// malformed record, a binary attribute, a duplicate field) is parsed into
/// a `Value` and decoded by [`decode_event`], which gives the reasons.
pub fn decode_event_bytes(
    bytes: &[u8],
) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    if let Some(records) = direct::decode(bytes) {
        return Ok(records.into_iter().map(Ok).collect());
    }
    decode_event_bytes_parsed(bytes)
}

/// How a stream function reads a Lambda event's bytes into its records
/// ([`crate::AppSpec::decode`]): [`decode_event_bytes`],
/// [`decode_views`](super::decode_views) of the app's view, or a function
/// that gives the app's [`ChangeReader`] to [`decode_event_bytes_with`].
pub type DecodeEvent = fn(&[u8]) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError>;

/// [`decode_event_bytes`], each record typed by `reader` as the event is
/// read ([`StreamChange::typed`]), no item of an image built. An event the
/// reader does not take whole (a record it refuses, an image before its
/// `Keys`, an image that might be over the item limit) is decoded as
/// [`decode_event_bytes`] decodes it, every record untyped.
pub fn decode_event_bytes_with<R: ChangeReader>(
    bytes: &[u8],
    reader: &R,
) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    if let Some(records) = direct::decode_with(bytes, Some(reader)) {
        return Ok(records.into_iter().map(Ok).collect());
    }
    decode_event_bytes(bytes)
}

/// [`decode_event_bytes`] through a `Value`, always.
fn decode_event_bytes_parsed(
    bytes: &[u8],
) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(EnvelopeError::NotJson("the body is empty".into()));
    }
    let event: Value = serde_json::from_slice(bytes)
        .map_err(|e| EnvelopeError::NotJson(redact(&e.to_string())))?;
    decode_event(&event)
}

/// Decode a Lambda DynamoDB Streams event, one result per record, in order.
/// Keys are rendered with [`DEFAULT_KEY_ATTRIBUTES`].
pub fn decode_event(
    event: &Value,
) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    decode_event_with(event, DEFAULT_KEY_ATTRIBUTES)
}

/// [`decode_event`] with the table's key attribute names (partition, sort),
/// used only to render keys in errors.
pub(crate) fn decode_event_with(
    event: &Value,
    key_attributes: (&str, &str),
) -> Result<Vec<Result<StreamChange, RecordError>>, EnvelopeError> {
    let records = match event.get("Records") {
        None | Some(Value::Null) => return Err(EnvelopeError::NoRecords),
        Some(Value::Array(records)) => records,
        Some(_) => return Err(EnvelopeError::RecordsNotArray),
    };
    if let Some(source) = other_source(records) {
        return Err(EnvelopeError::OtherSource(source));
    }
    Ok(records
        .iter()
        .enumerate()
        .map(|(index, record)| decode_record_with(index, record, key_attributes))
        .collect())
}

/// The source every record names, when it is not `aws:dynamodb` (e.g. an SQS
/// or S3 event sent to the stream function).
fn other_source(records: &[Value]) -> Option<String> {
    fn source(r: &Value) -> Option<&str> {
        r.get("eventSource")
            .or_else(|| r.get("EventSource"))
            .and_then(Value::as_str)
            .filter(|s| *s != STREAM_SOURCE)
    }
    let first = source(records.first()?)?;
    records
        .iter()
        .all(|r| source(r).is_some())
        .then(|| clip_to(first, 64))
}

/// Decode the record at position `index` of a batch.
#[cfg(test)]
pub(crate) fn decode_record(index: usize, record: &Value) -> Result<StreamChange, RecordError> {
    decode_record_with(index, record, DEFAULT_KEY_ATTRIBUTES)
}

/// Decode the record at position `index` of a batch, with the table's key
/// attribute names.
pub fn decode_record_with(
    index: usize,
    record: &Value,
    key_attributes: (&str, &str),
) -> Result<StreamChange, RecordError> {
    let mut error = RecordError {
        index,
        event_id: None,
        sequence_number: None,
        keys: None,
        reason: String::new(),
    };
    let Some(obj) = record.as_object() else {
        error.reason = "record is not a JSON object".into();
        return Err(error);
    };
    error.event_id = obj.get("eventID").and_then(Value::as_str).map(clip);
    if let Some(ddb) = obj.get("dynamodb").and_then(Value::as_object) {
        error.sequence_number = ddb
            .get("SequenceNumber")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok());
        error.keys = raw_keys(ddb, key_attributes);
    }
    decode_object(obj).map_err(|reason| RecordError { reason, ..error })
}

/// The record's decoding; `Err` is the reason.
fn decode_object(obj: &Map<String, Value>) -> Result<StreamChange, String> {
    let event_id = match obj.get("eventID") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err("empty eventID".into()),
        None | Some(Value::Null) => return Err("no eventID".into()),
        Some(_) => return Err("eventID is not a string".into()),
    };
    let ddb = match obj.get("dynamodb") {
        Some(Value::Object(ddb)) => ddb,
        None | Some(Value::Null) => return Err("no dynamodb object".into()),
        Some(_) => return Err("dynamodb is not an object".into()),
    };
    if let Some(Value::String(source)) = obj.get("eventSource")
        && source != STREAM_SOURCE
    {
        return Err(format!(
            "eventSource {:?} is not {STREAM_SOURCE:?}",
            clip_to(source, 64)
        ));
    }
    let event_name = match obj.get("eventName") {
        Some(Value::String(s)) => s.as_str(),
        None | Some(Value::Null) => return Err("no eventName".into()),
        Some(_) => return Err("eventName is not a string".into()),
    };
    let kind = match event_name {
        "INSERT" => ChangeKind::Insert,
        "MODIFY" => ChangeKind::Modify,
        "REMOVE" => ChangeKind::Remove,
        other => return Err(format!("unknown eventName {:?}", clip_to(other, 32))),
    };
    match ddb.get("Keys") {
        None | Some(Value::Null) => return Err("no Keys".into()),
        Some(Value::Object(keys)) if keys.is_empty() => return Err("empty Keys".into()),
        Some(Value::Object(_)) => {}
        Some(_) => return Err("Keys is not an object".into()),
    }
    let approximate_creation = match ddb.get("ApproximateCreationDateTime") {
        None | Some(Value::Null) => None,
        Some(v) => Some(parse_epoch(v)?),
    };
    let sequence_number = match ddb.get("SequenceNumber") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            s.parse()
                .map_err(|e: SequenceNumberError| format!("bad SequenceNumber: {e}"))?,
        ),
        Some(Value::Number(n)) if n.is_u64() => Some(SequenceNumber::from_digits(&n.to_string())),
        Some(_) => return Err("bad SequenceNumber: not a string".into()),
    };
    let size_bytes = ddb.get("SizeBytes").and_then(Value::as_i64);

    let (keys, old_image, new_image, event_source_arn, is_ttl) = parts(obj, ddb)?;
    let kind = match kind {
        ChangeKind::Remove if is_ttl => ChangeKind::TtlRemove,
        kind => kind,
    };
    let decoded = StreamChange {
        event_id,
        kind,
        sequence_number,
        approximate_creation,
        keys,
        old_image: non_empty(old_image),
        new_image: non_empty(new_image),
        event_source_arn,
        size_bytes,
        typed: None,
    };
    for (section, image) in [
        ("NewImage", &decoded.new_image),
        ("OldImage", &decoded.old_image),
    ] {
        let size = image.as_ref().map_or(0, item_size);
        if size > MAX_ITEM_BYTES {
            return Err(format!(
                "{section} is about {size} bytes, over DynamoDB's 400 KB item limit"
            ));
        }
    }
    Ok(decoded)
}

/// What [`decode_object`] reads of the record besides its fields:
/// `Keys`, `OldImage`, `NewImage`, `eventSourceARN` and whether a TTL
/// process removed the item.
type Parts = (Item, Item, Item, Option<Arc<str>>, bool);

/// [`Parts`] read straight from the parsed JSON, without copying the
/// record. The reading `aws_lambda_events`' `EventRecord` would give after
/// the normalisation this module describes (the tests check the two agree);
/// `Err` names the first section or attribute (in `Keys`, `NewImage`,
/// `OldImage` order) that is not DynamoDB JSON, never its value.
fn parts(obj: &Map<String, Value>, ddb: &Map<String, Value>) -> Result<Parts, String> {
    // A non-string field counts as absent; a missing or non-string
    // identity field as the empty string.
    let event_source_arn = obj
        .get("eventSourceARN")
        .and_then(Value::as_str)
        .map(Arc::from);
    let is_ttl = obj
        .get("userIdentity")
        .and_then(Value::as_object)
        .is_some_and(|u| {
            u.get("type").and_then(Value::as_str) == Some("Service")
                && u.get("principalId").and_then(Value::as_str) == Some(TTL_PRINCIPAL)
        });
    let section = |name: &str| -> Result<Item, String> {
        match ddb.get(name) {
            None | Some(Value::Null) => Ok(Item::new()),
            Some(Value::Object(attrs)) => read_section(name, attrs),
            Some(_) => Err(format!("{name} is not an object")),
        }
    };
    let keys = section("Keys")?;
    let new_image = section("NewImage")?;
    let old_image = section("OldImage")?;
    Ok((keys, old_image, new_image, event_source_arn, is_ttl))
}

/// The attributes of one section. The common types are read directly;
/// binary values (`B`, `BS`) and anything that is not DynamoDB JSON go
/// through serde_dynamo, whose error, redacted, is the reason.
fn read_section(section: &str, attrs: &Map<String, Value>) -> Result<Item, String> {
    let mut item = Item::with_capacity(attrs.len());
    for (name, v) in attrs {
        let value = match direct_attribute(v) {
            Some(value) => value,
            None => tagged_attribute(v).map_err(|e| {
                format!("{section} attribute {}: {}", clip_to(name, 64), redact(&e))
            })?,
        };
        item.insert(name.clone(), value);
    }
    Ok(item)
}

/// One attribute through serde_dynamo, untagged empty lists and maps
/// tagged first.
fn tagged_attribute(v: &Value) -> Result<AttributeValue, String> {
    let mut v = v.clone();
    normalise_attribute(&mut v);
    serde_dynamo::AttributeValue::deserialize(&v)
        .map(AttributeValue::from)
        .map_err(|e| e.to_string())
}

fn direct_map(attrs: &Map<String, Value>) -> Option<Item> {
    let mut item = Item::with_capacity(attrs.len());
    for (name, v) in attrs {
        item.insert(name.clone(), direct_attribute(v)?);
    }
    Some(item)
}

/// One attribute as [`normalise_attribute`] then serde_dynamo read it,
/// without them (`None` for `B`, `BS` and anything that is not DynamoDB
/// JSON: [`tagged_attribute`] reads those).
fn direct_attribute(v: &Value) -> Option<AttributeValue> {
    fn strings(v: &Value) -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_owned))
            .collect()
    }
    match v {
        Value::Array(a) if a.is_empty() => Some(AttributeValue::L(Vec::new())),
        Value::Object(m) if m.is_empty() => Some(AttributeValue::M(Item::new())),
        Value::Object(m) if m.len() == 1 => {
            let (tag, inner) = m.iter().next()?;
            Some(match (tag.as_str(), inner) {
                ("S", Value::String(s)) => AttributeValue::S(s.clone()),
                ("N", Value::String(n)) => AttributeValue::N(n.clone()),
                ("BOOL", Value::Bool(b)) => AttributeValue::Bool(*b),
                ("NULL", Value::Bool(b)) => AttributeValue::Null(*b),
                ("M", Value::Object(attrs)) => AttributeValue::M(direct_map(attrs)?),
                ("L", Value::Array(items)) => AttributeValue::L(
                    items
                        .iter()
                        .map(direct_attribute)
                        .collect::<Option<Vec<_>>>()?,
                ),
                ("SS", list) => AttributeValue::Ss(strings(list)?),
                ("NS", list) => AttributeValue::Ns(strings(list)?),
                _ => return None,
            })
        }
        _ => None,
    }
}

/// An item's size as DynamoDB counts it (names and values; numbers
/// estimated from their digits), for the 400 KB limit.
fn item_size(item: &Item) -> usize {
    item.iter()
        .map(|(name, v)| name.len() + attribute_size(v))
        .sum()
}

fn attribute_size(v: &AttributeValue) -> usize {
    let number = |n: &String| n.len().div_ceil(2) + 1;
    match v {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Ss(l) => l.iter().map(String::len).sum(),
        AttributeValue::Ns(l) => l.iter().map(number).sum(),
        AttributeValue::Bs(l) => l.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(l) => 3 + l.iter().map(|v| 1 + attribute_size(v)).sum::<usize>(),
        AttributeValue::M(m) => 3 + m.len() + item_size(m),
        _ => 1,
    }
}

fn non_empty(item: Item) -> Option<Item> {
    (!item.is_empty()).then_some(item)
}

/// Tag untagged empty lists (`[]` → `{"L": []}`) and maps (`{}` →
/// `{"M": {}}`), recursively inside `L` and `M`.
fn normalise_attribute(v: &mut Value) {
    match v {
        Value::Array(a) if a.is_empty() => *v = json!({"L": []}),
        Value::Object(m) if m.is_empty() => *v = json!({"M": {}}),
        Value::Object(m) if m.len() == 1 => match m.iter_mut().next() {
            Some((tag, Value::Array(items))) if tag == "L" => {
                items.iter_mut().for_each(normalise_attribute)
            }
            Some((tag, Value::Object(attrs))) if tag == "M" => {
                attrs.values_mut().for_each(normalise_attribute)
            }
            _ => {}
        },
        _ => {}
    }
}

/// `ApproximateCreationDateTime`: epoch seconds as an integer, a fraction or
/// a numeric string; kept to the millisecond (truncated).
fn parse_epoch(v: &Value) -> Result<DateTime<Utc>, String> {
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        _ => return Err("ApproximateCreationDateTime is not a number".into()),
    };
    parse_epoch_text(&text)
        .ok_or_else(|| "ApproximateCreationDateTime is not a valid epoch time".into())
}

fn parse_epoch_text(text: &str) -> Option<DateTime<Utc>> {
    if text.contains(['e', 'E']) {
        let seconds: f64 = text.parse().ok()?;
        if !seconds.is_finite() || seconds < 0.0 {
            return None;
        }
        // Saturating cast; out-of-range values are rejected by chrono.
        let millis = (seconds * 1000.0).floor() as i64;
        return Utc.timestamp_millis_opt(millis).single();
    }
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    if int.is_empty() || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: i64 = int.parse().ok()?;
    // The first three digits of the fraction, padded with zeros: `.5` is
    // 500 ms, `.1239` 123 ms.
    let millis = (0..3).fold(0, |millis, i| {
        millis * 10 + frac.as_bytes().get(i).map_or(0, |d| u32::from(d - b'0'))
    });
    epoch_millis(seconds, millis)
}

/// `seconds` after the epoch and `millis` more, when chrono holds it.
fn epoch_millis(seconds: i64, millis: u32) -> Option<DateTime<Utc>> {
    Utc.timestamp_opt(seconds, millis * 1_000_000).single()
}

/// Render the key attributes of an item as `PK=…, SK=…`: the configured
/// (partition, sort) names in that order, those present only. When neither
/// is present, every attribute of `keys` (by name). `S` and `N` values are
/// shown (clipped), other types as `<TYPE>`.
pub(crate) fn render_keys(keys: &Item, (partition, sort): (&str, &str)) -> String {
    let show = |name: &str, v: &AttributeValue| {
        let value = match v {
            AttributeValue::S(s) | AttributeValue::N(s) => key_value(s),
            AttributeValue::B(_) => "<B>".into(),
            AttributeValue::Bool(_) => "<BOOL>".into(),
            AttributeValue::Null(_) => "<NULL>".into(),
            AttributeValue::L(_) => "<L>".into(),
            AttributeValue::M(_) => "<M>".into(),
            AttributeValue::Ss(_) => "<SS>".into(),
            AttributeValue::Ns(_) => "<NS>".into(),
            AttributeValue::Bs(_) => "<BS>".into(),
            _ => "<?>".into(),
        };
        format!("{}={value}", clip_to(name, 64))
    };
    let mut parts: Vec<String> = [partition, sort]
        .into_iter()
        .filter_map(|name| keys.get(name).map(|v| show(name, v)))
        .collect();
    if parts.is_empty() {
        let mut all: Vec<(&String, &AttributeValue)> = keys.iter().collect();
        all.sort_by(|a, b| a.0.cmp(b.0));
        parts = all.into_iter().map(|(name, v)| show(name, v)).collect();
    }
    parts.join(", ")
}

/// The key of a raw (possibly malformed) record, for its error: from `Keys`,
/// else the key attributes of `NewImage` or `OldImage`.
fn raw_keys(ddb: &Map<String, Value>, (partition, sort): (&str, &str)) -> Option<String> {
    let show = |name: &str, v: &Value| {
        let mut v = v.clone();
        normalise_attribute(&mut v);
        let value = match v
            .as_object()
            .filter(|o| o.len() == 1)
            .and_then(|o| o.iter().next())
        {
            Some((tag, Value::String(s))) if tag == "S" || tag == "N" => key_value(s),
            Some((tag, _)) if SCALAR_TAGS.contains(&tag.as_str()) => format!("<{tag}>"),
            _ => "<invalid>".into(),
        };
        format!("{}={value}", clip_to(name, 64))
    };
    for section in SECTIONS {
        let Some(Value::Object(attrs)) = ddb.get(section) else {
            continue;
        };
        let mut parts: Vec<String> = [partition, sort]
            .into_iter()
            .filter_map(|name| attrs.get(name).map(|v| show(name, v)))
            .collect();
        if parts.is_empty() && section == "Keys" {
            let mut all: Vec<(&String, &Value)> = attrs.iter().collect();
            all.sort_by(|a, b| a.0.cmp(b.0));
            parts = all.into_iter().map(|(name, v)| show(name, v)).collect();
        }
        if !parts.is_empty() {
            return Some(parts.join(", "));
        }
    }
    None
}

/// The DynamoDB JSON type tags.
const SCALAR_TAGS: [&str; 10] = ["S", "N", "B", "BOOL", "NULL", "L", "M", "SS", "NS", "BS"];

/// [`redact_quoted`], and numbers serde quotes in backticks
/// (``invalid type: integer `5551234` ``); backticked identifiers (``missing
/// field `Keys` ``) stay.
fn redact(msg: &str) -> String {
    redact_quoted(msg)
        .split('`')
        .enumerate()
        .map(|(i, part)| {
            let identifier = part.starts_with(|c: char| c.is_ascii_alphabetic())
                && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if i % 2 == 1 && !identifier {
                "…"
            } else {
                part
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// A key value for a log line: clipped, and hidden when it looks like an
/// e-mail address (no key of a well-formed item contains `@`).
fn key_value(s: &str) -> String {
    if s.contains('@') {
        "<redacted: contains @>".into()
    } else {
        clip(s)
    }
}

fn clip(s: &str) -> String {
    clip_to(s, MAX_RENDERED)
}

fn clip_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// The inverse of [`decode_event`], for fixtures and test events: the
/// event exactly as Lambda delivers it from a NEW_AND_OLD_IMAGES stream
/// (`eventVersion` `1.1`, `StreamViewType` `NEW_AND_OLD_IMAGES`,
/// `userIdentity` on TTL removals). [`encode_event_as`] labels the records
/// with another stream's view (`capture` writes the stream's own).
///
/// `eventSourceARN` is the change's own, else `table_arn` (used verbatim;
/// Lambda writes the stream ARN `arn:aws:dynamodb:<region>:<account>:table/
/// <name>/stream/<label>`), else omitted as DynamoDB Local does; `awsRegion`
/// is taken from that ARN (`ddblocal` without one). Fields that are `None`
/// (`ApproximateCreationDateTime`, `SequenceNumber`, `SizeBytes`, images)
/// are omitted, so `decode_event(&encode_event(x))` gives `x` back for
/// changes with non-empty images. `ApproximateCreationDateTime` is integer
/// seconds, with a millisecond fraction only when there is one.
///
/// Built by hand: `EventRecord`'s serialisation writes `null` for every
/// absent optional field, `{}` for absent images and always truncates the
/// creation time to whole seconds.
pub fn encode_event(changes: &[StreamChange], table_arn: Option<&str>) -> Value {
    encode_event_as(changes, table_arn, StreamView::NewAndOldImages)
}

/// [`encode_event`] for a stream of `view`: every record's
/// `dynamodb.StreamViewType` is `view`'s name, as Lambda writes the
/// stream's own. The images are the changes' (a record read from a
/// KEYS_ONLY stream has none); nothing is added or dropped.
pub fn encode_event_as(
    changes: &[StreamChange],
    table_arn: Option<&str>,
    view: StreamView,
) -> Value {
    let records: Vec<Value> = changes
        .iter()
        .map(|c| encode_record(c, table_arn, view))
        .collect();
    json!({ "Records": records })
}

fn encode_record(change: &StreamChange, table_arn: Option<&str>, view: StreamView) -> Value {
    let arn = change.event_source_arn.as_deref().or(table_arn);
    let region = arn
        .and_then(|arn| arn.split(':').nth(3))
        .filter(|r| !r.is_empty())
        .unwrap_or(LOCAL_REGION);

    let mut ddb = Map::new();
    if let Some(at) = change.approximate_creation {
        ddb.insert("ApproximateCreationDateTime".into(), epoch_json(at));
    }
    ddb.insert("Keys".into(), item_json(&change.keys));
    if let Some(image) = &change.new_image {
        ddb.insert("NewImage".into(), item_json(image));
    }
    if let Some(image) = &change.old_image {
        ddb.insert("OldImage".into(), item_json(image));
    }
    if let Some(seq) = &change.sequence_number {
        ddb.insert("SequenceNumber".into(), Value::from(seq.as_str()));
    }
    if let Some(size) = change.size_bytes {
        ddb.insert("SizeBytes".into(), Value::from(size));
    }
    ddb.insert("StreamViewType".into(), Value::from(view.as_str()));

    let mut rec = Map::new();
    rec.insert("awsRegion".into(), Value::from(region));
    rec.insert("dynamodb".into(), Value::Object(ddb));
    rec.insert("eventID".into(), Value::from(change.event_id.as_str()));
    rec.insert("eventName".into(), Value::from(change.kind.event_name()));
    rec.insert("eventSource".into(), Value::from("aws:dynamodb"));
    if let Some(arn) = arn {
        rec.insert("eventSourceARN".into(), Value::from(arn));
    }
    rec.insert("eventVersion".into(), Value::from("1.1"));
    if change.kind == ChangeKind::TtlRemove {
        rec.insert(
            "userIdentity".into(),
            json!({"type": "Service", "principalId": TTL_PRINCIPAL}),
        );
    }
    Value::Object(rec)
}

/// Epoch seconds: an integer, or a number with the millisecond fraction.
fn epoch_json(at: DateTime<Utc>) -> Value {
    let (seconds, millis) = (at.timestamp(), at.timestamp_subsec_millis());
    if millis == 0 {
        Value::from(seconds)
    } else if seconds >= 0 {
        // Parsed from its decimal text, not summed: `2.0 + 0.954` lands on
        // the f64 below 2.954, which reads back a millisecond early (found
        // by the fuzzer).
        Value::from(
            format!("{seconds}.{millis:03}")
                .parse::<f64>()
                .unwrap_or(seconds as f64),
        )
    } else {
        Value::from(seconds as f64 + f64::from(millis) / 1000.0)
    }
}

pub(crate) fn item_json(item: &Item) -> Value {
    Value::Object(
        item.iter()
            .map(|(name, v)| (name.clone(), attribute_json(v)))
            .collect(),
    )
}

fn attribute_json(v: &AttributeValue) -> Value {
    serde_json::to_value(to_dynamo(v)).unwrap_or(Value::Null)
}

/// Like serde_dynamo's `From`, without its panic on the SDK's `Unknown`
/// variant (written as `NULL`).
fn to_dynamo(v: &AttributeValue) -> serde_dynamo::AttributeValue {
    use serde_dynamo::AttributeValue as D;
    match v {
        AttributeValue::S(s) => D::S(s.clone()),
        AttributeValue::N(n) => D::N(n.clone()),
        AttributeValue::B(b) => D::B(b.as_ref().to_vec()),
        AttributeValue::Bool(b) => D::Bool(*b),
        AttributeValue::Null(n) => D::Null(*n),
        AttributeValue::L(l) => D::L(l.iter().map(to_dynamo).collect()),
        AttributeValue::M(m) => D::M(m.iter().map(|(k, v)| (k.clone(), to_dynamo(v))).collect()),
        AttributeValue::Ss(ss) => D::Ss(ss.clone()),
        AttributeValue::Ns(ns) => D::Ns(ns.clone()),
        AttributeValue::Bs(bs) => D::Bs(bs.iter().map(|b| b.as_ref().to_vec()).collect()),
        _ => D::Null(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::event::dynamodb::EventRecord;
    use aws_sdk_dynamodb::primitives::Blob;
    use proptest::prelude::*;

    const U: &str = "3f1c2b4e-8a9d-4c6e-b1f2-0a1b2c3d4e5f";
    const G: &str = "7d2e9a10-5b3c-4f8e-9a1d-2c3b4a5f6e7d";
    const ARN: &str =
        "arn:aws:dynamodb:eu-west-1:123456789012:table/Archive/stream/2024-03-22T22:03:33.123";

    /// The example event of the AWS Lambda developer guide ("Using AWS
    /// Lambda with Amazon DynamoDB"), verbatim.
    const AWS_EXAMPLE: &str = r#"{
  "Records": [
    {
      "eventID": "1",
      "eventVersion": "1.0",
      "dynamodb": {
        "Keys": {
          "Id": {
            "N": "101"
          }
        },
        "NewImage": {
          "Message": {
            "S": "New item!"
          },
          "Id": {
            "N": "101"
          }
        },
        "StreamViewType": "NEW_AND_OLD_IMAGES",
        "SequenceNumber": "111",
        "SizeBytes": 26
      },
      "awsRegion": "us-west-2",
      "eventName": "INSERT",
      "eventSourceARN": "arn:aws:dynamodb:us-west-2:111122223333:table/TestTable/stream/2015-05-11T21:21:33.291",
      "eventSource": "aws:dynamodb"
    },
    {
      "eventID": "2",
      "eventVersion": "1.0",
      "dynamodb": {
        "OldImage": {
          "Message": {
            "S": "New item!"
          },
          "Id": {
            "N": "101"
          }
        },
        "SequenceNumber": "222",
        "Keys": {
          "Id": {
            "N": "101"
          }
        },
        "SizeBytes": 59,
        "NewImage": {
          "Message": {
            "S": "This item has changed"
          },
          "Id": {
            "N": "101"
          }
        },
        "StreamViewType": "NEW_AND_OLD_IMAGES"
      },
      "awsRegion": "us-west-2",
      "eventName": "MODIFY",
      "eventSourceARN": "arn:aws:dynamodb:us-west-2:111122223333:table/TestTable/stream/2015-05-11T21:21:33.291",
      "eventSource": "aws:dynamodb"
    },
    {
      "eventID": "3",
      "eventVersion": "1.0",
      "dynamodb": {
        "Keys": {
          "Id": {
            "N": "101"
          }
        },
        "SizeBytes": 38,
        "SequenceNumber": "333",
        "OldImage": {
          "Message": {
            "S": "This item has changed"
          },
          "Id": {
            "N": "101"
          }
        },
        "StreamViewType": "NEW_AND_OLD_IMAGES"
      },
      "awsRegion": "us-west-2",
      "eventName": "REMOVE",
      "eventSourceARN": "arn:aws:dynamodb:us-west-2:111122223333:table/TestTable/stream/2015-05-11T21:21:33.291",
      "eventSource": "aws:dynamodb"
    }
  ]
}"#;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.into())
    }

    /// The reference reading: `aws_lambda_events`' `EventRecord` over the
    /// record as [`normalise`] leaves it.
    fn reference_parts(obj: &Map<String, Value>) -> Result<Parts, String> {
        let record = EventRecord::deserialize(&normalise(obj)).map_err(|e| e.to_string())?;
        let is_ttl = record
            .user_identity
            .as_ref()
            .is_some_and(|u| u.type_ == "Service" && u.principal_id == TTL_PRINCIPAL);
        let change = record.change;
        Ok((
            change.keys.into(),
            change.old_image.into(),
            change.new_image.into(),
            record.event_source_arn.map(Arc::from),
            is_ttl,
        ))
    }

    /// A copy of the record `EventRecord` can read: defaults for the fields
    /// engines omit, wrongly typed optional fields dropped, untagged empty lists
    /// and maps tagged. Fields read directly from the raw JSON are removed.
    fn normalise(obj: &Map<String, Value>) -> Value {
        let mut rec = obj.clone();
        if !rec.get("awsRegion").is_some_and(Value::is_string) {
            rec.insert("awsRegion".into(), Value::from(""));
        }
        for field in [
            "eventSource",
            "eventVersion",
            "eventSourceARN",
            "recordFormat",
            "tableName",
        ] {
            if rec.get(field).is_some_and(|v| !v.is_string()) {
                rec.remove(field);
            }
        }
        let mut drop_identity = false;
        match rec.get_mut("userIdentity") {
            Some(Value::Object(identity)) => {
                for field in ["type", "principalId"] {
                    if identity.get(field).is_some_and(|v| !v.is_string()) {
                        identity.remove(field);
                    }
                }
            }
            Some(_) => drop_identity = true,
            None => {}
        }
        if drop_identity {
            rec.remove("userIdentity");
        }
        if let Some(Value::Object(ddb)) = rec.get_mut("dynamodb") {
            for field in [
                "ApproximateCreationDateTime",
                "SequenceNumber",
                "StreamViewType",
            ] {
                ddb.remove(field);
            }
            if ddb.get("SizeBytes").is_none_or(|v| v.as_i64().is_none()) {
                ddb.insert("SizeBytes".into(), Value::from(0));
            }
            for section in SECTIONS {
                if let Some(Value::Object(attrs)) = ddb.get_mut(section) {
                    attrs.values_mut().for_each(normalise_attribute);
                }
            }
        }
        Value::Object(rec)
    }

    /// The reading agrees with the reference: the same parts when the
    /// reference reads the record, an error when it cannot.
    fn agrees_with_reference(record: &Value) -> bool {
        let obj = record.as_object().expect("an object");
        let ddb = obj["dynamodb"].as_object().expect("a dynamodb object");
        match (parts(obj, ddb), reference_parts(obj)) {
            (Ok(read), Ok(reference)) => {
                assert_eq!(read, reference, "{record}");
                true
            }
            (Err(_), Err(_)) => false,
            (read, reference) => panic!("{record}: read {read:?}, reference {reference:?}"),
        }
    }

    #[test]
    fn the_reading_agrees_with_event_record() {
        let mut read = 0;
        // The workspace's captured fixtures: real engines' records.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../events/stream");
        for entry in std::fs::read_dir(dir).expect("events/stream") {
            let path = entry.expect("entry").path();
            let event: Value =
                serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
            for record in event["Records"].as_array().expect("Records") {
                if record.get("dynamodb").is_some_and(Value::is_object) {
                    read += usize::from(agrees_with_reference(record));
                }
            }
        }
        assert!(read > 10, "the fixtures are read ({read})");
        let keys = json!({"PK": {"S": "a"}, "SK": {"S": "b"}});
        let with = |extra: Value| {
            let mut r = json!({
                "eventID": "1", "eventName": "REMOVE", "eventSource": "aws:dynamodb",
                "dynamodb": {"Keys": keys.clone(), "SequenceNumber": "1"}
            });
            let (Value::Object(r_obj), Value::Object(extra)) = (&mut r, extra) else {
                unreachable!()
            };
            for (k, v) in extra {
                if k == "dynamodb" {
                    let ddb = r_obj["dynamodb"].as_object_mut().expect("object");
                    ddb.extend(v.as_object().expect("object").clone());
                } else {
                    r_obj.insert(k, v);
                }
            }
            r
        };
        let image = |attrs: Value| with(json!({"dynamodb": {"OldImage": attrs}}));
        let covered = [
            with(json!({})),
            with(json!({"eventSourceARN": ARN})),
            with(json!({"eventSourceARN": 5})),
            with(json!({"userIdentity": {"type": "Service", "principalId": TTL_PRINCIPAL}})),
            with(json!({"userIdentity": {"type": "Service", "principalId": "someone"}})),
            with(json!({"userIdentity": {"type": 1, "principalId": TTL_PRINCIPAL}})),
            with(json!({"userIdentity": {"principalId": TTL_PRINCIPAL}})),
            with(json!({"userIdentity": "Service"})),
            with(json!({"userIdentity": null})),
            with(json!({"dynamodb": {"NewImage": null, "OldImage": {}}})),
            image(
                json!({"a": {"S": ""}, "b": {"N": "-1.5e3"}, "c": {"BOOL": false},
                "d": {"NULL": true}, "e": {"NULL": false}, "f": {"SS": ["x", "y"]},
                "g": {"NS": ["1", "2"]}, "h": {"SS": []}}),
            ),
            image(
                json!({"l": [], "m": {}, "n": {"L": [[], {}, {"L": [{}]}, {"M": {"x": []}}]},
                "o": {"M": {"p": {}, "q": {"M": {"r": [], "s": {"S": "t"}}}}}}),
            ),
        ];
        for record in &covered {
            assert!(agrees_with_reference(record), "read: {record}");
        }
        // Binary values, read through serde_dynamo.
        for record in [
            image(json!({"b": {"B": "AAE="}})),
            image(json!({"b": {"BS": ["AAE="]}})),
            image(json!({"m": {"M": {"b": {"B": "AAE="}}}})),
        ] {
            assert!(agrees_with_reference(&record), "read: {record}");
        }
        let rejected = [
            with(json!({"dynamodb": {"NewImage": []}})),
            with(json!({"dynamodb": {"NewImage": "x"}})),
            image(json!({"x": {"S": 1}})),
            image(json!({"x": {"N": 1}})),
            image(json!({"x": {"BOOL": "true"}})),
            image(json!({"x": {"S": "a", "N": "1"}})),
            image(json!({"x": {"Q": "a"}})),
            image(json!({"x": [{"S": "a"}]})),
            image(json!({"x": "a"})),
            image(json!({"x": null})),
            image(json!({"x": {"L": [{"S": 1}]}})),
            image(json!({"x": {"M": {"y": {"N": 2}}}})),
            image(json!({"x": {"M": []}})),
            image(json!({"x": {"SS": [1]}})),
        ];
        for record in &rejected {
            assert!(!agrees_with_reference(record), "rejected: {record}");
        }
    }

    fn user_keys() -> Value {
        json!({"PK": {"S": U}, "SK": {"S": "User"}})
    }

    fn user_image(name: &str) -> Value {
        json!({
            "PK": {"S": U}, "SK": {"S": "User"},
            "DisplayName": {"S": name}, "ContactEmail": {"S": "alice@example.com"}
        })
    }

    /// A record as Lambda delivers it for a single-table design.
    fn record(id: &str, name: &str, seq: &str, ddb_extra: Value) -> Value {
        let mut ddb = json!({
            "ApproximateCreationDateTime": 1711143813,
            "Keys": user_keys(),
            "SequenceNumber": seq,
            "SizeBytes": 120,
            "StreamViewType": "NEW_AND_OLD_IMAGES"
        });
        if let (Value::Object(d), Value::Object(extra)) = (&mut ddb, ddb_extra) {
            d.extend(extra);
        }
        json!({
            "eventID": id,
            "eventName": name,
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "eu-west-1",
            "dynamodb": ddb,
            "eventSourceARN": ARN
        })
    }

    fn ok(v: &Value) -> StreamChange {
        decode_record(0, v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn err(v: &Value) -> RecordError {
        decode_record(0, v).expect_err("record must not decode")
    }

    #[test]
    fn aws_documented_example_decodes() {
        let event: Value = serde_json::from_str(AWS_EXAMPLE).unwrap();
        assert!(is_stream_event(&event));
        let changes: Vec<StreamChange> = decode_event(&event)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let kinds: Vec<ChangeKind> = changes.iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            [ChangeKind::Insert, ChangeKind::Modify, ChangeKind::Remove]
        );
        let c = &changes[1];
        assert_eq!(c.event_id, "2");
        assert_eq!(c.sequence_number, Some("222".parse().unwrap()));
        assert_eq!(c.size_bytes, Some(59));
        assert_eq!(c.approximate_creation, None, "absent, not 1970");
        assert_eq!(c.keys["Id"], AttributeValue::N("101".into()));
        assert_eq!(
            c.new_image.as_ref().unwrap()["Message"],
            s("This item has changed")
        );
        assert!(c.event_source_arn.as_deref().unwrap().contains("TestTable"));
        assert_eq!(changes[0].old_image, None);
        assert_eq!(changes[2].new_image, None);
        // No PK/SK in this table: every key attribute is rendered.
        assert_eq!(c.key_string(DEFAULT_KEY_ATTRIBUTES), "Id=101");
    }

    #[test]
    fn the_records_of_one_stream_share_its_arn() {
        let other = ARN.replace("table/Archive", "table/Other");
        let mut third = record("e3", "INSERT", "102", json!({}));
        third["eventSourceARN"] = json!(other);
        let event = json!({"Records": [
            record("e1", "INSERT", "100", json!({})),
            record("e2", "INSERT", "101", json!({})),
            third,
            record("e4", "INSERT", "103", json!({})),
        ]});
        let records = decode_event_bytes(event.to_string().as_bytes()).unwrap();
        let arns: Vec<Arc<str>> = records
            .into_iter()
            .map(|r| r.unwrap().event_source_arn.unwrap())
            .collect();
        assert_eq!(arns, [ARN, ARN, &other, ARN].map(Arc::from));
        assert!(Arc::ptr_eq(&arns[0], &arns[1]));
        assert!(!Arc::ptr_eq(&arns[1], &arns[3]), "another ARN came between");
    }

    #[test]
    fn insert_modify_remove_of_a_user() {
        let insert = ok(&record(
            "e1",
            "INSERT",
            "100",
            json!({"NewImage": user_image("Alice")}),
        ));
        assert_eq!(insert.kind, ChangeKind::Insert);
        assert_eq!(insert.keys["PK"], s(U));
        assert_eq!(insert.keys["SK"], s("User"));
        assert_eq!(
            insert.new_image.as_ref().unwrap()["DisplayName"],
            s("Alice")
        );
        assert_eq!(insert.old_image, None);
        assert_eq!(
            insert.approximate_creation,
            Some(Utc.timestamp_opt(1711143813, 0).unwrap())
        );
        assert_eq!(insert.event_source_arn.as_deref(), Some(ARN));
        assert_eq!(insert.size_bytes, Some(120));
        assert_eq!(insert.key_string(("PK", "SK")), format!("PK={U}, SK=User"));

        let modify = ok(&record(
            "e2",
            "MODIFY",
            "101",
            json!({"OldImage": user_image("Alice"), "NewImage": user_image("Alicia")}),
        ));
        assert_eq!(modify.kind, ChangeKind::Modify);
        assert_eq!(
            modify.old_image.as_ref().unwrap()["DisplayName"],
            s("Alice")
        );
        assert_eq!(
            modify.new_image.as_ref().unwrap()["DisplayName"],
            s("Alicia")
        );

        let remove = ok(&record(
            "e3",
            "REMOVE",
            "102",
            json!({"OldImage": user_image("Alicia")}),
        ));
        assert_eq!(remove.kind, ChangeKind::Remove);
        assert!(remove.kind.is_removal());
        assert_eq!(remove.new_image, None);
        assert_eq!(remove.latest_image().unwrap()["DisplayName"], s("Alicia"));
    }

    #[test]
    fn ttl_removal_is_recognised() {
        let mut r = record(
            "e1",
            "REMOVE",
            "100",
            json!({"OldImage": {"PK": {"S": G}, "SK": {"S": "Token"}}}),
        );
        r["userIdentity"] = json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"});
        assert_eq!(ok(&r).kind, ChangeKind::TtlRemove);

        r["userIdentity"] = json!({"type": "Service", "principalId": "someone.else"});
        assert_eq!(ok(&r).kind, ChangeKind::Remove);
        r["userIdentity"] = Value::Null;
        assert_eq!(ok(&r).kind, ChangeKind::Remove);
    }

    #[test]
    fn untagged_empty_lists_and_maps_are_tagged() {
        let image = json!({
            "PK": {"S": G}, "SK": {"S": "Container"},
            "Parts": [],
            "Meta": {},
            "Nested": {"L": [[], {}, {"M": {"Inner": [], "Deep": {"L": [{}]}}}]}
        });
        let c = ok(&record("e1", "INSERT", "1", json!({"NewImage": image})));
        let img = c.new_image.unwrap();
        assert_eq!(img["Parts"], AttributeValue::L(vec![]));
        assert_eq!(img["Meta"], AttributeValue::M(Default::default()));
        let empty_m = || AttributeValue::M(Default::default());
        let expected = AttributeValue::L(vec![
            AttributeValue::L(vec![]),
            empty_m(),
            AttributeValue::M(
                [
                    ("Inner".to_owned(), AttributeValue::L(vec![])),
                    ("Deep".to_owned(), AttributeValue::L(vec![empty_m()])),
                ]
                .into(),
            ),
        ]);
        assert_eq!(img["Nested"], expected);
    }

    #[test]
    fn empty_images_are_none() {
        let c = ok(&record(
            "e1",
            "MODIFY",
            "1",
            json!({"NewImage": {}, "OldImage": null}),
        ));
        assert_eq!(c.new_image, None);
        assert_eq!(c.old_image, None);
    }

    #[test]
    fn malformed_records_fail_only_their_slot() {
        let good = |id: &str, seq: &str| {
            record(id, "INSERT", seq, json!({"NewImage": user_image("Alice")}))
        };
        let mut no_keys = good("bad-keys", "2");
        no_keys["dynamodb"].as_object_mut().unwrap().remove("Keys");
        let bad_name = record("bad-name", "UPSERT", "3", json!({}));
        let bad_value = record(
            "bad-value",
            "INSERT",
            "4",
            json!({"NewImage": {
                "PK": {"S": U}, "SK": {"S": "User"},
                "ContactEmail": "alice@example.com"
            }}),
        );
        let event = json!({"Records": [good("ok-1", "1"), no_keys, bad_name, bad_value, good("ok-2", "5")]});
        let results = decode_event(&event).unwrap();
        assert_eq!(results.len(), 5);
        assert!(results[0].is_ok() && results[4].is_ok());

        let e = results[1].as_ref().unwrap_err();
        assert_eq!(e.index, 1);
        assert_eq!(e.reason, "no Keys");
        assert_eq!(e.event_id.as_deref(), Some("bad-keys"));
        assert_eq!(e.sequence_number, Some("2".parse().unwrap()));
        // Key found in the image even without Keys.
        assert_eq!(e.keys, Some(format!("PK={U}, SK=User")));
        assert_eq!(
            e.to_string(),
            format!("record #1 (event bad-keys, key PK={U}, SK=User): no Keys")
        );

        let e = results[2].as_ref().unwrap_err();
        assert!(
            e.reason.contains("eventName") && e.reason.contains("UPSERT"),
            "{e}"
        );
        assert_eq!(e.keys, Some(format!("PK={U}, SK=User")));

        let e = results[3].as_ref().unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("bad-value") && msg.contains(U), "{msg}");
        assert!(msg.contains("NewImage attribute ContactEmail"), "{msg}");
        assert!(!msg.contains("alice"), "{msg}");
    }

    #[test]
    fn serde_messages_are_redacted() {
        assert_eq!(
            redact("invalid type: integer `5551234`, expected a string"),
            "invalid type: integer `…`, expected a string"
        );
        assert_eq!(
            redact("missing field `eventName`"),
            "missing field `eventName`"
        );
        let r = record(
            "e1",
            "INSERT",
            "1",
            json!({"NewImage": {"PK": {"S": U}, "SK": {"S": "User"}, "Phone": {"S": 5551234}}}),
        );
        let e = err(&r);
        assert!(e.reason.starts_with("NewImage attribute Phone"), "{e}");
        assert!(!e.to_string().contains("5551234"), "{e}");
    }

    #[test]
    fn other_malformed_shapes() {
        let base = record("e", "INSERT", "1", json!({}));
        let mutate = |f: &dyn Fn(&mut Value)| {
            let mut r = base.clone();
            f(&mut r);
            err(&r)
        };
        assert_eq!(err(&json!("x")).reason, "record is not a JSON object");
        assert_eq!(
            mutate(&|r| r["dynamodb"] = Value::Null).reason,
            "no dynamodb object"
        );
        assert_eq!(
            mutate(&|r| {
                r.as_object_mut().unwrap().remove("eventID");
            })
            .reason,
            "no eventID"
        );
        assert_eq!(
            mutate(&|r| r["dynamodb"]["Keys"] = json!({})).reason,
            "empty Keys"
        );
        assert!(
            mutate(&|r| r["dynamodb"]["SequenceNumber"] = json!("12a"))
                .reason
                .contains("SequenceNumber")
        );
        assert!(
            mutate(&|r| r["dynamodb"]["ApproximateCreationDateTime"] = json!("soon"))
                .reason
                .contains("ApproximateCreationDateTime")
        );
        let e = mutate(&|r| r["dynamodb"]["Keys"]["PK"] = json!({"S": U, "N": "1"}));
        assert!(e.reason.starts_with("Keys attribute PK"), "{e}");
        assert_eq!(e.keys, Some("PK=<invalid>, SK=User".into()));
        let e = mutate(&|r| r["dynamodb"]["OldImage"] = json!("alice@example.com"));
        assert_eq!(e.reason, "OldImage is not an object");
    }

    #[test]
    fn missing_sequence_number_is_allowed() {
        let mut r = record("e1", "INSERT", "1", json!({"NewImage": user_image("A")}));
        r["dynamodb"]
            .as_object_mut()
            .unwrap()
            .remove("SequenceNumber");
        assert_eq!(ok(&r).sequence_number, None);
    }

    #[test]
    fn approximate_creation_variants() {
        let at = |v: Option<Value>| {
            let mut r = record("e1", "INSERT", "1", json!({}));
            let ddb = r["dynamodb"].as_object_mut().unwrap();
            match v {
                Some(v) => ddb.insert("ApproximateCreationDateTime".into(), v),
                None => ddb.remove("ApproximateCreationDateTime"),
            };
            // The byte-level path reads the same time, or leaves the
            // record to the `Value` path when that path rejects it.
            let bytes = serde_json::to_vec(&json!({ "Records": [r.clone()] })).unwrap();
            let direct = direct::decode(&bytes).map(|mut c| c.remove(0).approximate_creation);
            match decode_record(0, &r) {
                Ok(change) => {
                    assert_eq!(direct, Some(change.approximate_creation), "{r}");
                    change.approximate_creation
                }
                Err(e) => {
                    assert_eq!(direct, None, "{r}");
                    assert!(e.reason.contains("ApproximateCreationDateTime"), "{e}");
                    None
                }
            }
        };
        let t = |ms: i64| Some(Utc.timestamp_millis_opt(ms).unwrap());
        assert_eq!(at(None), None);
        assert_eq!(at(Some(Value::Null)), None);
        assert_eq!(at(Some(json!(1711143813))), t(1_711_143_813_000));
        assert_eq!(at(Some(json!(1711143813.123))), t(1_711_143_813_123));
        assert_eq!(at(Some(json!(1711143813.5))), t(1_711_143_813_500));
        assert_eq!(at(Some(json!(1711143813.1239))), t(1_711_143_813_123));
        assert_eq!(at(Some(json!("1711143813"))), t(1_711_143_813_000));
        assert_eq!(at(Some(json!(1.711143813e9))), t(1_711_143_813_000));
        assert_eq!(at(Some(json!(" 1711143813.2 "))), t(1_711_143_813_200));
        assert_eq!(at(Some(json!(0))), t(0));
        // Rejected by both paths: a sign, a number past chrono's range or
        // an `i64`, a word.
        for bad in [
            json!(-5),
            json!("-5"),
            json!(i64::MAX),
            json!(u64::MAX),
            json!(1e30),
            json!("soon"),
        ] {
            assert_eq!(at(Some(bad)), None);
        }
    }

    #[test]
    fn creation_times_round_trip_to_the_millisecond() {
        // Found by the fuzzer: 2 s + 954 ms was encoded as 2.9539999999999997.
        for ms in [2_954, 1_711_143_813_954, 1_001, 999, 123_456_789_007] {
            let at = Utc.timestamp_millis_opt(ms).unwrap();
            let text = epoch_json(at).to_string();
            assert_eq!(
                parse_epoch_text(&text),
                Some(at),
                "{ms} ms encoded as {text}"
            );
        }
        assert_eq!(
            epoch_json(Utc.timestamp_millis_opt(2_954).unwrap()),
            json!(2.954)
        );
    }

    #[test]
    fn dynamodb_local_omissions_get_defaults() {
        let r = json!({
            "eventID": "c81e728d9d4c2f636f067f89cc14862c",
            "eventName": "MODIFY",
            "dynamodb": {
                "Keys": user_keys(),
                "NewImage": user_image("A"),
                "SequenceNumber": "000000000000000000042"
            }
        });
        let c = ok(&r);
        assert_eq!(c.event_source_arn, None);
        assert_eq!(c.size_bytes, None);
        assert_eq!(c.approximate_creation, None);
        assert_eq!(c.sequence_number.unwrap().as_str(), "000000000000000000042");
    }

    #[test]
    fn a_sequence_number_is_32_bytes() {
        assert_eq!(size_of::<SequenceNumber>(), 32);
        assert_eq!(size_of::<Option<SequenceNumber>>(), 32);
    }

    #[test]
    fn sequence_numbers_compare_as_numbers() {
        let n = |s: &str| s.parse::<SequenceNumber>().unwrap();
        assert!(n("9") < n("10"));
        assert!(n("0009") < n("10"));
        assert_eq!(n("007"), n("7"));
        assert_eq!(n("007").to_string(), "007");
        let a = n("4000000000000000000000000000000000000001");
        let b = n("4000000000000000000000000000000000000002");
        let c = n("999999999999999999999999999999999999999");
        assert_eq!(a.as_str().len(), 40);
        assert!(a < b && c < a);
        let mut all = vec![b.clone(), a.clone(), c.clone(), n("10"), n("9")];
        all.sort();
        assert_eq!(all, [n("9"), n("10"), c.clone(), a.clone(), b.clone()]);
        assert_eq!(
            "".parse::<SequenceNumber>(),
            Err(SequenceNumberError::Empty)
        );
        assert_eq!(
            "1e5".parse::<SequenceNumber>(),
            Err(SequenceNumberError::NotDigits)
        );
        assert_eq!(serde_json::to_value(n("0042")).unwrap(), json!("0042"));
        let back: SequenceNumber = serde_json::from_value(json!("0042")).unwrap();
        assert_eq!(back.as_str(), "0042");
        assert!(serde_json::from_value::<SequenceNumber>(json!("-1")).is_err());
        // Past 30 digits (kept on the heap, not inline) it is the same number.
        let long = n(&format!("0{}", a.as_str()));
        assert_eq!(long.as_str().len(), 41);
        assert_eq!(n(&"0".repeat(30)), n("0"));
        assert_eq!(n(&"0".repeat(31)), n("0"));
        assert!(n(&format!("{}1", "0".repeat(30))) < n("2"));
        assert_eq!(long, a);
        assert!(long < b && c < long);
        assert_eq!(long.to_string(), format!("0{a}"));
        assert_eq!(n(&"1".repeat(41)).cmp(&a), Ordering::Greater);
    }

    #[test]
    fn envelope_errors() {
        assert_eq!(decode_event(&json!({})), Err(EnvelopeError::NoRecords));
        assert_eq!(decode_event(&json!([1, 2])), Err(EnvelopeError::NoRecords));
        assert_eq!(
            decode_event(&json!({"source": "aws.events", "detail-type": "Scheduled Event"})),
            Err(EnvelopeError::NoRecords)
        );
        assert_eq!(
            decode_event(&json!({"Records": {"0": {}}})),
            Err(EnvelopeError::RecordsNotArray)
        );
        assert!(matches!(
            decode_event_bytes(b"{\"Records\": [}"),
            Err(EnvelopeError::NotJson(_))
        ));
        assert_eq!(decode_event(&json!({"Records": []})), Ok(vec![]));
    }

    #[test]
    fn foreign_sources_empty_bodies_and_oversized_items() {
        let sqs = json!({"Records": [{"eventSource": "aws:sqs", "body": "{}"}]});
        assert_eq!(
            decode_event(&sqs),
            Err(EnvelopeError::OtherSource("aws:sqs".into()))
        );
        let sns = json!({"Records": [{"EventSource": "aws:sns"}]});
        assert!(matches!(decode_event(&sns), Err(EnvelopeError::OtherSource(s)) if s == "aws:sns"));
        for body in [&b""[..], b" \n\t"] {
            let e = decode_event_bytes(body).unwrap_err();
            assert_eq!(e.to_string(), "event is not JSON: the body is empty");
        }

        // In a DynamoDB batch, a foreign record fails alone.
        let good = record("e1", "INSERT", "1", json!({"NewImage": user_image("A")}));
        let mut kinesis = record("e2", "INSERT", "2", json!({"NewImage": user_image("A")}));
        kinesis["eventSource"] = json!("aws:kinesis");
        let results = decode_event(&json!({"Records": [good, kinesis]})).unwrap();
        assert!(results[0].is_ok());
        let e = results[1].as_ref().unwrap_err();
        assert_eq!(
            e.reason,
            r#"eventSource "aws:kinesis" is not "aws:dynamodb""#
        );

        let image = |len: usize| {
            let notes = "x".repeat(len);
            json!({"NewImage": {"PK": {"S": U}, "SK": {"S": "User"}, "Notes": {"S": notes}}})
        };
        assert!(decode_record(0, &record("e", "INSERT", "1", image(MAX_ITEM_BYTES - 100))).is_ok());
        let e = err(&record("e", "INSERT", "1", image(MAX_ITEM_BYTES)));
        assert!(
            e.reason.contains("over DynamoDB's 400 KB item limit"),
            "{e}"
        );
        assert_eq!(e.keys, Some(format!("PK={U}, SK=User")));
    }

    #[test]
    fn stream_event_detection() {
        assert!(is_stream_event(
            &json!({"Records": [{"eventSource": "aws:dynamodb"}]})
        ));
        assert!(is_stream_event(&json!({"Records": [{"dynamodb": {}}]})));
        assert!(!is_stream_event(
            &json!({"Records": [{"eventSource": "aws:sqs", "body": "{}"}]})
        ));
        assert!(!is_stream_event(&json!({"source": "aws.events"})));
        assert!(!is_stream_event(&json!("Records")));
    }

    #[test]
    fn debug_does_not_show_values() {
        let c = ok(&record(
            "e1",
            "INSERT",
            "1",
            json!({"NewImage": user_image("Alice")}),
        ));
        let dbg = format!("{c:?}");
        assert!(dbg.contains("ContactEmail") && dbg.contains(U), "{dbg}");
        assert!(!dbg.contains("Alice") && !dbg.contains("alice@"), "{dbg}");
    }

    fn sample_changes() -> Vec<StreamChange> {
        let image: Item = [
            ("PK".to_owned(), s(U)),
            ("SK".to_owned(), s("User")),
            ("DisplayName".to_owned(), s("Alice")),
            ("Age".to_owned(), AttributeValue::N("42".into())),
            (
                "Blob".to_owned(),
                AttributeValue::B(Blob::new(vec![0, 1, 2, 255])),
            ),
            (
                "Tags".to_owned(),
                AttributeValue::Ss(vec!["a".into(), "b".into()]),
            ),
            ("Parts".to_owned(), AttributeValue::L(vec![])),
            ("Meta".to_owned(), AttributeValue::M(Default::default())),
            ("Gone".to_owned(), AttributeValue::Null(true)),
            ("Flag".to_owned(), AttributeValue::Bool(false)),
        ]
        .into();
        let keys: Item = [("PK".to_owned(), s(U)), ("SK".to_owned(), s("User"))].into();
        let change = |id: &str, kind, seq: Option<&str>| StreamChange {
            event_id: id.into(),
            kind,
            sequence_number: seq.map(|s| s.parse().unwrap()),
            approximate_creation: Some(Utc.timestamp_opt(1711143813, 0).unwrap()),
            keys: keys.clone(),
            old_image: None,
            new_image: None,
            event_source_arn: Some(ARN.into()),
            size_bytes: Some(120),
            typed: None,
        };
        let mut insert = change("e1", ChangeKind::Insert, Some("100"));
        insert.new_image = Some(image.clone());
        let mut modify = change("e2", ChangeKind::Modify, Some("0000101"));
        modify.old_image = Some(image.clone());
        modify.new_image = Some(image.clone());
        modify.approximate_creation = Some(Utc.timestamp_millis_opt(1_711_143_813_123).unwrap());
        let mut remove = change("e3", ChangeKind::Remove, None);
        remove.old_image = Some(image.clone());
        remove.approximate_creation = None;
        remove.size_bytes = None;
        remove.event_source_arn = None;
        let mut ttl = change(
            "e4",
            ChangeKind::TtlRemove,
            Some("4000000000000000000000000000000000000001"),
        );
        ttl.old_image = Some(image);
        vec![insert, modify, remove, ttl]
    }

    #[test]
    fn encode_decode_round_trip() {
        let changes = sample_changes();
        let event = encode_event(&changes, None);
        assert!(is_stream_event(&event));
        let back: Vec<StreamChange> = decode_event(&event)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, changes);
    }

    /// A record says the view of the stream it came from: a KEYS_ONLY
    /// stream's records carry only keys and say so, they are not labelled
    /// NEW_AND_OLD_IMAGES; the label changes nothing else.
    #[test]
    fn encoded_records_carry_the_streams_view_type() {
        let changes = sample_changes();
        let default = encode_event(&changes, None);
        for view in StreamView::ALL {
            let event = encode_event_as(&changes, None, view);
            let records = event["Records"].as_array().unwrap();
            assert_eq!(records.len(), changes.len());
            for (i, r) in records.iter().enumerate() {
                assert_eq!(r["dynamodb"]["StreamViewType"], view.as_str(), "{i}");
                let mut same = r.clone();
                same["dynamodb"]["StreamViewType"] = json!("NEW_AND_OLD_IMAGES");
                assert_eq!(same, default["Records"][i], "only the label differs");
            }
        }
        // Records read from a KEYS_ONLY stream: keys, no images.
        let keys_only: Vec<StreamChange> = changes
            .iter()
            .cloned()
            .map(|mut c| {
                c.old_image = None;
                c.new_image = None;
                c
            })
            .collect();
        let event = encode_event_as(&keys_only, None, StreamView::KeysOnly);
        for r in event["Records"].as_array().unwrap() {
            let ddb = r["dynamodb"].as_object().unwrap();
            assert_eq!(ddb["StreamViewType"], "KEYS_ONLY");
            assert!(ddb.contains_key("Keys"));
            assert!(!ddb.contains_key("NewImage") && !ddb.contains_key("OldImage"));
        }
        let back: Vec<StreamChange> = decode_event(&event)
            .unwrap()
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, keys_only);
    }

    #[test]
    fn encoded_shape_is_lambdas() {
        let changes = sample_changes();
        let event = encode_event(
            &changes,
            Some("arn:aws:dynamodb:us-east-1:1:table/T/stream/x"),
        );
        let r = &event["Records"][0];
        assert_eq!(r["awsRegion"], "eu-west-1");
        assert_eq!(r["eventVersion"], "1.1");
        assert_eq!(r["eventSource"], "aws:dynamodb");
        assert_eq!(r["eventName"], "INSERT");
        assert_eq!(r["eventSourceARN"], ARN);
        assert_eq!(
            r["dynamodb"]["ApproximateCreationDateTime"],
            json!(1711143813)
        );
        assert_eq!(r["dynamodb"]["StreamViewType"], "NEW_AND_OLD_IMAGES");
        assert_eq!(r["dynamodb"]["SequenceNumber"], "100");
        assert_eq!(r["dynamodb"]["SizeBytes"], 120);
        assert_eq!(r["dynamodb"]["Keys"], user_keys());
        assert_eq!(r["dynamodb"]["NewImage"]["Blob"], json!({"B": "AAEC/w=="}));
        assert_eq!(r["dynamodb"]["NewImage"]["Parts"], json!({"L": []}));
        assert!(r["dynamodb"].get("OldImage").is_none());
        assert!(r.get("userIdentity").is_none());
        assert_eq!(
            event["Records"][1]["dynamodb"]["ApproximateCreationDateTime"],
            json!(1711143813.123)
        );
        // A change without its own ARN gets the given one.
        let r = &event["Records"][2];
        assert_eq!(
            r["eventSourceARN"],
            "arn:aws:dynamodb:us-east-1:1:table/T/stream/x"
        );
        assert_eq!(r["awsRegion"], "us-east-1");
        assert!(r["dynamodb"].get("SequenceNumber").is_none());
        assert_eq!(
            event["Records"][3]["userIdentity"],
            json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"})
        );
        assert_eq!(event["Records"][3]["eventName"], "REMOVE");
    }

    /// A reader of the `Name` attribute of each image; it refuses a
    /// record whose new name is `refuse`.
    struct Names;

    #[derive(Debug, PartialEq)]
    struct Named {
        event_id: String,
        old: Option<String>,
        new: Option<String>,
    }

    impl ChangeReader for Names {
        type Image = String;
        type Change = Named;
        fn image<'de, D: serde::Deserializer<'de>>(
            &self,
            keys: &Item,
            d: D,
        ) -> Result<String, D::Error> {
            #[derive(Deserialize)]
            struct Name {
                #[serde(rename = "Name")]
                name: String,
            }
            let key: Vec<(&str, &AttributeValue)> =
                keys.iter().map(|(k, v)| (k.as_str(), v)).collect();
            let (Name { name }, _rest) =
                crate::item::text::read_image_from(d, &key, |n| n == "Name")?;
            Ok(name)
        }
        fn change(
            &self,
            raw: &StreamChange,
            old: Option<String>,
            new: Option<String>,
        ) -> Option<Named> {
            assert!(raw.old_image.is_none() && raw.new_image.is_none());
            (new.as_deref() != Some("refuse")).then(|| Named {
                event_id: raw.event_id.clone(),
                old,
                new,
            })
        }
    }

    #[test]
    fn a_reader_types_each_record_as_the_event_is_read_or_leaves_it_to_the_items() {
        let named = |pk: &str, name: &str| {
            Item::from([
                ("PK".into(), AttributeValue::S(pk.into())),
                ("Name".into(), AttributeValue::S(name.into())),
            ])
        };
        let change = |id: &str, old: Option<Item>, new: Option<Item>| StreamChange {
            event_id: id.into(),
            kind: ChangeKind::Modify,
            sequence_number: Some("7".parse().unwrap()),
            approximate_creation: None,
            keys: Item::from([("PK".into(), AttributeValue::S("a".into()))]),
            old_image: old,
            new_image: new,
            event_source_arn: Some(ARN.into()),
            size_bytes: Some(20),
            typed: None,
        };
        let changes = vec![
            change("e1", Some(named("a", "x")), Some(named("a", "y"))),
            change("e2", None, Some(named("a", "z"))),
        ];
        let bytes = serde_json::to_vec(&encode_event(&changes, None)).unwrap();
        let read = decode_event_bytes_with(&bytes, &Names).unwrap();
        for (read, change) in read.iter().zip(&changes) {
            let read = read.as_ref().unwrap();
            let typed = read.typed.as_ref().and_then(Typed::get::<Named>).unwrap();
            let name =
                |image: &Option<Item>| image.as_ref().map(|i| i["Name"].as_s().unwrap().clone());
            assert_eq!(
                typed,
                &Named {
                    event_id: change.event_id.clone(),
                    old: name(&change.old_image),
                    new: name(&change.new_image),
                }
            );
            // The envelope read alike, no item of an image built.
            let mut envelope = change.clone();
            (envelope.old_image, envelope.new_image) = (None, None);
            assert_eq!(
                StreamChange {
                    typed: None,
                    ..read.clone()
                },
                envelope
            );
        }
        // Refused: a record (all of the event's then), an image that is
        // not the key's or comes before the keys. Decoded as without a
        // reader.
        let refused = [
            vec![
                changes[0].clone(),
                change("e3", None, Some(named("a", "refuse"))),
            ],
            vec![change("e4", None, Some(named("b", "y")))],
        ];
        for changes in refused {
            let bytes = serde_json::to_vec(&encode_event(&changes, None)).unwrap();
            let read = decode_event_bytes_with(&bytes, &Names).unwrap();
            assert_eq!(read, decode_event_bytes(&bytes).unwrap());
            assert_eq!(read, changes.into_iter().map(Ok).collect::<Vec<_>>());
        }
        let first = br#"{"Records": [{"eventID": "x", "eventName": "INSERT", "dynamodb": {
            "NewImage": {"PK": {"S": "a"}, "Name": {"S": "n"}}, "Keys": {"PK": {"S": "a"}}}}]}"#;
        let read = decode_event_bytes_with(first, &Names).unwrap();
        assert!(read[0].as_ref().unwrap().new_image.is_some());
        assert_eq!(read, decode_event_bytes(first).unwrap());
    }

    #[test]
    fn the_byte_level_path_reads_well_formed_events_and_leaves_the_rest() {
        let example = AWS_EXAMPLE.as_bytes();
        let direct = direct::decode(example).expect("read straight from the bytes");
        let parsed = decode_event(&serde_json::from_slice(example).unwrap()).unwrap();
        assert_eq!(direct.len(), 3);
        assert_eq!(
            direct.into_iter().map(Ok).collect::<Vec<_>>(),
            parsed,
            "the same changes as through a Value"
        );
        // What `encode_event` writes (fixtures, captures), with nested and
        // empty values, a fractional creation time and a TTL removal.
        let mut item = Item::new();
        item.insert("PK".into(), AttributeValue::S(U.into()));
        item.insert("SK".into(), AttributeValue::S("User".into()));
        item.insert("Name".into(), AttributeValue::S("caf\u{e9} \"x\"".into()));
        item.insert(
            "Entries".into(),
            AttributeValue::L(vec![
                AttributeValue::M(Item::from([
                    ("Qty".into(), AttributeValue::N("1.5".into())),
                    ("Tags".into(), AttributeValue::Ss(vec!["a".into()])),
                    ("Empty".into(), AttributeValue::L(vec![])),
                ])),
                AttributeValue::M(Item::new()),
                AttributeValue::Null(true),
                AttributeValue::Bool(false),
            ]),
        );
        let keys: Item = item
            .iter()
            .filter(|(k, _)| *k == "PK" || *k == "SK")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let change = |kind, old: Option<Item>, new: Option<Item>| StreamChange {
            event_id: "e1".into(),
            kind,
            sequence_number: Some("000000000000000000042".parse().unwrap()),
            approximate_creation: Some(Utc.timestamp_millis_opt(1_711_143_813_123).unwrap()),
            keys: keys.clone(),
            old_image: old,
            new_image: new,
            event_source_arn: Some(ARN.into()),
            size_bytes: Some(120),
            typed: None,
        };
        let changes = vec![
            change(ChangeKind::Insert, None, Some(item.clone())),
            change(ChangeKind::Modify, Some(item.clone()), Some(item.clone())),
            change(ChangeKind::TtlRemove, Some(item.clone()), None),
        ];
        let bytes = serde_json::to_vec(&encode_event(&changes, None)).unwrap();
        assert_eq!(direct::decode(&bytes), Some(changes.clone()));

        // The item size limit, counted while reading: at the limit read
        // here, one byte over left to the `Value` path and its reason.
        for over in [0, 1] {
            let mut big = keys.clone();
            let nested = AttributeValue::M(Item::from([(
                "Q".to_string(),
                AttributeValue::L(vec![AttributeValue::N("12345".into())]),
            )]));
            big.insert("Nested".into(), nested);
            let used = item_size(&big) + "Big".len();
            big.insert(
                "Big".into(),
                AttributeValue::S("x".repeat(MAX_ITEM_BYTES - used + over)),
            );
            assert_eq!(item_size(&big), MAX_ITEM_BYTES + over);
            let one = vec![change(ChangeKind::Insert, None, Some(big))];
            let event = encode_event(&one, None);
            let bytes = serde_json::to_vec(&event).unwrap();
            assert_eq!(direct::decode(&bytes).is_some(), over == 0);
            assert_eq!(decode_event_bytes(&bytes), decode_event(&event));
        }

        // Left to the `Value` path, which gives the reasons: a binary
        // attribute, a malformed record, a duplicate field.
        let mut binary = item.clone();
        binary.insert("Blob".into(), AttributeValue::B(Blob::new(vec![1, 2])));
        let with_binary = vec![change(ChangeKind::Insert, None, Some(binary))];
        let bytes = serde_json::to_vec(&encode_event(&with_binary, None)).unwrap();
        assert_eq!(direct::decode(&bytes), None);
        assert_eq!(
            decode_event_bytes(&bytes).unwrap(),
            with_binary.into_iter().map(Ok).collect::<Vec<_>>()
        );
        let malformed =
            br#"{"Records": [{"eventID": "x", "eventName": "INSERT", "dynamodb": {}}]}"#;
        assert_eq!(direct::decode(malformed), None);
        let reason = decode_event_bytes(malformed)
            .unwrap()
            .remove(0)
            .unwrap_err()
            .reason;
        assert_eq!(reason, "no Keys");
        let duplicate = br#"{"Records": [{"eventID": "x", "eventID": "y", "eventName": "REMOVE",
            "dynamodb": {"Keys": {"PK": {"S": "a"}}, "OldImage": {"PK": {"S": "a"}}}}]}"#;
        assert_eq!(direct::decode(duplicate), None);
        assert_eq!(
            decode_event_bytes(duplicate).unwrap()[0]
                .as_ref()
                .unwrap()
                .event_id,
            "y"
        );
        // A repeated attribute name, in an image or in a nested map: the
        // `Value` path keeps the last value.
        for image in [
            r#"{"PK": {"S": "a"}, "N": {"S": "1"}, "N": {"S": "2"}}"#,
            r#"{"PK": {"S": "a"}, "M": {"M": {"N": {"S": "1"}, "N": {"S": "2"}}}}"#,
        ] {
            let event = format!(
                r#"{{"Records": [{{"eventID": "x", "eventName": "INSERT",
                "dynamodb": {{"Keys": {{"PK": {{"S": "a"}}}}, "NewImage": {image}}}}}]}}"#
            );
            assert_eq!(direct::decode(event.as_bytes()), None, "{image}");
            let change = decode_event_bytes(event.as_bytes())
                .unwrap()
                .remove(0)
                .unwrap();
            let image = change.new_image.unwrap();
            let two = AttributeValue::S("2".into());
            match image.get("M") {
                Some(AttributeValue::M(m)) => assert_eq!(m["N"], two),
                _ => assert_eq!(image["N"], two),
            }
        }
        // Not UTF-8 (in a string): the `Value` path's error, as before.
        let latin1 = b"{\"Records\": [{\"eventID\": \"\xe9\", \"eventName\": \"REMOVE\",
            \"dynamodb\": {\"Keys\": {\"PK\": {\"S\": \"a\"}}}}]}";
        assert_eq!(direct::decode(latin1), None);
        let Err(EnvelopeError::NotJson(reason)) = decode_event_bytes(latin1) else {
            panic!("not JSON");
        };
        assert_eq!(
            reason,
            redact(
                &serde_json::from_slice::<Value>(latin1)
                    .unwrap_err()
                    .to_string()
            )
        );
    }

    // ---- property tests ----

    fn key_name() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "S",
                "N",
                "B",
                "L",
                "M",
                "SS",
                "NS",
                "BS",
                "NULL",
                "BOOL",
                "PK",
                "SK",
                "Keys",
                "NewImage",
                "OldImage",
                "SequenceNumber",
                "SizeBytes",
                "eventName",
                "type",
            ])
            .prop_map(String::from),
            "[a-zA-Z]{1,4}",
        ]
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            "[a-zA-Z0-9.:=+/-]{0,10}".prop_map(Value::from),
            prop::sample::select(vec!["INSERT", "MODIFY", "REMOVE", "1711143813.5", "AAEC"])
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(key_name(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Usually `good`, sometimes arbitrary JSON.
    fn mostly(good: impl Strategy<Value = Value> + 'static) -> BoxedStrategy<Value> {
        prop_oneof![8 => good, 1 => any_json()].boxed()
    }

    /// Usually present.
    fn maybe(s: impl Strategy<Value = Value>) -> impl Strategy<Value = Option<Value>> {
        prop::option::weighted(0.9, s)
    }

    /// Mostly well-typed DynamoDB JSON, sometimes untagged or junk.
    fn attribute() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            4 => "[a-z@.]{0,8}".prop_map(|s| json!({"S": s})),
            2 => any::<i32>().prop_map(|n| json!({"N": n.to_string()})),
            1 => any::<bool>().prop_map(|b| json!({"BOOL": b})),
            1 => Just(json!({"NULL": true})),
            1 => Just(json!({"B": "AAEC"})),
            1 => Just(json!({"SS": ["a", "b"]})),
            1 => Just(json!([])),
            1 => Just(json!({})),
            1 => any_json(),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(|l| json!({ "L": l })),
                prop::collection::btree_map("[A-Z][a-z]{0,3}", inner, 0..3)
                    .prop_map(|m| json!({ "M": m })),
            ]
        })
    }

    fn image() -> BoxedStrategy<Value> {
        mostly(prop::collection::btree_map(key_name(), attribute(), 0..4).prop_map(|m| json!(m)))
    }

    /// An object with the fields that are `Some`.
    fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
        Value::Object(
            fields
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k.to_owned(), v)))
                .collect(),
        )
    }

    fn stream_record() -> impl Strategy<Value = Value> {
        let ddb = (
            maybe(image()),
            maybe(image()),
            maybe(image()),
            maybe(mostly("[0-9]{1,40}".prop_map(Value::from))),
            maybe(mostly(prop_oneof![
                (0u32..2_000_000_000).prop_map(Value::from),
                (0.0f64..2e9).prop_map(Value::from),
            ])),
            maybe(mostly((0i64..1000).prop_map(Value::from))),
        )
            .prop_map(|(keys, new, old, seq, at, size)| {
                object(vec![
                    ("Keys", keys),
                    ("NewImage", new),
                    ("OldImage", old),
                    ("SequenceNumber", seq),
                    ("ApproximateCreationDateTime", at),
                    ("SizeBytes", size),
                ])
            });
        (
            maybe(mostly("[a-f0-9]{1,8}".prop_map(Value::from))),
            maybe(mostly(
                prop::sample::select(vec!["INSERT", "MODIFY", "REMOVE"]).prop_map(Value::from),
            )),
            prop::option::of(mostly(Just(
                json!({"type": "Service", "principalId": "dynamodb.amazonaws.com"}),
            ))),
            maybe(mostly(ddb)),
            prop::option::of(mostly(
                "arn:aws:dynamodb:[a-z0-9-]{0,9}:1:table/T".prop_map(Value::from),
            )),
        )
            .prop_map(|(id, name, identity, ddb, arn)| {
                object(vec![
                    ("eventID", id),
                    ("eventName", name),
                    ("userIdentity", identity),
                    ("dynamodb", ddb),
                    ("eventSourceARN", arn),
                ])
            })
    }

    proptest! {
        /// The byte-level path reads what it reads as the `Value` path
        /// does, and `decode_event_bytes` always agrees with `decode_event`.
        #[test]
        fn bytes_decode_as_the_parsed_json_does(
            records in prop::collection::vec((stream_record(), any::<bool>()), 0..4)
        ) {
            let records: Vec<Value> = records
                .into_iter()
                .map(|(mut r, tagged)| {
                    if let (true, Some(o)) = (tagged, r.as_object_mut()) {
                        o.insert("eventSource".into(), json!(STREAM_SOURCE));
                        o.insert("awsRegion".into(), json!("eu-west-1"));
                    }
                    r
                })
                .collect();
            let event = json!({ "Records": records });
            let bytes = serde_json::to_vec(&event).unwrap();
            let parsed = decode_event(&event);
            if let Some(direct) = direct::decode(&bytes) {
                let direct: Vec<_> = direct.into_iter().map(Ok).collect();
                prop_assert_eq!(Ok(direct), parsed.clone());
            }
            prop_assert_eq!(decode_event_bytes(&bytes), parsed);
        }

        #[test]
        fn sequence_order_agrees_with_numbers(
            a in any::<u128>(), b in any::<u128>(), za in 0usize..4, zb in 0usize..4
        ) {
            let sa: SequenceNumber = format!("{}{a}", "0".repeat(za)).parse().unwrap();
            let sb: SequenceNumber = format!("{}{b}", "0".repeat(zb)).parse().unwrap();
            prop_assert_eq!(sa.cmp(&sb), a.cmp(&b));
            prop_assert_eq!(sa == sb, a == b);
        }

        #[test]
        fn decode_never_panics_and_round_trips(r in stream_record()) {
            match decode_record(7, &r) {
                Ok(change) => {
                    let event = encode_event(std::slice::from_ref(&change), None);
                    let back = decode_event(&event).unwrap().pop().unwrap();
                    prop_assert_eq!(back, Ok(change));
                }
                Err(e) => {
                    prop_assert_eq!(e.index, 7);
                    prop_assert!(!e.reason.contains('@'), "{}", e);
                }
            }
        }

        #[test]
        fn decode_never_panics_on_any_json(v in any_json()) {
            let _ = decode_record(0, &v);
            let _ = decode_event(&v);
            let _ = is_stream_event(&v);
        }
    }
}
