//! DynamoDB Streams processing, independent of any table design.
//!
//! - decoding ([`decode_event`]): lenient decoding of the event Lambda delivers (and the
//!   inverse, for fixtures and captures): one malformed record never fails
//!   the batch, it becomes an error in its own slot;
//! - running ([`run_batch`]): runs a decoded batch through a [`RecordProcessor`] in order
//!   and computes the partial-batch response (`ReportBatchItemFailures`);
//! - routing ([`Router`]): an app's typed changes, routed by item kind to the
//!   handlers that want them (a [`RecordProcessor`] for the engine);
//! - views ([`ImageView`], [`decode_views`]): what an app's handlers read of
//!   each image, read as the event is read.
//!
//! Nothing here knows an app's key schema: changes carry raw items, and
//! only the key attribute names (default `PK`/`SK`) are configurable, for
//! rendering keys in log lines and error texts. Attribute values other than
//! keys never reach a log line or an error text.

pub(crate) mod decode;
pub(crate) mod engine;
pub(crate) mod routed;
pub(crate) mod source;
pub(crate) mod view;

pub use decode::{
    ChangeKind, ChangeReader, DEFAULT_KEY_ATTRIBUTES, DecodeEvent, EnvelopeError, RecordError,
    SequenceNumber, SequenceNumberError, StreamChange, Typed, decode_event, decode_event_bytes,
    decode_event_bytes_with, decode_record_with, encode_event, encode_event_as, is_stream_event,
};
pub use engine::{
    BatchItemFailure, BatchReport, BatchResponse, EngineConfig, RecordOutcome, RecordProcessor,
    RecordReport, RecordStatus, run_batch,
};
pub use routed::{ChangeHandler, HandlerOutcome, InBatch, Router, TypedChange};
pub use source::{ByTable, table_name};
pub use view::{ImageView, Images, ViewReader, decode_views};
