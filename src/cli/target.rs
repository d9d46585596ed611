//! The table a command works on: an embedded, in-memory DynamoDB Local
//! (started for the command, table created from the schema, stopped at the
//! end) or a table at `--endpoint-url` (DynamoDB Local or AWS).

use std::sync::Arc;

use clap::Args;

use super::CliError;
use crate::keys::{PK, SK};
use worker_engine::local::{self, DynamoDbLocal};
use worker_engine::store::{self, DynamoStore, StoreError};

/// The table name when none is given.
pub const DEFAULT_TABLE: &str = "nishiki-table-local-db";

/// The key attributes of the table, for the generic replay machinery.
pub const KEYS: (&str, &str) = (PK, SK);

/// Where the table is; by default an embedded DynamoDB Local.
#[derive(Debug, Clone, Args)]
pub struct TableOpts {
    /// DynamoDB endpoint: a DynamoDB Local (http://127.0.0.1:8000) or AWS
    /// (https://dynamodb.eu-west-1.amazonaws.com, credentials and region from
    /// the environment). Default: start an in-memory DynamoDB Local for this
    /// command and create the table in it.
    #[arg(long, value_name = "URL")]
    pub endpoint_url: Option<String>,
    /// The table.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_TABLE)]
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
    /// The table.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_TABLE)]
    pub table: String,
}

/// An open table.
pub struct Target {
    pub store: Arc<DynamoStore>,
    pub endpoint: String,
    pub table: String,
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
    pub async fn open(opts: &TableOpts) -> Result<Target, CliError> {
        match &opts.endpoint_url {
            None => Target::embedded(&opts.table).await,
            Some(url) => {
                let t = Target::connect(url, &opts.table).await;
                t.require_table().await?;
                Ok(t)
            }
        }
    }

    /// Open an existing table at an explicit endpoint.
    pub async fn open_endpoint(opts: &EndpointOpts) -> Result<Target, CliError> {
        let t = Target::connect(&opts.endpoint_url, &opts.table).await;
        t.require_table().await?;
        Ok(t)
    }

    /// Start an in-memory DynamoDB Local (installing it on first use) and
    /// create the table from the schema.
    pub async fn embedded(table: &str) -> Result<Target, CliError> {
        eprintln!("starting DynamoDB Local…");
        let local = local::start().await?;
        let endpoint = local.endpoint_url();
        let store = DynamoStore::new(store::local_client(&endpoint), table);
        store.create_table(&crate::schema::nishiki()).await?;
        Ok(Target {
            store: Arc::new(store),
            endpoint,
            table: table.to_owned(),
            embedded: Some(local),
        })
    }

    /// A table at an endpoint, without checking anything.
    pub async fn connect(endpoint: &str, table: &str) -> Target {
        let client = if is_local(endpoint) {
            store::local_client(endpoint)
        } else {
            store::client(Some(endpoint)).await
        };
        Target {
            store: Arc::new(DynamoStore::new(client, table)),
            endpoint: endpoint.to_owned(),
            table: table.to_owned(),
            embedded: None,
        }
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
                endpoint: self.endpoint.clone(),
                table: self.table.clone(),
            }),
            Err(e) => Err(self.no_table(e)),
        }
    }

    /// Fail with "run `nishiki-worker table create ...`" when the table
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
                endpoint: self.endpoint.clone(),
                table: self.table.clone(),
            },
            other => CliError::Store(other),
        }
    }

    /// A Streams API client for the same endpoint.
    pub async fn streams_client(&self) -> aws_sdk_dynamodbstreams::Client {
        if is_local(&self.endpoint) {
            worker_engine::stream_reader::local_client(&self.endpoint)
        } else {
            worker_engine::stream_reader::client(Some(&self.endpoint)).await
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
