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

/// [`https_client`] trusting only `AWS_ROOTS`: no certificate file is
/// read when the client is built. Only for AWS endpoints (or `http://`).
pub(crate) fn aws_https_client() -> SharedHttpClient {
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

/// The host of an endpoint URL (`[::1]` as `::1`), without scheme, port
/// or path.
pub fn endpoint_host(endpoint: &str) -> &str {
    let rest = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

/// Whether the endpoint is on this machine: `localhost`, a loopback
/// address (127.0.0.0/8, ::1) or the unspecified address (which connects
/// to this machine). Decided from the URL alone, without a request.
pub fn is_loopback(endpoint: &str) -> bool {
    let host = endpoint_host(endpoint).to_ascii_lowercase();
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

/// Whether the endpoint is AWS's own (its account can be asked).
pub fn is_aws(endpoint: &str) -> bool {
    let host = endpoint_host(endpoint).to_ascii_lowercase();
    host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn")
}

/// `AWS_ENDPOINT_URL`: the endpoint of every service (the SDK's variable).
pub const ENDPOINT_URL: &str = "AWS_ENDPOINT_URL";
/// `AWS_ENDPOINT_URL_DYNAMODB`: DynamoDB's endpoint (the SDK's variable).
pub const DYNAMODB_ENDPOINT_URL: &str = "AWS_ENDPOINT_URL_DYNAMODB";
/// `DYNAMODB_ENDPOINT_URL`: the project's own name for
/// [`DYNAMODB_ENDPOINT_URL`], kept as an alias.
pub const DYNAMODB_ENDPOINT_ALIAS: &str = "DYNAMODB_ENDPOINT_URL";
/// `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true` makes the SDK ignore every
/// `AWS_ENDPOINT_URL*` variable.
pub const IGNORE_ENDPOINT_URLS: &str = "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS";

/// The endpoint of `service_id` (the SDK's service id: `DynamoDB`,
/// `DynamoDB Streams`, `SQS`, `EventBridge`, `STS`, `S3`) as the SDK's
/// environment gives it ([the SDK's documentation][doc]):
/// `AWS_ENDPOINT_URL_<SERVICE>` (the id in capitals, spaces as `_`:
/// `AWS_ENDPOINT_URL_DYNAMODB_STREAMS`), then `AWS_ENDPOINT_URL`; none of
/// them where `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is `true`. DynamoDB's
/// also answers to [`DYNAMODB_ENDPOINT_ALIAS`], after the SDK's own
/// service variable. `var` reads a variable (empty counts as unset).
///
/// [doc]: https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html
pub fn endpoint_from_env(service_id: &str, var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let ignored = var(IGNORE_ENDPOINT_URLS).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let service = format!(
        "{ENDPOINT_URL}_{}",
        service_id.to_uppercase().replace(' ', "_")
    );
    let own = (!ignored).then(|| var(&service)).flatten();
    let alias = (service_id == "DynamoDB")
        .then(|| var(DYNAMODB_ENDPOINT_ALIAS))
        .flatten();
    let global = (!ignored).then(|| var(ENDPOINT_URL)).flatten();
    own.or(alias).or(global)
}

/// [`endpoint_from_env`] on the process's environment.
pub fn endpoint_from_process_env(service_id: &str) -> Option<String> {
    endpoint_from_env(service_id, |name| std::env::var(name).ok())
}

/// The SDK's per-service settings from the process's environment, for a
/// configuration built by hand ([`lambda_config`]): each client built from
/// it takes its endpoint from [`endpoint_from_env`], as clients built by
/// `aws_config::load_defaults` do (without reading the profile files).
#[derive(Debug, Clone, Default)]
struct EnvServiceConfig {
    /// DynamoDB's endpoint given in code, over the environment's.
    dynamodb: Option<String>,
}

impl aws_types::service_config::LoadServiceConfig for EnvServiceConfig {
    fn load_config(&self, key: aws_types::service_config::ServiceConfigKey<'_>) -> Option<String> {
        if key.env() == ENDPOINT_URL {
            if key.service_id() == "DynamoDB" && self.dynamodb.is_some() {
                return self.dynamodb.clone();
            }
            return endpoint_from_process_env(key.service_id());
        }
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let service = key.service_id().to_uppercase().replace(' ', "_");
        var(&format!("{}_{service}", key.env())).or_else(|| var(key.env()))
    }
}

/// The SDK configuration of a Lambda function, from the variables Lambda
/// sets and the SDK's endpoint variables, nothing else: `AWS_REGION` (or
/// `AWS_DEFAULT_REGION`), `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
/// `AWS_SESSION_TOKEN`, and each client's endpoint from
/// [`endpoint_from_env`] (`AWS_ENDPOINT_URL_<SERVICE>`, `AWS_ENDPOINT_URL`;
/// `DYNAMODB_ENDPOINT_URL` for DynamoDB). No profile file, instance
/// metadata or STS web identity is consulted, so the default provider chain
/// and its STS client stay out of the `bootstrap`s. Elsewhere (the command
/// line, on AWS), export the credentials into the environment (`aws
/// configure export-credentials --format env`).
///
/// `dynamodb_endpoint` (DynamoDB Local), given in code, is DynamoDB's
/// endpoint over the environment's. With a DynamoDB endpoint that is not
/// AWS, from either, a missing region is `us-east-1` and missing
/// credentials are dummy ones. The HTTP client is `aws_https_client`: an
/// endpoint whose certificate is not signed by Amazon Trust Services (a
/// TLS-inspecting proxy) is refused.
pub fn lambda_config(dynamodb_endpoint: Option<&str>) -> aws_config::SdkConfig {
    use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let services = EnvServiceConfig {
        dynamodb: dynamodb_endpoint.map(str::to_owned),
    };
    let local = dynamodb_endpoint
        .map(str::to_owned)
        .or_else(|| endpoint_from_process_env("DynamoDB"))
        .is_some_and(|url| !is_aws(&url));
    let region = var("AWS_REGION")
        .or_else(|| var("AWS_DEFAULT_REGION"))
        .or_else(|| local.then(|| "us-east-1".to_owned()));
    let credentials = if local && var("AWS_ACCESS_KEY_ID").is_none() {
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
    aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .http_client(aws_https_client())
        .region(region.map(aws_config::Region::new))
        .credentials_provider(credentials)
        .service_config(services)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn a_service_endpoint_comes_from_its_own_variable_then_the_global_one() {
        let vars = [
            ("AWS_ENDPOINT_URL", "http://global:1"),
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://ddb:2"),
            ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", "http://streams:3"),
        ];
        assert_eq!(
            endpoint_from_env("DynamoDB", env(&vars)).as_deref(),
            Some("http://ddb:2")
        );
        assert_eq!(
            endpoint_from_env("DynamoDB Streams", env(&vars)).as_deref(),
            Some("http://streams:3")
        );
        assert_eq!(
            endpoint_from_env("SQS", env(&vars)).as_deref(),
            Some("http://global:1")
        );
        assert_eq!(endpoint_from_env("SQS", env(&[])), None);
    }

    #[test]
    fn dynamodb_endpoint_url_is_an_alias_after_the_sdks_own_variable() {
        let alias = [("DYNAMODB_ENDPOINT_URL", "http://alias:1")];
        assert_eq!(
            endpoint_from_env("DynamoDB", env(&alias)).as_deref(),
            Some("http://alias:1")
        );
        let both = [
            ("DYNAMODB_ENDPOINT_URL", "http://alias:1"),
            ("AWS_ENDPOINT_URL_DYNAMODB", "http://ddb:2"),
            ("AWS_ENDPOINT_URL", "http://global:3"),
        ];
        assert_eq!(
            endpoint_from_env("DynamoDB", env(&both)).as_deref(),
            Some("http://ddb:2")
        );
        let global = [
            ("DYNAMODB_ENDPOINT_URL", "http://alias:1"),
            ("AWS_ENDPOINT_URL", "http://global:3"),
        ];
        assert_eq!(
            endpoint_from_env("DynamoDB", env(&global)).as_deref(),
            Some("http://alias:1")
        );
        // The alias is DynamoDB's only.
        assert_eq!(endpoint_from_env("EventBridge", env(&alias)), None);
    }

    #[test]
    fn ignoring_configured_endpoints_ignores_the_sdks_variables() {
        let vars = [
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
            ("AWS_ENDPOINT_URL", "http://global:1"),
            ("AWS_ENDPOINT_URL_SQS", "http://sqs:2"),
            ("AWS_ENDPOINT_URL_DYNAMODB", ""),
        ];
        assert_eq!(endpoint_from_env("SQS", env(&vars)), None);
        assert_eq!(endpoint_from_env("DynamoDB", env(&vars)), None);
    }

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
