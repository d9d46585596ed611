//! Configuration from the environment (Lambda) or any lookup (tests, the
//! command line's `--env`): the app's own variables below, and those every
//! app reads (the endpoint, deadline margin, stream concurrency, pinned
//! job, parking table, logs: `worker_engine::settings`; the app's README
//! lists them all).
//!
//! | variable | default | read by | meaning |
//! |---|---|---|---|
//! | `USERS_TABLE` | (required) | all | the Users table |
//! | `COMMUNITIES_TABLE` | (required) | all | the Communities table |
//! | `NOTIFICATIONS_TABLE` | (required) | all | the Notifications table |
//! | `GROUP_CHATS_TABLE` | (required) | all | the GroupChats table |
//! | `PRIVATE_CHATS_TABLE` | (required) | all | the PrivateChats table |
//! | `CHAT_REQUESTS_TABLE` | (required) | all | the ChatRequests table |
//! | `REQUEST_EXPIRY_DAYS` | `30` | expire-requests | pending requests older than this expire |
//! | `TWIN_GRACE_MINUTES` | `60` | audit-requests | a copy's twin may be missing this long |
//!
//! [`COMMON_ENV`] (the table variables, then `worker_engine::settings`'
//! common ones) and each job's `SPEC` declare the same list with who reads
//! each variable. Every function reads every table's name: the
//! stream function tells the tables' records apart by it.

use worker_engine::TableNames;
use worker_engine::settings::JobSettings;
use worker_engine::{ConfigError, Env};

use crate::keys::Job;
use crate::requests::RequestSettings;
use crate::schema::Table;

/// A variable the chat worker reads: its name, default, meaning and which
/// function reads it (the rows of the table above).
pub type EnvVar = worker_engine::EnvVar<Job>;
/// Who reads a variable: every function or one scheduled job.
pub type ReadBy = worker_engine::ReadBy<Job>;

const fn table_var(t: Table, meaning: &'static str) -> EnvVar {
    EnvVar {
        name: t.env_var(),
        read_by: &[ReadBy::All],
        default: None,
        meaning,
    }
}

/// The variables every function reads, whatever its jobs: each table's
/// name, then the engine's common variables (`worker_engine::settings`).
pub const COMMON_ENV: &[EnvVar] = worker_engine::common_env!(Job;
    table_var(Table::Users, "the Users table"),
    table_var(Table::Communities, "the Communities table"),
    table_var(Table::Notifications, "the Notifications table"),
    table_var(Table::GroupChats, "the GroupChats table"),
    table_var(Table::PrivateChats, "the PrivateChats table"),
    table_var(Table::ChatRequests, "the ChatRequests table"),
);

/// Everything the worker is configured with: the common settings (on the
/// ChatRequests table, `TableSet::HOME`) and [`ChatSettings`].
pub type Settings = worker_engine::settings::Settings<Job, ChatSettings>;

/// The chat worker's own settings: the tables' names and its jobs'.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatSettings {
    /// Each table's name as deployed, from its own variable (`USERS_TABLE`, ...).
    pub tables: TableNames<Table>,
    /// The expiry's and the twin audit's settings (`REQUEST_EXPIRY_DAYS`,
    /// `TWIN_GRACE_MINUTES`).
    pub requests: RequestSettings,
}

impl JobSettings for ChatSettings {
    const TABLE: &'static str = "the ChatRequests table";

    fn table_name(env: &Env) -> Result<String, ConfigError> {
        Ok(TableNames::<Table>::from_env(env)?.home().to_owned())
    }

    fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(ChatSettings {
            tables: TableNames::from_env(env)?,
            requests: RequestSettings::from_env(env)?,
        })
    }
}

/// The defaults, on the tables `names` names.
pub fn for_tables(names: TableNames<Table>) -> Settings {
    let mut s = Settings::for_table(names.home());
    s.tables = names;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tables' and the chat jobs' variables (the common ones:
    /// `worker_engine::settings`).
    #[test]
    fn settings_from_the_environment() {
        let prod = |t: Table| format!("{}-prod", t.name());
        let mut vars: Vec<(&str, String)> =
            Table::ALL.iter().map(|t| (t.env_var(), prod(*t))).collect();
        let settings = |vars: &[(&str, String)]| {
            let vars: Vec<_> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
            Settings::from_lookup(&worker_testkit::env::lookup(&vars))
        };
        let s = settings(&vars).unwrap();
        assert_eq!(s, for_tables(TableNames::new(prod)));
        assert_eq!(s.tables.name(Table::Users), "Users-prod");
        assert_eq!(s.common.table_name, "ChatRequests-prod", "the home table");
        assert_eq!(s.requests, RequestSettings::default());
        vars.push(("REQUEST_EXPIRY_DAYS", "7".into()));
        vars.push(("TWIN_GRACE_MINUTES", "5".into()));
        let s = settings(&vars).unwrap();
        assert_eq!(
            (s.requests.expiry_days, s.requests.twin_grace_minutes),
            (7, 5)
        );
        vars.push(("REQUEST_EXPIRY_DAYS", "a month".into()));
        assert_eq!(settings(&vars).unwrap_err().name, "REQUEST_EXPIRY_DAYS");
        let e = settings(&vars[1..]).unwrap_err();
        assert_eq!(e.name, "USERS_TABLE");
    }
}
