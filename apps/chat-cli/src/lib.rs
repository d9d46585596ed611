//! `chat-worker`: the toolkit's command line, with what only the chat
//! worker knows. The target table is ChatRequests; each of the six tables
//! is named by its variable (`USERS_TABLE`, ..., `CHAT_REQUESTS_TABLE`, the
//! seed's names by default) or by `--table ROLE=NAME` (`--table
//! Users=dev-users`), and diffs and snapshots cover all six
//! (`worker_toolkit::cli::tables`).

use worker_engine::ConfigError;
use worker_engine::Worker;
use worker_toolkit::cli::tables::{OtherTable, WorkerParts, others_of};
use worker_toolkit::cli::{CliApp, NoExtra};
use worker_toolkit::replay::redact::Placeholder;

use chat_worker::app::{APP, Deps, TableHandler};
use chat_worker::config::Settings;
use chat_worker::keys::Job;
use chat_worker::schema::Table;

/// The target table's default name and role: the ChatRequests table.
pub const LOCAL_TABLE: &str = Table::ChatRequests.name();

/// The chat worker, as the toolkit's command line sees it.
pub struct Chat;

impl CliApp for Chat {
    type Job = Job;
    type Deps = Deps;
    type Handler = dyn TableHandler<Table>;
    type Extra = NoExtra;
    const APP: &'static worker_engine::AppSpec<Job, Deps, dyn TableHandler<Table>> = &APP;
    const DEFAULT_TABLE: &'static str = LOCAL_TABLE;
    const TABLE_VAR: &'static str = Table::ChatRequests.env_var();
    const ABOUT: &'static str = ABOUT;
    const TEMPLATE: Option<&'static str> = Some("infra/chat.yaml");
    const EXAMPLES: &'static str = EXAMPLES;

    /// The Users table's personal attributes (the worker never logs them).
    fn personal_attributes() -> Vec<(&'static str, Placeholder)> {
        vec![
            ("Email", Placeholder::Email),
            ("Username", Placeholder::Name),
            ("Name", Placeholder::Name),
        ]
    }

    fn other_tables() -> Vec<OtherTable> {
        others_of::<Table>()
    }

    fn worker(p: WorkerParts<'_>) -> Result<Worker<Job>, ConfigError> {
        let settings = Settings::from_lookup(&p.table_lookup::<Table>())?;
        let stores = p.stores::<Table>();
        Ok(chat_worker::app::worker(stores, p.tx, settings, p.clock))
    }
}

const ABOUT: &str = "Run the chat worker locally over its six tables: replay DynamoDB Streams \
events and schedule ticks through the handlers the Lambda functions run, run a job, manage the \
tables, live loop over every table's stream.";

const EXAMPLES: &str = "\
Examples:
  # What does accepting this request do? (embedded DynamoDB Local, all six tables)
  chat-worker replay --apply-writes --now 2024-06-01T00:00:00Z events/chat/stream/request-accepted.json

  # Expire old pending requests on a snapshot of the six tables
  chat-worker run expire-requests --snapshot events/chat/golden/request-accepted.json --now 2024-08-01T00:00:00Z

  # The six tables after the acceptance, in one file
  chat-worker replay --apply-writes --write-snapshot after.json --now 2024-06-01T00:00:00Z \\
      events/chat/stream/users-created.json events/chat/stream/chat-created.json \\
      events/chat/stream/requests-created.json events/chat/stream/request-accepted.json

  # The six tables on a DynamoDB Local you run, then the live loop over their streams
  chat-worker table create --endpoint-url http://127.0.0.1:8000
  chat-worker dev --endpoint-url http://127.0.0.1:8000";

#[cfg(test)]
mod tests {
    use super::*;
    use worker_testkit::cli::{check_command_line, local_crons};

    #[test]
    fn the_command_line_is_consistent() {
        check_command_line::<Chat>();
        assert_eq!(LOCAL_TABLE, "ChatRequests");
        assert_eq!(
            local_crons::<Chat>(),
            [
                ("expire-requests".into(), "0 * * * *".into()),
                ("audit-requests".into(), "30 3 * * *".into())
            ]
        );
    }
}
