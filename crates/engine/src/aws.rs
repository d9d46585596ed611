//! The HTTP client of every AWS SDK client of the engine and its apps.
//!
//! The workspace builds the SDK without its default HTTPS client (rustls on
//! aws-lc-rs, about 2 MB of each Lambda `bootstrap`), so a client must be
//! given one: [`https_client`], rustls on ring, with the system's root
//! certificates; plain `http://` endpoints (DynamoDB Local) work too. An
//! SDK client built without it fails its first request with "no HTTP
//! client".

use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// A new HTTPS client, its connection pool its own. Not one per process:
/// pooled connections belong to the tokio runtime that opened them, and a
/// client shared by the runtimes of several tests stalls on them.
pub fn https_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// `aws_config::defaults` (the environment, profiles, instance metadata)
/// with [`https_client`].
pub fn defaults() -> aws_config::ConfigLoader {
    aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(https_client())
}

/// The SDK configuration of a Lambda function, from the variables Lambda
/// sets and nothing else: `AWS_REGION` (or `AWS_DEFAULT_REGION`) and
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`. No
/// profile file, instance metadata or STS web identity is consulted, so
/// the default provider chain and its STS client stay out of the
/// `bootstrap`s. Elsewhere (the command line, on AWS), export the
/// credentials into the environment (`aws configure export-credentials
/// --format env`). With `endpoint_url` (DynamoDB Local) a missing region is
/// `us-east-1` and missing credentials are dummy ones.
pub fn lambda_config(endpoint_url: Option<&str>) -> aws_config::SdkConfig {
    use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .or_else(|| endpoint_url.map(|_| "us-east-1".to_owned()));
    let credentials = if endpoint_url.is_some() && var("AWS_ACCESS_KEY_ID").is_none() {
        SharedCredentialsProvider::new(Credentials::new(
            "local",
            "local",
            None,
            None,
            "worker-local",
        ))
    } else {
        SharedCredentialsProvider::new(
            aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
        )
    };
    let mut config = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .http_client(https_client())
        .region(region.map(aws_config::Region::new))
        .credentials_provider(credentials);
    if let Some(url) = endpoint_url {
        config = config.endpoint_url(url);
    }
    config.build()
}
