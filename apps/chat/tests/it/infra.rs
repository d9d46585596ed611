//! `infra/chat.yaml` checked against the code: the six tables are the
//! schemas in code, each function runs its binary with exactly the
//! variables its description lists, each role grants, table by table,
//! exactly the actions and indexes of `app::table_access`, and every
//! table's stream has its own event source mapping that reports batch
//! item failures; beside them the worker's parking table, tracing, Lambda's
//! logging controls and the alarms on the worker's own metrics
//! (`worker_testkit::template::operations_problems`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use worker_testkit::deploy::Deployed;

use chat_worker::app::{APP, table_access};
use chat_worker::keys::Job;
use chat_worker::schema::Table;
use serde_json::{Value, json};
use worker_testkit::deploy::{
    FunctionSpec, JOB_ALARM_METRICS, PARKING_TABLE, STREAM_ALARM_METRICS,
};
use worker_testkit::template::{
    self, Stack, is_operations_statement, operations_problems, strings,
};

fn stack() -> Stack {
    let t = template::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/chat.yaml"));
    Stack::new(t, "chat-worker-dev", "", &[])
}

fn functions() -> Vec<FunctionSpec<Job>> {
    APP.check().expect("the app's description holds together");
    APP.functions()
}

#[test]
fn the_tables_are_the_schemas_in_code() {
    let stack = stack();
    let tables = stack.resources_of("AWS::DynamoDB::Table");
    let mut want: BTreeSet<&str> = Table::ALL.iter().map(|t| t.logical_id()).collect();
    want.insert(PARKING_TABLE);
    assert_eq!(
        tables.keys().map(String::as_str).collect::<BTreeSet<_>>(),
        want,
        "the six tables and the worker's parking table"
    );
    for t in Table::ALL {
        let r = stack.resource(t.logical_id());
        let mut expected = t.schema().to_cloudformation(Value::Null);
        let mut got = r.clone();
        expected["Properties"]
            .as_object_mut()
            .unwrap()
            .remove("TableName");
        let props = got["Properties"].as_object_mut().unwrap();
        props.remove("TableName");
        // The live tables: point-in-time recovery on (the worker's cascades
        // delete items; a mistaken run can be undone by a restore).
        assert_eq!(
            props.remove("PointInTimeRecoverySpecification"),
            Some(json!({"PointInTimeRecoveryEnabled": true})),
            "{t:?}: point-in-time recovery"
        );
        // Metadata: checkov's decisions (operations_problems reads them).
        got.as_object_mut().unwrap().remove("Metadata");
        assert_eq!(got, expected, "{t:?}");
    }
}

#[test]
fn every_function_runs_its_binary_with_exactly_its_variables() {
    let stack = stack();
    for f in functions() {
        let r = stack.resource(f.logical_id);
        let binary = if f.job.is_some() {
            "chat-schedule"
        } else {
            "chat-stream"
        };
        assert_eq!(r["Metadata"]["BuildProperties"]["Binary"], binary);
        let env = stack.env(f.logical_id);
        let names: BTreeSet<&str> = env.keys().map(String::as_str).collect();
        let expected: BTreeSet<&str> = f.env_vars.iter().copied().collect();
        assert_eq!(names, expected, "{}", f.logical_id);
        for t in Table::ALL {
            assert_eq!(
                env[t.env_var()],
                json!(format!("ref:{}", t.logical_id())),
                "{} {t:?}",
                f.logical_id
            );
        }
        match f.job {
            Some(job) => assert_eq!(env["WORKER_JOB"], json!(job.as_str())),
            None => assert!(!env.contains_key("WORKER_JOB")),
        }
    }
}

/// The statements of a function's role.
fn statements(stack: &Stack, f: &FunctionSpec<Job>) -> Vec<Value> {
    let function = stack.resource(f.logical_id);
    let role = function["Properties"]["Role"].as_str().unwrap().to_owned();
    let role = role
        .strip_prefix("getatt:")
        .and_then(|r| r.strip_suffix(".Arn"))
        .expect("Role: !GetAtt <Role>.Arn");
    let policies = stack.resource(role)["Properties"]["Policies"].clone();
    policies
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
        .collect()
}

#[test]
fn every_role_grants_table_by_table_exactly_what_its_function_calls() {
    let stack = stack();
    for f in functions() {
        let mut granted: BTreeMap<Table, (BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
        let mut streams = BTreeSet::new();
        for s in statements(&stack, &f) {
            if is_operations_statement(&s) {
                continue; // tracing and parking: operations_problems
            }
            assert_eq!(s["Effect"], "Allow");
            let actions = strings(&s["Action"]);
            let resources = strings(&s["Resource"]);
            if actions.iter().all(|a| a.starts_with("dynamodb:"))
                && actions.contains("dynamodb:GetRecords")
            {
                streams = resources;
                continue;
            }
            if !actions.iter().any(|a| a.starts_with("dynamodb:")) {
                continue;
            }
            // One table per statement: its ARN and its indexes' ARNs.
            let table = Table::ALL
                .into_iter()
                .find(|t| resources.contains(&format!("getatt:{}.Arn", t.logical_id())))
                .unwrap_or_else(|| panic!("{}: a statement on no table: {s}", f.logical_id));
            let prefix = format!("getatt:{}.Arn/index/", table.logical_id());
            let mut indexes = BTreeSet::new();
            for r in &resources {
                if let Some(i) = r.strip_prefix(&prefix) {
                    indexes.insert(i.to_owned());
                } else {
                    assert_eq!(
                        *r,
                        format!("getatt:{}.Arn", table.logical_id()),
                        "{}: {s}",
                        f.logical_id
                    );
                }
            }
            let e = granted.entry(table).or_default();
            e.0.extend(actions);
            e.1.extend(indexes);
        }
        let wanted: BTreeMap<Table, (BTreeSet<String>, BTreeSet<String>)> = table_access(f.job)
            .into_iter()
            .map(|(t, (a, i))| {
                (
                    t,
                    (
                        a.into_iter().map(str::to_owned).collect(),
                        i.into_iter().map(str::to_owned).collect(),
                    ),
                )
            })
            .collect();
        assert_eq!(granted, wanted, "{}", f.logical_id);
        if f.reads_stream {
            let all: BTreeSet<String> = Table::ALL
                .iter()
                .map(|t| format!("getatt:{}.StreamArn", t.logical_id()))
                .collect();
            assert_eq!(streams, all);
        } else {
            assert!(streams.is_empty(), "{}", f.logical_id);
        }
    }
}

#[test]
fn every_table_stream_has_its_own_mapping_reporting_batch_item_failures() {
    let stack = stack();
    let stream = stack.resource("StreamFunction");
    let events = stream["Properties"]["Events"].as_object().unwrap();
    let mut mapped = BTreeSet::new();
    for (_, e) in events {
        assert_eq!(e["Type"], "DynamoDB");
        let p = &e["Properties"];
        assert_eq!(
            p["FunctionResponseTypes"],
            json!(["ReportBatchItemFailures"])
        );
        // The StreamParallelizationFactor parameter: 1 unless deployed with up to 10.
        assert_eq!(p["ParallelizationFactor"], "1");
        assert!(p["MaximumRetryAttempts"].as_u64().unwrap() <= 10);
        assert_eq!(
            p["DestinationConfig"]["OnFailure"]["Destination"],
            "getatt:StreamFailureQueue.Arn"
        );
        assert!(mapped.insert(p["Stream"].as_str().unwrap().to_owned()));
    }
    let all: BTreeSet<String> = Table::ALL
        .iter()
        .map(|t| format!("getatt:{}.StreamArn", t.logical_id()))
        .collect();
    assert_eq!(mapped, all);
    let param = &stack.t["Parameters"]["StreamParallelizationFactor"];
    assert_eq!(
        (
            param["Default"].as_u64(),
            param["MinValue"].as_u64(),
            param["MaxValue"].as_u64()
        ),
        (Some(1), Some(1), Some(10))
    );
    let t = template::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/chat.yaml"));
    let ten = Stack::new(
        t,
        "chat-worker-dev",
        "",
        &[("StreamParallelizationFactor", "10")],
    );
    for e in ten.resource("StreamFunction")["Properties"]["Events"]
        .as_object()
        .unwrap()
        .values()
    {
        assert_eq!(e["Properties"]["ParallelizationFactor"], "10");
    }
}

/// Every mapping: the queue by default; with OnFailureDestination=bucket an
/// encrypted, private, TLS-only bucket whose objects expire.
#[test]
fn stream_failures_go_to_the_queue_or_an_encrypted_bucket() {
    let t = template::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../infra/chat.yaml"));
    let stack = |o: &[(&str, &str)]| Stack::new(t.clone(), "chat-worker-dev", "", o);
    let ids: Vec<&str> = functions().iter().map(|f| f.logical_id).collect();
    let problems = template::on_failure_destination_problems(&stack, &ids);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_job_has_its_schedule_and_every_function_and_metric_an_alarm() {
    let stack = stack();
    for s in APP.schedules() {
        let fun = s.function;
        let schedule_id = fun.replace("Function", "Schedule");
        let r = stack.resource(&schedule_id);
        let p = &r["Properties"];
        if let worker_engine::Schedule::Rate(expr) = s.schedule {
            assert_eq!(p["ScheduleExpression"], expr);
        }
        assert_eq!(p["Target"]["Arn"], format!("getatt:{fun}.Arn"));
        let input: Value = serde_json::from_str(p["Target"]["Input"].as_str().unwrap()).unwrap();
        assert_eq!(input["job"], s.job.as_str());
        assert!(p["Target"]["DeadLetterConfig"]["Arn"].is_string());
    }
    let alarms = stack.resources_of("AWS::CloudWatch::Alarm");
    let watched: BTreeSet<(String, String)> = alarms
        .values()
        .map(|a| {
            let p = &a["Properties"];
            (
                p["MetricName"].as_str().unwrap().to_owned(),
                p["Dimensions"][0]["Value"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect();
    for f in functions() {
        assert!(
            watched.contains(&("Errors".into(), format!("ref:{}", f.logical_id))),
            "{}",
            f.logical_id
        );
    }
    let metrics: BTreeSet<&str> = alarms
        .values()
        .filter(|a| a["Properties"]["Namespace"] == APP.namespace)
        .map(|a| a["Properties"]["MetricName"].as_str().unwrap())
        .collect();
    let mut want = BTreeSet::from([
        chat_worker::requests::REQUEST_CONFLICTS,
        chat_worker::requests::TWINS_MISSING,
    ]);
    want.extend(STREAM_ALARM_METRICS);
    want.extend(JOB_ALARM_METRICS);
    want.insert(template::ENVIRONMENT_FAULTS);
    assert_eq!(metrics, want);
}

/// Parked, traced, logged through Lambda's controls, every mapping's
/// EventCount metrics, and alarmed on the worker's own metrics.
#[test]
fn the_template_parks_traces_and_alarms_on_the_workers_metrics() {
    let schedule_of = |job: Job| APP.schedule(job).expect("scheduled").schedule;
    let problems = operations_problems(&stack(), APP.namespace, &functions(), &schedule_of);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
