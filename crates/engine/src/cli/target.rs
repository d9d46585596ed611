//! The table a command works on: an embedded, in-memory DynamoDB Local
//! (started for the command, table created from the schema, stopped at the
//! end) or a table at `--endpoint-url` (DynamoDB Local or AWS).

use std::sync::Arc;

use clap::Args;

use super::{CliApp, CliError};
use crate::local::{self, DynamoDbLocal};
use crate::replay::redact::Placeholder;
use crate::schema::TableSchema;
use crate::store::{self, DynamoStore, StoreError};

/// The app a command works for: its name (in messages), its table, and
/// the attributes that hold personal data.
#[derive(Debug, Clone)]
pub struct AppTable {
    pub app: &'static str,
    pub schema: TableSchema,
    pub personal: Vec<(&'static str, Placeholder)>,
    /// The tables its worker serves besides this one ([`CliApp::other_tables`]).
    pub others: Vec<super::tables::OtherTable>,
}

impl AppTable {
    pub fn of<A: CliApp>() -> Self {
        AppTable {
            app: A::NAME,
            schema: A::schema(),
            personal: A::personal_attributes(),
            others: A::other_tables(),
        }
    }

    /// The key attribute names, for the replay machinery.
    pub fn keys(&self) -> (&'static str, &'static str) {
        self.schema.key.names()
    }
}

/// Where the table is; by default an embedded DynamoDB Local.
#[derive(Debug, Clone, Args)]
pub struct TableOpts {
    /// DynamoDB endpoint: a DynamoDB Local (http://127.0.0.1:8000) or AWS
    /// (https://dynamodb.eu-west-1.amazonaws.com, credentials and region from
    /// the environment). Default: start an in-memory DynamoDB Local for this
    /// command and create the table in it.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// The table (the app gives the default).
    #[arg(long, value_name = "NAME")]
    pub table: String,
}

/// A table on an endpoint given explicitly (commands that manage or read a
/// table that outlives them).
#[derive(Debug, Clone, Args)]
pub struct EndpointOpts {
    /// DynamoDB endpoint: a DynamoDB Local (http://127.0.0.1:8000) or AWS
    /// (https://dynamodb.eu-west-1.amazonaws.com, credentials and region from
    /// the environment).
    #[arg(long, value_name = "URL")]
    pub endpoint_url: String,
    /// The table (the app gives the default).
    #[arg(long, value_name = "NAME")]
    pub table: String,
}

/// An open table.
pub struct Target {
    pub store: Arc<DynamoStore>,
    pub endpoint: String,
    pub table: String,
    /// Whose table it is.
    pub app: AppTable,
    /// The app's other tables on the same endpoint (none for a one-table
    /// app).
    pub others: Vec<super::tables::OpenTable>,
    /// The embedded DynamoDB Local, stopped when the target is dropped.
    embedded: Option<DynamoDbLocal>,
}

/// Whether the endpoint is on this machine (no AWS credentials needed).
pub fn is_local(endpoint: &str) -> bool {
    let rest = endpoint
        .strip_prefix("http://")
        .or_else(|| endpoint.strip_prefix("https://"))
        .unwrap_or(endpoint);
    ["127.", "localhost", "[::1]", "0.0.0.0"]
        .iter()
        .any(|p| rest.starts_with(p))
}

impl Target {
    /// Open the table of `opts`: start an embedded DynamoDB Local and create
    /// the table, or check that the table exists at the endpoint.
    pub async fn open(opts: &TableOpts, app: &AppTable) -> Result<Target, CliError> {
        match &opts.endpoint_url {
            None => Target::embedded(&opts.table, app).await,
            Some(url) => {
                let t = Target::connect(url, &opts.table, app).await;
                t.require_table().await?;
                Ok(t)
            }
        }
    }

    /// Open an existing table at an explicit endpoint.
    pub async fn open_endpoint(opts: &EndpointOpts, app: &AppTable) -> Result<Target, CliError> {
        let t = Target::connect(&opts.endpoint_url, &opts.table, app).await;
        t.require_table().await?;
        Ok(t)
    }

    /// Start an in-memory DynamoDB Local (installing it on first use) and
    /// create the table from the schema.
    pub async fn embedded(table: &str, app: &AppTable) -> Result<Target, CliError> {
        eprintln!("starting DynamoDB Local…");
        let local = local::start().await?;
        let endpoint = local.endpoint_url();
        let store =
            DynamoStore::new(store::local_client(&endpoint), table).with_key(app.schema.key);
        store.create_table(&app.schema).await?;
        let others = super::tables::open_others(&store, &app.others);
        for o in &others {
            o.store.create_table(&o.table.schema).await?;
        }
        Ok(Target {
            store: Arc::new(store),
            endpoint,
            table: table.to_owned(),
            app: app.clone(),
            others,
            embedded: Some(local),
        })
    }

    /// A table at an endpoint, without checking anything.
    pub async fn connect(endpoint: &str, table: &str, app: &AppTable) -> Target {
        let client = if is_local(endpoint) {
            store::local_client(endpoint)
        } else {
            store::client(Some(endpoint)).await
        };
        let store = DynamoStore::new(client, table).with_key(app.schema.key);
        let others = super::tables::open_others(&store, &app.others);
        Target {
            store: Arc::new(store),
            endpoint: endpoint.to_owned(),
            table: table.to_owned(),
            app: app.clone(),
            others,
            embedded: None,
        }
    }

    /// The table's key attribute names.
    pub fn keys(&self) -> (&'static str, &'static str) {
        self.app.keys()
    }

    /// Whether this is the command's own DynamoDB Local.
    pub fn is_embedded(&self) -> bool {
        self.embedded.is_some()
    }

    /// `table T at URL` / `table T on the embedded DynamoDB Local (URL)`.
    pub fn describe(&self) -> String {
        if self.is_embedded() {
            format!(
                "table {} on the embedded DynamoDB Local ({})",
                self.table, self.endpoint
            )
        } else {
            format!("table {} at {}", self.table, self.endpoint)
        }
    }

    /// The table's stream ARN; an error saying what to do when the table or
    /// its stream is missing.
    pub async fn stream_arn(&self) -> Result<String, CliError> {
        match self.store.stream_arn().await {
            Ok(Some(arn)) => Ok(arn),
            Ok(None) => Err(CliError::NoStream {
                app: self.app.app,
                endpoint: self.endpoint.clone(),
                table: self.table.clone(),
            }),
            Err(e) => Err(self.no_table(e)),
        }
    }

    /// Fail with "run `<app> table create ...`" when the table
    /// does not exist.
    pub async fn require_table(&self) -> Result<(), CliError> {
        self.store
            .stream_arn()
            .await
            .map(|_| ())
            .map_err(|e| self.no_table(e))
    }

    fn no_table(&self, e: StoreError) -> CliError {
        match e {
            StoreError::NotFound { .. } => CliError::NoTable {
                app: self.app.app,
                endpoint: self.endpoint.clone(),
                table: self.table.clone(),
            },
            other => CliError::Store(other),
        }
    }

    /// A Streams API client for the same endpoint.
    pub async fn streams_client(&self) -> aws_sdk_dynamodbstreams::Client {
        if is_local(&self.endpoint) {
            crate::stream_reader::local_client(&self.endpoint)
        } else {
            crate::stream_reader::client(Some(&self.endpoint)).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_endpoints() {
        assert!(is_local("http://127.0.0.1:8000"));
        assert!(is_local("http://localhost:8000"));
        assert!(is_local("http://[::1]:8000"));
        assert!(!is_local("https://dynamodb.eu-west-1.amazonaws.com"));
    }
}
