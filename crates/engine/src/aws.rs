//! The HTTP client of every AWS SDK client of the engine and its apps.
//!
//! The workspace builds the SDK without its default HTTPS client (rustls on
//! aws-lc-rs, about 2 MB of each Lambda `bootstrap`), so a client must be
//! given one: [`https_client`], rustls on ring, with the system's root
//! certificates; plain `http://` endpoints (DynamoDB Local) work too. An
//! SDK client built without it fails its first request with "no HTTP
//! client".
//!
//! A Lambda function's clients ([`lambda_config`]) trust the Amazon Trust
//! Services roots instead, built into the binary (`aws_roots.pem`): every
//! AWS endpoint a function calls chains to one of them, and reading and
//! parsing the system's certificate bundle (about 150 certificates) was
//! the largest step of a `bootstrap`'s start before its first invocation.

use aws_smithy_http_client::tls::{Provider, TlsContext, TrustStore, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// A new HTTPS client, its connection pool its own. Not one per process:
/// pooled connections belong to the tokio runtime that opened them, and a
/// client shared by the runtimes of several tests stalls on them.
pub fn https_client() -> SharedHttpClient {
    rustls_client(TlsContext::default())
}

/// rustls on ring with `context` (its trust store).
fn rustls_client(context: TlsContext) -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .tls_context(context)
        .build_https()
}

/// The root certificates of Amazon Trust Services (Amazon Root CA 1 to 4
/// and Starfield Services Root Certificate Authority - G2), which sign the
/// certificates of every AWS service endpoint.
const AWS_ROOTS: &[u8] = include_bytes!("aws_roots.pem");

/// [`https_client`] trusting only [`AWS_ROOTS`]: no certificate file is
/// read when the client is built. Only for AWS endpoints (or `http://`).
pub fn aws_https_client() -> SharedHttpClient {
    let roots = TrustStore::empty()
        .with_native_roots(false)
        .with_pem_certificate(AWS_ROOTS);
    rustls_client(
        TlsContext::builder()
            .with_trust_store(roots)
            .build()
            .expect("a TLS context"),
    )
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
/// `us-east-1` and missing credentials are dummy ones. The HTTP client is
/// [`aws_https_client`]: an endpoint whose certificate is not signed by
/// Amazon Trust Services (a TLS-inspecting proxy) is refused.
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
        .http_client(aws_https_client())
        .region(region.map(aws_config::Region::new))
        .credentials_provider(credentials);
    if let Some(url) = endpoint_url {
        config = config.endpoint_url(url);
    }
    config.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    #[test]
    fn the_built_in_roots_are_the_five_amazon_trust_services_certificates() {
        let certs = CertificateDer::pem_slice_iter(AWS_ROOTS)
            .collect::<Result<Vec<_>, _>>()
            .expect("valid PEM");
        assert_eq!(certs.len(), 5);
        let names: Vec<&str> = std::str::from_utf8(AWS_ROOTS)
            .expect("text")
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .collect();
        assert_eq!(
            names,
            [
                "Amazon Root CA 1",
                "Amazon Root CA 2",
                "Amazon Root CA 3",
                "Amazon Root CA 4",
                "Starfield Services Root Certificate Authority - G2"
            ]
        );
        // Each is a self-signed root: the DER is a SEQUENCE, and distinct.
        for cert in &certs {
            assert_eq!(cert.as_ref()[0], 0x30);
        }
        let mut unique: Vec<&[u8]> = certs.iter().map(|c| c.as_ref()).collect();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 5);
    }
}
