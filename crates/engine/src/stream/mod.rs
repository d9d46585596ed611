//! DynamoDB Streams processing, independent of any table design.
//!
//! - [`decode`]: lenient decoding of the event Lambda delivers (and the
//!   inverse, for fixtures and captures): one malformed record never fails
//!   the batch, it becomes an error in its own slot;
//! - [`engine`]: runs a decoded batch through a [`RecordProcessor`] in order
//!   and computes the partial-batch response (`ReportBatchItemFailures`);
//! - [`routed`]: an app's typed changes, routed by item kind to the
//!   handlers that want them (a [`RecordProcessor`] for the engine).
//!
//! Nothing here knows an app's key schema: changes carry raw items, and
//! only the key attribute names (default `PK`/`SK`) are configurable, for
//! rendering keys in log lines and error texts. Attribute values other than
//! keys never reach a log line or an error text.

pub mod decode;
pub mod engine;
pub mod routed;
pub mod source;

pub use decode::{
    ChangeKind, DEFAULT_KEY_ATTRIBUTES, EnvelopeError, RecordError, SequenceNumber,
    SequenceNumberError, StreamChange, decode_event, decode_event_bytes, decode_event_with,
    decode_record, decode_record_with, encode_event, is_stream_event, render_keys,
};
pub use engine::{
    BatchItemFailure, BatchReport, BatchResponse, EngineConfig, ProcessError, RecordOutcome,
    RecordProcessor, RecordReport, RecordStatus, run_batch,
};
