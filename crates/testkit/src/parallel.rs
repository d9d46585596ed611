//! The event source mapping's `ParallelizationFactor`, as [`crate::Drain`]
//! runs it ([`crate::Drain::with_parallelization`]): a shard's records go
//! to up to 10 concurrent batch streams ("lanes") by a hash of their
//! partition key, so records of one partition key stay in order and
//! records of different keys interleave. The split is the toolkit's
//! mapping's, the one the `dev` loop runs ([`worker_toolkit::mapping`]):
//! [`lanes`] splits records as [`lane_of`] assigns them.

pub use worker_toolkit::mapping::{
    MAX_PARALLELIZATION_FACTOR, lane_of, split_by_partition_key as lanes,
};

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use async_trait::async_trait;
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde_json::{Value, json};
    use worker_engine::schema::{DEFAULT_KEY, TableSchema};
    use worker_engine::stream::BatchReport;
    use worker_engine::stream::{ChangeKind, SequenceNumber, StreamChange};
    use worker_toolkit::mapping::{EventFunction, InvokeError};

    use super::*;
    use crate::{Drain, TestTable};

    fn change(seq: u32, pk: &str, sk: &str) -> StreamChange {
        StreamChange {
            event_id: format!("e{seq}"),
            kind: ChangeKind::Insert,
            sequence_number: Some(seq.to_string().parse().unwrap()),
            approximate_creation: None,
            keys: [
                ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
                ("SK".to_owned(), AttributeValue::S(sk.to_owned())),
            ]
            .into(),
            old_image: None,
            new_image: None,
            event_source_arn: None,
            size_bytes: None,
            typed: None,
        }
    }

    #[test]
    fn lanes_keep_each_partition_key_in_one_lane_in_order() {
        // 12 partitions, several items each, interleaved.
        let changes: Vec<StreamChange> = (1..=120)
            .map(|s| change(s, &format!("p{}", s % 12), &format!("s{}", s % 5)))
            .collect();
        assert_eq!(lanes(changes.clone(), Some("PK"), 1), vec![changes.clone()]);
        for factor in [2, 3, 10] {
            let split = lanes(changes.clone(), Some("PK"), factor);
            assert_eq!(split.len(), factor);
            assert_eq!(split.iter().map(Vec::len).sum::<usize>(), changes.len());
            let mut lane_of_key = BTreeMap::new();
            for (l, lane) in split.iter().enumerate() {
                let seqs: Vec<&SequenceNumber> = lane
                    .iter()
                    .map(|c| c.sequence_number.as_ref().unwrap())
                    .collect();
                assert!(seqs.windows(2).all(|w| w[0] < w[1]), "lane {l} in order");
                for c in lane {
                    let pk = format!("{:?}", c.keys["PK"]);
                    assert_eq!(*lane_of_key.entry(pk).or_insert(l), l, "one lane per key");
                    assert_eq!(lane_of(&c.keys, Some("PK"), factor), l);
                }
            }
            assert_eq!(lane_of_key.len(), 12);
        }
        // At 10, twelve keys use more than one lane.
        let used = lanes(changes, Some("PK"), 10)
            .iter()
            .filter(|l| !l.is_empty())
            .count();
        assert!(used > 1, "{used}");
    }

    /// Notes every record it handles, per partition key, in the order it
    /// handled them; fails the record of item (`fail_pk`, `fail_sk`) at
    /// version `fail_version` once (the records before it in the batch are
    /// handled, it and the rest are retried); counts the invocations in
    /// flight at once.
    struct PerKeyOrder {
        fail: (String, String, u64),
        failed: Mutex<bool>,
        seen: Mutex<BTreeMap<String, Vec<(String, u64)>>>,
        in_flight: AtomicUsize,
        most_in_flight: AtomicUsize,
    }

    #[async_trait]
    impl EventFunction for PerKeyOrder {
        async fn invoke_stream(&self, event: &Value) -> Result<BatchReport, InvokeError> {
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_in_flight.fetch_max(now, Ordering::SeqCst);
            // Long enough for the other lanes' invocations to start.
            tokio::time::sleep(Duration::from_millis(30)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut report = BatchReport::default();
            for r in event["Records"].as_array().unwrap() {
                let image = &r["dynamodb"]["NewImage"];
                let pk = image["PK"]["S"].as_str().unwrap().to_owned();
                let sk = image["SK"]["S"].as_str().unwrap().to_owned();
                let version: u64 = image["V"]["N"].as_str().unwrap().parse().unwrap();
                if (&pk, &sk, version) == (&self.fail.0, &self.fail.1, self.fail.2) {
                    let mut failed = self.failed.lock().unwrap();
                    if !*failed {
                        *failed = true;
                        let seq = r["dynamodb"]["SequenceNumber"].as_str().unwrap();
                        report.batch_item_failures = vec![seq.to_owned()];
                        break;
                    }
                }
                self.seen
                    .lock()
                    .unwrap()
                    .entry(pk)
                    .or_default()
                    .push((sk, version));
                report.handled += 1;
            }
            Ok(report)
        }

        async fn invoke_schedule(&self, _: &Value) -> Result<Value, InvokeError> {
            Ok(Value::Null)
        }
    }

    /// Each of 20 partitions gets 3 items written 4 times each, the
    /// partitions' writes interleaved (240 records): at factor 10 the
    /// drain runs lanes at once, retries a failed record by itself, and
    /// every partition's records reach the app exactly in write order.
    #[tokio::test]
    async fn drain_at_factor_10_keeps_each_partition_keys_order() {
        let table = TestTable::with_schema(&TableSchema::new(DEFAULT_KEY)).await;
        let mut written: BTreeMap<String, Vec<(String, u64)>> = BTreeMap::new();
        for version in 0..4u64 {
            for item in 0..3 {
                let puts: Vec<Value> = (0..20)
                    .map(|p| {
                        json!({
                            "PK": {"S": format!("p{p}")},
                            "SK": {"S": format!("i{item}")},
                            "V": {"N": version.to_string()},
                        })
                    })
                    .collect();
                table.put_json(&puts).await;
                for p in 0..20 {
                    written
                        .entry(format!("p{p}"))
                        .or_default()
                        .push((format!("i{item}"), version));
                }
            }
        }
        let app = PerKeyOrder {
            fail: ("p7".into(), "i1".into(), 2),
            failed: Mutex::new(false),
            seen: Mutex::new(BTreeMap::new()),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
        };
        let mut drain = Drain::new(&table).await.with_parallelization(10);
        assert_eq!(drain.parallelization(), 10);
        assert_eq!(drain.run(&app).await, 240);
        assert!(*app.failed.lock().unwrap(), "the failure was injected");
        assert_eq!(*app.seen.lock().unwrap(), written, "each key's order");
        let most = app.most_in_flight.load(Ordering::SeqCst);
        assert!(most > 1, "lanes run at once: at most {most} in flight");
        assert!(most <= 10, "{most}");
        // One lane retried: one report more than the batches it took.
        assert!(
            drain
                .batches
                .iter()
                .any(|b| b.batch_item_failures.len() == 1)
        );
    }

    /// The default drain is unchanged: one batch at a time, stream order.
    #[tokio::test]
    async fn drain_by_default_is_one_batch_at_a_time_in_stream_order() {
        let table = TestTable::with_schema(&TableSchema::new(DEFAULT_KEY)).await;
        let puts: Vec<Value> = (0..30)
            .map(|i| json!({"PK": {"S": format!("p{}", i % 7)}, "SK": {"S": format!("s{i}")}, "V": {"N": i.to_string()}}))
            .collect();
        table.put_json(&puts).await;
        let app = PerKeyOrder {
            fail: (String::new(), String::new(), 0),
            failed: Mutex::new(true),
            seen: Mutex::new(BTreeMap::new()),
            in_flight: AtomicUsize::new(0),
            most_in_flight: AtomicUsize::new(0),
        };
        let mut drain = Drain::new(&table).await;
        assert_eq!(drain.parallelization(), 1);
        assert_eq!(drain.run(&app).await, 30);
        assert_eq!(app.most_in_flight.load(Ordering::SeqCst), 1);
        assert_eq!(drain.batches.len(), 1);
    }
}
