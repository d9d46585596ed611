//! The on-failure records of a DynamoDB stream event source mapping: what
//! Lambda sends to the mapping's on-failure destination when it gives up on
//! a batch (retries exhausted, record too old).
//!
//! # SQS (and SNS): the position only
//!
//! The message carries no record, only where the batch was:
//!
//! ```json
//! {"requestContext": {"requestId": "…", "functionArn": "…",
//!    "condition": "RetryAttemptsExhausted", "approximateInvokeCount": 11},
//!  "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
//!  "version": "1.0", "timestamp": "2024-03-25T09:00:00.000Z",
//!  "DDBStreamBatchInfo": {"shardId": "shardId-…", "startSequenceNumber": "…",
//!    "endSequenceNumber": "…", "approximateArrivalOfFirstRecord": "…",
//!    "approximateArrivalOfLastRecord": "…", "batchSize": 3,
//!    "streamArn": "arn:aws:dynamodb:…:table/…/stream/…"}}
//! ```
//!
//! [`FailureRange`] is that position; the records themselves are read from
//! the stream while it still holds them (24 hours) with
//! [`crate::stream_reader::read_range`].
//!
//! # S3: the position and the records
//!
//! Since November 2024 the destination of a stream mapping (DynamoDB,
//! Kinesis) may also be an S3 bucket (`DestinationConfig.OnFailure.Destination:
//! arn:aws:s3:::BUCKET`). For S3, Lambda writes the whole invocation record:
//! the message above **and** `payload`, the batch exactly as the function
//! was invoked with it, so a redrive no longer depends on the stream's
//! 24-hour retention ([`InvocationRecord`], [`parse_invocation_record`]):
//!
//! ```json
//! {"requestContext": {…}, "responseContext": {…}, "version": "1.0",
//!  "timestamp": "2025-11-25T15:54:54.000Z",
//!  "DDBStreamBatchInfo": {…, "batchSize": 1, …},
//!  "payload": {"Records": [{"eventID": "…", "eventName": "INSERT",
//!    "eventVersion": "1.1", "eventSource": "aws:dynamodb", "awsRegion": "…",
//!    "dynamodb": {"ApproximateCreationDateTime": 1764086094, "Keys": {…},
//!      "NewImage": {…}, "SequenceNumber": "…", "SizeBytes": 54,
//!      "StreamViewType": "NEW_IMAGE"},
//!    "eventSourceARN": "arn:aws:dynamodb:…:table/…/stream/…"}]}}
//! ```
//!
//! One object per failed batch, its key
//! `aws/lambda/<mapping UUID>/<shard id>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<random UUID>`
//! (the time of the failure, UTC), so a listing of the bucket is ordered by
//! mapping, shard, then time. `payload` is a JSON object (an escaped JSON
//! string of it is read too).
//!
//! Sources: the Lambda Developer Guide, "Retain discarded records for a
//! DynamoDB event source in Lambda"
//! (<https://docs.aws.amazon.com/lambda/latest/dg/services-dynamodb-errors.html>:
//! "For Amazon S3 destinations, Lambda also sends the entire invocation
//! record along with the metadata") and its Kinesis twin
//! (<https://docs.aws.amazon.com/lambda/latest/dg/kinesis-on-failure-destination.html>,
//! which gives the object key's naming convention); the Lambda API
//! reference of `OnFailure.Destination` (an S3 bucket for Kinesis and
//! DynamoDB sources). The object's exact JSON above (a `payload` object
//! holding `Records`, the key layout) is the one LocalStack's test suite
//! recorded from AWS itself (its AWS-validated snapshot of
//! `test_dynamodb_event_source_mapping_with_s3_on_failure_destination`,
//! last validated 2025-11-25).

use serde_json::Value;

use worker_engine::stream::SequenceNumber;

/// The records a failure message stands for: one shard, a sequence range
/// (both ends included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRange {
    /// `DDBStreamBatchInfo.streamArn`: the stream the batch was read from.
    pub stream_arn: String,
    /// `DDBStreamBatchInfo.shardId`: the shard that held the batch.
    pub shard_id: String,
    /// `DDBStreamBatchInfo.startSequenceNumber`: the batch's first record.
    pub start: SequenceNumber,
    /// `DDBStreamBatchInfo.endSequenceNumber`: the batch's last record
    /// (never before [`FailureRange::start`]).
    pub end: SequenceNumber,
    /// How many records the batch had.
    pub batch_size: Option<u64>,
    /// Why Lambda gave up (`RetryAttemptsExhausted`, `RecordAgeExceeded`, …).
    pub condition: Option<String>,
}

/// Why a message is not an on-failure message of a stream mapping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a DynamoDB stream on-failure message: {0}")]
pub struct NotAFailureMessage(pub String);

/// Read one on-failure message (the message body).
pub fn parse(message: &Value) -> Result<FailureRange, NotAFailureMessage> {
    let info = &message["DDBStreamBatchInfo"];
    if !info.is_object() {
        return Err(NotAFailureMessage("no DDBStreamBatchInfo".into()));
    }
    let text = |k: &str| {
        info[k]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| NotAFailureMessage(format!("DDBStreamBatchInfo.{k} missing")))
    };
    let seq = |k: &str| -> Result<SequenceNumber, NotAFailureMessage> {
        text(k)?
            .parse()
            .map_err(|e| NotAFailureMessage(format!("DDBStreamBatchInfo.{k}: {e}")))
    };
    let (start, end) = (seq("startSequenceNumber")?, seq("endSequenceNumber")?);
    if start > end {
        return Err(NotAFailureMessage(format!(
            "startSequenceNumber {start} is after endSequenceNumber {end}"
        )));
    }
    Ok(FailureRange {
        stream_arn: text("streamArn")?.to_owned(),
        shard_id: text("shardId")?.to_owned(),
        start,
        end,
        batch_size: info["batchSize"].as_u64(),
        condition: message["requestContext"]["condition"]
            .as_str()
            .map(str::to_owned),
    })
}

/// Every on-failure message in a file's JSON: one message, a list of
/// messages, or SQS messages (`aws sqs receive-message` output
/// `{"Messages": [{"Body": "<message>"}, …]}`, or a list of `{"Body": …}`).
pub fn parse_all(v: &Value) -> Result<Vec<FailureRange>, NotAFailureMessage> {
    let one = |m: &Value| -> Result<FailureRange, NotAFailureMessage> {
        match m.get("Body").or_else(|| m.get("body")) {
            Some(Value::String(body)) => {
                let inner: Value = serde_json::from_str(body)
                    .map_err(|e| NotAFailureMessage(format!("Body is not JSON: {e}")))?;
                parse(&inner)
            }
            _ => parse(m),
        }
    };
    let list = match v {
        Value::Array(items) => items.iter().collect::<Vec<_>>(),
        Value::Object(o) if o.contains_key("Messages") => o["Messages"]
            .as_array()
            .map(|a| a.iter().collect())
            .unwrap_or_default(),
        other => vec![other],
    };
    if list.is_empty() {
        return Err(NotAFailureMessage("no message".into()));
    }
    list.into_iter().map(one).collect()
}

/// An invocation record Lambda wrote to an S3 on-failure destination:
/// where the batch was, and its records as the function received them.
#[derive(Debug, Clone, PartialEq)]
pub struct InvocationRecord {
    /// Where the batch was (the record's `DDBStreamBatchInfo`).
    pub range: FailureRange,
    /// The batch's records (`payload.Records`), as delivered.
    pub records: Vec<Value>,
}

impl InvocationRecord {
    /// The batch as a DynamoDB Streams event (`{"Records": [...]}`).
    pub fn event(&self) -> Value {
        serde_json::json!({ "Records": self.records })
    }
}

/// Read an invocation record of an S3 on-failure destination (see the
/// module's documentation): the on-failure message's `DDBStreamBatchInfo`
/// and `payload.Records` (a JSON object, or a string holding one). Refused:
/// a record without `payload` (an SQS or SNS message: replay it with
/// `--failure-message`), a payload without records, or one whose count is
/// not the batch's `batchSize` (a truncated payload).
pub fn parse_invocation_record(v: &Value) -> Result<InvocationRecord, NotAFailureMessage> {
    let range = parse(v)?;
    let payload = match v.get("payload") {
        None | Some(Value::Null) => {
            return Err(NotAFailureMessage(
                "no payload: an SQS or SNS on-failure message, not an S3 invocation record".into(),
            ));
        }
        Some(Value::String(text)) => serde_json::from_str(text)
            .map_err(|e| NotAFailureMessage(format!("payload is not JSON: {e}")))?,
        Some(other) => other.clone(),
    };
    let records = match payload.get("Records") {
        Some(Value::Array(records)) if !records.is_empty() => records.clone(),
        Some(Value::Array(_)) => return Err(NotAFailureMessage("payload.Records is empty".into())),
        _ => return Err(NotAFailureMessage("payload has no Records list".into())),
    };
    if let Some(i) = records.iter().position(|r| !r.is_object()) {
        return Err(NotAFailureMessage(format!(
            "payload.Records[{i}] is not a record"
        )));
    }
    if let Some(size) = range.batch_size
        && size != records.len() as u64
    {
        return Err(NotAFailureMessage(format!(
            "payload holds {} record(s), DDBStreamBatchInfo.batchSize says {size}",
            records.len()
        )));
    }
    Ok(InvocationRecord { range, records })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message() -> Value {
        json!({
            "requestContext": {
                "requestId": "316aa6d0-8154-4a3b-9af7-85d5f4a6bc81",
                "functionArn": "arn:aws:lambda:us-east-2:123456789012:function:w-stream",
                "condition": "RetryAttemptsExhausted",
                "approximateInvokeCount": 11
            },
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "version": "1.0",
            "timestamp": "2024-03-25T09:00:49.717Z",
            "DDBStreamBatchInfo": {
                "shardId": "shardId-00000001573689847184-864758bb",
                "startSequenceNumber": "800000000003126276362",
                "endSequenceNumber": "800000000003126276400",
                "approximateArrivalOfFirstRecord": "2024-03-25T09:00:19Z",
                "approximateArrivalOfLastRecord": "2024-03-25T09:00:21Z",
                "batchSize": 3,
                "streamArn": "arn:aws:dynamodb:us-east-2:123456789012:table/t/stream/2024-03-25T00:04:06.388"
            }
        })
    }

    #[test]
    fn a_message_gives_its_shard_and_range() {
        let r = parse(&message()).unwrap();
        assert_eq!(r.shard_id, "shardId-00000001573689847184-864758bb");
        assert_eq!(r.start.as_str(), "800000000003126276362");
        assert_eq!(r.end.as_str(), "800000000003126276400");
        assert_eq!(r.batch_size, Some(3));
        assert_eq!(r.condition.as_deref(), Some("RetryAttemptsExhausted"));
        assert!(r.stream_arn.ends_with("/stream/2024-03-25T00:04:06.388"));
    }

    #[test]
    fn sqs_wrappings_and_lists_are_read() {
        let body = message().to_string();
        let sqs = json!({"Messages": [{"MessageId": "m1", "Body": body}, {"Body": body}]});
        assert_eq!(parse_all(&sqs).unwrap().len(), 2);
        assert_eq!(parse_all(&json!([message(), message()])).unwrap().len(), 2);
        assert_eq!(
            parse_all(&message()).unwrap(),
            vec![parse(&message()).unwrap()]
        );
    }

    #[test]
    fn anything_else_is_refused_with_the_reason() {
        let e = parse(&json!({"Records": []})).unwrap_err();
        assert!(e.to_string().contains("DDBStreamBatchInfo"), "{e}");
        let mut m = message();
        m["DDBStreamBatchInfo"]["endSequenceNumber"] = json!("1");
        assert!(parse(&m).unwrap_err().to_string().contains("after"));
        m["DDBStreamBatchInfo"]["endSequenceNumber"] = json!("12x");
        assert!(parse(&m).is_err());
        assert!(parse_all(&json!({"Messages": []})).is_err());
    }

    /// An S3 invocation record: the message and the batch as delivered.
    fn invocation_record() -> Value {
        let mut v = message();
        v["DDBStreamBatchInfo"]["batchSize"] = json!(2);
        let record = |seq: &str| {
            json!({
                "eventID": format!("e{seq}"), "eventName": "INSERT", "eventVersion": "1.1",
                "eventSource": "aws:dynamodb", "awsRegion": "us-east-2",
                "dynamodb": {"ApproximateCreationDateTime": 1711357219,
                    "Keys": {"PK": {"S": "a"}, "SK": {"S": "b"}},
                    "NewImage": {"PK": {"S": "a"}, "SK": {"S": "b"}},
                    "SequenceNumber": seq, "SizeBytes": 20, "StreamViewType": "NEW_AND_OLD_IMAGES"},
                "eventSourceARN": v["DDBStreamBatchInfo"]["streamArn"].clone()
            })
        };
        v["payload"] =
            json!({"Records": [record("800000000003126276362"), record("800000000003126276400")]});
        v
    }

    #[test]
    fn an_s3_invocation_record_gives_its_range_and_its_records() {
        let r = parse_invocation_record(&invocation_record()).unwrap();
        assert_eq!(r.range.shard_id, "shardId-00000001573689847184-864758bb");
        assert_eq!(r.records.len(), 2);
        assert_eq!(
            r.event()["Records"][1]["dynamodb"]["SequenceNumber"],
            "800000000003126276400"
        );
        // The payload as an escaped JSON string reads the same.
        let mut v = invocation_record();
        v["payload"] = json!(v["payload"].to_string());
        assert_eq!(parse_invocation_record(&v).unwrap(), r);
    }

    #[test]
    fn an_invocation_record_without_its_whole_batch_is_refused() {
        let e = parse_invocation_record(&message()).unwrap_err().to_string();
        assert!(e.contains("no payload"), "{e}");
        let mut v = invocation_record();
        v["DDBStreamBatchInfo"]["batchSize"] = json!(3);
        let e = parse_invocation_record(&v).unwrap_err().to_string();
        assert!(
            e.contains("2 record(s)") && e.contains("batchSize says 3"),
            "{e}"
        );
        v["payload"] = json!({"Records": []});
        assert!(parse_invocation_record(&v).is_err());
        v["payload"] = json!("{not json");
        assert!(
            parse_invocation_record(&v)
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
        v["payload"] = json!({"Records": [1]});
        v["DDBStreamBatchInfo"]["batchSize"] = json!(1);
        assert!(
            parse_invocation_record(&v)
                .unwrap_err()
                .to_string()
                .contains("Records[0]")
        );
    }
}
