//! The on-failure message of a DynamoDB stream event source mapping: what
//! Lambda sends to the mapping's on-failure destination (an SQS queue) when
//! it gives up on a batch (retries exhausted, record too old). It carries
//! no record, only where the batch was:
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

use serde_json::Value;

use crate::stream::decode::SequenceNumber;

/// The records a failure message stands for: one shard, a sequence range
/// (both ends included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRange {
    pub stream_arn: String,
    pub shard_id: String,
    pub start: SequenceNumber,
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
}
