//! Variables for a test, as the settings read them: a lookup over pairs
//! instead of the process environment.

use std::collections::HashMap;

/// A lookup of `vars` (`[("TABLE_NAME", "t"), ...]`), for
/// `Settings::from_lookup` and `Env::new`.
pub fn lookup(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| vars.get(name).cloned()
}
