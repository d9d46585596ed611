//! What a DynamoDB stream event source mapping's on-failure destination
//! receives when Lambda gives up on a batch, built the way Lambda builds
//! it (`worker_toolkit::failure_message` documents both and their sources):
//!
//! - SQS/SNS: the message, the batch's position only
//!   ([`crate::on_failure_message`], [`message_for`]);
//! - S3: one object per batch, the message plus `payload` (the batch as
//!   the function received it), under
//!   `aws/lambda/<mapping UUID>/<shard id>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<UUID>`
//!   ([`s3_invocation_record`], [`s3_object_key`]).
//!
//! Records come from a real stream (DynamoDB Local's, read with
//! [`crate::TestTable::stream_records`]) and are encoded as Lambda delivers
//! them ([`lambda_records`]). The destinations themselves are moto's
//! ([`crate::moto`]): a queue ([`create_queue`], [`send`], [`queue_counts`],
//! [`queue_bodies`]) and a bucket ([`create_bucket`], [`put_object`],
//! [`bucket_keys`]).

use serde_json::{Value, json};
use worker_engine::stream::{StreamChange, encode_event};

use crate::moto::Moto;

/// The mapping UUID of the test kit's objects.
pub const MAPPING_UUID: &str = "6a2f1c9e-3b7d-4e58-9f10-2c4b8d7e5a31";
/// When the test kit's batches failed (the message's `timestamp`).
pub const FAILED_AT: &str = "2024-03-25T09:00:49.717Z";

/// Stream changes as the records of a Lambda event (`Records` of the
/// DynamoDB Streams event the function was invoked with).
pub fn lambda_records(changes: &[StreamChange], stream_arn: &str) -> Vec<Value> {
    encode_event(changes, Some(stream_arn))["Records"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The sequence number of a record as delivered.
fn sequence_number(record: &Value) -> &str {
    record["dynamodb"]["SequenceNumber"]
        .as_str()
        .expect("a stream record has a SequenceNumber")
}

/// The SQS on-failure message of a batch of `records` (Lambda-shaped,
/// of `shard`): [`crate::on_failure_message`] from its first to its last
/// sequence number.
pub fn message_for(stream_arn: &str, shard: &str, records: &[Value]) -> Value {
    let (first, last) = (
        records.first().expect("a batch has records"),
        records.last().expect("a batch has records"),
    );
    crate::on_failure_message(
        stream_arn,
        shard,
        sequence_number(first),
        sequence_number(last),
        records.len() as u64,
    )
}

/// The invocation record Lambda writes to an S3 on-failure destination for
/// a batch of `records` of `shard`: the on-failure message (its
/// `timestamp` `failed_at`) and `payload`, `{"Records": [...]}`.
pub fn s3_invocation_record(
    stream_arn: &str,
    shard: &str,
    records: &[Value],
    failed_at: &str,
) -> Value {
    let mut record = message_for(stream_arn, shard, records);
    record["timestamp"] = json!(failed_at);
    record["payload"] = json!({ "Records": records });
    record
}

/// The object key Lambda gives an invocation record:
/// `aws/lambda/<mapping UUID>/<shard id>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<UUID>`,
/// from `failed_at` (RFC 3339, UTC) and a UUID `n` tells apart.
pub fn s3_object_key(mapping_uuid: &str, shard: &str, failed_at: &str, n: u32) -> String {
    assert!(failed_at.len() >= 19, "an RFC 3339 time, not {failed_at:?}");
    let day = failed_at[..10].replace('-', "/");
    let time = failed_at[..19].replace(':', ".");
    format!("aws/lambda/{mapping_uuid}/{shard}/{day}/{time}-{n:08x}-0000-4000-8000-{n:012x}")
}

/// A queue on moto's server; its URL.
pub async fn create_queue(moto: &Moto, name: &str) -> String {
    moto.sqs()
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("create queue")
        .queue_url
        .expect("a queue URL")
}

/// Send `body` (JSON) to the queue, as Lambda sends an on-failure message.
pub async fn send(moto: &Moto, queue_url: &str, body: &Value) {
    moto.sqs()
        .send_message()
        .queue_url(queue_url)
        .message_body(body.to_string())
        .send()
        .await
        .expect("send message");
}

/// `(visible, in flight)`: the queue's messages that can be received now,
/// and those received and hidden.
pub async fn queue_counts(moto: &Moto, queue_url: &str) -> (usize, usize) {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let out = moto
        .sqs()
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .expect("queue attributes");
    let attrs = out.attributes.unwrap_or_default();
    let n = |a: A| {
        attrs
            .get(&a)
            .and_then(|v| v.parse().ok())
            .unwrap_or(usize::MAX)
    };
    (
        n(A::ApproximateNumberOfMessages),
        n(A::ApproximateNumberOfMessagesNotVisible),
    )
}

/// The body (JSON; `null` when it is not) of every message in the queue,
/// each received and made visible again at once: the queue is left as it
/// was.
pub async fn queue_bodies(moto: &Moto, queue_url: &str) -> Vec<Value> {
    let sqs = moto.sqs();
    let mut seen = std::collections::HashMap::new();
    let mut receipts = Vec::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(60)
            .wait_time_seconds(1)
            .send()
            .await
            .expect("receive");
        let messages = out.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        for m in messages {
            let body = serde_json::from_str(m.body().unwrap_or("")).unwrap_or(Value::Null);
            seen.insert(m.message_id().unwrap_or_default().to_owned(), body);
            receipts.push(m.receipt_handle().unwrap_or_default().to_owned());
        }
    }
    for receipt in receipts {
        sqs.change_message_visibility()
            .queue_url(queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(0)
            .send()
            .await
            .expect("visible again");
    }
    seen.into_values().collect()
}

/// A bucket on moto's server.
pub async fn create_bucket(moto: &Moto, bucket: &str) {
    moto.s3()
        .create_bucket()
        .bucket(bucket)
        .send()
        .await
        .expect("create bucket");
}

/// Write an object, as Lambda writes an invocation record.
pub async fn put_object(moto: &Moto, bucket: &str, key: &str, body: impl Into<Vec<u8>>) {
    moto.s3()
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(body.into().into())
        .send()
        .await
        .expect("put object");
}

/// Every key of the bucket, in S3's order.
pub async fn bucket_keys(moto: &Moto, bucket: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut token = None;
    loop {
        let out = moto
            .s3()
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token)
            .send()
            .await
            .expect("list objects");
        keys.extend(
            out.contents
                .unwrap_or_default()
                .into_iter()
                .filter_map(|o| o.key),
        );
        match out.next_continuation_token {
            Some(next) => token = Some(next),
            None => return keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_lambdas_naming_convention() {
        assert_eq!(
            s3_object_key(MAPPING_UUID, "shardId-00000001-a1", FAILED_AT, 7),
            "aws/lambda/6a2f1c9e-3b7d-4e58-9f10-2c4b8d7e5a31/shardId-00000001-a1/2024/03/25/\
             2024-03-25T09.00.49-00000007-0000-4000-8000-000000000007"
        );
    }

    #[test]
    fn an_invocation_record_is_the_message_and_the_batch() {
        let record = |seq: &str| json!({"eventID": "e", "dynamodb": {"SequenceNumber": seq}});
        let records = [record("100"), record("200")];
        let v = s3_invocation_record("arn:s", "shardId-1", &records, FAILED_AT);
        assert_eq!(v["DDBStreamBatchInfo"]["startSequenceNumber"], "100");
        assert_eq!(v["DDBStreamBatchInfo"]["endSequenceNumber"], "200");
        assert_eq!(v["DDBStreamBatchInfo"]["batchSize"], 2);
        assert_eq!(
            v["payload"]["Records"][1]["dynamodb"]["SequenceNumber"],
            "200"
        );
        assert_eq!(v["timestamp"], FAILED_AT);
    }
}
