//! A SAM template checked against an app's description: the checks every
//! app's `tests/it/infra.rs` runs on its template, given the app's
//! [`AppSpec`] (its functions and table schema), names and settings reader
//! ([`AppTemplate`]).
//!
//! - the sandbox table equals the schema in code;
//! - every function of `AppSpec::functions()` exists, runs its binary (the
//!   package's `<prefix>stream` / `<prefix>schedule`), sets exactly the
//!   variables its `FunctionSpec` lists (`WORKER_JOB` pinned for a job),
//!   with values the app's settings reader accepts;
//! - every role grants exactly the function's DynamoDB actions on the table
//!   ARN and its index ARNs, stream reads only to the stream function, and
//!   `events:PutEvents` on the bus only where the access says
//!   `publishes_events` (and a bus is set);
//! - the event source mapping, the schedules (input a tick of the job, the
//!   expression of its `Schedule`), queues, log groups, alarms (those in
//!   the app's namespace name a metric their function writes) and outputs;
//! - what every app needs to run in production ([`AppTemplate::operations`]:
//!   [`operations_problems`]): the parking table, tracing, Lambda's logging
//!   controls, the mapping's metrics and the alarms on the worker's own
//!   metrics. The other checks skip the operations grants
//!   ([`is_operations_statement`]) and the parking table.
//!
//! [`template_tests!`](crate::template_tests) makes each check a test of
//! its own. An app's `tests/app.rs` holds what its code does against the
//! grants: [`actions_used`] by a run, [`granted`] to the function, and the
//! [`emf`] lines it wrote.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::deploy::{
    Deployed, FunctionSpec, PARKING_TABLE, PUT_EVENTS_ACTION, STREAM_FUNCTION, STREAM_READ_ACTIONS,
};
use serde_json::{Value, json};
use worker_engine::Worker;
use worker_engine::metrics::CapturedLines;
use worker_engine::schedule::{JobName, parse_tick};
use worker_engine::settings::CommonSettings;
use worker_engine::store::{DynamoStore, MetricsSnapshot, Operation};
use worker_engine::{AppSpec, Schedule};

use crate::template::{
    ACCOUNT, ENVIRONMENT_FAULTS, REGION, Stack, is_operations_statement,
    on_failure_destination_problems, operations_problems, strings, table_arn,
};

/// What the checks read of the app's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsView<J> {
    /// The job a schedule function is pinned to (`WORKER_JOB`); `None` for
    /// the stream function.
    pub job: Option<J>,
    /// The table the function works on (`TABLE_NAME`).
    pub table_name: String,
    /// The event bus of the jobs that publish, if set.
    pub event_bus: Option<String>,
}

impl<J: Clone> SettingsView<J> {
    /// The view of an app's common settings and its jobs' event bus.
    pub fn of(common: &CommonSettings<J>, event_bus: Option<String>) -> Self {
        SettingsView {
            job: common.job.clone(),
            table_name: common.table_name.clone(),
            event_bus,
        }
    }
}

/// An app's template and what it is checked against: its `AppSpec`'s
/// functions and table schema, and:
pub struct AppTemplate<J: 'static, D: ?Sized + 'static, H: ?Sized + 'static> {
    /// The app's description: its functions (binaries, variables, grants),
    /// table schema and metrics namespace.
    pub app: &'static AppSpec<J, D, H>,
    /// The table of the default stage (`<prefix>dev`).
    pub table: &'static str,
    /// The table name before the stage (`my-table-`).
    pub table_prefix: &'static str,
    /// The logical id of the sandbox table resource.
    pub sandbox_table: &'static str,
    /// The package's binaries are `<prefix>stream` and `<prefix>schedule`.
    pub binary_prefix: &'static str,
    /// The package's folder (its `Cargo.toml` names the binaries).
    pub manifest_dir: &'static str,
    /// The template file (e.g. `infra/shop.yaml`): read for the comments
    /// on the event source's settings, and named in failures.
    pub template_path: PathBuf,
    /// The stream ARN the stack is given.
    pub stream_arn: &'static str,
    /// The stack, parameters overridden.
    pub stack: fn(&[(&str, &str)]) -> Stack,
    /// The app's settings as a function reads them from its environment.
    #[allow(clippy::type_complexity)]
    pub settings: fn(&dyn Fn(&str) -> Option<String>) -> Result<SettingsView<J>, String>,
}

/// The statements of a function's role (a role of its own, holding the
/// policies, none managed).
pub fn statements<J: JobName>(stack: &Stack, f: &FunctionSpec<J>) -> Vec<Value> {
    let func = stack.resource(f.logical_id);
    let role_id = func["Properties"]["Role"]
        .as_str()
        .and_then(|r| r.strip_prefix("getatt:"))
        .and_then(|r| r.strip_suffix(".Arn"))
        .unwrap_or_else(|| panic!("{}: Role is !GetAtt <Role>.Arn", f.logical_id));
    let role = stack.resource(role_id);
    assert_eq!(role["Type"], "AWS::IAM::Role");
    assert!(
        role["Properties"].get("ManagedPolicyArns").is_none(),
        "{role_id}: no managed policies"
    );
    assert!(
        func["Properties"].get("Policies").is_none(),
        "{}: the role holds the policies",
        f.logical_id
    );
    role["Properties"]["Policies"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["PolicyDocument"]["Statement"].as_array().unwrap().clone())
        .collect()
}

impl<J: JobName, D: ?Sized, H: ?Sized> AppTemplate<J, D, H> {
    fn functions(&self) -> Vec<FunctionSpec<J>> {
        self.app
            .check()
            .expect("the app's description is consistent");
        self.app.functions()
    }

    fn binary(&self, f: &FunctionSpec<J>) -> String {
        format!("{}{}", self.binary_prefix, f.binary)
    }

    // ------------------------------------------------------------------ the table

    /// With `CreateTable=true` the sandbox table's properties equal the
    /// schema in code, it is retained on delete and replace, and its name
    /// follows `Stage` or `TableName`; without it, the only table is the
    /// parking table.
    pub fn the_sandbox_table_is_the_schema_in_code(&self) {
        let stack = (self.stack)(&[("CreateTable", "true")]);
        let table = stack.resource(self.sandbox_table);
        assert_eq!(
            stack.t["Resources"][self.sandbox_table]["Condition"], "CreateTable",
            "the table is created only on request"
        );
        let want = (self.app.schema)().to_cloudformation(json!(self.table));
        assert_eq!(table["Type"], want["Type"]);
        assert_eq!(table["DeletionPolicy"], "Retain");
        assert_eq!(table["UpdateReplacePolicy"], "Retain");
        assert_eq!(
            table["Properties"],
            want["Properties"],
            "{}: the template's table drifted from the schema in code",
            self.template_path.display()
        );

        // The name follows the stage, or the TableName parameter.
        let prod = (self.stack)(&[("CreateTable", "true"), ("Stage", "prod")]);
        assert_eq!(
            prod.resource(self.sandbox_table)["Properties"]["TableName"],
            format!("{}prod", self.table_prefix)
        );
        let named = (self.stack)(&[("CreateTable", "true"), ("TableName", "sandbox")]);
        assert_eq!(
            named.resource(self.sandbox_table)["Properties"]["TableName"],
            "sandbox"
        );
        // Without CreateTable the only table is the worker's parking table.
        assert_eq!(
            (self.stack)(&[])
                .resources_of("AWS::DynamoDB::Table")
                .into_keys()
                .collect::<Vec<_>>(),
            [PARKING_TABLE]
        );
    }

    // ------------------------------------------------------------------ operations

    /// Parked, traced, logged through Lambda's controls and alarmed on the
    /// worker's own metrics ([`operations_problems`], all of them listed).
    pub fn operations(&self) {
        let schedule_of = |job: J| {
            self.app
                .schedule(job)
                .expect("every job is scheduled")
                .schedule
        };
        let problems = operations_problems(
            &(self.stack)(&[]),
            self.app.namespace,
            &self.functions(),
            &schedule_of,
        );
        assert!(
            problems.is_empty(),
            "{}:\n{}",
            self.template_path.display(),
            problems.join("\n")
        );
    }

    // ------------------------------------------------------------------ functions

    /// One template function per function of the app, each built from its
    /// binary of the package's `Cargo.toml`, with exactly the variables its
    /// `FunctionSpec` lists (`WORKER_JOB` pinned for a job), values the
    /// app's settings reader accepts, with and without an event bus; the
    /// sandbox table's name with `CreateTable=true`; the `provided.al2023`
    /// runtime on x86_64.
    pub fn every_function_runs_its_binary_with_exactly_its_variables(&self) {
        let cargo = std::fs::read_to_string(format!("{}/Cargo.toml", self.manifest_dir))
            .expect("Cargo.toml");
        for (bus, stack) in [
            ("", (self.stack)(&[])),
            ("bus", (self.stack)(&[("NotifyEventBus", "bus")])),
        ] {
            let ids: BTreeSet<String> = stack
                .resources_of("AWS::Serverless::Function")
                .into_keys()
                .collect();
            let want: BTreeSet<String> = self
                .functions()
                .iter()
                .map(|f| f.logical_id.to_owned())
                .collect();
            assert_eq!(ids, want, "one template function per APP function");

            for f in &self.functions() {
                let id = f.logical_id;
                let raw = &stack.t["Resources"][id];
                assert_eq!(raw["Metadata"]["BuildMethod"], "rust-cargolambda", "{id}");
                assert_eq!(
                    raw["Metadata"]["BuildProperties"]["Binary"],
                    self.binary(f),
                    "{id}"
                );
                assert!(
                    cargo.contains(&format!("name = \"{}\"", self.binary(f))),
                    "{id}: {} is a binary of the package's Cargo.toml",
                    self.binary(f)
                );

                let env = stack.env(id);
                let have: BTreeSet<&str> = env.keys().map(String::as_str).collect();
                let want: BTreeSet<&str> = f.env_vars.iter().copied().collect();
                assert_eq!(have, want, "{id}: environment variables");
                assert_eq!(env["TABLE_NAME"], self.table, "{id}");
                match f.job {
                    Some(job) => assert_eq!(env["WORKER_JOB"], job.as_str(), "{id}"),
                    None => assert!(!env.contains_key("WORKER_JOB"), "{id}"),
                }
                // A configuration the code accepts, pinned as declared.
                let settings = (self.settings)(&|name| {
                    env.get(name).map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                })
                .unwrap_or_else(|e| panic!("{id}: {e}"));
                assert_eq!(settings.job, f.job, "{id}");
                assert_eq!(settings.table_name, self.table, "{id}");
                if f.publishes_events {
                    assert_eq!(
                        settings.event_bus.as_deref(),
                        (!bus.is_empty()).then_some(bus),
                        "{id}: NOTIFY_EVENT_BUS"
                    );
                }
            }
        }
        // With CreateTable the functions use the new table.
        let sandbox = (self.stack)(&[("CreateTable", "true")]);
        for f in &self.functions() {
            assert_eq!(
                sandbox.env(f.logical_id)["TABLE_NAME"],
                format!("ref:{}", self.sandbox_table)
            );
        }
        let stack = (self.stack)(&[]);
        let globals = stack.resolve(&stack.t["Globals"]["Function"]);
        assert_eq!(globals["Runtime"], "provided.al2023");
        assert_eq!(globals["Handler"], "bootstrap");
        assert_eq!(globals["Architectures"], json!(["x86_64"]));
    }

    // ------------------------------------------------------------------ roles

    /// One role per function, granting exactly its `FunctionSpec`'s
    /// DynamoDB actions on the table and its indexes, the stream reads on
    /// the stream only to the function that reads it, `events:PutEvents`
    /// only where declared and a bus is set, and otherwise only its own
    /// queue and log group; no wildcard. The operations grants are
    /// [`AppTemplate::operations`]'.
    pub fn every_role_grants_exactly_what_its_function_calls(&self) {
        let mut roles = BTreeSet::new();
        for (bus, stack) in [
            ("", (self.stack)(&[])),
            (
                "app-events",
                (self.stack)(&[("NotifyEventBus", "app-events")]),
            ),
        ] {
            for f in &self.functions() {
                let id = f.logical_id;
                roles.insert(stack.resource(id)["Properties"]["Role"].to_string());
                let mut data_actions = BTreeSet::new();
                let mut data_resources = BTreeSet::new();
                let mut stream_read = false;
                let mut put_events = false;
                let stream: BTreeSet<String> =
                    STREAM_READ_ACTIONS.iter().map(|a| a.to_string()).collect();
                for s in statements(&stack, f) {
                    if is_operations_statement(&s) {
                        continue; // tracing and parking: `operations`
                    }
                    assert_eq!(s["Effect"], "Allow", "{id}");
                    let actions = strings(&s["Action"]);
                    let resources = strings(&s["Resource"]);
                    for a in &actions {
                        assert!(!a.contains('*'), "{id}: wildcard action {a}");
                    }
                    assert!(!resources.iter().any(|r| r.contains('*')), "{id}: {s}");
                    if actions.iter().any(|a| stream.contains(a)) {
                        assert_eq!(actions, stream, "{id}: the stream read actions together");
                        assert!(f.reads_stream, "{id}: stream read without a stream");
                        assert_eq!(resources, BTreeSet::from([self.stream_arn.to_owned()]));
                        stream_read = true;
                    } else if actions.iter().any(|a| a.starts_with("dynamodb:")) {
                        assert!(
                            actions.iter().all(|a| a.starts_with("dynamodb:")),
                            "{id}: {actions:?}"
                        );
                        data_actions.extend(actions);
                        data_resources.extend(resources);
                    } else if actions.contains(PUT_EVENTS_ACTION) {
                        assert_eq!(actions.len(), 1, "{id}: {actions:?}");
                        assert!(f.publishes_events, "{id}: events:PutEvents");
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
                                "{id}: unexpected action {a}"
                            );
                        }
                        for r in &resources {
                            assert!(r.starts_with("getatt:"), "{id}: {r}");
                        }
                    }
                }
                let want: BTreeSet<String> =
                    f.dynamodb_actions.iter().map(|a| a.to_string()).collect();
                assert_eq!(data_actions, want, "{id}: DynamoDB actions");
                let table = table_arn(self.table);
                let mut want_resources = BTreeSet::from([table.clone()]);
                want_resources.extend(f.indexes.iter().map(|i| format!("{table}/index/{i}")));
                assert_eq!(data_resources, want_resources, "{id}: resources");
                assert_eq!(stream_read, f.reads_stream, "{id}: stream read");
                assert_eq!(
                    put_events,
                    f.publishes_events && !bus.is_empty(),
                    "{id}: PutEvents only where declared, with a bus"
                );
            }
        }
        assert_eq!(roles.len(), self.functions().len(), "one role per function");
    }

    // ------------------------------------------------------------------ event source, schedules, operations

    /// The stream function's one DynamoDB event source: from
    /// `TRIM_HORIZON`, `ReportBatchItemFailures` and bisection on, retries,
    /// record age, batch size and window bounded, failures to the queue,
    /// each setting with a comment giving its reason, the sandbox table's
    /// stream with `CreateTable=true`, and `ParallelizationFactor` from its
    /// parameter (default 1, at most 10).
    pub fn the_stream_event_source_reports_batch_item_failures_and_is_bounded(&self) {
        let stack = (self.stack)(&[]);
        let f = stack.resource(STREAM_FUNCTION);
        let sources: Vec<&Value> = f["Properties"]["Events"]
            .as_object()
            .expect("the stream function has Events")
            .values()
            .filter(|e| e["Type"] == "DynamoDB")
            .collect();
        assert_eq!(sources.len(), 1, "one DynamoDB event source");
        let source = &sources[0]["Properties"];
        assert_eq!(source["Stream"], self.stream_arn);
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
        // stream_failures_go_to_the_queue_or_an_encrypted_bucket). No Type:
        // SAM's takes no intrinsic, and the role holds the grant.
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
        let text = std::fs::read_to_string(&self.template_path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for setting in [
            "StartingPosition:",
            "BatchSize:",
            "MaximumBatchingWindowInSeconds:",
            "FunctionResponseTypes:",
            "BisectBatchOnFunctionError:",
            "MaximumRetryAttempts:",
            "MaximumRecordAgeInSeconds:",
            "ParallelizationFactor:",
            "DestinationConfig:",
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
        let sandbox = (self.stack)(&[("CreateTable", "true")]);
        let s = &sandbox.resource(STREAM_FUNCTION)["Properties"]["Events"]["TableStream"]["Properties"]
            ["Stream"];
        assert_eq!(*s, format!("getatt:{}.StreamArn", self.sandbox_table));
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
        let ten = (self.stack)(&[("StreamParallelizationFactor", "10")]);
        let ten = ten.resource(STREAM_FUNCTION)["Properties"]["Events"]
            .as_object()
            .expect("the stream function has Events")
            .values()
            .find(|e| e["Type"] == "DynamoDB")
            .expect("a DynamoDB event source")["Properties"]["ParallelizationFactor"]
            .clone();
        assert_eq!(ten, "10");
    }

    /// The batches the stream mapping gives up on go to the queue, or with
    /// `OnFailureDestination=bucket` to an encrypted, private, TLS-only
    /// bucket whose objects expire ([`on_failure_destination_problems`]).
    pub fn stream_failures_go_to_the_queue_or_an_encrypted_bucket(&self) {
        let ids: Vec<&str> = self.functions().iter().map(|f| f.logical_id).collect();
        let problems = on_failure_destination_problems(&self.stack, &ids);
        assert!(
            problems.is_empty(),
            "{}:\n{}",
            self.template_path.display(),
            problems.join("\n")
        );
    }

    /// One schedule per job, targeting the job's function with a tick of
    /// that job as input, at its `Schedule`'s rate (enabled) or disabled
    /// for an on-demand job, with a retry policy and a dead-letter queue
    /// its function's failures go to as well; `SchedulesState=DISABLED`
    /// turns them all off; the scheduler's role may invoke exactly the
    /// schedule functions.
    pub fn every_job_has_a_schedule_with_its_expression_and_a_dead_letter_queue(&self) {
        let stack = (self.stack)(&[]);
        let schedules = stack.resources_of("AWS::Scheduler::Schedule");
        assert_eq!(schedules.len(), J::ALL.len());
        let queues = stack.resources_of("AWS::SQS::Queue");
        for &job in J::ALL {
            let f = self.app.function_of(job);
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
            .unwrap_or_else(|e| panic!("{id}: input is JSON: {e}"));
            let tick = parse_tick::<J>(&tick).unwrap_or_else(|e| panic!("{id}: {e}"));
            assert_eq!(tick.job, job, "{id}");
            assert!(tick.scheduled_time.is_some(), "{id}");
            assert_eq!(p["Target"]["RoleArn"], "getatt:SchedulerRole.Arn", "{id}");
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
                dlq,
                "{id}"
            );
            let expr = p["ScheduleExpression"].as_str().unwrap();
            let spec = self.app.schedule(job).expect("every job is scheduled");
            assert_eq!(spec.function, f.logical_id, "{id}");
            match spec.schedule {
                Schedule::Rate(rate) => {
                    assert_eq!(expr, rate, "{id}");
                    assert_eq!(p["State"], "ENABLED", "{id}");
                }
                Schedule::OnDemand => assert_eq!(p["State"], "DISABLED", "{id} runs on demand"),
                other => panic!("{id}: {other:?} is not checked by this kit"),
            }
        }
        // SchedulesState turns every schedule off (the first deployment).
        let off = (self.stack)(&[("SchedulesState", "DISABLED")]);
        for (id, s) in off.resources_of("AWS::Scheduler::Schedule") {
            assert_eq!(s["Properties"]["State"], "DISABLED", "{id}");
        }
        // The scheduler may invoke exactly the schedule functions.
        let role = stack.resource("SchedulerRole");
        let invoke: BTreeSet<String> =
            role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["Action"] == "lambda:InvokeFunction")
                .flat_map(|s| strings(&s["Resource"]))
                .collect();
        let want: BTreeSet<String> = J::ALL
            .iter()
            .map(|j| format!("getatt:{}.Arn", self.app.function_of(*j).logical_id))
            .collect();
        assert_eq!(invoke, want);
    }

    /// Every function has an `Errors` alarm, an output and a log group of
    /// its own (`/aws/lambda/<name>`, 30 days); the stream function an
    /// `IteratorAge` alarm; the queues (stream failures and a DLQ per job)
    /// each a backlog alarm and an output.
    pub fn logs_alarms_and_outputs_cover_every_function_and_queue(&self) {
        let stack = (self.stack)(&[]);
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
        for f in &self.functions() {
            let id = f.logical_id;
            let name = format!("ref:{id}");
            assert!(
                alarm_on("Errors", "FunctionName", &name),
                "{id}: Errors alarm"
            );
            assert!(output_values.contains(&name), "{id}: output");
            let func = stack.resource(id);
            let group = func["Properties"]["LoggingConfig"]["LogGroup"]
                .as_str()
                .and_then(|g| g.strip_prefix("ref:"))
                .unwrap_or_else(|| panic!("{id}: LoggingConfig.LogGroup"));
            let lg = &logs[group];
            assert_eq!(lg["Properties"]["RetentionInDays"], "30", "{id}");
            assert_eq!(
                lg["Properties"]["LogGroupName"],
                format!(
                    "/aws/lambda/{}",
                    func["Properties"]["FunctionName"].as_str().unwrap()
                ),
                "{id}"
            );
        }
        assert!(alarm_on(
            "IteratorAge",
            "FunctionName",
            &format!("ref:{STREAM_FUNCTION}")
        ));
        let queues = stack.resources_of("AWS::SQS::Queue");
        assert_eq!(
            queues.len(),
            1 + J::ALL.len(),
            "stream failures + a DLQ per job"
        );
        for q in queues.keys() {
            let name = format!("getatt:{q}.QueueName");
            assert!(
                alarm_on("ApproximateNumberOfMessagesVisible", "QueueName", &name),
                "{q}: queue alarm"
            );
            assert!(output_values.contains(&name), "{q}: output");
        }
    }

    /// Alarms on the worker's own EMF metrics name a metric their function
    /// writes: the engine's record counters on the stream function, the job's
    /// declared metrics (or the run counters) on a schedule function.
    /// Returns how many alarms are on the app's own metrics.
    pub fn alarms_on_the_workers_metrics_name_metrics_their_function_writes(&self) -> usize {
        let stack = (self.stack)(&[]);
        let mut seen = 0;
        for (id, a) in stack.resources_of("AWS::CloudWatch::Alarm") {
            let p = &a["Properties"];
            if p["Namespace"] != self.app.namespace {
                continue;
            }
            seen += 1;
            let dims = p["Dimensions"].as_array().unwrap();
            assert_eq!(dims.len(), 1, "{id}: the Function dimension alone");
            assert_eq!(dims[0]["Name"], "Function", "{id}");
            let function = dims[0]["Value"]
                .as_str()
                .and_then(|v| v.strip_prefix("ref:"))
                .unwrap_or_else(|| panic!("{id}: Function is !Ref <Function>"));
            let f = self
                .functions()
                .into_iter()
                .find(|f| f.logical_id == function)
                .unwrap_or_else(|| panic!("{id}: {function} is a function of APP"));
            let metric = p["MetricName"].as_str().unwrap();
            let writes: Vec<&str> = match f.job {
                None => vec![
                    ENVIRONMENT_FAULTS,
                    "RecordsHandled",
                    "RecordsSkipped",
                    "RecordsFailed",
                    worker_engine::park::RECORDS_PARKED,
                    "RecordsRetried",
                    "StreamLagMs",
                    "StreamLagMaxMs",
                ]
                .into_iter()
                .chain(self.app.stream_specs().map(|s| s.writes_metric))
                .collect(),
                Some(job) => vec![ENVIRONMENT_FAULTS, "JobRuns", "JobsIncomplete", "JobErrors"]
                    .into_iter()
                    .chain(self.app.schedule(job).unwrap().metrics.iter().copied())
                    .collect(),
            };
            assert!(
                writes.contains(&metric),
                "{id}: {function} writes no {metric}"
            );
        }
        seen
    }
}

/// Every check of [`AppTemplate`] as a `#[test]` of its own, named as the
/// check, on the app's template (`$template`: an expression giving its
/// [`AppTemplate`], evaluated by each test). With `, alarms >= n, "why"`
/// the alarms on the worker's metrics are also at least `n`. An app's
/// `tests/it/infra.rs` invokes it once and adds its own tests beside.
#[macro_export]
macro_rules! template_tests {
    ($template:expr $(, alarms >= $n:expr, $why:literal)?) => {
        #[test]
        fn the_sandbox_table_is_the_schema_in_code() {
            $template.the_sandbox_table_is_the_schema_in_code();
        }

        /// Parked, traced, logged through Lambda's controls and alarmed on
        /// the worker's own metrics (`worker_testkit::template::operations_problems`).
        #[test]
        fn the_template_parks_traces_and_alarms_on_the_workers_metrics() {
            $template.operations();
        }

        #[test]
        fn every_function_runs_its_binary_with_exactly_its_variables() {
            $template.every_function_runs_its_binary_with_exactly_its_variables();
        }

        #[test]
        fn every_role_grants_exactly_what_its_function_calls() {
            $template.every_role_grants_exactly_what_its_function_calls();
        }

        #[test]
        fn the_stream_event_source_reports_batch_item_failures_and_is_bounded() {
            $template.the_stream_event_source_reports_batch_item_failures_and_is_bounded();
        }

        /// The queue by default; with OnFailureDestination=bucket an
        /// encrypted, private, TLS-only bucket whose objects expire.
        #[test]
        fn stream_failures_go_to_the_queue_or_an_encrypted_bucket() {
            $template.stream_failures_go_to_the_queue_or_an_encrypted_bucket();
        }

        #[test]
        fn every_job_has_a_schedule_with_its_expression_and_a_dead_letter_queue() {
            $template.every_job_has_a_schedule_with_its_expression_and_a_dead_letter_queue();
        }

        #[test]
        fn logs_alarms_and_outputs_cover_every_function_and_queue() {
            $template.logs_alarms_and_outputs_cover_every_function_and_queue();
        }

        #[test]
        fn alarms_on_the_workers_metrics_name_metrics_their_function_writes() {
            let _alarms =
                $template.alarms_on_the_workers_metrics_name_metrics_their_function_writes();
            $(assert!(_alarms >= $n, $why);)?
        }
    };
}

/// The IAM actions of the requests counted in `used` (the store's
/// metrics over a run), to hold against what a function is granted.
pub fn actions_used(used: &MetricsSnapshot) -> BTreeSet<&'static str> {
    [
        (used.get_item, Operation::GetItem),
        (used.put_item, Operation::PutItem),
        (used.delete_item, Operation::DeleteItem),
        (used.update_item, Operation::UpdateItem),
        (used.query, Operation::Query),
        (used.scan, Operation::Scan),
        (used.batch_write_item, Operation::BatchWriteItem),
        (used.batch_get_item, Operation::BatchGetItem),
        (used.execute_statement, Operation::ExecuteStatement),
        (used.transact_write_items, Operation::TransactWriteItems),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(_, op)| crate::deploy::action_of(op))
    .collect()
}

/// Runs each job of `app` once through `worker` (a tick at `now`, to
/// completion) and checks that every request it made, as `store` counted
/// them, is one its own function is granted.
pub async fn each_job_within_its_grants<J: JobName, D: ?Sized, H: ?Sized>(
    app: &AppSpec<J, D, H>,
    worker: &Worker<J>,
    store: &DynamoStore,
    now: &str,
) {
    for job in J::ALL {
        let before = store.metrics().snapshot();
        let tick = json!({"job": job.as_str(), "scheduledTime": now});
        let report = worker.handle_schedule(&tick, None).await;
        let report = report.unwrap_or_else(|e| panic!("{job}: the tick runs: {e}"));
        assert!(report.complete, "{job}: one tick completes: {report:?}");
        let used = actions_used(&store.metrics().snapshot().since(&before));
        let function = app.function_of(*job);
        assert!(used.is_subset(&granted(&function)), "{job}: {used:?}");
    }
}

/// The DynamoDB actions `f` is granted.
pub fn granted<J>(f: &FunctionSpec<J>) -> BTreeSet<&'static str> {
    f.dynamodb_actions.iter().copied().collect()
}

/// The EMF lines captured, as JSON.
pub fn emf(lines: &CapturedLines) -> Vec<Value> {
    lines
        .lines()
        .iter()
        .map(|l| serde_json::from_str(l).expect("an EMF line"))
        .collect()
}
