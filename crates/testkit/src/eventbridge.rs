//! Events read back from a real EventBridge: a bus of its own on moto's
//! server ([`crate::moto`]), a rule with an event pattern (as a deployment
//! would route an app's events), and an SQS queue as the rule's target.
//! What a publisher put on the bus and the rule matched arrives in the
//! queue as the event EventBridge delivers (`source`, `detail-type`,
//! `detail`, `region`, `time`, ...; moto leaves out `account`).
//! [`run_schedule_function`] runs an app's schedule bootstrap publishing
//! to such a bus, as Lambda runs it.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_eventbridge::types::Target;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;
use worker_engine::EventBridgePublisher;

use crate::TestTable;
use crate::moto::Moto;
use crate::runtime_api::{Running, RuntimeApi, function_command};

/// A bus whose events matching a pattern land in a queue.
pub struct RoutedBus {
    /// The bus's name (unique to this test process and call).
    pub bus: String,
    /// The rule on the bus that routes the matching events to the queue
    /// (`<bus>-to-queue`).
    pub rule: String,
    /// The URL of the rule's target queue on moto, which
    /// [`RoutedBus::received`] reads the delivered events from.
    pub queue_url: String,
    sqs: aws_sdk_sqs::Client,
}

impl RoutedBus {
    /// A bus of its own on moto's server ([`crate::moto::moto`]) routing
    /// `source`'s `detail_type` events to a queue ([`pattern`]), and moto.
    pub async fn of_events(name: &str, source: &str, detail_type: &str) -> (&'static Moto, Self) {
        let moto = crate::moto::moto().await;
        (
            moto,
            RoutedBus::new(moto, name, &pattern(source, detail_type)).await,
        )
    }

    /// A publisher to moto's EventBridge (the bus is the settings').
    pub fn publisher(moto: &Moto) -> Arc<EventBridgePublisher> {
        Arc::new(EventBridgePublisher::with_client(moto.eventbridge()))
    }

    /// A new bus `<name>-<pid>-<n>` on `moto`, a rule on it with
    /// `pattern` (an EventBridge event pattern) and a queue as its target.
    pub async fn new(moto: &Moto, name: &str, pattern: &Value) -> RoutedBus {
        static N: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let events = moto.eventbridge();
        let sqs = moto.sqs();
        events
            .create_event_bus()
            .name(&id)
            .send()
            .await
            .expect("CreateEventBus");
        let queue_url = sqs
            .create_queue()
            .queue_name(&id)
            .send()
            .await
            .expect("CreateQueue")
            .queue_url
            .expect("a queue URL");
        let queue_arn = sqs
            .get_queue_attributes()
            .queue_url(&queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("GetQueueAttributes")
            .attributes
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .expect("the queue's ARN");
        let rule = format!("{id}-to-queue");
        events
            .put_rule()
            .name(&rule)
            .event_bus_name(&id)
            .event_pattern(pattern.to_string())
            .send()
            .await
            .expect("PutRule");
        let put = events
            .put_targets()
            .rule(&rule)
            .event_bus_name(&id)
            .targets(
                Target::builder()
                    .id("queue")
                    .arn(queue_arn)
                    .build()
                    .expect("id and arn are set"),
            )
            .send()
            .await
            .expect("PutTargets");
        assert_eq!(put.failed_entry_count, 0, "PutTargets: {put:?}");
        RoutedBus {
            bus: id,
            rule,
            queue_url,
            sqs,
        }
    }

    /// The events that reached the queue: read (and deleted) until `n`
    /// arrived, then until the queue stays empty for a second, so an extra
    /// event is seen too; a test failure after `timeout` without `n`.
    pub async fn received(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        let mut events = Vec::new();
        loop {
            let got = self
                .sqs
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(1)
                .send()
                .await
                .expect("ReceiveMessage");
            let messages = got.messages.unwrap_or_default();
            let empty = messages.is_empty();
            for m in messages {
                let body = m.body.as_deref().expect("a message body");
                events.push(serde_json::from_str(body).expect("the event as JSON"));
                if let Some(handle) = m.receipt_handle {
                    self.sqs
                        .delete_message()
                        .queue_url(&self.queue_url)
                        .receipt_handle(handle)
                        .send()
                        .await
                        .expect("DeleteMessage");
                }
            }
            if events.len() >= n && empty {
                return events;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} events reached the queue of bus {} within {timeout:?}",
                events.len(),
                self.bus
            );
        }
    }
}

/// The rule a deployment puts on a bus for an app's events: those of
/// `source` and `detail_type`.
pub fn pattern(source: &str, detail_type: &str) -> Value {
    serde_json::json!({"source": [source], "detail-type": [detail_type]})
}

/// The details of `events` (as the queue received them) by their
/// `detail.<field>`, each checked to be of `source` and `detail_type`, in
/// moto's region, and there once.
pub fn details_by(
    events: Vec<Value>,
    source: &str,
    detail_type: &str,
    field: &str,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for e in events {
        assert_eq!(e["source"], source, "{e}");
        assert_eq!(e["detail-type"], detail_type, "{e}");
        assert_eq!(e["region"], crate::moto::REGION, "{e}");
        let k = e["detail"][field].as_str().expect(field).to_owned();
        assert!(out.insert(k, e["detail"].clone()).is_none(), "twice: {e}");
    }
    out
}

/// An app's schedule function run as Lambda runs it, publishing to a bus
/// on moto: its bootstrap `binary` on a local Runtime API, pinned to `job`
/// (`WORKER_JOB`, also the function's name) at `now` (`WORKER_NOW`), on
/// `table`, `NOTIFY_EVENT_BUS` the bus of `routed`, EventBridge (and STS,
/// SQS, S3), the region and credentials those of `moto`. Invoked once with
/// `payload`; its answer (a test failure unless it answers within 120 s).
pub async fn run_schedule_function(
    binary: &Path,
    job: &str,
    now: &str,
    table: &TestTable,
    routed: &RoutedBus,
    moto: &Moto,
    payload: &Value,
) -> Value {
    let api = RuntimeApi::start().await.expect("runtime API");
    let mut cmd = function_command(binary, &api);
    cmd.env("AWS_LAMBDA_FUNCTION_NAME", job)
        .env("TABLE_NAME", &table.name)
        .env("AWS_ENDPOINT_URL_DYNAMODB", &table.endpoint)
        .env("WORKER_JOB", job)
        .env("WORKER_NOW", now)
        .env("NOTIFY_EVENT_BUS", &routed.bus)
        .stderr(Stdio::inherit());
    for (k, v) in moto.env() {
        cmd.env(k, v);
    }
    let _function = Running(cmd.spawn().expect("start the function"));
    let outcome = tokio::time::timeout(
        Duration::from_secs(120),
        api.invoke(
            serde_json::to_vec(payload).expect("JSON"),
            Duration::from_secs(60),
        ),
    )
    .await
    .expect("the function answers within 120 s");
    outcome.json()
}
