//! `infra/template.yaml` checked against the code:
//!
//! - the sandbox table equals `src/schema.rs` (keys, indexes, stream) plus
//!   TTL on the worker's attribute;
//! - every function sets exactly the environment variables
//!   `src/config.rs` says it reads (`APP.functions()`), runs the right binary,
//!   and a schedule function is pinned to its job;
//! - every stream filter pattern, evaluated by a small evaluator of the
//!   Lambda event-filtering subset used, rejects every worker-owned key kind
//!   (built with `src/keys.rs`) and accepts every service key kind;
//! - every role grants exactly the DynamoDB actions of `APP.functions()`, on
//!   the table ARN and only the index ARNs that function queries;
//! - the event source mapping, schedules, queues, log groups, alarms and
//!   outputs are there, with the settings the issue asks for;
//! - and `APP.functions()` itself is honest: every stream fixture and every
//!   scheduled job is run on DynamoDB Local and the DynamoDB actions and
//!   indexes actually requested are compared with the declaration.
//!
//! `cargo test --test it infra::` (the last test starts DynamoDB Local);
//! `scripts/lint-infra` runs cfn-lint on the same file.

use crate::support;
use worker_testkit::deploy::Deployed;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use nishiki_cli::KEYS;
use nishiki_worker::app::{App, EventError};
use nishiki_worker::config::{Config, ManualClock, env_vars};
use nishiki_worker::jobs::APP;
use nishiki_worker::jobs::expiry::TTL_ATTRIBUTE;
use nishiki_worker::keys::{
    ContainerId, FoodId, GroupId, ItemKey, ItemKind, Job, UserId, Violation,
};
use serde_json::{Value, json};
use support::template::{STREAM_ARN, delivered, filter_patterns, matches, nishiki_stack};
use support::{Drain, TestTable};
use worker_engine::Schedule;
use worker_engine::store::ItemWriter;
use worker_engine::store::{self, DynamoStore, Operation};
use worker_engine::stream::{decode_event, is_stream_event};
use worker_testkit::deploy::{
    FunctionSpec, PARKING_TABLE, PUT_EVENTS_ACTION, STREAM_FUNCTION, STREAM_READ_ACTIONS, action_of,
};
use worker_testkit::infra::statements;
use worker_testkit::template::{
    ACCOUNT, REGION, Stack, is_operations_statement, on_failure_destination_problems,
    operations_problems, strings, table_arn,
};
use worker_toolkit::replay::apply;
use worker_toolkit::replay::snapshot::{load_items, read_snapshot};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

// ------------------------------------------------------------------ the table

#[test]
fn the_sandbox_table_is_the_schema_in_code() {
    let stack = nishiki_stack(&[("CreateTable", "true")]);
    let table = stack.resource("NishikiTable");
    assert_eq!(table["Type"], "AWS::DynamoDB::Table");
    assert_eq!(
        stack.t["Resources"]["NishikiTable"]["Condition"], "CreateTable",
        "the table is created only on request"
    );
    assert_eq!(table["DeletionPolicy"], "Retain");
    assert_eq!(table["UpdateReplacePolicy"], "Retain");

    let mut props = table["Properties"].clone();
    let ttl = props
        .as_object_mut()
        .unwrap()
        .remove("TimeToLiveSpecification")
        .expect("the table has TTL");
    assert_eq!(
        ttl,
        json!({"AttributeName": TTL_ATTRIBUTE, "Enabled": true})
    );
    let want = nishiki_worker::schema::nishiki().to_cloudformation(json!("nishiki-table-dev-db"));
    assert_eq!(
        props, want["Properties"],
        "infra/template.yaml's table drifted from src/schema.rs"
    );

    // The name follows the stage, or the TableName parameter.
    let prod = nishiki_stack(&[("CreateTable", "true"), ("Stage", "prod")]);
    assert_eq!(
        prod.resource("NishikiTable")["Properties"]["TableName"],
        "nishiki-table-prod-db"
    );
    let named = nishiki_stack(&[("CreateTable", "true"), ("TableName", "sandbox-db")]);
    assert_eq!(
        named.resource("NishikiTable")["Properties"]["TableName"],
        "sandbox-db"
    );
    // Without CreateTable the only table is the worker's parking table.
    assert_eq!(
        nishiki_stack(&[])
            .resources_of("AWS::DynamoDB::Table")
            .into_keys()
            .collect::<Vec<_>>(),
        [PARKING_TABLE]
    );
}

// ------------------------------------------------------------------ functions

#[test]
fn every_function_sets_the_variables_its_code_reads() {
    let stack = nishiki_stack(&[]);
    let functions = stack.resources_of("AWS::Serverless::Function");
    let ids: BTreeSet<&str> = functions.keys().map(String::as_str).collect();
    let want: BTreeSet<&str> = APP.functions().iter().map(|f| f.logical_id).collect();
    assert_eq!(
        ids, want,
        "one template function per function of APP.functions()"
    );

    for f in &APP.functions() {
        let env = stack.env(f.logical_id);
        let have: BTreeSet<&str> = env.keys().map(String::as_str).collect();
        let want: BTreeSet<&str> = f.env_vars.iter().copied().collect();
        assert_eq!(have, want, "{}: environment variables", f.logical_id);
        // Everything the code reads, outside local runs, is covered.
        for v in env_vars() {
            if v.is_read_by(f.job) {
                assert!(have.contains(v.name), "{}: {} unset", f.logical_id, v.name);
            }
        }
        assert_eq!(
            env["TABLE_NAME"], "nishiki-table-dev-db",
            "{}",
            f.logical_id
        );
        match f.job {
            Some(job) => assert_eq!(env["WORKER_JOB"], job.as_str(), "{}", f.logical_id),
            None => assert!(!env.contains_key("WORKER_JOB")),
        }
        // A configuration the code accepts.
        let config = Config::from_lookup(&|name| {
            env.get(name).map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        })
        .unwrap_or_else(|e| panic!("{}: {e}", f.logical_id));
        assert_eq!(config.common.job, f.job);

        let raw = &stack.t["Resources"][f.logical_id];
        assert_eq!(raw["Metadata"]["BuildMethod"], "rust-cargolambda");
        assert_eq!(raw["Metadata"]["BuildProperties"]["Binary"], f.binary);
    }
    // With CreateTable the functions use the new table (and depend on it).
    let sandbox = nishiki_stack(&[("CreateTable", "true")]);
    assert_eq!(
        sandbox.env("StreamFunction")["TABLE_NAME"],
        "ref:NishikiTable"
    );
    let globals = stack.resolve(&stack.t["Globals"]["Function"]);
    assert_eq!(globals["Runtime"], "provided.al2023");
    assert_eq!(globals["Handler"], "bootstrap");
    assert_eq!(globals["Architectures"], json!(["x86_64"]));
    let arm = nishiki_stack(&[("Architecture", "arm64")]);
    assert_eq!(
        arm.resolve(&arm.t["Globals"]["Function"]["Architectures"]),
        json!(["arm64"])
    );
}

/// A schedule function pinned to a job refuses a tick for another job
/// before touching the table.
#[tokio::test]
async fn a_pinned_schedule_function_refuses_other_jobs() {
    let store = Arc::new(DynamoStore::new(
        store::local_client("http://127.0.0.1:9"),
        "nowhere",
    ));
    let mut config = Config::for_table("nowhere");
    config.common.job = Some(Job::SweepInvitations);
    let app = App::new(store, config, Arc::new(ManualClock::new(Utc::now())));
    let err = app
        .handle_schedule(&json!({"job": "audit"}), None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EventError::WrongJob {
                pinned: Job::SweepInvitations,
                got: Job::Audit
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("WORKER_JOB=sweep-invitations"));
}

// ------------------------------------------------------------------ filters

#[test]
fn the_pattern_evaluator_follows_lambda_semantics() {
    let p = json!({"dynamodb": {"Keys": {"SK": {"S": ["User", {"prefix": "Group#"}]},
                                          "PK": {"S": [{"anything-but": ["A", "B"]}]}}}});
    let rec =
        |pk: &str, sk: &str| json!({"dynamodb": {"Keys": {"PK": {"S": pk}, "SK": {"S": sk}}}});
    assert!(matches(&p, &rec("u1", "User")));
    assert!(matches(&p, &rec("u1", "Group#g1")));
    assert!(!matches(&p, &rec("u1", "Users")));
    assert!(!matches(&p, &rec("A", "User")));
    assert!(!matches(
        &p,
        &json!({"dynamodb": {"Keys": {"SK": {"S": "User"}}}})
    ));
    assert!(matches(&json!({"a": [{"exists": false}]}), &json!({})));
    assert!(!matches(&json!({"a": [{"exists": true}]}), &json!({})));
}

fn stream_filters(stack: &Stack) -> Vec<Value> {
    let f = stack.resource(STREAM_FUNCTION);
    let events = f["Properties"]["Events"].as_object().unwrap();
    let sources: Vec<&Value> = events
        .values()
        .filter(|e| e["Type"] == "DynamoDB")
        .collect();
    assert_eq!(sources.len(), 1, "one DynamoDB event source");
    filter_patterns(&sources[0]["Properties"])
}

fn record_of(key: &ItemKey) -> Value {
    let (pk, sk) = key.encode();
    json!({
        "eventName": "MODIFY",
        "eventSource": "aws:dynamodb",
        "dynamodb": {"Keys": {"PK": {"S": pk}, "SK": {"S": sk}}, "StreamViewType": "NEW_AND_OLD_IMAGES"}
    })
}

/// Examples of every key kind, built with `src/keys.rs`.
fn example_keys() -> Vec<ItemKey> {
    let (user, group, container, food) = (
        UserId::random(),
        GroupId::random(),
        ContainerId::random(),
        FoodId::random(),
    );
    let mut keys = vec![
        ItemKey::User(user),
        ItemKey::Membership { user, group },
        ItemKey::Group(group),
        ItemKey::ContainerLink { group, container },
        ItemKey::InvitationLink(group),
        ItemKey::Container(container),
        ItemKey::Category,
        ItemKey::ExpiringFood {
            group,
            container,
            food,
        },
        ItemKey::ExpiryReminder {
            date: NaiveDate::from_ymd_opt(2024, 3, 25).unwrap(),
            container,
            food,
        },
    ];
    let subjects = keys.clone();
    for violation in Violation::ALL {
        for subject in &subjects {
            keys.push(ItemKey::AuditSuspect {
                violation,
                subject: Box::new(subject.clone()),
            });
        }
    }
    keys.extend(Job::ALL.map(ItemKey::Checkpoint));
    keys
}

#[test]
fn stream_filters_drop_worker_items_and_keep_service_items() {
    let filters = stream_filters(&nishiki_stack(&[]));
    let passes = |record: &Value| delivered(&filters, record);
    let mut kinds = BTreeSet::new();
    for key in example_keys() {
        kinds.insert(key.kind());
        let record = record_of(&key);
        assert_eq!(
            passes(&record),
            !key.kind().is_worker_owned(),
            "{:?} {:?}",
            key.kind(),
            key.encode()
        );
    }
    assert_eq!(kinds.len(), 11, "every ItemKind is covered");
    for kind in [
        ItemKind::ExpiringFood,
        ItemKind::ExpiryReminder,
        ItemKind::AuditSuspect,
        ItemKind::Checkpoint,
    ] {
        assert!(kinds.contains(&kind));
    }

    // Every record of the captured fixtures: service kinds pass, the
    // worker's own do not.
    let mut seen = 0;
    for entry in std::fs::read_dir(root().join("events/stream")).unwrap() {
        let path = entry.unwrap().path();
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for r in v["Records"].as_array().into_iter().flatten() {
            let keys = &r["dynamodb"]["Keys"];
            let (Some(pk), Some(sk)) = (keys["PK"]["S"].as_str(), keys["SK"]["S"].as_str()) else {
                continue;
            };
            let Ok(key) = ItemKey::decode(pk, sk) else {
                continue;
            };
            seen += 1;
            assert_eq!(
                passes(r),
                !key.kind().is_worker_owned(),
                "{}: {pk} / {sk}",
                path.display()
            );
        }
    }
    assert!(seen >= 20, "the fixtures have records ({seen})");
}

// ------------------------------------------------------------------ roles

#[test]
fn every_role_grants_exactly_what_its_function_calls() {
    for (bus, stack) in [
        ("", nishiki_stack(&[])),
        (
            "nishiki-events",
            nishiki_stack(&[("NotifyEventBus", "nishiki-events")]),
        ),
    ] {
        for f in &APP.functions() {
            let mut data_actions = BTreeSet::new();
            let mut data_resources = BTreeSet::new();
            let mut stream_read = false;
            let mut put_events = false;
            for s in statements(&stack, f) {
                if is_operations_statement(&s) {
                    continue; // tracing and parking: operations_problems
                }
                assert_eq!(s["Effect"], "Allow");
                let actions = strings(&s["Action"]);
                let resources = strings(&s["Resource"]);
                for a in &actions {
                    assert!(!a.contains('*'), "{}: wildcard action {a}", f.logical_id);
                }
                assert!(
                    !resources.iter().any(|r| r == "*"),
                    "{}: Resource \"*\" in {s}",
                    f.logical_id
                );
                let stream: BTreeSet<String> =
                    STREAM_READ_ACTIONS.iter().map(|a| a.to_string()).collect();
                if actions == stream {
                    assert!(
                        f.reads_stream,
                        "{}: stream read without a stream",
                        f.logical_id
                    );
                    assert_eq!(resources, BTreeSet::from([STREAM_ARN.to_owned()]));
                    stream_read = true;
                } else if actions.iter().any(|a| a.starts_with("dynamodb:")) {
                    assert!(
                        actions.iter().all(|a| a.starts_with("dynamodb:")),
                        "{}: {actions:?}",
                        f.logical_id
                    );
                    data_actions.extend(actions);
                    data_resources.extend(resources);
                } else if actions.contains(PUT_EVENTS_ACTION) {
                    assert!(f.publishes_events, "{}: events:PutEvents", f.logical_id);
                    assert_eq!(
                        resources,
                        BTreeSet::from([format!(
                            "arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{bus}"
                        )])
                    );
                    put_events = true;
                } else {
                    // Its own failure queue and log group, nothing else.
                    for a in &actions {
                        assert!(
                            [
                                "sqs:SendMessage",
                                "logs:CreateLogStream",
                                "logs:PutLogEvents"
                            ]
                            .contains(&a.as_str()),
                            "{}: unexpected action {a}",
                            f.logical_id
                        );
                    }
                    for r in &resources {
                        assert!(r.starts_with("getatt:"), "{}: {r}", f.logical_id);
                    }
                }
            }
            let want: BTreeSet<String> = f.dynamodb_actions.iter().map(|a| a.to_string()).collect();
            assert_eq!(data_actions, want, "{}: DynamoDB actions", f.logical_id);
            let table = table_arn("nishiki-table-dev-db");
            let mut want_resources = BTreeSet::from([table.clone()]);
            want_resources.extend(f.indexes.iter().map(|i| format!("{table}/index/{i}")));
            assert_eq!(
                data_resources, want_resources,
                "{}: resources",
                f.logical_id
            );
            assert_eq!(stream_read, f.reads_stream, "{}", f.logical_id);
            assert_eq!(
                put_events,
                f.publishes_events && !bus.is_empty(),
                "{}: PutEvents only with a bus",
                f.logical_id
            );
        }
    }
}

// ------------------------------------------------------------------ event sources, schedules, operations

/// Parked, traced, logged through Lambda's controls and alarmed on the
/// worker's own metrics (worker_testkit::template::operations_problems).
#[test]
fn the_template_parks_traces_and_alarms_on_the_workers_metrics() {
    let schedule_of = |job: Job| APP.schedule(job).expect("scheduled").schedule;
    let stack = nishiki_stack(&[]);
    let problems = operations_problems(&stack, APP.namespace, &APP.functions(), &schedule_of);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check sees a missing alarm, a parking table without SSE or
    // point-in-time recovery, a queue not encrypted, a skipped check that
    // guards the data, and an environment-faults alarm over 5 minutes.
    let mut t = stack.t.clone();
    t["Resources"]
        .as_object_mut()
        .unwrap()
        .remove("StreamRecordsParkedAlarm");
    t["Resources"]["AuditEnvironmentFaultsAlarm"]["Properties"]["Period"] = json!(300);
    let parking = t["Resources"][PARKING_TABLE]["Properties"]
        .as_object_mut()
        .unwrap();
    parking.remove("SSESpecification");
    parking.remove("PointInTimeRecoverySpecification");
    t["Resources"][PARKING_TABLE]["Metadata"]["checkov"]["skip"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "CKV_AWS_28", "comment": "no backups"}));
    t["Resources"]["AuditDlq"]["Properties"]["SqsManagedSseEnabled"] = json!(false);
    let broken = Stack::new(t, "nishiki-worker-dev", STREAM_ARN, &[]);
    let problems = operations_problems(&broken, APP.namespace, &APP.functions(), &schedule_of);
    assert_eq!(problems.len(), 6, "{problems:?}");
    assert!(problems[0].contains("SSE"), "{problems:?}");
    assert!(problems[1].contains("point-in-time"), "{problems:?}");
    assert!(problems[2].contains("AuditDlq: encrypted"), "{problems:?}");
    assert!(problems[3].contains("CKV_AWS_28 guards"), "{problems:?}");
    assert!(problems[4].contains("RecordsParked"), "{problems:?}");
    assert!(
        problems[5].contains("AuditFunction: EnvironmentFaults alarm"),
        "{problems:?}"
    );
}

#[test]
fn the_stream_event_source_is_safe() {
    let stack = nishiki_stack(&[]);
    let f = stack.resource(STREAM_FUNCTION);
    let source = f["Properties"]["Events"]
        .as_object()
        .unwrap()
        .values()
        .find(|e| e["Type"] == "DynamoDB")
        .unwrap()["Properties"]
        .clone();
    assert_eq!(source["Stream"], STREAM_ARN);
    assert_eq!(source["StartingPosition"], "TRIM_HORIZON");
    assert_eq!(
        source["FunctionResponseTypes"],
        json!(["ReportBatchItemFailures"])
    );
    assert_eq!(source["BisectBatchOnFunctionError"], true);
    let retries = source["MaximumRetryAttempts"].as_i64().unwrap();
    assert!((0..=100).contains(&retries), "bounded retries");
    let age = source["MaximumRecordAgeInSeconds"].as_i64().unwrap();
    assert!((60..=86_400).contains(&age), "bounded record age");
    let batch = source["BatchSize"].as_i64().unwrap();
    assert!((1..=1000).contains(&batch));
    assert!(source["MaximumBatchingWindowInSeconds"].as_i64().unwrap() <= 300);
    // By default the queue, as before (OnFailureDestination: see
    // stream_failures_go_to_the_queue_or_an_encrypted_bucket). No Type: SAM's
    // takes no intrinsic, and the role holds the grant.
    assert!(
        source["DestinationConfig"]["OnFailure"]
            .get("Type")
            .is_none()
    );
    assert_eq!(
        source["DestinationConfig"]["OnFailure"]["Destination"],
        "getatt:StreamFailureQueue.Arn"
    );
    // Each setting carries a one-line reason in the template.
    let text = std::fs::read_to_string(root().join("infra/template.yaml")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for setting in [
        "StartingPosition:",
        "BatchSize:",
        "MaximumBatchingWindowInSeconds:",
        "FunctionResponseTypes:",
        "BisectBatchOnFunctionError:",
        "MaximumRetryAttempts: 10",
        "MaximumRecordAgeInSeconds:",
        "ParallelizationFactor:",
        "DestinationConfig:",
        "FilterCriteria:",
    ] {
        let i = lines
            .iter()
            .position(|l| l.trim_start().starts_with(setting) && l.starts_with("            "))
            .unwrap_or_else(|| panic!("{setting} in the event source"));
        assert!(
            lines[i - 1].trim_start().starts_with('#'),
            "{setting} has a comment with its reason"
        );
    }
    // With CreateTable the mapping reads the new table's stream.
    let sandbox = nishiki_stack(&[("CreateTable", "true")]);
    let s = sandbox.resource(STREAM_FUNCTION)["Properties"]["Events"]["TableStream"]["Properties"]
        ["Stream"]
        .clone();
    assert_eq!(s, "getatt:NishikiTable.StreamArn");
    // Batches of a shard in flight at once: the StreamParallelizationFactor
    // parameter, 1 (a shard in order) unless deployed with up to 10.
    let p = &stack.t["Parameters"]["StreamParallelizationFactor"];
    assert_eq!(
        (
            p["Default"].as_u64(),
            p["MinValue"].as_u64(),
            p["MaxValue"].as_u64()
        ),
        (Some(1), Some(1), Some(10)),
        "StreamParallelizationFactor: default 1, allowed 1..10"
    );
    assert_eq!(source["ParallelizationFactor"], "1");
    let ten = nishiki_stack(&[("StreamParallelizationFactor", "10")]);
    assert_eq!(
        ten.resource(STREAM_FUNCTION)["Properties"]["Events"]["TableStream"]["Properties"]["ParallelizationFactor"],
        "10"
    );
}

/// The queue by default; with OnFailureDestination=bucket an encrypted,
/// private, TLS-only bucket whose objects expire
/// (worker_testkit::template::on_failure_destination_problems).
#[test]
fn stream_failures_go_to_the_queue_or_an_encrypted_bucket() {
    let ids: Vec<&str> = APP.functions().iter().map(|f| f.logical_id).collect();
    let problems = on_failure_destination_problems(&nishiki_stack, &ids);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The check sees a bucket without encryption or expiry, and a role that
    // may not write to it.
    let mut t = support::template::template();
    let bucket = &mut t["Resources"]["StreamFailureBucket"]["Properties"];
    bucket.as_object_mut().unwrap().remove("BucketEncryption");
    bucket["LifecycleConfiguration"]["Rules"][0]["Status"] = json!("Disabled");
    t["Resources"]["StreamRole"]["Properties"]["Policies"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    let broken = |o: &[(&str, &str)]| Stack::new(t.clone(), "nishiki-worker-dev", STREAM_ARN, o);
    let problems = on_failure_destination_problems(&broken, &ids);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems[0].contains("encrypted"), "{problems:?}");
    assert!(problems[1].contains("lifecycle"), "{problems:?}");
    assert!(
        problems[2].contains("StreamFunction may on S3"),
        "{problems:?}"
    );
}

/// With OnFailureDestination=bucket an object holds Lambda's on-failure
/// record with the batch itself beside it: `redrive --failure-message`
/// reads a downloaded object as it reads the queue's message.
#[test]
fn a_bucket_record_is_read_as_the_queue_message_is() {
    let message = worker_testkit::on_failure_message(STREAM_ARN, "shardId-1", "100", "300", 3);
    let mut object = message.clone();
    object["payload"] = json!({"Records": []});
    assert_eq!(
        worker_toolkit::failure_message::parse_all(&object).unwrap(),
        worker_toolkit::failure_message::parse_all(&message).unwrap()
    );
}

#[test]
fn every_job_has_a_schedule_with_retries_and_a_dead_letter_queue() {
    let stack = nishiki_stack(&[("ExpiryTimeZone", "Asia/Tokyo")]);
    let schedules = stack.resources_of("AWS::Scheduler::Schedule");
    assert_eq!(schedules.len(), Job::ALL.len());
    let queues = stack.resources_of("AWS::SQS::Queue");
    for job in Job::ALL {
        let f = APP.function_of(job);
        let target_arn = format!("getatt:{}.Arn", f.logical_id);
        let (id, s) = schedules
            .iter()
            .find(|(_, s)| s["Properties"]["Target"]["Arn"] == target_arn.as_str())
            .unwrap_or_else(|| panic!("no schedule for {job}"));
        let p = &s["Properties"];
        let input = p["Target"]["Input"].as_str().unwrap();
        assert!(input.contains("<aws.scheduler.scheduled-time>"), "{id}");
        let tick: Value = serde_json::from_str(
            &input.replace("<aws.scheduler.scheduled-time>", "2024-03-25T00:05:00Z"),
        )
        .unwrap();
        let tick = worker_engine::schedule::parse_tick::<Job>(&tick).unwrap();
        assert_eq!(tick.job, job, "{id}");
        assert!(tick.scheduled_time.is_some(), "{id}");
        let retry = &p["Target"]["RetryPolicy"];
        assert!(retry["MaximumRetryAttempts"].as_i64().is_some(), "{id}");
        assert!(retry["MaximumEventAgeInSeconds"].as_i64().is_some(), "{id}");
        let dlq = p["Target"]["DeadLetterConfig"]["Arn"].as_str().unwrap();
        let queue = dlq
            .strip_prefix("getatt:")
            .and_then(|q| q.strip_suffix(".Arn"))
            .unwrap();
        assert!(queues.contains_key(queue), "{id}: DLQ {queue}");
        // The function's failed runs go to the same queue.
        let func = stack.resource(f.logical_id);
        assert_eq!(
            func["Properties"]["EventInvokeConfig"]["DestinationConfig"]["OnFailure"]["Destination"],
            dlq
        );
        let expr = p["ScheduleExpression"].as_str().unwrap();
        let spec = APP.schedule(job).expect("every job is scheduled");
        assert_eq!(spec.function, f.logical_id, "{id}");
        match spec.schedule {
            Schedule::Rate(rate) => {
                assert_eq!(expr, rate, "{id}");
                assert_eq!(p["State"], "ENABLED");
            }
            Schedule::Daily { zone_env } => {
                assert!(expr.starts_with("cron("), "{id}: daily cron");
                assert_eq!(zone_env, "EXPIRY_TIME_ZONE", "{id}: the zone parameter");
                assert_eq!(p["ScheduleExpressionTimezone"], "Asia/Tokyo", "{id}");
                assert_eq!(p["State"], "ENABLED");
            }
            Schedule::OnDemand => assert_eq!(p["State"], "DISABLED", "{id} runs on demand"),
        }
    }
    // The first deployment keeps every schedule off until the backfill ran.
    let first = nishiki_stack(&[("SchedulesState", "DISABLED")]);
    for (id, s) in first.resources_of("AWS::Scheduler::Schedule") {
        assert_eq!(s["Properties"]["State"], "DISABLED", "{id}");
    }
}

#[test]
fn logs_alarms_and_outputs_cover_every_function_and_queue() {
    let stack = nishiki_stack(&[]);
    let alarms = stack.resources_of("AWS::CloudWatch::Alarm");
    let alarm_on = |metric: &str, dim: &str, value: &str| {
        alarms.values().any(|a| {
            let p = &a["Properties"];
            p["MetricName"] == metric
                && p["Dimensions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|d| d["Name"] == dim && d["Value"] == value)
        })
    };
    let outputs = stack.resolve(&stack.t["Outputs"]);
    let output_values: BTreeSet<String> = outputs
        .as_object()
        .unwrap()
        .values()
        .map(|o| o["Value"].as_str().unwrap().to_owned())
        .collect();
    let logs = stack.resources_of("AWS::Logs::LogGroup");
    for f in &APP.functions() {
        let name = format!("ref:{}", f.logical_id);
        assert!(
            alarm_on("Errors", "FunctionName", &name),
            "{}: Errors alarm",
            f.logical_id
        );
        assert!(output_values.contains(&name), "{}: output", f.logical_id);
        let func = stack.resource(f.logical_id);
        let group = func["Properties"]["LoggingConfig"]["LogGroup"]
            .as_str()
            .and_then(|g| g.strip_prefix("ref:"))
            .unwrap_or_else(|| panic!("{}: LoggingConfig.LogGroup", f.logical_id));
        let lg = &logs[group];
        assert!(
            lg["Properties"]["RetentionInDays"]
                .as_str()
                .is_some_and(|d| d == "30")
        );
        assert_eq!(
            lg["Properties"]["LogGroupName"],
            format!(
                "/aws/lambda/{}",
                func["Properties"]["FunctionName"].as_str().unwrap()
            )
        );
    }
    assert!(alarm_on(
        "IteratorAge",
        "FunctionName",
        "ref:StreamFunction"
    ));
    let queues = stack.resources_of("AWS::SQS::Queue");
    assert_eq!(queues.len(), 5);
    for q in queues.keys() {
        let name = format!("getatt:{q}.QueueName");
        assert!(
            alarm_on("ApproximateNumberOfMessagesVisible", "QueueName", &name),
            "{q}: queue alarm"
        );
        assert!(output_values.contains(&name), "{q}: output");
    }
}

// ------------------------------------------------------------------ honest declarations

/// One entry of `events/manifest.json`.
#[derive(Debug, serde::Deserialize)]
struct Fixture {
    name: String,
    events: Vec<String>,
    snapshot: String,
    now: String,
    #[serde(rename = "applyWrites")]
    apply_writes: bool,
    #[serde(default)]
    env: Vec<String>,
}

#[derive(Debug, Default)]
struct Used {
    actions: BTreeSet<&'static str>,
    indexes: BTreeSet<String>,
}

fn record_use(used: &mut BTreeMap<&'static str, Used>, f: &FunctionSpec<Job>, store: &DynamoStore) {
    let u = used.entry(f.logical_id).or_default();
    let m = store.metrics().snapshot();
    for (n, op) in [
        (m.get_item, Operation::GetItem),
        (m.put_item, Operation::PutItem),
        (m.delete_item, Operation::DeleteItem),
        (m.update_item, Operation::UpdateItem),
        (m.query, Operation::Query),
        (m.scan, Operation::Scan),
        (m.batch_write_item, Operation::BatchWriteItem),
        (m.batch_get_item, Operation::BatchGetItem),
        (m.execute_statement, Operation::ExecuteStatement),
    ] {
        if n > 0 {
            u.actions.insert(action_of(op));
        }
    }
    // Guarded writes (TransactWriteItems): the checks, and the deletes
    // beside them (Nishiki's guarded writes are all deletes).
    if m.transact_write_items > 0 {
        u.actions.insert(action_of(Operation::TransactWriteItems));
        u.actions.insert(action_of(Operation::DeleteItem));
    }
    for (op, index) in store.metrics().indexes() {
        // A request on a missing index is still a request IAM checks.
        u.actions.insert(action_of(op));
        u.indexes.insert(index);
    }
}

/// The worker as a function runs it: its own store (fresh metrics), the
/// configuration the template gives it (`WORKER_JOB` for a job), notify off.
fn function_app(
    table: &TestTable,
    job: Option<Job>,
    env: &[String],
    now: DateTime<Utc>,
) -> (App, Arc<DynamoStore>) {
    let store = Arc::new(DynamoStore::new(
        store::local_client(&table.endpoint),
        &table.name,
    ));
    let mut vars: HashMap<String, String> = env
        .iter()
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    vars.insert("TABLE_NAME".into(), table.name.clone());
    if let Some(job) = job {
        vars.insert("WORKER_JOB".into(), job.as_str().into());
    }
    let config = Config::from_lookup(&|n| vars.get(n).cloned()).expect("fixture configuration");
    assert!(config.expiry.notify_event_bus.is_none());
    let app = App::new(store.clone(), config, Arc::new(ManualClock::new(now)));
    (app, store)
}

async fn load(table: &TestTable, snapshot: &Path) {
    let items = read_snapshot(snapshot, KEYS).expect("snapshot");
    load_items(table.store.clone(), items, 4, None)
        .await
        .expect("load snapshot");
}

/// Runs every stream fixture (after the service writes it stands for, as
/// `replay --apply-writes` does) and every scheduled job on every fixture
/// table (with and without the invitation-expiry index, before and after
/// the audit's grace period), recording what each function asked DynamoDB
/// for; the declaration in the jobs' `SPEC`s must cover it, and everything
/// declared must be used (or be a documented fallback).
#[tokio::test]
async fn declared_actions_are_the_ones_the_code_uses() {
    let events = root().join("events");
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(events.join("manifest.json")).unwrap())
            .unwrap();
    let fixtures: Vec<Fixture> = serde_json::from_value(manifest["fixtures"].clone()).unwrap();
    let mut used: BTreeMap<&'static str, Used> = BTreeMap::new();

    for f in &fixtures {
        let table = support::nishiki_table().await;
        load(&table, &events.join(&f.snapshot)).await;
        let now: DateTime<Utc> = f.now.parse().expect("now");
        for file in &f.events {
            let v: Value =
                serde_json::from_str(&std::fs::read_to_string(events.join(file)).unwrap()).unwrap();
            if is_stream_event(&v) {
                if f.apply_writes
                    && let Ok(decoded) = decode_event(&v)
                {
                    let plan = apply::plan(&decoded);
                    apply::apply(table.store.as_ref(), &plan)
                        .await
                        .expect("apply the service's writes");
                }
                let (app, store) = function_app(&table, None, &f.env, now);
                let _ = app.handle_stream(&v, None).await;
                record_use(&mut used, &APP.stream_function(), &store);
            } else if let Ok(tick) = worker_engine::schedule::parse_tick::<Job>(&v) {
                let (app, store) = function_app(&table, Some(tick.job), &f.env, now);
                app.handle_schedule(&v, None)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {file}: {e}", f.name));
                record_use(&mut used, &APP.function_of(tick.job), &store);
            }
        }
    }

    let now: DateTime<Utc> = "2024-03-25T09:00:00Z".parse().unwrap();
    let mut tables: Vec<PathBuf> = std::fs::read_dir(events.join("tables"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    tables.sort();
    for path in &tables {
        for schema in [
            nishiki_worker::schema::nishiki(),
            nishiki_worker::schema::without_invitation_expiry_index(),
        ] {
            let table = TestTable::with_schema(&schema).await;
            load(&table, path).await;
            for at in [now, now + Duration::days(2), now + Duration::days(10)] {
                for job in Job::ALL {
                    let (app, store) = function_app(&table, Some(job), &[], at);
                    app.run_job(job, None)
                        .await
                        .unwrap_or_else(|e| panic!("{}: {job}: {e}", path.display()));
                    record_use(&mut used, &APP.function_of(job), &store);
                }
            }
        }
    }

    // The service deleting every user, group and container item alone (what
    // it leaves behind is the cascade's work: memberships, links, the
    // group's invitation link, flags), read from the table's stream as Lambda
    // would.
    for path in &tables {
        let table = support::nishiki_table().await;
        load(&table, path).await;
        let mut drain = Drain::new(&table).await;
        drain.skip_existing().await;
        for (pk, sk) in table.keys().await {
            if ["User", "Group", "Container"].contains(&sk.as_str()) {
                table
                    .store
                    .delete(&ItemKey::decode(&pk, &sk).unwrap().to_attributes(), None)
                    .await
                    .unwrap();
            }
        }
        let (app, store) = function_app(&table, None, &[], now);
        assert!(
            drain.run(&app).await > 0,
            "{}: the deletes reach the stream",
            path.display()
        );
        record_use(&mut used, &APP.stream_function(), &store);
    }

    let mut problems = Vec::new();
    for f in &APP.functions() {
        let u = used
            .get(f.logical_id)
            .unwrap_or_else(|| panic!("{} never ran", f.logical_id));
        for a in &u.actions {
            if !f.dynamodb_actions.contains(a) {
                problems.push(format!("{}: uses {a}, not declared", f.logical_id));
            }
        }
        for i in &u.indexes {
            if !f.indexes.contains(&i.as_str()) {
                problems.push(format!("{}: uses index {i}, not declared", f.logical_id));
            }
        }
        for a in &f.dynamodb_actions {
            if !u.actions.contains(a) && !f.fallbacks.iter().any(|fb| fb.action == *a) {
                problems.push(format!(
                    "{}: declares {a}, never used (and not a documented fallback)",
                    f.logical_id
                ));
            }
        }
        for i in &f.indexes {
            if !u.indexes.contains(*i) {
                problems.push(format!("{}: declares index {i}, never used", f.logical_id));
            }
        }
        eprintln!(
            "{}: used {:?} on indexes {:?}",
            f.logical_id, u.actions, u.indexes
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
