//! A SAM template as tests read it: the YAML in CloudFormation's JSON form
//! ([`load`]), and [`Stack`], the template evaluated for given parameter
//! values (by the toolkit's evaluator, the one local runs use). Every app
//! checks its template against its code with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::deploy::{
    FunctionSpec, JOB_ALARM_METRICS, JOBS_INCOMPLETE_PERIODS, PARKING_TABLE, STREAM_ALARM_METRICS,
    STREAM_FUNCTION, TRACING_ACTIONS, alarm_period,
};
use serde_json::{Value, json};
use worker_engine::Schedule;
use worker_engine::park;
use worker_engine::schedule::JobName;
use worker_toolkit::template::{Evaluator, Pseudo};

/// The account of every evaluated ARN.
pub const ACCOUNT: &str = "123456789012";
/// The region of every evaluated ARN.
pub const REGION: &str = "us-east-1";

/// A template file in CloudFormation's JSON form.
pub fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    to_json(&yaml)
}

/// The YAML reader, the intrinsic's shape and the evaluator are the
/// toolkit's (local runs read the same templates:
/// [`worker_toolkit::template`]); `!Ref AWS::NoValue` evaluates to
/// [`NO_VALUE`].
pub use worker_toolkit::template::{NO_VALUE, single, to_json};

/// The template with its intrinsic functions evaluated for given parameter
/// values (defaults otherwise) by the toolkit's [`Evaluator`]: references
/// to resources become `ref:<Id>`, attributes `getatt:<Id>.<Attr>`; what
/// it cannot evaluate panics.
pub struct Stack {
    /// The template, in CloudFormation's JSON form.
    pub t: Value,
    /// Its intrinsics' evaluator, the stack's parameters set.
    evaluator: Evaluator,
}

impl Stack {
    /// The stack of template `t` named `stack_name`, its table's stream at
    /// `stream_arn` (`TableStreamArn`), the parameters overridden.
    pub fn new(t: Value, stack_name: &str, stream_arn: &str, overrides: &[(&str, &str)]) -> Self {
        assert!(
            t["Parameters"].is_object(),
            "the template has no Parameters"
        );
        let pseudo = Pseudo {
            account: ACCOUNT.into(),
            region: REGION.into(),
            stack_name: stack_name.into(),
        };
        let mut evaluator = Evaluator::new(&t, pseudo);
        evaluator.set("TableStreamArn", json!(stream_arn));
        for (k, v) in overrides {
            assert!(
                t["Parameters"].get(*k).is_some(),
                "no parameter {k} in the template"
            );
            evaluator.set(k, json!(v));
        }
        Stack { t, evaluator }
    }

    /// Whether the template's condition `name` holds.
    pub fn condition(&self, name: &str) -> bool {
        self.evaluator
            .condition(name)
            .unwrap_or_else(|problem| panic!("{problem}"))
    }

    /// The value with every intrinsic function evaluated and `AWS::NoValue`
    /// removed.
    pub fn resolve(&self, v: &Value) -> Value {
        self.evaluator
            .checked(v)
            .unwrap_or_else(|problem| panic!("{problem}"))
    }

    /// A resource, resolved (panics when absent or its condition is false).
    pub fn resource(&self, id: &str) -> Value {
        let r = self.t["Resources"]
            .get(id)
            .unwrap_or_else(|| panic!("no resource {id}"));
        if let Some(c) = r.get("Condition").and_then(Value::as_str) {
            assert!(self.condition(c), "{id} is not created ({c} is false)");
        }
        self.resolve(r)
    }

    /// Resolved resources of a type (those whose condition holds).
    pub fn resources_of(&self, kind: &str) -> BTreeMap<String, Value> {
        self.t["Resources"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, r)| r["Type"] == kind)
            .filter(|(_, r)| {
                r.get("Condition")
                    .and_then(Value::as_str)
                    .is_none_or(|c| self.condition(c))
            })
            .map(|(id, _)| (id.clone(), self.resource(id)))
            .collect()
    }

    /// The function's environment variables (Globals merged).
    pub fn env(&self, function: &str) -> BTreeMap<String, Value> {
        let mut vars = BTreeMap::new();
        let globals = self.resolve(&self.t["Globals"]["Function"]["Environment"]["Variables"]);
        let own = &self.resource(function)["Properties"]["Environment"]["Variables"];
        for m in [&globals, own] {
            if let Some(m) = m.as_object() {
                vars.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        vars
    }
}

/// A string or a list of strings, as a set.
pub fn strings(v: &Value) -> BTreeSet<String> {
    match v {
        Value::String(s) => BTreeSet::from([s.clone()]),
        Value::Array(a) => a
            .iter()
            .map(|s| s.as_str().expect("a string").to_owned())
            .collect(),
        other => panic!("expected a string or a list of strings, got {other}"),
    }
}

/// The ARN of table `table` as the evaluated template names it, in
/// [`REGION`] and [`ACCOUNT`].
pub fn table_arn(table: &str) -> String {
    format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}")
}

/// Whether a role statement is one of those every app's roles carry beside
/// their own table access, which [`operations_problems`] checks: X-Ray
/// tracing (on `*`), or the stream function's parking.
pub fn is_operations_statement(s: &Value) -> bool {
    let actions = strings(&s["Action"]);
    let tracing: BTreeSet<String> = TRACING_ACTIONS.iter().map(|a| a.to_string()).collect();
    let parking: BTreeSet<String> = park::PARK_ACTIONS.iter().map(|a| a.to_string()).collect();
    actions == tracing
        || (actions == parking
            && strings(&s["Resource"]) == BTreeSet::from([format!("getatt:{PARKING_TABLE}.Arn")]))
}

/// A value as text (parameters resolve to strings, literals may be numbers).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The statements of a function's role (`Role: !GetAtt <Role>.Arn`).
fn role_statements(stack: &Stack, function: &str) -> Vec<Value> {
    let f = stack.resource(function);
    let Some(role) = f["Properties"]["Role"]
        .as_str()
        .and_then(|r| r.strip_prefix("getatt:"))
        .and_then(|r| r.strip_suffix(".Arn"))
    else {
        return Vec::new();
    };
    stack.resource(role)["Properties"]["Policies"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| {
            p["PolicyDocument"]["Statement"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .collect()
}

/// The worker's count of environment faults (a table or index missing,
/// access denied, invalid credentials), the engine's own name: the stream
/// function and every schedule function write it (EMF, the app's
/// namespace, dimension `Function`), and every template alarms on it per
/// function: `Sum >= 1` over one period of 60 s, missing data not
/// breaching, actions on the alarm topic.
pub use worker_engine::metrics::ENVIRONMENT_FAULTS;

/// A template's stack for given parameter overrides.
pub type StackOf<'a> = dyn Fn(&[(&str, &str)]) -> Stack + 'a;

/// The logical id of the stream mapping's on-failure queue in a template.
pub const STREAM_FAILURE_QUEUE: &str = "StreamFailureQueue";
/// The logical id of the on-failure bucket (`OnFailureDestination=bucket`).
pub const STREAM_FAILURE_BUCKET: &str = "StreamFailureBucket";

/// Where the stream mappings record the batches they give up on, as the
/// `OnFailureDestination` parameter (`queue`, the default, or `bucket`)
/// chooses, on stacks of the template made by `stack` with parameters
/// overridden (empty: all well):
///
/// - `queue`: every DynamoDB event source of the stream function sends to
///   [`STREAM_FAILURE_QUEUE`], its role may `sqs:SendMessage` there and
///   nothing on S3, and no bucket is created;
/// - `bucket`: every one writes to [`STREAM_FAILURE_BUCKET`], created by the
///   stack (retained), encrypted (SSE), with every public access block on,
///   a bucket policy denying any request without TLS, and a lifecycle rule
///   expiring every object after `FailureRecordRetentionDays`; the stream
///   role may `s3:PutObject` on its objects and `s3:ListBucket` on it (what
///   Lambda asks of an S3 on-failure destination), no other role anything
///   on S3; an alarm on the bucket's `PutRequests` and an output name it.
pub fn on_failure_destination_problems(stack: &StackOf<'_>, functions: &[&str]) -> Vec<String> {
    let mut found = Findings::default();
    let queue = stack(&[]);
    failure_parameter_problems(&queue.t["Parameters"], &mut found);
    queue_destination_problems(&queue, &mut found);
    let bucket = stack(&[
        ("OnFailureDestination", "bucket"),
        ("FailureRecordRetentionDays", "30"),
    ]);
    failure_bucket_problems(&bucket, &mut found);
    bucket_access_problems(&bucket, functions, &mut found);
    found.0
}

/// An action a role allows on a resource.
type Grant = (String, String);

/// The `OnFailureDestination` and `FailureRecordRetentionDays` parameters.
fn failure_parameter_problems(p: &Value, found: &mut Findings) {
    found.check(
        p["OnFailureDestination"]["AllowedValues"] == json!(["queue", "bucket"])
            && p["OnFailureDestination"]["Default"] == "queue",
        "OnFailureDestination: AllowedValues [queue, bucket], Default queue".into(),
    );
    let days = &p["FailureRecordRetentionDays"];
    found.check(
        days["Type"] == "Number" && days["Default"] == 14 && days["MinValue"] == 1,
        "FailureRecordRetentionDays: a Number, Default 14, MinValue 1".into(),
    );
}

/// The `OnFailure` of each DynamoDB event source of the stream function.
fn destinations(stack: &Stack) -> Vec<Value> {
    stack.resource(STREAM_FUNCTION)["Properties"]["Events"]
        .as_object()
        .into_iter()
        .flat_map(|e| e.values())
        .filter(|e| e["Type"] == "DynamoDB")
        .map(|e| e["Properties"]["DestinationConfig"]["OnFailure"].clone())
        .collect()
}

/// Every action `function`'s role allows, on each of its resources.
fn grants(stack: &Stack, function: &str) -> BTreeSet<Grant> {
    role_statements(stack, function)
        .iter()
        .filter(|s| s["Effect"] == "Allow")
        .flat_map(|s| {
            let resources = strings(&s["Resource"]);
            strings(&s["Action"])
                .into_iter()
                .flat_map(move |a| resources.clone().into_iter().map(move |r| (a.clone(), r)))
        })
        .collect()
}

/// The grants of S3 actions.
fn on_s3(g: &BTreeSet<Grant>) -> BTreeSet<Grant> {
    g.iter()
        .filter(|(a, _)| a.starts_with("s3:"))
        .cloned()
        .collect()
}

/// `queue` (the default): every event source sends to
/// [`STREAM_FAILURE_QUEUE`], which the stream role may write to, nothing on
/// S3, no bucket.
fn queue_destination_problems(queue: &Stack, found: &mut Findings) {
    let queue_arn = format!("getatt:{STREAM_FAILURE_QUEUE}.Arn");
    let sources = destinations(queue);
    found.check(
        !sources.is_empty(),
        "the stream function has no DynamoDB event source".into(),
    );
    for d in &sources {
        found.check(
            d["Destination"] == queue_arn.as_str() && d.get("Type").is_none_or(|t| t == "SQS"),
            format!("queue: an event source's OnFailure is {d}, not {queue_arn}"),
        );
    }
    let g = grants(queue, STREAM_FUNCTION);
    found.check(
        g.contains(&("sqs:SendMessage".to_owned(), queue_arn.clone())) && on_s3(&g).is_empty(),
        format!(
            "queue: the stream role may sqs:SendMessage to {STREAM_FAILURE_QUEUE}, nothing on S3"
        ),
    );
    found.check(
        queue.resources_of("AWS::S3::Bucket").is_empty()
            && queue.resources_of("AWS::S3::BucketPolicy").is_empty(),
        "queue: no bucket created".into(),
    );
}

/// `bucket`: the one bucket is [`STREAM_FAILURE_BUCKET`], retained,
/// encrypted, private, its objects expiring, an alarm on its writes.
fn failure_bucket_problems(bucket: &Stack, found: &mut Findings) {
    let buckets = bucket.resources_of("AWS::S3::Bucket");
    found.check(
        buckets
            .keys()
            .map(String::as_str)
            .eq([STREAM_FAILURE_BUCKET]),
        format!(
            "bucket: the one bucket is {STREAM_FAILURE_BUCKET} ({:?})",
            buckets.keys()
        ),
    );
    let Some(b) = buckets.get(STREAM_FAILURE_BUCKET) else {
        return;
    };
    let props = &b["Properties"];
    found.check(
        b["DeletionPolicy"] == "Retain",
        format!("{STREAM_FAILURE_BUCKET}: DeletionPolicy Retain (it may hold the only copy)"),
    );
    let sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    found.check(
        !sse.is_empty()
            && sse.iter().all(|r| {
                ["AES256", "aws:kms", "aws:kms:dsse"].contains(
                    &r["ServerSideEncryptionByDefault"]["SSEAlgorithm"]
                        .as_str()
                        .unwrap_or(""),
                )
            }),
        format!("{STREAM_FAILURE_BUCKET}: encrypted (BucketEncryption SSE)"),
    );
    let block = &props["PublicAccessBlockConfiguration"];
    found.check(
        [
            "BlockPublicAcls",
            "BlockPublicPolicy",
            "IgnorePublicAcls",
            "RestrictPublicBuckets",
        ]
        .iter()
        .all(|k| block[*k] == true),
        format!("{STREAM_FAILURE_BUCKET}: every public access block on"),
    );
    bucket_expiry_and_alarm_problems(bucket, props, found);
}

/// The failure bucket's (`props`) lifecycle rule expiring every object
/// after `FailureRecordRetentionDays` (30 on `bucket`), and the alarm on
/// its `PutRequests`.
fn bucket_expiry_and_alarm_problems(bucket: &Stack, props: &Value, found: &mut Findings) {
    let rules = props["LifecycleConfiguration"]["Rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    found.check(
        rules.iter().any(|r| {
            r["Status"] == "Enabled"
                && text(&r["ExpirationInDays"]) == "30"
                && r.get("Prefix").is_none()
                && r.get("Filter").is_none()
                && r.get("TagFilters").is_none()
        }),
        format!(
            "{STREAM_FAILURE_BUCKET}: a lifecycle rule expires every object after FailureRecordRetentionDays"
        ),
    );
    let filter = props["MetricsConfigurations"][0]["Id"].clone();
    let dimensions = json!([
        {"Name": "BucketName", "Value": format!("ref:{STREAM_FAILURE_BUCKET}")},
        {"Name": "FilterId", "Value": filter}
    ]);
    found.check(
        bucket
            .resources_of("AWS::CloudWatch::Alarm")
            .values()
            .any(|a| {
                let p = &a["Properties"];
                p["Namespace"] == "AWS/S3"
                    && p["MetricName"] == "PutRequests"
                    && p["Dimensions"] == dimensions
            }),
        format!("{STREAM_FAILURE_BUCKET}: an alarm on its PutRequests (request metrics {filter})"),
    );
}

/// `bucket`: TLS only, every event source writes there, only the stream
/// role may (`s3:PutObject` on its objects, `s3:ListBucket` on it), and an
/// output names it.
fn bucket_access_problems(bucket: &Stack, functions: &[&str], found: &mut Findings) {
    let bucket_arn = format!("getatt:{STREAM_FAILURE_BUCKET}.Arn");
    let objects = format!("{bucket_arn}/*");
    let tls_only = bucket
        .resources_of("AWS::S3::BucketPolicy")
        .values()
        .filter(|p| p["Properties"]["Bucket"] == format!("ref:{STREAM_FAILURE_BUCKET}").as_str())
        .flat_map(|p| {
            p["Properties"]["PolicyDocument"]["Statement"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .any(|s| {
            s["Effect"] == "Deny"
                && s["Principal"] == "*"
                && strings(&s["Action"]).contains("s3:*")
                && strings(&s["Resource"]) == BTreeSet::from([bucket_arn.clone(), objects.clone()])
                && s["Condition"] == json!({"Bool": {"aws:SecureTransport": "false"}})
        });
    found.check(
        tls_only,
        format!("{STREAM_FAILURE_BUCKET}: a bucket policy denies every request without TLS"),
    );
    for d in destinations(bucket) {
        found.check(
            d["Destination"] == bucket_arn.as_str() && d.get("Type").is_none_or(|t| t == "S3"),
            format!("bucket: an event source's OnFailure is {d}, not {bucket_arn}"),
        );
    }
    for f in functions {
        let want = if *f == STREAM_FUNCTION {
            BTreeSet::from([
                ("s3:PutObject".to_owned(), objects.clone()),
                ("s3:ListBucket".to_owned(), bucket_arn.clone()),
            ])
        } else {
            BTreeSet::new()
        };
        found.check(
            on_s3(&grants(bucket, f)) == want,
            format!("bucket: {f} may on S3 exactly {want:?}"),
        );
    }
    let outputs = bucket.resolve(&bucket.t["Outputs"]);
    let named = outputs.as_object().is_some_and(|o| {
        o.iter().any(|(id, o)| {
            o["Value"] == format!("ref:{STREAM_FAILURE_BUCKET}").as_str()
                && bucket.t["Outputs"][id]["Condition"] == "FailuresToBucket"
        })
    });
    found.check(
        named,
        format!("bucket: an output (Condition FailuresToBucket) names {STREAM_FAILURE_BUCKET}"),
    );
}

/// checkov checks that guard data at rest or from the public, which no
/// template may skip: S3 encryption, public ACLs and the public access
/// block (`CKV_AWS_19`, `20`, `53`-`57`); nor may the parking table skip
/// point-in-time recovery (`CKV_AWS_28`).
pub const CHECKOV_NEVER_SKIPPED: [&str; 7] = [
    "CKV_AWS_19",
    "CKV_AWS_20",
    "CKV_AWS_53",
    "CKV_AWS_54",
    "CKV_AWS_55",
    "CKV_AWS_56",
    "CKV_AWS_57",
];

/// The checkov decisions of a template (`scripts/lint-infra` runs checkov
/// on it), as written on the resources: `Metadata: {checkov: {skip: [{id,
/// comment}]}}`, each a check id (`CKV_AWS_<n>`) at most once per resource,
/// with a one-line reason; none of [`CHECKOV_NEVER_SKIPPED`] (nor
/// `CKV_AWS_28` on the parking table). Empty: all well written.
pub fn checkov_skip_problems(t: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(resources) = t["Resources"].as_object() else {
        return vec!["no Resources".into()];
    };
    for (id, r) in resources {
        let Some(checkov) = r["Metadata"].get("checkov") else {
            continue;
        };
        let Some(skips) = checkov["skip"].as_array() else {
            problems.push(format!("{id}: Metadata.checkov has no skip list"));
            continue;
        };
        let mut seen = BTreeSet::new();
        for s in skips {
            let check = s["id"].as_str().unwrap_or_default();
            let comment = s["comment"].as_str().unwrap_or_default().trim();
            let well_named = check
                .strip_prefix("CKV_AWS_")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !well_named {
                problems.push(format!(
                    "{id}: checkov skip {s}: id is not a CKV_AWS_<n> check"
                ));
            }
            if comment.is_empty() || comment.contains('\n') {
                problems.push(format!(
                    "{id}: checkov skip of {check}: a one-line comment gives the reason"
                ));
            }
            if !seen.insert(check.to_owned()) {
                problems.push(format!("{id}: checkov skip of {check} twice"));
            }
            if CHECKOV_NEVER_SKIPPED.contains(&check)
                || (id == PARKING_TABLE && check == "CKV_AWS_28")
            {
                problems.push(format!(
                    "{id}: {check} guards the data: fix it, never skip it"
                ));
            }
        }
    }
    problems
}

/// What every app's template needs to run in production, checked against
/// the engine (empty: all there):
///
/// - the parking table is [`park::schema`] with SSE on, TTL on
///   [`park::TTL_ATTRIBUTE`] and point-in-time recovery on; the stream
///   function gets `PARKING_TABLE` (the table), `PARKING_RETENTION_DAYS`
///   (the `ParkingRetentionDays` parameter) and a [`park::PARK_ACTIONS`]
///   grant on it;
/// - every queue is encrypted at rest (SQS-managed SSE or a KMS key), and
///   every checkov decision is written on its resource
///   ([`checkov_skip_problems`]);
/// - every function is traced (`Tracing: Active`, the X-Ray grant) and
///   logs through Lambda's controls (`LoggingConfig`: JSON, the `LogLevel`
///   parameter as `ApplicationLogLevel`; no `LOG_FORMAT`/`RUST_LOG`);
/// - the stream event source has `MetricsConfig: {Metrics: [EventCount]}`;
/// - alarms on the worker's own metrics (namespace `namespace`, dimension
///   `Function`): [`STREAM_ALARM_METRICS`] on the stream function (`> 0`;
///   the lag over the `StreamLagAlarmMs` parameter), [`JOB_ALARM_METRICS`]
///   on each schedule function (`JobErrors > 0`; `JobsIncomplete` minimum
///   `>= 1` for [`JOBS_INCOMPLETE_PERIODS`] periods in a row of
///   [`alarm_period`] of its schedule), and [`ENVIRONMENT_FAULTS`] on every
///   function (`Sum >= 1` in one minute, missing data not breaching,
///   `AlarmActions` the `AlarmTopicArn` when set).
pub fn operations_problems<J: JobName>(
    stack: &Stack,
    namespace: &str,
    functions: &[FunctionSpec<J>],
    schedule_of: &dyn Fn(J) -> Schedule,
) -> Vec<String> {
    let mut found = Findings::default();
    parking_table_problems(stack, &mut found);
    // Queues encrypted at rest (the skip of checkov's CKV_AWS_27 says so).
    for (id, q) in stack.resources_of("AWS::SQS::Queue") {
        let p = &q["Properties"];
        found.check(
            p["SqsManagedSseEnabled"] == true || p.get("KmsMasterKeyId").is_some(),
            format!("{id}: encrypted at rest (SqsManagedSseEnabled or KmsMasterKeyId)"),
        );
    }
    for p in checkov_skip_problems(&stack.t) {
        found.check(false, p);
    }
    let globals = stack.resolve(&stack.t["Globals"]["Function"]);
    for f in functions {
        let function = Function::of(stack, namespace, f.logical_id);
        function.tracing_and_logging_problems(&globals, &mut found);
        function.environment_faults_problems(&mut found);
        match f.job {
            None => function.stream_problems(&mut found),
            Some(job) => function.job_alarm_problems(alarm_period(schedule_of(job)), &mut found),
        }
    }
    found.0
}

/// The problems a check finds, in the order found.
#[derive(Default)]
struct Findings(Vec<String>);

impl Findings {
    /// Note `what` unless `ok`.
    fn check(&mut self, ok: bool, what: String) {
        if !ok {
            self.0.push(what);
        }
    }
}

/// A parameter's value, as text.
fn param(stack: &Stack, name: &str) -> String {
    text(&stack.resolve(&json!({ "Ref": name })))
}

/// The parking table: [`park::schema`], SSE, TTL and point-in-time
/// recovery on, retained.
fn parking_table_problems(stack: &Stack, found: &mut Findings) {
    if stack.t["Resources"].get(PARKING_TABLE).is_none() {
        return found.check(false, format!("no {PARKING_TABLE} resource"));
    }
    let t = stack.resource(PARKING_TABLE);
    let mut props = t["Properties"].clone();
    let obj = props.as_object_mut().expect("Properties");
    let sse = obj.remove("SSESpecification");
    let ttl = obj.remove("TimeToLiveSpecification");
    let pitr = obj.remove("PointInTimeRecoverySpecification");
    found.check(
        sse == Some(json!({"SSEEnabled": true})),
        format!("{PARKING_TABLE}: SSESpecification.SSEEnabled true (encrypted at rest)"),
    );
    found.check(
        ttl == Some(json!({"AttributeName": park::TTL_ATTRIBUTE, "Enabled": true})),
        format!("{PARKING_TABLE}: TTL on {}", park::TTL_ATTRIBUTE),
    );
    found.check(
        pitr == Some(json!({"PointInTimeRecoveryEnabled": true})),
        format!("{PARKING_TABLE}: point-in-time recovery on (it may hold the only copy)"),
    );
    let want = park::schema().to_cloudformation(props["TableName"].clone());
    found.check(
        props == want["Properties"],
        format!(
            "{PARKING_TABLE}: {props} is not worker_engine::park::schema() {}",
            want["Properties"]
        ),
    );
    found.check(
        t["DeletionPolicy"] == "Retain",
        format!("{PARKING_TABLE}: DeletionPolicy Retain"),
    );
}

/// A function of a stack, as [`operations_problems`] reads it.
struct Function<'a> {
    stack: &'a Stack,
    /// The namespace of the worker's metrics.
    namespace: &'a str,
    /// Its logical id.
    id: &'a str,
    /// Its properties, evaluated.
    props: Value,
    /// Its environment variables (Globals merged).
    env: BTreeMap<String, Value>,
    /// The statements of its role.
    statements: Vec<Value>,
}

impl<'a> Function<'a> {
    /// Function `id` of `stack`, its alarms in `namespace`.
    fn of(stack: &'a Stack, namespace: &'a str, id: &'a str) -> Self {
        let props = stack.resource(id)["Properties"].clone();
        let env = stack.env(id);
        let statements = role_statements(stack, id);
        Function {
            stack,
            namespace,
            id,
            props,
            env,
            statements,
        }
    }

    /// Whether its role allows exactly `actions` on exactly `resource`.
    fn granted(&self, actions: &[&str], resource: &str) -> bool {
        let want: BTreeSet<String> = actions.iter().map(|a| a.to_string()).collect();
        self.statements.iter().any(|s| {
            s["Effect"] == "Allow"
                && strings(&s["Action"]) == want
                && strings(&s["Resource"]) == BTreeSet::from([resource.to_owned()])
        })
    }

    /// The properties of its alarm on the worker's `metric`.
    fn alarm(&self, metric: &str) -> Option<Value> {
        let dimensions = json!([{"Name": "Function", "Value": format!("ref:{}", self.id)}]);
        self.stack
            .resources_of("AWS::CloudWatch::Alarm")
            .into_values()
            .map(|a| a["Properties"].clone())
            .find(|a| {
                a["Namespace"] == self.namespace
                    && a["MetricName"] == metric
                    && a["Dimensions"] == dimensions
            })
    }

    /// Traced (`Tracing: Active`, the X-Ray grant), logging through
    /// Lambda's controls.
    fn tracing_and_logging_problems(&self, globals: &Value, found: &mut Findings) {
        let id = self.id;
        let tracing = self.props.get("Tracing").unwrap_or(&globals["Tracing"]);
        found.check(tracing == "Active", format!("{id}: Tracing: Active"));
        let logging = &self.props["LoggingConfig"];
        found.check(
            logging["LogFormat"] == "JSON"
                && text(&logging["ApplicationLogLevel"]) == param(self.stack, "LogLevel"),
            format!("{id}: LoggingConfig JSON with ApplicationLogLevel = LogLevel ({logging})"),
        );
        found.check(
            !self.env.contains_key("LOG_FORMAT") && !self.env.contains_key("RUST_LOG"),
            format!("{id}: logs are set by LoggingConfig, not LOG_FORMAT/RUST_LOG"),
        );
        found.check(
            self.granted(&TRACING_ACTIONS, "*"),
            format!("{id}: the role grants {TRACING_ACTIONS:?}"),
        );
    }

    /// Its [`ENVIRONMENT_FAULTS`] alarm: any one, within the minute, to
    /// the topic.
    fn environment_faults_problems(&self, found: &mut Findings) {
        let id = self.id;
        let Some(a) = self.alarm(ENVIRONMENT_FAULTS) else {
            return found.check(false, format!("{id}: no {ENVIRONMENT_FAULTS} alarm"));
        };
        let topic = json!({"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]});
        let raw = self.stack.t["Resources"]
            .as_object()
            .into_iter()
            .flatten()
            .find(|(_, r)| {
                r["Properties"]["MetricName"] == ENVIRONMENT_FAULTS
                    && r["Properties"]["Dimensions"][0]["Value"] == json!({"Ref": id})
            })
            .map(|(_, r)| r["Properties"]["AlarmActions"].clone());
        found.check(
            a["Statistic"] == "Sum"
                && text(&a["Period"]) == "60"
                && text(&a["EvaluationPeriods"]) == "1"
                && text(&a["Threshold"]) == "1"
                && a["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
                && a["TreatMissingData"] == "notBreaching"
                && raw == Some(topic),
            format!(
                "{id}: {ENVIRONMENT_FAULTS} alarm: Sum >= 1 in one period of 60 s, notBreaching, AlarmActions on the topic"
            ),
        );
    }

    /// The stream function: parking (table, retention, grant), the event
    /// source's metrics, [`STREAM_ALARM_METRICS`] alarms.
    fn stream_problems(&self, found: &mut Findings) {
        let (id, env) = (self.id, &self.env);
        let retention = param(self.stack, "ParkingRetentionDays");
        found.check(
            env.get(park::PARKING_TABLE_ENV) == Some(&json!(format!("ref:{PARKING_TABLE}"))),
            format!("{id}: {} = !Ref {PARKING_TABLE}", park::PARKING_TABLE_ENV),
        );
        found.check(
            env.get(park::PARKING_RETENTION_DAYS_ENV).map(text) == Some(retention.clone())
                && retention == park::DEFAULT_RETENTION_DAYS.to_string(),
            format!(
                "{id}: {} = !Ref ParkingRetentionDays (default {})",
                park::PARKING_RETENTION_DAYS_ENV,
                park::DEFAULT_RETENTION_DAYS
            ),
        );
        found.check(
            self.granted(&park::PARK_ACTIONS, &format!("getatt:{PARKING_TABLE}.Arn")),
            format!(
                "{id}: the role grants {:?} on {PARKING_TABLE}",
                park::PARK_ACTIONS
            ),
        );
        let sources: Vec<&Value> = self.props["Events"]
            .as_object()
            .into_iter()
            .flat_map(|e| e.values())
            .filter(|e| e["Type"] == "DynamoDB")
            .collect();
        found.check(
            !sources.is_empty()
                && sources.iter().all(|s| {
                    s["Properties"]["MetricsConfig"] == json!({"Metrics": ["EventCount"]})
                }),
            format!("{id}: MetricsConfig {{Metrics: [EventCount]}} on its event source"),
        );
        for metric in STREAM_ALARM_METRICS {
            let Some(a) = self.alarm(metric) else {
                found.check(false, format!("{id}: no {metric} alarm"));
                continue;
            };
            let want = if metric == "StreamLagMaxMs" {
                param(self.stack, "StreamLagAlarmMs")
            } else {
                "0".to_owned()
            };
            found.check(
                text(&a["Threshold"]) == want && a["ComparisonOperator"] == "GreaterThanThreshold",
                format!("{id}: {metric} alarm > {want}"),
            );
        }
    }

    /// A schedule function: [`JOB_ALARM_METRICS`] alarms over `period`
    /// (its schedule's [`alarm_period`]).
    fn job_alarm_problems(&self, period: u32, found: &mut Findings) {
        let id = self.id;
        for metric in JOB_ALARM_METRICS {
            let Some(a) = self.alarm(metric) else {
                found.check(false, format!("{id}: no {metric} alarm"));
                continue;
            };
            found.check(
                text(&a["Period"]) == period.to_string(),
                format!("{id}: {metric} alarm period {period}"),
            );
            if metric == "JobsIncomplete" {
                let n = JOBS_INCOMPLETE_PERIODS.to_string();
                found.check(
                    a["Statistic"] == "Minimum"
                        && text(&a["EvaluationPeriods"]) == n
                        && text(&a["DatapointsToAlarm"]) == n
                        && text(&a["Threshold"]) == "1"
                        && a["ComparisonOperator"] == "GreaterThanOrEqualToThreshold",
                    format!(
                        "{id}: JobsIncomplete alarm: every run incomplete for {n} periods in a row"
                    ),
                );
            } else {
                found.check(
                    text(&a["Threshold"]) == "0"
                        && a["ComparisonOperator"] == "GreaterThanThreshold",
                    format!("{id}: {metric} alarm > 0"),
                );
            }
        }
    }
}
