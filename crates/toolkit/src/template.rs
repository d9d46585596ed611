//! An app's deployment template (AWS SAM / CloudFormation YAML) as local
//! runs read it, so `dev`, `run` and `replay` behave like the deployment:
//! every DynamoDB event source mapping (the table whose stream it reads,
//! batch size, batching window, retries, bisect, record age,
//! `FilterCriteria`, the failure destination, the starting position),
//! the schedules (expression, time zone, state, the job each one ticks) and
//! every function's timeout.
//!
//! [`to_json`] turns the YAML, short tags included (`!Ref`, `!GetAtt`,
//! `!Sub`, `!If`, ...), into CloudFormation's JSON form; [`Params`]
//! evaluates the intrinsics the settings use with the parameters' defaults;
//! [`filter`] is Lambda's event-filtering for the patterns of a mapping.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value, json};

/// Why a template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {problem}")]
pub struct TemplateError {
    pub file: String,
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

/// The intrinsics a local run needs, evaluated with the parameters'
/// defaults: `Ref` (parameters; resources as `ref:<Id>`), `Fn::Sub`,
/// `Fn::If` and the condition functions, `Fn::GetAtt` (as
/// `getatt:<Id>.<Attr>`), `Fn::Join`. Anything else is left as written.
pub struct Params<'a> {
    t: &'a Value,
    values: BTreeMap<String, Value>,
}

impl<'a> Params<'a> {
    pub fn new(t: &'a Value) -> Self {
        let values = t["Parameters"]
            .as_object()
            .map(|ps| {
                ps.iter()
                    .filter_map(|(name, p)| {
                        let d = p.get("Default")?;
                        Some((
                            name.clone(),
                            match d {
                                Value::Number(n) => Value::String(n.to_string()),
                                other => other.clone(),
                            },
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Params { t, values }
    }

    fn reference(&self, name: &str) -> Value {
        match name {
            "AWS::Partition" => json!("aws"),
            "AWS::Region" => json!("us-east-1"),
            "AWS::AccountId" => json!("000000000000"),
            "AWS::StackName" => json!("local"),
            _ => self
                .values
                .get(name)
                .cloned()
                .unwrap_or_else(|| json!(format!("ref:{name}"))),
        }
    }

    fn truth(&self, v: &Value) -> bool {
        let Some((f, arg)) = single(v) else {
            return v.as_bool().unwrap_or(false);
        };
        let args = arg.as_array().map(Vec::as_slice).unwrap_or(&[]);
        match f {
            "Fn::Equals" if args.len() == 2 => self.resolve(&args[0]) == self.resolve(&args[1]),
            "Fn::Not" => !args.first().is_some_and(|c| self.truth(c)),
            "Fn::And" => args.iter().all(|c| self.truth(c)),
            "Fn::Or" => args.iter().any(|c| self.truth(c)),
            "Condition" => arg
                .as_str()
                .and_then(|n| self.t["Conditions"].get(n))
                .is_some_and(|c| self.truth(c)),
            _ => false,
        }
    }

    fn sub(&self, text: &str, vars: &Map<String, Value>) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let Some(end) = rest[start..].find('}').map(|e| e + start) else {
                break;
            };
            let name = &rest[start + 2..end];
            let value = match vars.get(name) {
                Some(v) => self.resolve(v),
                None if !name.starts_with("AWS::") && name.contains('.') => {
                    json!(format!("getatt:{name}"))
                }
                None => self.reference(name),
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

    /// The value with the intrinsics evaluated.
    pub fn resolve(&self, v: &Value) -> Value {
        if let Some((f, arg)) = single(v) {
            match f {
                "Ref" => return self.reference(arg.as_str().unwrap_or_default()),
                "Fn::GetAtt" => {
                    let parts: Vec<&str> = arg
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    return json!(format!("getatt:{}", parts.join(".")));
                }
                "Fn::Sub" => {
                    return match arg {
                        Value::String(s) => json!(self.sub(s, &Map::new())),
                        Value::Array(a) => match (a.first(), a.get(1)) {
                            (Some(Value::String(s)), Some(Value::Object(vars))) => {
                                json!(self.sub(s, vars))
                            }
                            _ => v.clone(),
                        },
                        _ => v.clone(),
                    };
                }
                "Fn::If" => {
                    if let Some([c, yes, no]) = arg.as_array().map(Vec::as_slice) {
                        let c = json!({"Condition": c});
                        return self.resolve(if self.truth(&c) { yes } else { no });
                    }
                }
                "Fn::Join" => {
                    if let Some([sep, parts]) = arg.as_array().map(Vec::as_slice) {
                        let parts = self.resolve(parts);
                        let texts: Vec<String> = parts
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .map(|p| {
                                        p.as_str().map_or_else(|| p.to_string(), str::to_owned)
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        return json!(texts.join(sep.as_str().unwrap_or("")));
                    }
                }
                "Fn::Equals" | "Fn::Not" | "Fn::And" | "Fn::Or" => return json!(self.truth(v)),
                _ => {}
            }
        }
        match v {
            Value::Array(items) => Value::Array(items.iter().map(|i| self.resolve(i)).collect()),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), self.resolve(v)))
                    .collect(),
            ),
            other => other.clone(),
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
    /// The logical id of the table whose stream it reads (`Stream: !GetAtt
    /// <Table>.StreamArn`); `None` when the stream is not a table of the
    /// template (an ARN given as a parameter).
    pub table: Option<String>,
    /// The function's environment variables that name that table (`!Ref
    /// <Table>`): how a local run finds the table among the app's.
    pub table_variables: Vec<String>,
    pub batch_size: u32,
    pub batching_window_secs: u32,
    /// `MaximumRetryAttempts`; `None`: unbounded (-1 or absent).
    pub max_retries: Option<u32>,
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
    pub file: String,
    /// Every DynamoDB event source, in the template's order of functions
    /// and events (by logical id).
    pub streams: Vec<StreamMapping>,
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
        let p = Params::new(t);
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
/// list of values, `numeric` comparisons. [`check`] refuses anything else
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

    /// Whether every operator of a pattern is one [`matches`] evaluates.
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
