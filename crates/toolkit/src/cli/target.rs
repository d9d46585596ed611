//! The table a command works on: an embedded, in-memory DynamoDB Local
//! (started for the command, table created from the schema, stopped at the
//! end) or a table at `--endpoint-url` (DynamoDB Local or AWS).

use std::sync::Arc;

use clap::Args;

use super::{CliApp, CliError};
use crate::local::{self, DynamoDbLocal};
use crate::replay::redact::Placeholder;
use worker_engine::schema::TableSchema;
use worker_engine::store::{self, DynamoStore, StoreError};

/// The app a command works for: its name (in messages), its tables, and
/// the attributes that hold personal data.
///
/// [`AppTable::of`] names each table as the app's variables do;
/// [`AppTable::named`] then applies a command's `--table` values.
#[derive(Debug, Clone)]
pub struct AppTable {
    /// The app's name ([`CliApp::NAME`]), in messages and in the commands
    /// they suggest.
    pub app: &'static str,
    /// The target (home) table's keys, indexes and stream.
    pub schema: TableSchema,
    /// The attributes that hold personal data, each with the placeholder
    /// `capture --redact` puts in its place ([`CliApp::personal_attributes`]).
    pub personal: Vec<(&'static str, Placeholder)>,
    /// The tables its worker serves besides this one ([`CliApp::other_tables`]).
    pub others: Vec<super::tables::OtherTable>,
    /// The target table's role: its default name ([`CliApp::DEFAULT_TABLE`]).
    pub role: &'static str,
    /// The variable naming the target table ([`CliApp::TABLE_VAR`]).
    pub var: &'static str,
    /// The app has several tables, even where a command works on one of
    /// them (`table snapshot --table ROLE`): its snapshot file then names
    /// the table.
    pub several: bool,
}

impl AppTable {
    /// App `A`'s tables, each named as the app's variables do (else its
    /// default name).
    pub fn of<A: CliApp>() -> Self {
        let others = A::other_tables();
        AppTable {
            app: A::NAME,
            schema: A::schema(),
            personal: A::personal_attributes(),
            several: !others.is_empty(),
            others,
            role: A::DEFAULT_TABLE,
            var: A::TABLE_VAR,
        }
    }

    /// An app of one table, with the given schema (tests and tools).
    pub fn single(app: &'static str, schema: TableSchema) -> Self {
        AppTable {
            app,
            schema,
            personal: Vec::new(),
            others: Vec::new(),
            role: "",
            var: worker_engine::settings::TABLE_NAME,
            several: false,
        }
    }

    /// The key attribute names, for the replay machinery.
    pub fn keys(&self) -> (&'static str, &'static str) {
        self.schema.key.names()
    }

    /// Every table of a command on `target` (the target table's name):
    /// `(name, key attribute names)`, the target first, then the others by
    /// their names ([`super::tables::OtherTable::name`]).
    pub fn table_names(&self, target: &str) -> Vec<(String, (&'static str, &'static str))> {
        std::iter::once((target.to_owned(), self.keys()))
            .chain(
                self.others
                    .iter()
                    .map(|o| (o.name.clone(), o.schema.key.names())),
            )
            .collect()
    }

    /// The app's tables as a command names them, and the target table's
    /// name ([`super::tables::name_tables`]): for an app of one table,
    /// `--table NAME`; for an app of several, `--table ROLE=NAME` names a
    /// table by its role and, where `scope` allows, `--table ROLE` picks
    /// the one table the command works on.
    pub fn named(&self, table: &[String], scope: Scope) -> Result<(AppTable, String), CliError> {
        super::tables::name_tables(self, table, scope)
    }
}

/// The tables a command works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every table of the app: the worker runs over all of them.
    Every,
    /// Every table, or the one a bare `--table ROLE` picks (`table
    /// snapshot`, `capture`).
    OneOrEvery,
}

/// Credentials and region of a command that may reach AWS.
#[derive(Debug, Clone, Default, Args)]
pub struct AwsOpts {
    /// AWS region of the endpoint (and of the account check before a
    /// write). Default: the environment's or the profile's; us-east-1 for
    /// an endpoint that is not AWS.
    #[arg(long, env = "AWS_REGION", value_name = "REGION")]
    pub region: Option<String>,
    /// Named profile of the shared AWS config and credentials files.
    #[arg(long, env = "AWS_PROFILE", value_name = "NAME")]
    pub profile: Option<String>,
}

/// The DynamoDB endpoint the environment names, as the SDK reads it
/// ([`worker_engine::aws::endpoint_from_env`]): `--endpoint-url`'s default.
fn endpoint_from_env() -> Option<&'static str> {
    worker_engine::aws::endpoint_from_process_env("DynamoDB")
        .map(|url| &*Box::leak(url.into_boxed_str()))
}

/// Where the table is; by default an embedded DynamoDB Local.
#[derive(Debug, Clone, Default, Args)]
pub struct TableOpts {
    /// DynamoDB endpoint: a DynamoDB Local (http://127.0.0.1:8000) or AWS
    /// (https://dynamodb.eu-west-1.amazonaws.com, credentials and region from
    /// the environment, --profile or --region). Default: the SDK's
    /// AWS_ENDPOINT_URL_DYNAMODB, DYNAMODB_ENDPOINT_URL, AWS_ENDPOINT_URL (in
    /// that order), else start an in-memory DynamoDB Local for this command
    /// and create the table in it.
    #[arg(long, value_name = "URL", default_value = endpoint_from_env())]
    pub endpoint_url: Option<String>,
    /// The table (the app gives the default).
    #[arg(long, env = "TABLE_NAME", value_name = "NAME")]
    pub table: Vec<String>,
    /// `--region` and `--profile`.
    #[command(flatten)]
    pub aws: AwsOpts,
}

/// A table on an endpoint given explicitly (commands that manage or read a
/// table that outlives them).
#[derive(Debug, Clone, Default, Args)]
pub struct EndpointOpts {
    /// DynamoDB endpoint: a DynamoDB Local (http://127.0.0.1:8000) or AWS
    /// (https://dynamodb.eu-west-1.amazonaws.com, credentials and region from
    /// the environment, --profile or --region). Default: the SDK's
    /// AWS_ENDPOINT_URL_DYNAMODB, DYNAMODB_ENDPOINT_URL, AWS_ENDPOINT_URL (in
    /// that order).
    #[arg(long, value_name = "URL", default_value = endpoint_from_env())]
    pub endpoint_url: String,
    /// The table (the app gives the default).
    #[arg(long, env = "TABLE_NAME", value_name = "NAME")]
    pub table: Vec<String>,
    /// `--region` and `--profile`.
    #[command(flatten)]
    pub aws: AwsOpts,
}

/// The permission a command that writes needs to write to a table that is
/// not on this machine.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct RemoteWriteOpts {
    /// Write to an endpoint that is not on this machine (AWS, or a
    /// DynamoDB Local elsewhere). Without it such a command refuses before
    /// sending anything (`run` does a dry run instead); with it, the account,
    /// region and table are printed before the first write.
    #[arg(long)]
    pub allow_remote_writes: bool,
}

/// An open table.
pub struct Target {
    /// The store on the target table.
    pub store: Arc<DynamoStore>,
    /// The DynamoDB endpoint: `--endpoint-url`, or the embedded DynamoDB
    /// Local's `http://127.0.0.1:<port>`.
    pub endpoint: String,
    /// The target table's name.
    pub table: String,
    /// Whose table it is.
    pub app: AppTable,
    /// The app's other tables on the same endpoint (none for a one-table
    /// app).
    pub others: Vec<super::tables::OpenTable>,
    /// The AWS settings the clients were made with.
    pub aws: AwsOpts,
    /// The embedded DynamoDB Local, stopped when the target is dropped.
    embedded: Option<DynamoDbLocal>,
}

pub use worker_engine::aws::{endpoint_host, is_aws, is_loopback};

/// Whether the endpoint is on this machine (no AWS credentials needed).
pub fn is_local(endpoint: &str) -> bool {
    is_loopback(endpoint)
}

/// The shared guard of every command that writes: `Ok` when the endpoint
/// is on this machine (`None` is the embedded DynamoDB Local) or remote
/// writes are allowed; otherwise an error saying how to allow them.
/// Decided from the URL alone: nothing is sent.
pub fn refuse_remote_writes(
    endpoint: Option<&str>,
    allow: RemoteWriteOpts,
    command: &str,
) -> Result<(), CliError> {
    match endpoint {
        Some(url) if !is_loopback(url) && !allow.allow_remote_writes => {
            Err(CliError::RemoteWrites {
                command: command.to_owned(),
                endpoint: url.to_owned(),
            })
        }
        _ => Ok(()),
    }
}

/// The AWS configuration of a command (no endpoint: each client sets its
/// own). For an endpoint that is not AWS, missing region and credentials
/// default to us-east-1 and dummy keys (a DynamoDB Local elsewhere).
pub async fn sdk_config(endpoint: Option<&str>, aws: &AwsOpts) -> aws_config::SdkConfig {
    let mut loader = worker_engine::aws::defaults();
    if let Some(p) = &aws.profile {
        loader = loader.profile_name(p);
    }
    let custom = endpoint.is_some_and(|e| !is_aws(e));
    match &aws.region {
        Some(r) => loader = loader.region(aws_config::Region::new(r.clone())),
        None if custom
            && std::env::var_os("AWS_REGION").is_none()
            && std::env::var_os("AWS_DEFAULT_REGION").is_none() =>
        {
            loader = loader.region(aws_config::Region::new("us-east-1"));
        }
        None => {}
    }
    if custom && aws.profile.is_none() && std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local",
            "local",
            None,
            None,
            "worker-local",
        ));
    }
    loader.load().await
}

impl Target {
    /// Open `table` (its name, [`AppTable::named`]) where `opts` says:
    /// start an embedded DynamoDB Local and create the app's tables, or
    /// check that they exist at the endpoint.
    pub async fn open(opts: &TableOpts, app: &AppTable, table: &str) -> Result<Target, CliError> {
        match &opts.endpoint_url {
            None => Target::embedded(table, app).await,
            Some(url) => {
                let t = Target::connect_with(url, table, app, &opts.aws).await;
                t.require_table().await?;
                t.require_others(|_| true).await?;
                Ok(t)
            }
        }
    }

    /// Open `table`, existing, at an explicit endpoint.
    pub async fn open_endpoint(
        opts: &EndpointOpts,
        app: &AppTable,
        table: &str,
    ) -> Result<Target, CliError> {
        let t = Target::connect_with(&opts.endpoint_url, table, app, &opts.aws).await;
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
            aws: AwsOpts::default(),
            embedded: Some(local),
        })
    }

    /// A table at an endpoint, without checking anything.
    pub async fn connect(endpoint: &str, table: &str, app: &AppTable) -> Target {
        Target::connect_with(endpoint, table, app, &AwsOpts::default()).await
    }

    /// A table at an endpoint with the given region and profile, without
    /// checking anything.
    pub async fn connect_with(
        endpoint: &str,
        table: &str,
        app: &AppTable,
        aws: &AwsOpts,
    ) -> Target {
        let client = if is_local(endpoint) {
            store::local_client(endpoint)
        } else {
            let config = sdk_config(Some(endpoint), aws).await;
            aws_sdk_dynamodb::Client::from_conf(
                aws_sdk_dynamodb::config::Builder::from(&config)
                    .endpoint_url(endpoint)
                    .build(),
            )
        };
        let store = DynamoStore::new(client, table).with_key(app.schema.key);
        let others = super::tables::open_others(&store, &app.others);
        Target {
            store: Arc::new(store),
            endpoint: endpoint.to_owned(),
            table: table.to_owned(),
            app: app.clone(),
            others,
            aws: aws.clone(),
            embedded: None,
        }
    }

    /// Before the first write to a table that is not on this machine: say
    /// which account (STS GetCallerIdentity, for an AWS endpoint), region
    /// and table will be written to, on stderr ([`WriteDestination`]'s
    /// line). Nothing for a local table. The STS client is the command's
    /// ([`sdk_config`]): the environment's credentials, region and STS
    /// endpoint (`AWS_ENDPOINT_URL_STS`, `AWS_ENDPOINT_URL`).
    pub async fn announce_writes(&self) -> Option<WriteDestination> {
        if self.is_embedded() || is_loopback(&self.endpoint) {
            return None;
        }
        let config = sdk_config(Some(&self.endpoint), &self.aws).await;
        let d = self.write_destination(&config).await;
        eprintln!("{d}");
        Some(d)
    }

    /// Where a write goes with `config`'s credentials: the account STS
    /// GetCallerIdentity answers for them (asked only of an AWS endpoint's
    /// table; a DynamoDB elsewhere has no account), the region and the
    /// table.
    pub async fn write_destination(&self, config: &aws_config::SdkConfig) -> WriteDestination {
        let region = config
            .region()
            .map_or_else(|| "(none)".to_owned(), |r| r.to_string());
        let account = if is_aws(&self.endpoint) {
            caller_account(config).await
        } else {
            "n/a (not an AWS endpoint)".to_owned()
        };
        WriteDestination {
            account,
            region,
            table: self.table.clone(),
            endpoint: self.endpoint.clone(),
        }
    }

    /// The table's key attribute names.
    pub fn keys(&self) -> (&'static str, &'static str) {
        self.app.keys()
    }

    /// Every table of the command: the target table first, then the app's
    /// other tables in their order (one for a one-table app).
    pub fn tables(&self) -> Vec<super::tables::CommandTable<'_>> {
        std::iter::once(super::tables::CommandTable {
            name: &self.table,
            keys: self.keys(),
            store: &self.store,
        })
        .chain(self.others.iter().map(|o| super::tables::CommandTable {
            name: &o.name,
            keys: o.table.schema.key.names(),
            store: &o.store,
        }))
        .collect()
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

    /// Fail with "run `<app> table create ...`" when one of the other
    /// tables `wanted` names does not exist.
    pub async fn require_others(&self, wanted: impl Fn(&str) -> bool) -> Result<(), CliError> {
        for o in self.others.iter().filter(|o| wanted(&o.name)) {
            match o.store.stream_arn().await {
                Ok(_) => {}
                Err(StoreError::NotFound { .. }) => {
                    return Err(CliError::NoOtherTable {
                        app: self.app.app,
                        endpoint: self.endpoint.clone(),
                        table: o.name.clone(),
                        var: o.table.var,
                    });
                }
                Err(e) => return Err(self.no_table(e)),
            }
        }
        Ok(())
    }

    fn no_table(&self, e: StoreError) -> CliError {
        match e {
            StoreError::NotFound { .. } => CliError::NoTable {
                app: self.app.app,
                endpoint: self.endpoint.clone(),
                table: self.table.clone(),
                table_arg: if self.app.several {
                    format!("{}={}", self.app.role, self.table)
                } else {
                    self.table.clone()
                },
            },
            StoreError::Transient {
                operation,
                code,
                message,
            } if code == "transport" => match unreachable(&message) {
                Some(reason) => CliError::Unreachable {
                    app: self.app.app.to_owned(),
                    endpoint: self.endpoint.clone(),
                    reason,
                },
                None => CliError::Store(StoreError::Transient {
                    operation,
                    code,
                    message,
                }),
            },
            other => CliError::Store(other),
        }
    }

    /// A Streams API client: at `AWS_ENDPOINT_URL_DYNAMODB_STREAMS` when it
    /// is set (the SDK's variable), else beside the table's endpoint.
    pub async fn streams_client(&self) -> aws_sdk_dynamodbstreams::Client {
        let own = std::env::var("AWS_ENDPOINT_URL_DYNAMODB_STREAMS")
            .ok()
            .filter(|v| !v.trim().is_empty());
        let endpoint = own.unwrap_or_else(|| streams_endpoint(&self.endpoint));
        if is_local(&endpoint) {
            crate::stream_reader::local_client(&endpoint)
        } else {
            let config = sdk_config(Some(&self.endpoint), &self.aws).await;
            aws_sdk_dynamodbstreams::Client::from_conf(
                aws_sdk_dynamodbstreams::config::Builder::from(&config)
                    .endpoint_url(endpoint)
                    .build(),
            )
        }
    }
}

/// The Streams API endpoint beside a DynamoDB endpoint
/// (`dynamodb.R.amazonaws.com` -> `streams.dynamodb.R.amazonaws.com`; any
/// other endpoint serves both).
fn streams_endpoint(endpoint: &str) -> String {
    let host = endpoint_host(endpoint);
    if is_aws(endpoint) && host.starts_with("dynamodb.") {
        endpoint.replacen(host, &format!("streams.{host}"), 1)
    } else {
        endpoint.to_owned()
    }
}

/// The address a connector failed to reach (`127.0.0.1:8000` in the
/// SDK's `ConnectError("tcp connect error", 127.0.0.1:8000, ...)`).
pub fn connect_address(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once("ConnectError(\"")?;
    let (_, rest) = rest.split_once("\", ")?;
    let address = rest.split([',', ')']).next()?.trim();
    (!address.is_empty()).then_some(address)
}

/// Why nothing answers, from a transport failure's message (the SDK's
/// connector error): `None` when something answered.
pub fn unreachable(message: &str) -> Option<&'static str> {
    let m = message.to_ascii_lowercase();
    if m.contains("connection refused") {
        Some("connection refused")
    } else if m.contains("dns error") || m.contains("failed to lookup address") {
        Some("the host name does not resolve")
    } else if m.contains("connect") && (m.contains("timed out") || m.contains("timeout")) {
        Some("the connection timed out")
    } else if m.contains("tcp connect error") || m.contains("network is unreachable") {
        Some("cannot connect")
    } else {
        None
    }
}

/// Where a command is about to write, as printed before its first write
/// (its `Display`: `writing to table T at URL (account A, region R)`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WriteDestination {
    /// The AWS account (STS GetCallerIdentity), or why it is unknown, or
    /// `n/a (not an AWS endpoint)`.
    pub account: String,
    /// The region of the command's AWS settings, or `(none)`.
    pub region: String,
    /// The target table's name.
    pub table: String,
    /// The DynamoDB endpoint written to.
    pub endpoint: String,
}

impl std::fmt::Display for WriteDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "writing to table {} at {} (account {}, region {})",
            self.table, self.endpoint, self.account, self.region
        )
    }
}

/// The account of the credentials (STS GetCallerIdentity), or why it is
/// unknown.
async fn caller_account(config: &aws_config::SdkConfig) -> String {
    let sts = aws_sdk_sts::Client::new(config);
    let call = sts.get_caller_identity().send();
    match tokio::time::timeout(std::time::Duration::from_secs(10), call).await {
        Ok(Ok(id)) => id.account().unwrap_or("(unknown)").to_owned(),
        Ok(Err(e)) => format!(
            "unknown (STS GetCallerIdentity failed: {})",
            aws_smithy_types::error::display::DisplayErrorContext(&e)
        ),
        Err(_) => "unknown (STS GetCallerIdentity timed out)".to_owned(),
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
        assert!(is_loopback("http://127.8.0.1:8000/"));
        assert!(is_loopback("http://0.0.0.0:8000"));
        assert!(is_loopback("http://LOCALHOST"));
        assert!(!is_loopback("http://192.0.2.2:8000"));
        assert!(!is_loopback("http://127.0.0.1.example.com:8000"));
        assert!(!is_loopback("http://localhost.example.com"));
        assert!(!is_loopback("http://[fd00::2]:8000"));
        assert_eq!(endpoint_host("http://user@[::1]:80/x"), "::1");
        assert!(is_aws("https://dynamodb.eu-west-1.amazonaws.com"));
        assert!(!is_aws("http://192.0.2.2:8000"));
        assert_eq!(
            streams_endpoint("https://dynamodb.eu-west-1.amazonaws.com"),
            "https://streams.dynamodb.eu-west-1.amazonaws.com"
        );
    }

    #[test]
    fn an_unreachable_endpoint_is_told_from_a_failing_one() {
        let refused = "dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111)";
        assert_eq!(unreachable(refused), Some("connection refused"));
        assert_eq!(
            unreachable(
                "dispatch failure: other: client error (Connect): dns error: failed to lookup address information"
            ),
            Some("the host name does not resolve")
        );
        assert_eq!(unreachable("service error: InternalServerError"), None);
        let full = r#"dispatch failure: io error: client error (Connect): tcp connect error: Connection refused (os error 111) (DispatchFailure(DispatchFailure { source: ConnectorError { kind: Io, source: hyper_util::client::legacy::Error(Connect, ConnectError("tcp connect error", 127.0.0.1:8000, Os { code: 111 })) } }))"#;
        assert_eq!(connect_address(full), Some("127.0.0.1:8000"));
        assert_eq!(connect_address("timeout"), None);
    }

    #[test]
    fn remote_writes_are_refused_unless_allowed() {
        let deny = RemoteWriteOpts::default();
        let allow = RemoteWriteOpts {
            allow_remote_writes: true,
        };
        assert!(refuse_remote_writes(None, deny, "run").is_ok());
        assert!(refuse_remote_writes(Some("http://127.0.0.1:8000"), deny, "run").is_ok());
        let e = refuse_remote_writes(
            Some("https://dynamodb.eu-west-1.amazonaws.com"),
            deny,
            "table load",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--allow-remote-writes") && e.contains("table load"),
            "{e}"
        );
        assert!(
            refuse_remote_writes(Some("https://dynamodb.eu-west-1.amazonaws.com"), allow, "x")
                .is_ok()
        );
    }
}
