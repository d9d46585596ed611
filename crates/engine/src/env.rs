//! Reading configuration from environment variables (or any lookup, so
//! tests never touch the process environment), with errors that name the
//! variable and say what a valid value looks like.

use std::str::FromStr;

/// A configuration value that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}={value:?}: {reason}")]
pub struct ConfigError {
    /// The variable that does not parse (`STREAM_CONCURRENCY`).
    pub name: &'static str,
    /// Its value, as set.
    pub value: String,
    /// What is wrong with it and what a valid value looks like.
    pub reason: String,
}

/// Where variables are read from.
pub struct Env<'a>(&'a dyn Fn(&str) -> Option<String>);

impl<'a> Env<'a> {
    /// Variables read through `lookup` (`None`: not set); for the process
    /// environment, `Env::new(&|name: &str| std::env::var(name).ok())`.
    pub fn new(lookup: &'a dyn Fn(&str) -> Option<String>) -> Self {
        Env(lookup)
    }

    /// The value, if set (an empty value counts as set).
    pub fn get(&self, name: &str) -> Option<String> {
        (self.0)(name)
    }

    /// The value, if set and not empty.
    pub fn non_empty(&self, name: &str) -> Option<String> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// A required, non-empty value; `reason` says what it is for.
    pub fn required(&self, name: &'static str, reason: &str) -> Result<String, ConfigError> {
        self.non_empty(name).ok_or_else(|| ConfigError {
            name,
            value: String::new(),
            reason: format!("required: {reason}"),
        })
    }

    /// A whole number, if set.
    pub fn number(&self, name: &'static str) -> Result<Option<u64>, ConfigError> {
        self.parse(name, |v| {
            v.parse::<u64>()
                .map_err(|_| "expected a whole number".to_owned())
        })
    }

    /// `on`/`off` (also `true`/`false`, `1`/`0`; empty is off), if set.
    pub fn switch(&self, name: &'static str) -> Result<Option<bool>, ConfigError> {
        self.parse(name, |v| match v {
            "on" | "true" | "1" => Ok(true),
            "off" | "false" | "0" | "" => Ok(false),
            _ => Err("expected on or off".to_owned()),
        })
    }

    /// A value of any [`FromStr`] type, if set; `expected` says what a
    /// valid value looks like.
    pub fn from_str<T: FromStr>(
        &self,
        name: &'static str,
        expected: &str,
    ) -> Result<Option<T>, ConfigError> {
        self.parse(name, |v| v.parse().map_err(|_| expected.to_owned()))
    }

    /// A value read by `f`, if set.
    pub fn parse<T>(
        &self,
        name: &'static str,
        f: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ConfigError> {
        self.get(name)
            .map(|v| {
                f(&v).map_err(|reason| ConfigError {
                    name,
                    value: v.clone(),
                    reason,
                })
            })
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn values_parse_or_name_the_variable() {
        let vars: HashMap<&str, &str> = [("N", "12"), ("BAD", "1h"), ("S", "on"), ("E", "")].into();
        let lookup = |k: &str| vars.get(k).map(|v| v.to_string());
        let env = Env::new(&lookup);
        assert_eq!(env.number("N").unwrap(), Some(12));
        assert_eq!(env.number("MISSING").unwrap(), None);
        let e = env.number("BAD").unwrap_err();
        assert_eq!((e.name, e.value.as_str()), ("BAD", "1h"));
        assert!(e.to_string().contains("whole number"), "{e}");
        assert_eq!(env.switch("S").unwrap(), Some(true));
        assert_eq!(env.switch("E").unwrap(), Some(false));
        assert!(env.switch("N").is_err());
        assert_eq!(env.non_empty("E"), None);
        let e = env.required("E", "the table").unwrap_err();
        assert!(e.to_string().contains("required: the table"), "{e}");
    }
}
