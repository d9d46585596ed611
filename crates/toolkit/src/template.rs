//! An app's deployment template (AWS SAM / CloudFormation YAML) as local
//! runs read it, so `dev`, `run` and `replay` behave like the deployment:
//! every DynamoDB event source mapping (the table whose stream it reads,
//! batch size, batching window, retries, bisect, record age,
//! `FilterCriteria`, the failure destination, the starting position),
//! the schedules (expression, time zone, state, the job each one ticks) and
//! every function's timeout.
//!
//! [`to_json`] turns the YAML, short tags included (`!Ref`, `!GetAtt`,
//! `!Sub`, `!If`, ...), into CloudFormation's JSON form; [`Evaluator`]
//! evaluates the intrinsic functions, here with the parameters' defaults
//! (the test kit's stacks evaluate with it too, for given parameters);
//! [`filter`] is Lambda's event-filtering for the patterns of a mapping.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value, json};

/// Why a template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {problem}")]
pub struct TemplateError {
    /// The template's path, as given.
    pub file: String,
    /// What is wrong with it (cannot read, not YAML, no `Resources`, an
    /// unsupported or invalid setting).
    pub problem: String,
}

/// A YAML value in CloudFormation's JSON form: `!Ref x` -> `{"Ref": x}`,
/// `!GetAtt A.B` -> `{"Fn::GetAtt": ["A", "B"]}`, `!Sub`/`!If`/... ->
/// `{"Fn::Sub": ...}`. Keys that are not strings are written as YAML text.
pub fn to_json(v: &serde_yaml_ng::Value) -> Value {
    use serde_yaml_ng::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(*b),
        Y::Number(n) => serde_json::to_value(n).unwrap_or(Value::Null),
        Y::String(s) => Value::String(s.clone()),
        Y::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
        Y::Mapping(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let k = match k.as_str() {
                        Some(s) => s.to_owned(),
                        None => serde_yaml_ng::to_string(k)
                            .unwrap_or_default()
                            .trim()
                            .to_owned(),
                    };
                    (k, to_json(v))
                })
                .collect(),
        ),
        Y::Tagged(t) => {
            let tag = t.tag.to_string();
            let name = tag.trim_start_matches('!');
            let inner = to_json(&t.value);
            match name {
                "Ref" => json!({ "Ref": inner }),
                "Condition" => json!({ "Condition": inner }),
                "GetAtt" => match inner {
                    Value::String(s) => match s.split_once('.') {
                        Some((res, attr)) => json!({ "Fn::GetAtt": [res, attr] }),
                        None => json!({ "Fn::GetAtt": [s] }),
                    },
                    other => json!({ "Fn::GetAtt": other }),
                },
                other => json!({ format!("Fn::{other}"): inner }),
            }
        }
    }
}

/// `{"Fn::X": arg}` as `("Fn::X", arg)`.
pub fn single(v: &Value) -> Option<(&str, &Value)> {
    let m = v.as_object()?;
    if m.len() != 1 {
        return None;
    }
    let (k, arg) = m.iter().next()?;
    (k == "Ref" || k == "Condition" || k.starts_with("Fn::")).then_some((k.as_str(), arg))
}

/// Read a template file into CloudFormation's JSON form.
pub fn load(path: &Path) -> Result<Value, TemplateError> {
    let err = |problem: String| TemplateError {
        file: path.display().to_string(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let yaml: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| err(format!("not YAML: {e}")))?;
    let t = to_json(&yaml);
    if !t["Resources"].is_object() {
        return Err(err("no Resources: not a CloudFormation template".into()));
    }
    Ok(t)
}

/// What `!Ref AWS::NoValue` evaluates to; [`Evaluator`] drops it from the
/// lists and maps it evaluates, as CloudFormation drops the property.
pub const NO_VALUE: &str = "\u{0}AWS::NoValue";

/// The pseudo parameters' values a template is evaluated with
/// (`AWS::Partition` is always `aws`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pseudo {
    /// `AWS::AccountId`.
    pub account: String,
    /// `AWS::Region`.
    pub region: String,
    /// `AWS::StackName`.
    pub stack_name: String,
}

impl Pseudo {
    /// A local run's: account `000000000000`, `us-east-1`, stack `local`.
    pub fn local() -> Self {
        Pseudo {
            account: "000000000000".into(),
            region: "us-east-1".into(),
            stack_name: "local".into(),
        }
    }
}

/// The evaluator of a template's intrinsic functions, the one both local
/// runs and the test kit use: `Ref` (parameters, pseudo parameters,
/// `AWS::NoValue`; a resource as `ref:<Id>`), `Fn::GetAtt` and `${Id.Attr}`
/// (as `getatt:<Id>.<Attr>`), `Fn::Sub`, `Fn::If`, `Fn::Join`, and the
/// conditions (`Fn::Equals`, `Fn::Not`, `Fn::And`, `Fn::Or`, `Condition`).
/// Any other function is kept, its arguments evaluated.
///
/// What it cannot evaluate (a parameter without a value, a reference to
/// nothing, a malformed function) is a problem: [`Evaluator::checked`]
/// reports the first; [`Evaluator::resolve`] goes on, leaving the
/// reference rendered, the condition false, the `Fn::Sub` as written.
#[derive(Debug, Clone)]
pub struct Evaluator {
    /// The pseudo parameters' values.
    pseudo: Pseudo,
    /// The parameters' values: defaults (numbers as text, as CloudFormation
    /// passes them), then those [`Evaluator::set`].
    values: BTreeMap<String, Value>,
    /// The template's parameters, with a value or not.
    declared: BTreeSet<String>,
    /// The logical ids of the template's resources.
    resources: BTreeSet<String>,
    /// The template's `Conditions`.
    conditions: Map<String, Value>,
}

/// What an evaluation could not evaluate, in the order met.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    /// Note `problem`; the evaluation goes on with `fallback`.
    fn note<T>(&mut self, problem: String, fallback: T) -> T {
        self.0.push(problem);
        fallback
    }

    /// `value`, or the first problem noted.
    fn or_first<T>(self, value: T) -> Result<T, String> {
        self.0.into_iter().next().map_or(Ok(value), Err)
    }
}

impl Evaluator {
    /// The evaluator of template `t` (CloudFormation's JSON form) with its
    /// parameters' defaults.
    pub fn new(t: &Value, pseudo: Pseudo) -> Self {
        let declared = t["Parameters"].as_object().cloned().unwrap_or_default();
        let values = declared
            .iter()
            .filter_map(|(name, p)| {
                let value = match p.get("Default")? {
                    Value::Number(n) => Value::String(n.to_string()),
                    other => other.clone(),
                };
                Some((name.clone(), value))
            })
            .collect();
        let ids = |m: &Value| m.as_object().map(|m| m.keys().cloned().collect());
        Evaluator {
            pseudo,
            values,
            declared: ids(&t["Parameters"]).unwrap_or_default(),
            resources: ids(&t["Resources"]).unwrap_or_default(),
            conditions: t["Conditions"].as_object().cloned().unwrap_or_default(),
        }
    }

    /// Give parameter `name` a value (declared or not: a stack's own).
    pub fn set(&mut self, name: &str, value: Value) {
        self.values.insert(name.to_owned(), value);
    }

    /// The value with the intrinsics evaluated, whatever the problems.
    pub fn resolve(&self, v: &Value) -> Value {
        self.eval(v, &mut Problems::default())
    }

    /// The value with the intrinsics evaluated, or the first problem.
    pub fn checked(&self, v: &Value) -> Result<Value, String> {
        let mut problems = Problems::default();
        let value = self.eval(v, &mut problems);
        problems.or_first(value)
    }

    /// Whether condition `name` holds, or the first problem.
    pub fn condition(&self, name: &str) -> Result<bool, String> {
        let mut problems = Problems::default();
        let holds = self.holds(name, &mut problems);
        problems.or_first(holds)
    }

    /// `v` evaluated, what could not be noted in `problems`.
    fn eval(&self, v: &Value, problems: &mut Problems) -> Value {
        if let Some((f, arg)) = single(v)
            && let Some(value) = self.intrinsic(f, arg, v, problems)
        {
            return value;
        }
        match v {
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.eval(i, problems))
                    .filter(|i| i != NO_VALUE)
                    .collect(),
            ),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), self.eval(v, problems)))
                    .filter(|(_, v)| v != NO_VALUE)
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Function `f` of `whole` evaluated; `None`: kept, its arguments
    /// evaluated.
    fn intrinsic(
        &self,
        f: &str,
        arg: &Value,
        whole: &Value,
        problems: &mut Problems,
    ) -> Option<Value> {
        match f {
            "Ref" => {
                let name = arg
                    .as_str()
                    .unwrap_or_else(|| problems.note(format!("!Ref {arg}: not a name"), ""));
                Some(self.reference(name, problems))
            }
            "Fn::GetAtt" => Some(self.get_att(arg, problems)),
            "Fn::Sub" => Some(
                self.substitute(arg, problems)
                    .unwrap_or_else(|| whole.clone()),
            ),
            "Fn::If" => self.branch(arg, problems),
            "Fn::Join" => self.join(arg, problems),
            "Fn::Equals" | "Fn::Not" | "Fn::And" | "Fn::Or" => {
                Some(json!(self.truth(whole, problems)))
            }
            _ => None,
        }
    }

    /// `Ref name`: a pseudo parameter, a parameter's value, or a resource
    /// as `ref:<Id>`.
    fn reference(&self, name: &str, problems: &mut Problems) -> Value {
        let pseudo = match name {
            "AWS::Partition" => Some("aws"),
            "AWS::Region" => Some(self.pseudo.region.as_str()),
            "AWS::AccountId" => Some(self.pseudo.account.as_str()),
            "AWS::StackName" => Some(self.pseudo.stack_name.as_str()),
            "AWS::NoValue" => Some(NO_VALUE),
            _ => None,
        };
        if let Some(value) = pseudo {
            return json!(value);
        }
        if let Some(v) = self.values.get(name) {
            return v.clone();
        }
        let rendered = json!(format!("ref:{name}"));
        if self.declared.contains(name) {
            problems.note(
                format!("parameter {name} has no default and no value"),
                rendered,
            )
        } else if self.resources.contains(name) {
            rendered
        } else {
            problems.note(
                format!("!Ref {name}: no such parameter or resource"),
                rendered,
            )
        }
    }

    /// `getatt:<Id>.<Attr>` of resource `id`.
    fn attribute(&self, id: &str, attr: &str, problems: &mut Problems) -> Value {
        let value = json!(format!("getatt:{id}.{attr}"));
        if self.resources.contains(id) {
            return value;
        }
        problems.note(format!("{id}.{attr}: no such resource {id}"), value)
    }

    /// `Fn::GetAtt: [Id, Attr]`.
    fn get_att(&self, arg: &Value, problems: &mut Problems) -> Value {
        if let Some([Value::String(id), Value::String(attr)]) = arg.as_array().map(Vec::as_slice) {
            return self.attribute(id, attr, problems);
        }
        let parts: Vec<&str> = arg
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let value = json!(format!("getatt:{}", parts.join(".")));
        problems.note(format!("!GetAtt {arg}: not [resource, attribute]"), value)
    }

    /// `Fn::Sub: text` or `[text, {variables}]`; `None` when neither.
    fn substitute(&self, arg: &Value, problems: &mut Problems) -> Option<Value> {
        let no_vars = Map::new();
        let (text, vars) = match arg {
            Value::String(s) => (s, &no_vars),
            Value::Array(a) => match (a.first(), a.get(1)) {
                (Some(Value::String(s)), Some(Value::Object(vars))) => (s, vars),
                _ => return problems.note(format!("!Sub {arg}: not [text, {{variables}}]"), None),
            },
            other => return problems.note(format!("!Sub {other}: neither text nor a list"), None),
        };
        Some(json!(self.sub(text, vars, problems)))
    }

    /// `text` with each `${name}` replaced: a variable, an attribute
    /// (`Id.Attr`) or a reference.
    fn sub(&self, text: &str, vars: &Map<String, Value>, problems: &mut Problems) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            rest = &rest[start..];
            let Some(end) = rest.find('}') else {
                problems.note(format!("!Sub {text}: no closing brace"), ());
                break;
            };
            let name = &rest[2..end];
            let value = match (vars.get(name), name.split_once('.')) {
                (Some(v), _) => self.eval(v, problems),
                (None, Some((id, attr))) if !name.starts_with("AWS::") => {
                    self.attribute(id, attr, problems)
                }
                (None, _) => self.reference(name, problems),
            };
            match value {
                Value::String(s) => out.push_str(&s),
                other => out.push_str(&other.to_string()),
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// `Fn::If: [condition, yes, no]`; `None` when not that.
    fn branch(&self, arg: &Value, problems: &mut Problems) -> Option<Value> {
        let Some([c, yes, no]) = arg.as_array().map(Vec::as_slice) else {
            return problems.note(format!("!If {arg}: not [condition, yes, no]"), None);
        };
        let holds = self.truth(&json!({ "Condition": c }), problems);
        Some(self.eval(if holds { yes } else { no }, problems))
    }

    /// `Fn::Join: [separator, [parts]]`; `None` when not that.
    fn join(&self, arg: &Value, problems: &mut Problems) -> Option<Value> {
        let Some([sep, parts]) = arg.as_array().map(Vec::as_slice) else {
            return problems.note(format!("!Join {arg}: not [separator, list]"), None);
        };
        let sep = sep
            .as_str()
            .unwrap_or_else(|| problems.note(format!("!Join {arg}: a separator not text"), ""));
        let parts = self.eval(parts, problems);
        let Some(parts) = parts.as_array() else {
            return problems.note(
                format!("!Join {arg}: {parts} is not a list"),
                Some(json!("")),
            );
        };
        let texts: Vec<String> = parts
            .iter()
            .map(|p| match p.as_str() {
                Some(s) => s.to_owned(),
                None => problems.note(format!("!Join {arg}: {p} is not text"), p.to_string()),
            })
            .collect();
        Some(json!(texts.join(sep)))
    }

    /// Whether the template's condition `name` holds.
    fn holds(&self, name: &str, problems: &mut Problems) -> bool {
        match self.conditions.get(name) {
            Some(c) => self.truth(c, problems),
            None => problems.note(format!("no condition {name}"), false),
        }
    }

    /// Whether condition function `v` holds.
    fn truth(&self, v: &Value, problems: &mut Problems) -> bool {
        let Some((f, arg)) = single(v) else {
            let lenient = v.as_bool().unwrap_or(false);
            return problems.note(format!("not a condition: {v}"), lenient);
        };
        if f == "Condition" {
            return match arg.as_str() {
                Some(name) => self.holds(name, problems),
                None => problems.note(format!("Condition {arg}: not a name"), false),
            };
        }
        let args = arg
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_else(|| problems.note(format!("{f} {arg}: not a list"), &[]));
        match (f, args) {
            ("Fn::Equals", [a, b]) => self.eval(a, problems) == self.eval(b, problems),
            ("Fn::Equals", _) => problems.note(format!("{f} {arg}: not two values"), false),
            ("Fn::Not", []) => problems.note(format!("{f} {arg}: no condition"), true),
            ("Fn::Not", [c, ..]) => !self.truth(c, problems),
            ("Fn::And", _) => args.iter().all(|c| self.truth(c, problems)),
            ("Fn::Or", _) => args.iter().any(|c| self.truth(c, problems)),
            _ => problems.note(format!("unsupported condition function {f}"), false),
        }
    }
}

/// A DynamoDB event source mapping of a function.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamMapping {
    /// The function's logical id.
    pub function: String,
    /// The event's name in the function's `Events`.
    pub event: String,
    /// The logical id of the table whose stream it reads
    /// (`Stream: !GetAtt <Table>.StreamArn`); `None` when the stream is not
    /// a table of the template (an ARN given as a parameter).
    pub table: Option<String>,
    /// The function's environment variables that name that table
    /// (`!Ref <Table>`): how a local run finds the table among the app's.
    pub table_variables: Vec<String>,
    /// `BatchSize`: the most records per invocation (100 when absent).
    pub batch_size: u32,
    /// `MaximumBatchingWindowInSeconds`: how long records gather before an
    /// invocation (0 when absent).
    pub batching_window_secs: u32,
    /// `MaximumRetryAttempts`; `None`: unbounded (-1 or absent).
    pub max_retries: Option<u32>,
    /// `BisectBatchOnFunctionError` (false when absent): a failed batch is
    /// split in two and retried.
    pub bisect: bool,
    /// `MaximumRecordAgeInSeconds`; `None`: unbounded (-1 or absent).
    pub max_record_age_secs: Option<u64>,
    /// `ParallelizationFactor` (1 when absent): batches of one shard in
    /// flight at once, records split by partition key.
    pub parallelization_factor: u32,
    /// The `FilterCriteria` patterns, parsed.
    pub filters: Vec<Value>,
    /// `DestinationConfig.OnFailure.Destination`, as evaluated
    /// (`getatt:<Queue>.Arn`).
    pub on_failure: Option<String>,
    /// `StartingPosition`: `TRIM_HORIZON` or `LATEST` (the two a DynamoDB
    /// stream's mapping takes; any other value is refused when the template
    /// is read).
    pub starting_position: Option<String>,
    /// The function's `Timeout` in seconds.
    pub timeout_secs: Option<u64>,
}

/// A schedule of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSetting {
    /// The schedule's logical id.
    pub id: String,
    /// The job its input names.
    pub job: String,
    /// `ScheduleExpression`: `rate(...)`, `cron(...)` or `at(...)`.
    pub expression: String,
    /// `ScheduleExpressionTimezone` (IANA); `None`: UTC.
    pub time_zone: Option<String>,
    /// `State` is not `DISABLED`.
    pub enabled: bool,
}

/// What a local run takes from the template.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Deployment {
    /// The template's path, as given (in messages).
    pub file: String,
    /// Every DynamoDB event source, in the template's order of functions
    /// and events (by logical id).
    pub streams: Vec<StreamMapping>,
    /// Every schedule (`AWS::Scheduler::Schedule` or `AWS::Events::Rule`)
    /// whose input names a job, by logical id.
    pub schedules: Vec<ScheduleSetting>,
    /// The `Timeout` of the function pinned to each job (`WORKER_JOB`).
    pub job_timeouts: BTreeMap<String, u64>,
}

fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn as_i64(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

fn as_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

const FUNCTION_TYPES: [&str; 2] = ["AWS::Serverless::Function", "AWS::Lambda::Function"];

impl Deployment {
    /// Read `path` and take the settings out of it.
    pub fn load(path: &Path) -> Result<Deployment, TemplateError> {
        let t = load(path)?;
        Deployment::from_template(&t, &path.display().to_string())
    }

    /// The settings of a template already in JSON form.
    pub fn from_template(t: &Value, file: &str) -> Result<Deployment, TemplateError> {
        let err = |problem: String| TemplateError {
            file: file.to_owned(),
            problem,
        };
        let p = Evaluator::new(t, Pseudo::local());
        let resources = t["Resources"].as_object().cloned().unwrap_or_default();
        let global_timeout = as_u64(&p.resolve(&t["Globals"]["Function"]["Timeout"]));
        let mut out = Deployment {
            file: file.to_owned(),
            ..Default::default()
        };
        for (id, r) in &resources {
            let kind = r["Type"].as_str().unwrap_or_default();
            let props = p.resolve(&r["Properties"]);
            if FUNCTION_TYPES.contains(&kind) {
                let timeout = as_u64(&props["Timeout"]).or(global_timeout);
                if let (Some(job), Some(secs)) = (
                    props["Environment"]["Variables"]["WORKER_JOB"].as_str(),
                    timeout,
                ) {
                    out.job_timeouts.insert(job.to_owned(), secs);
                }
                let variables = props["Environment"]["Variables"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                let events = props["Events"].as_object().cloned().unwrap_or_default();
                for (event, e) in events.iter().filter(|(_, e)| e["Type"] == "DynamoDB") {
                    let mut mapping =
                        stream_mapping(id, &e["Properties"], timeout).map_err(&err)?;
                    mapping.event = event.clone();
                    mapping.table = e["Properties"]["Stream"]
                        .as_str()
                        .and_then(|s| s.strip_prefix("getatt:"))
                        .and_then(|s| s.strip_suffix(".StreamArn"))
                        .map(str::to_owned);
                    if let Some(table) = &mapping.table {
                        let reference = format!("ref:{table}");
                        mapping.table_variables = variables
                            .iter()
                            .filter(|(_, v)| v.as_str() == Some(reference.as_str()))
                            .map(|(name, _)| name.clone())
                            .collect();
                    }
                    out.streams.push(mapping);
                }
            }
            if kind == "AWS::Scheduler::Schedule" || kind == "AWS::Events::Rule" {
                let input = props["Target"]["Input"]
                    .as_str()
                    .or_else(|| props["Targets"][0]["Input"].as_str());
                let job = input
                    .and_then(|i| serde_json::from_str::<Value>(i).ok())
                    .and_then(|i| i["job"].as_str().map(str::to_owned));
                let (Some(job), Some(expr)) = (job, props["ScheduleExpression"].as_str()) else {
                    continue;
                };
                out.schedules.push(ScheduleSetting {
                    id: id.clone(),
                    job,
                    expression: expr.to_owned(),
                    time_zone: props["ScheduleExpressionTimezone"]
                        .as_str()
                        .map(str::to_owned),
                    enabled: props["State"].as_str() != Some("DISABLED"),
                });
            }
        }
        Ok(out)
    }

    /// The timeout of the stream function (of the first event source).
    pub fn stream_timeout(&self) -> Option<u64> {
        self.streams.first().and_then(|s| s.timeout_secs)
    }

    /// The timeout of the function that runs `job`.
    pub fn job_timeout(&self, job: &str) -> Option<u64> {
        self.job_timeouts.get(job).copied()
    }

    /// The schedule that ticks `job`, if any.
    pub fn schedule_of(&self, job: &str) -> Option<&ScheduleSetting> {
        self.schedules.iter().find(|s| s.job == job)
    }
}

fn stream_mapping(
    function: &str,
    props: &Value,
    timeout_secs: Option<u64>,
) -> Result<StreamMapping, String> {
    let filters = match props["FilterCriteria"]["Filters"].as_array() {
        None => Vec::new(),
        Some(fs) => fs
            .iter()
            .map(|f| {
                let text = f["Pattern"]
                    .as_str()
                    .ok_or_else(|| format!("a filter of {function} has no Pattern string"))?;
                let pattern: Value = serde_json::from_str(text)
                    .map_err(|e| format!("a filter pattern of {function} is not JSON: {e}"))?;
                filter::check(&pattern).map_err(|e| format!("filter of {function}: {e}"))?;
                Ok(pattern)
            })
            .collect::<Result<_, String>>()?,
    };
    let starting_position = props["StartingPosition"].as_str().map(str::to_owned);
    if let Some(p) = starting_position
        .as_deref()
        .filter(|p| !matches!(*p, "TRIM_HORIZON" | "LATEST"))
    {
        return Err(format!(
            "the StartingPosition of {function} is {p:?}: a DynamoDB stream's is TRIM_HORIZON or LATEST"
        ));
    }
    let unbounded = |v: &Value| as_i64(v).filter(|n| *n >= 0).map(|n| n as u64);
    Ok(StreamMapping {
        function: function.to_owned(),
        event: String::new(),
        table: None,
        table_variables: Vec::new(),
        batch_size: as_u64(&props["BatchSize"]).map_or(100, |n| n as u32),
        batching_window_secs: as_u64(&props["MaximumBatchingWindowInSeconds"])
            .map_or(0, |n| n as u32),
        max_retries: unbounded(&props["MaximumRetryAttempts"]).map(|n| n as u32),
        bisect: as_bool(&props["BisectBatchOnFunctionError"]).unwrap_or(false),
        max_record_age_secs: unbounded(&props["MaximumRecordAgeInSeconds"]),
        parallelization_factor: as_u64(&props["ParallelizationFactor"]).map_or(1, |n| n as u32),
        filters,
        on_failure: props["DestinationConfig"]["OnFailure"]["Destination"]
            .as_str()
            .map(str::to_owned),
        starting_position,
        timeout_secs,
    })
}

/// Lambda event filtering: whether a record (its JSON as Lambda delivers
/// it) passes a mapping's `FilterCriteria`. Supports Lambda's semantics
/// for: object = every field (AND), array = any alternative (OR); exact
/// values, `prefix`, `suffix`, `exists`, `anything-but` with a value or a
/// list of values, `numeric` comparisons. `check` refuses anything else
/// when the template is read.
pub mod filter {
    use serde_json::Value;

    /// Whether an event matches one pattern.
    pub fn matches(pattern: &Value, event: &Value) -> bool {
        let Some(p) = pattern.as_object() else {
            return false;
        };
        p.iter().all(|(field, pv)| {
            let ev = event.get(field);
            match pv {
                Value::Object(_) => ev.is_some_and(|e| matches(pv, e)),
                Value::Array(alternatives) => alternatives.iter().any(|a| leaf(a, ev)),
                _ => false,
            }
        })
    }

    /// Whether Lambda delivers `record` through `patterns` (any pattern
    /// matches; no patterns: every record).
    pub fn delivered(patterns: &[Value], record: &Value) -> bool {
        patterns.is_empty() || patterns.iter().any(|p| matches(p, record))
    }

    /// Whether every operator of a pattern is one [`matches()`] evaluates.
    pub fn check(pattern: &Value) -> Result<(), String> {
        let p = pattern
            .as_object()
            .ok_or_else(|| format!("a pattern is an object, not {pattern}"))?;
        for (field, pv) in p {
            match pv {
                Value::Object(_) => check(pv)?,
                Value::Array(alts) => {
                    for a in alts {
                        check_leaf(a).map_err(|e| format!("{field}: {e}"))?;
                    }
                }
                other => return Err(format!("{field}: {other} is neither object nor array")),
            }
        }
        Ok(())
    }

    fn check_leaf(alt: &Value) -> Result<(), String> {
        match alt {
            Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => Ok(()),
            Value::Object(op) if op.len() == 1 => {
                let (name, arg) = op.iter().next().expect("one operator");
                match (name.as_str(), arg) {
                    ("prefix" | "suffix", Value::String(_)) | ("exists", Value::Bool(_)) => Ok(()),
                    ("anything-but", Value::Array(values))
                        if values.iter().all(|v| v.is_string() || v.is_number()) =>
                    {
                        Ok(())
                    }
                    ("anything-but", Value::String(_) | Value::Number(_)) => Ok(()),
                    ("numeric", Value::Array(_)) => Ok(()),
                    (other, arg) => Err(format!("unsupported operator {other}: {arg}")),
                }
            }
            other => Err(format!("unsupported alternative {other}")),
        }
    }

    fn leaf(alt: &Value, ev: Option<&Value>) -> bool {
        match alt {
            Value::Null => ev.is_some_and(Value::is_null),
            Value::String(_) | Value::Number(_) | Value::Bool(_) => ev == Some(alt),
            Value::Object(op) if op.len() == 1 => {
                let (name, arg) = op.iter().next().expect("one operator");
                let text = ev.and_then(Value::as_str);
                match (name.as_str(), arg) {
                    ("prefix", Value::String(p)) => text.is_some_and(|t| t.starts_with(p.as_str())),
                    ("suffix", Value::String(s)) => text.is_some_and(|t| t.ends_with(s.as_str())),
                    ("exists", Value::Bool(b)) => ev.is_some() == *b,
                    ("anything-but", Value::Array(values)) => {
                        ev.is_some_and(|e| !values.contains(e))
                    }
                    ("anything-but", v @ (Value::String(_) | Value::Number(_))) => {
                        ev.is_some_and(|e| e != v)
                    }
                    ("numeric", Value::Array(cmp)) => {
                        let Some(x) = ev.and_then(Value::as_f64) else {
                            return false;
                        };
                        cmp.chunks(2).all(|c| {
                            match (c[0].as_str(), c.get(1).and_then(Value::as_f64)) {
                                (Some("<"), Some(n)) => x < n,
                                (Some("<="), Some(n)) => x <= n,
                                (Some(">"), Some(n)) => x > n,
                                (Some(">="), Some(n)) => x >= n,
                                (Some("="), Some(n)) => x == n,
                                _ => false,
                            }
                        })
                    }
                    _ => false,
                }
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = r#"
Parameters:
  Minutes: {Type: Number, Default: 15}
  Zone: {Type: String, Default: Asia/Tokyo}
  Factor: {Type: Number, Default: 4, MinValue: 1, MaxValue: 10}
Globals:
  Function:
    Timeout: 30
Resources:
  Queue: {Type: AWS::SQS::Queue}
  StreamFunction:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 120
      Events:
        S:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt Table.StreamArn
            StartingPosition: TRIM_HORIZON
            BatchSize: 500
            MaximumBatchingWindowInSeconds: 2
            BisectBatchOnFunctionError: true
            MaximumRetryAttempts: 10
            MaximumRecordAgeInSeconds: -1
            ParallelizationFactor: !Ref Factor
            DestinationConfig: {OnFailure: {Type: SQS, Destination: !GetAtt Queue.Arn}}
            FilterCriteria:
              Filters:
                - Pattern: '{"dynamodb": {"Keys": {"SK": {"S": [{"prefix": "A#"}]}}}}'
  JobFunction:
    Type: AWS::Serverless::Function
    Properties:
      Environment: {Variables: {WORKER_JOB: sweep}}
  Tick:
    Type: AWS::Scheduler::Schedule
    Properties:
      ScheduleExpression: !Sub rate(${Minutes} minutes)
      ScheduleExpressionTimezone: !Ref Zone
      State: ENABLED
      Target:
        Arn: !GetAtt JobFunction.Arn
        Input: '{"job": "sweep", "scheduledTime": "<aws.scheduler.scheduled-time>"}'
"#;

    #[test]
    fn settings_come_from_the_template() {
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(T).unwrap();
        let d = Deployment::from_template(&to_json(&yaml), "t.yaml").unwrap();
        assert_eq!(d.streams.len(), 1);
        let s = d.streams[0].clone();
        assert_eq!(
            (s.function.as_str(), s.event.as_str()),
            ("StreamFunction", "S")
        );
        assert_eq!(s.table.as_deref(), Some("Table"));
        assert_eq!((s.batch_size, s.batching_window_secs), (500, 2));
        assert_eq!((s.max_retries, s.bisect), (Some(10), true));
        assert_eq!(s.max_record_age_secs, None);
        assert_eq!(s.parallelization_factor, 4, "the parameter's default");
        assert_eq!(s.on_failure.as_deref(), Some("getatt:Queue.Arn"));
        assert_eq!(s.timeout_secs, Some(120));
        assert_eq!(s.starting_position.as_deref(), Some("TRIM_HORIZON"));
        let at_timestamp = T.replace("TRIM_HORIZON", "AT_TIMESTAMP");
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&at_timestamp).unwrap();
        let e = Deployment::from_template(&to_json(&yaml), "t.yaml").unwrap_err();
        assert!(e.problem.contains("TRIM_HORIZON or LATEST"), "{e}");
        assert_eq!(d.job_timeout("sweep"), Some(30), "the Globals timeout");
        let tick = d.schedule_of("sweep").unwrap();
        assert_eq!(tick.expression, "rate(15 minutes)");
        assert_eq!(tick.time_zone.as_deref(), Some("Asia/Tokyo"));
        let rec = |sk: &str| json!({"dynamodb": {"Keys": {"SK": {"S": sk}}}});
        assert!(filter::delivered(&s.filters, &rec("A#1")));
        assert!(!filter::delivered(&s.filters, &rec("B#1")));
    }

    /// Two tables' streams, each its own mapping: every event source is
    /// read with its own settings and the variables naming its table.
    #[test]
    fn every_event_source_is_read_with_its_own_settings() {
        const TWO: &str = r#"
Resources:
  People: {Type: AWS::DynamoDB::Table}
  Orders: {Type: AWS::DynamoDB::Table}
  StreamFunction:
    Type: AWS::Serverless::Function
    Properties:
      Timeout: 60
      Environment:
        Variables:
          PEOPLE_TABLE: !Ref People
          ORDERS_TABLE: !Ref Orders
          OTHER: x
      Events:
        PeopleStream:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt People.StreamArn
            StartingPosition: LATEST
            BatchSize: 10
        OrdersStream:
          Type: DynamoDB
          Properties:
            Stream: !GetAtt Orders.StreamArn
            StartingPosition: TRIM_HORIZON
            BatchSize: 200
            FilterCriteria:
              Filters:
                - Pattern: '{"eventName": ["INSERT"]}'
        Tick: {Type: Schedule, Properties: {Schedule: rate(1 minute)}}
"#;
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(TWO).unwrap();
        let d = Deployment::from_template(&to_json(&yaml), "two.yaml").unwrap();
        let by_event = |e: &str| d.streams.iter().find(|s| s.event == e).unwrap();
        assert_eq!(d.streams.len(), 2, "{d:?}");
        let people = by_event("PeopleStream");
        assert_eq!(people.table.as_deref(), Some("People"));
        assert_eq!(people.table_variables, ["PEOPLE_TABLE"]);
        assert_eq!(people.batch_size, 10);
        assert_eq!(people.starting_position.as_deref(), Some("LATEST"));
        assert!(people.filters.is_empty());
        let orders = by_event("OrdersStream");
        assert_eq!(orders.table_variables, ["ORDERS_TABLE"]);
        assert_eq!(orders.batch_size, 200);
        assert_eq!(orders.starting_position.as_deref(), Some("TRIM_HORIZON"));
        assert_eq!(orders.filters.len(), 1);
        assert_eq!(d.stream_timeout(), Some(60));
    }

    /// A template's intrinsics, evaluated: parameters (defaults, values
    /// set), pseudo parameters, resources as `ref:`/`getatt:`, `Fn::Sub`,
    /// `Fn::If` on conditions, `Fn::Join`, `AWS::NoValue` dropped.
    #[test]
    fn the_evaluator_evaluates_the_intrinsics() {
        let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(
            r#"
Parameters:
  Stage: {Type: String, Default: dev}
  Days: {Type: Number, Default: 14}
  Bus: {Type: String, Default: ""}
Conditions:
  Notify: !Not [!Equals [!Ref Bus, ""]]
  Either: !Or [!Condition Notify, !Equals [!Ref Stage, prod]]
Resources:
  Queue: {Type: AWS::SQS::Queue}
"#,
        )
        .unwrap();
        let t = to_json(&yaml);
        let mut e = Evaluator::new(&t, Pseudo::local());
        let v = |s: &str| to_json(&serde_yaml_ng::from_str(s).unwrap());
        let eval = |e: &Evaluator, s: &str| e.checked(&v(s)).unwrap();
        assert_eq!(eval(&e, "!Ref Days"), json!("14"), "numbers as text");
        assert_eq!(
            eval(&e, "!Sub 'q-${Stage}-${AWS::AccountId}-${Queue.Arn}'"),
            json!("q-dev-000000000000-getatt:Queue.Arn")
        );
        assert_eq!(
            eval(&e, "!Join ['/', [!Ref Queue, !GetAtt Queue.Arn, x]]"),
            json!("ref:Queue/getatt:Queue.Arn/x")
        );
        assert_eq!(
            eval(&e, "[a, !If [Notify, b, !Ref AWS::NoValue]]"),
            json!(["a"])
        );
        assert_eq!(e.condition("Either"), Ok(false));
        e.set("Bus", json!("bus"));
        assert_eq!(e.condition("Either"), Ok(true));
        assert_eq!(
            eval(
                &e,
                "{k: !If [Notify, !Sub ['${X}', {X: !Ref Bus}], !Ref AWS::NoValue]}"
            ),
            json!({"k": "bus"})
        );
    }

    /// What cannot be evaluated: [`Evaluator::checked`] says what;
    /// [`Evaluator::resolve`] leaves the reference rendered, the condition
    /// false, the `Fn::Sub` as written.
    #[test]
    fn what_cannot_be_evaluated_is_a_problem() {
        let t = json!({
            "Parameters": {"Given": {"Type": "String"}},
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        });
        let e = Evaluator::new(&t, Pseudo::local());
        let cases = [
            (
                json!({"Ref": "Given"}),
                json!("ref:Given"),
                "parameter Given has no default",
            ),
            (
                json!({"Ref": "Nothing"}),
                json!("ref:Nothing"),
                "!Ref Nothing: no such",
            ),
            (
                json!({"Fn::GetAtt": ["Table", "StreamArn"]}),
                json!("getatt:Table.StreamArn"),
                "no such resource Table",
            ),
            (
                json!({"Fn::If": ["Missing", 1, 2]}),
                json!(2),
                "no condition Missing",
            ),
            (json!({"Fn::Sub": 7}), json!({"Fn::Sub": 7}), "!Sub 7"),
            (
                json!({"Fn::Sub": "a${b"}),
                json!("a${b"),
                "no closing brace",
            ),
            (json!({"Fn::Equals": [1]}), json!(false), "not two values"),
        ];
        for (v, lenient, problem) in cases {
            assert_eq!(e.resolve(&v), lenient, "{v}");
            let got = e.checked(&v).unwrap_err();
            assert!(got.contains(problem), "{v}: {got}");
        }
        assert_eq!(e.checked(&json!({"Ref": "Queue"})), Ok(json!("ref:Queue")));
    }

    #[test]
    fn filters_follow_lambda() {
        use filter::matches;
        let p = json!({"a": [{"anything-but": ["x", "y"]}], "b": [{"exists": false}]});
        assert!(matches(&p, &json!({"a": "z"})));
        assert!(!matches(&p, &json!({"a": "x"})));
        assert!(!matches(&p, &json!({"a": "z", "b": 1})));
        assert!(!matches(&p, &json!({})), "anything-but needs the field");
        let n = json!({"n": [{"numeric": [">", 1, "<=", 5]}]});
        assert!(matches(&n, &json!({"n": 5})) && !matches(&n, &json!({"n": 1})));
        assert!(filter::check(&json!({"a": [{"wildcard": "x*"}]})).is_err());
    }
}
