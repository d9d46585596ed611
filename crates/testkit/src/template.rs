//! A SAM template as tests read it: the YAML in CloudFormation's JSON form
//! ([`load`]), and [`Stack`], an evaluator of the intrinsic functions a
//! template uses, for given parameter values. Every app checks its
//! template against its code with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value, json};

/// What `!Ref AWS::NoValue` evaluates to (dropped from lists and maps).
pub const NO_VALUE: &str = "\u{0}AWS::NoValue";
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

/// The YAML reader and the intrinsic's shape are the engine's (local runs
/// read the same templates: [`worker_engine::template`]).
pub use worker_engine::template::{single, to_json};

/// The template with its intrinsic functions evaluated for given parameter
/// values (defaults otherwise): references to resources become
/// `ref:<Id>`, attributes `getatt:<Id>.<Attr>`.
pub struct Stack {
    pub t: Value,
    params: BTreeMap<String, Value>,
    stack_name: String,
}

impl Stack {
    /// The stack of template `t` named `stack_name`, its table's stream at
    /// `stream_arn` (`TableStreamArn`), the parameters overridden.
    pub fn new(t: Value, stack_name: &str, stream_arn: &str, overrides: &[(&str, &str)]) -> Self {
        let mut params = BTreeMap::new();
        for (name, p) in t["Parameters"].as_object().expect("Parameters") {
            if let Some(d) = p.get("Default") {
                let d = match d {
                    Value::Number(n) => Value::String(n.to_string()),
                    other => other.clone(),
                };
                params.insert(name.clone(), d);
            }
        }
        params.insert("TableStreamArn".into(), json!(stream_arn));
        for (k, v) in overrides {
            assert!(
                t["Parameters"].get(*k).is_some(),
                "no parameter {k} in the template"
            );
            params.insert((*k).into(), json!(v));
        }
        Stack {
            t,
            params,
            stack_name: stack_name.to_owned(),
        }
    }

    pub fn condition(&self, name: &str) -> bool {
        let c = self.t["Conditions"]
            .get(name)
            .unwrap_or_else(|| panic!("no condition {name}"));
        self.truth(c)
    }

    fn truth(&self, v: &Value) -> bool {
        let (f, arg) = single(v).unwrap_or_else(|| panic!("not a condition: {v}"));
        let args = arg.as_array();
        match f {
            "Fn::Equals" => {
                let a = args.expect("Equals takes two values");
                self.resolve(&a[0]) == self.resolve(&a[1])
            }
            "Fn::Not" => !self.truth(&args.expect("Not takes a list")[0]),
            "Fn::And" => args.expect("And").iter().all(|c| self.truth(c)),
            "Fn::Or" => args.expect("Or").iter().any(|c| self.truth(c)),
            "Condition" => self.condition(arg.as_str().expect("condition name")),
            other => panic!("unsupported condition function {other}"),
        }
    }

    fn reference(&self, name: &str) -> Value {
        match name {
            "AWS::Partition" => json!("aws"),
            "AWS::Region" => json!(REGION),
            "AWS::AccountId" => json!(ACCOUNT),
            "AWS::StackName" => json!(self.stack_name),
            "AWS::NoValue" => json!(NO_VALUE),
            _ => match self.params.get(name) {
                Some(v) => v.clone(),
                None if self.t["Parameters"].get(name).is_some() => {
                    panic!("parameter {name} has no default and no value")
                }
                None => {
                    assert!(
                        self.t["Resources"].get(name).is_some(),
                        "!Ref {name}: no such parameter or resource"
                    );
                    json!(format!("ref:{name}"))
                }
            },
        }
    }

    fn sub(&self, text: &str, vars: &Map<String, Value>) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').expect("closing brace") + start;
            let name = &rest[start + 2..end];
            let value = if let Some(v) = vars.get(name) {
                self.resolve(v)
            } else if !name.starts_with("AWS::") && name.contains('.') {
                let (res, attr) = name.split_once('.').unwrap();
                assert!(self.t["Resources"].get(res).is_some(), "${{{name}}}");
                json!(format!("getatt:{res}.{attr}"))
            } else {
                self.reference(name)
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

    /// The value with every intrinsic function evaluated and `AWS::NoValue`
    /// removed.
    pub fn resolve(&self, v: &Value) -> Value {
        if let Some((f, arg)) = single(v) {
            match f {
                "Ref" => return self.reference(arg.as_str().expect("!Ref name")),
                "Fn::GetAtt" => {
                    let a = arg.as_array().expect("GetAtt list");
                    let res = a[0].as_str().unwrap();
                    assert!(self.t["Resources"].get(res).is_some(), "!GetAtt {res}");
                    return json!(format!("getatt:{res}.{}", a[1].as_str().unwrap()));
                }
                "Fn::Sub" => {
                    return match arg {
                        Value::String(s) => json!(self.sub(s, &Map::new())),
                        Value::Array(a) => json!(self.sub(
                            a[0].as_str().expect("Sub text"),
                            a[1].as_object().expect("Sub variables")
                        )),
                        other => panic!("bad !Sub {other}"),
                    };
                }
                "Fn::If" => {
                    let a = arg.as_array().expect("If list");
                    let branch = if self.condition(a[0].as_str().unwrap()) {
                        &a[1]
                    } else {
                        &a[2]
                    };
                    return self.resolve(branch);
                }
                "Fn::Join" => {
                    let a = arg.as_array().expect("Join list");
                    let parts = self.resolve(&a[1]);
                    let parts: Vec<String> = parts
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| p.as_str().unwrap().to_owned())
                        .collect();
                    return json!(parts.join(a[0].as_str().unwrap()));
                }
                "Fn::Equals" | "Fn::Not" | "Fn::And" | "Fn::Or" => {
                    return json!(self.truth(v));
                }
                _ => {}
            }
        }
        match v {
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| self.resolve(i))
                    .filter(|i| i != NO_VALUE)
                    .collect(),
            ),
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), self.resolve(v)))
                    .filter(|(_, v)| v != NO_VALUE)
                    .collect(),
            ),
            other => other.clone(),
        }
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

pub fn table_arn(table: &str) -> String {
    format!("arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}")
}
