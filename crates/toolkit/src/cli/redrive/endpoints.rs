//! Where `redrive`'s SQS and S3 clients send their requests, and the region
//! they sign for. The command's `--endpoint-url` is DynamoDB's (as in every
//! command, [`super::super::target`]); the other services have flags of
//! their own, and otherwise follow the SDK's variables and the queue URL.
//!
//! SQS (`--queue-url URL`), first that applies:
//!
//! 1. `--sqs-endpoint-url URL`;
//! 2. `AWS_ENDPOINT_URL_SQS` (the SDK's variable of the service);
//! 3. the queue URL's own server, when it is not AWS's (moto's
//!    `http://127.0.0.1:PORT/123456789012/q`, LocalStack, ElasticMQ): the
//!    queue URL says where the queue is;
//! 4. `AWS_ENDPOINT_URL` (the SDK's variable of every service: often set for
//!    DynamoDB Local, hence after the queue URL's own server);
//! 5. AWS's endpoint of the queue's region.
//!
//! (2 and 4 are ignored where `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`.)
//! The region: the one an AWS host names (`sqs.<region>.amazonaws.com`,
//! `<region>.queue.amazonaws.com`, a VPC endpoint's
//! `….sqs.<region>.vpce.amazonaws.com`; the endpoint's, else the queue
//! URL's), over `--region`/`AWS_REGION` (the queue is where its URL says,
//! whatever region the table is in), then the profile's; us-east-1 for an
//! endpoint that is not AWS. Credentials: `--profile`/`AWS_PROFILE`, the
//! environment, the SDK's chain; dummy ones for an endpoint that is not AWS
//! when none is configured.
//!
//! S3 (`--s3 s3://BUCKET/PREFIX`): `--s3-endpoint-url`, `AWS_ENDPOINT_URL_S3`,
//! `AWS_ENDPOINT_URL`, else AWS; the region from an AWS endpoint's host,
//! else `--region`/`AWS_REGION`, the profile's, us-east-1 for an endpoint
//! that is not AWS. Path-style addressing (`http://host/BUCKET/KEY`) for an
//! endpoint that is not AWS.

use crate::cli::target::{AwsOpts, sdk_config};
use worker_engine::aws::{ENDPOINT_URL, IGNORE_ENDPOINT_URLS, endpoint_host, is_aws};

/// Where a client goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The endpoint set on the client; `None`: the SDK's endpoint of the
    /// region (AWS).
    pub endpoint: Option<String>,
    /// Where the endpoint came from (for the report).
    pub from: &'static str,
    /// The region an AWS host names, over `--region`.
    pub region: Option<String>,
}

impl Resolved {
    /// `http://127.0.0.1:5000 (the queue URL)` / `AWS (region eu-west-1)`.
    pub fn describe(&self, region: Option<&str>) -> String {
        let region = region.unwrap_or("(none)");
        match &self.endpoint {
            Some(url) => format!("{url} ({}, region {region})", self.from),
            None => format!("AWS (region {region})"),
        }
    }
}

/// The SDK's endpoint variables of a service (`None` where ignored).
struct EnvEndpoints {
    own: Option<(String, &'static str)>,
    global: Option<String>,
}

fn env_endpoints(service_var: &'static str, var: &impl Fn(&str) -> Option<String>) -> EnvEndpoints {
    let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let ignored = var(IGNORE_ENDPOINT_URLS).is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if ignored {
        return EnvEndpoints {
            own: None,
            global: None,
        };
    }
    EnvEndpoints {
        own: var(service_var).map(|v| (v, service_var)),
        global: var(ENDPOINT_URL),
    }
}

/// The origin of a URL (`http://127.0.0.1:5000` of
/// `http://127.0.0.1:5000/123456789012/q`).
pub fn origin(url: &str) -> &str {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            &url[..scheme.len() + 3 + end]
        }
        None => url,
    }
}

/// Whether a DNS label is a region's name (`us-east-1`, `us-gov-west-1`,
/// `cn-north-1`, `eu-isoe-west-1`).
fn is_region(label: &str) -> bool {
    let parts: Vec<&str> = label.split('-').collect();
    parts.len() >= 3
        && parts.iter().all(|p| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
        && parts[0].len() == 2
        && parts[parts.len() - 1].chars().all(|c| c.is_ascii_digit())
}

/// The region an AWS host of `service` names (`sqs.eu-west-1.amazonaws.com`,
/// `sqs-fips.…`, `vpce-….sqs.eu-west-1.vpce.amazonaws.com`,
/// `s3.eu-west-1.amazonaws.com`, `s3.dualstack.eu-west-1.…`; for SQS also
/// the legacy `eu-west-1.queue.amazonaws.com` and `queue.amazonaws.com`,
/// us-east-1). `None` for any other host.
pub fn aws_region(url: &str, service: &str) -> Option<String> {
    if !is_aws(url) {
        return None;
    }
    let host = endpoint_host(url).to_ascii_lowercase();
    let labels: Vec<&str> = host.split('.').collect();
    if service == "sqs" {
        if host == "queue.amazonaws.com" {
            return Some("us-east-1".into());
        }
        if labels.len() > 1 && labels[1] == "queue" && is_region(labels[0]) {
            return Some(labels[0].into());
        }
    }
    let of_service = |l: &str| l == service || l.starts_with(&format!("{service}-"));
    labels
        .windows(2)
        .chain(labels.windows(3))
        .find_map(|w| match w {
            [s, r] if of_service(s) && is_region(r) => Some(r.to_string()),
            [s, "dualstack", r] if of_service(s) && is_region(r) => Some(r.to_string()),
            _ => None,
        })
}

/// The SQS client's endpoint and region for `queue_url` (see the module's
/// documentation). `var` reads a variable (empty counts as unset).
pub fn resolve_sqs(
    flag: Option<&str>,
    queue_url: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Resolved {
    let env = env_endpoints("AWS_ENDPOINT_URL_SQS", &var);
    let (endpoint, from) = if let Some(url) = flag {
        (Some(url.to_owned()), "--sqs-endpoint-url")
    } else if let Some((url, name)) = env.own {
        (Some(url), name)
    } else if !is_aws(queue_url) && queue_url.contains("://") {
        (Some(origin(queue_url).to_owned()), "the queue URL")
    } else if let Some(url) = env.global {
        (Some(url), ENDPOINT_URL)
    } else {
        (None, "AWS")
    };
    let region = endpoint
        .as_deref()
        .and_then(|e| aws_region(e, "sqs"))
        .or_else(|| aws_region(queue_url, "sqs"));
    Resolved {
        endpoint,
        from,
        region,
    }
}

/// The S3 client's endpoint and region (see the module's documentation).
pub fn resolve_s3(flag: Option<&str>, var: impl Fn(&str) -> Option<String>) -> Resolved {
    let env = env_endpoints("AWS_ENDPOINT_URL_S3", &var);
    let (endpoint, from) = if let Some(url) = flag {
        (Some(url.to_owned()), "--s3-endpoint-url")
    } else if let Some((url, name)) = env.own {
        (Some(url), name)
    } else if let Some(url) = env.global {
        (Some(url), ENDPOINT_URL)
    } else {
        (None, "AWS")
    };
    let region = endpoint.as_deref().and_then(|e| aws_region(e, "s3"));
    Resolved {
        endpoint,
        from,
        region,
    }
}

/// The SDK configuration of a client that goes where `resolved` says:
/// `aws` with the region an AWS host names; for an endpoint that is not
/// AWS, us-east-1 and dummy credentials when none are configured
/// ([`sdk_config`]). `fallback` stands for the endpoint when the client
/// goes to AWS (the queue URL).
async fn config(resolved: &Resolved, aws: &AwsOpts, fallback: &str) -> aws_config::SdkConfig {
    let mut aws = aws.clone();
    if let Some(region) = &resolved.region {
        aws.region = Some(region.clone());
    }
    let endpoint = resolved.endpoint.as_deref().unwrap_or(fallback);
    sdk_config(Some(endpoint), &aws).await
}

/// An SQS client for `resolved` and the region it signs for.
pub async fn sqs_client(
    resolved: &Resolved,
    aws: &AwsOpts,
    queue_url: &str,
) -> (aws_sdk_sqs::Client, Option<String>) {
    let config = config(resolved, aws, queue_url).await;
    let region = config.region().map(|r| r.to_string());
    let mut builder = aws_sdk_sqs::config::Builder::from(&config);
    if let Some(url) = &resolved.endpoint {
        builder = builder.endpoint_url(url);
    }
    (aws_sdk_sqs::Client::from_conf(builder.build()), region)
}

/// An S3 client for `resolved` (path-style addressing for an endpoint that
/// is not AWS) and the region it signs for.
pub async fn s3_client(resolved: &Resolved, aws: &AwsOpts) -> (aws_sdk_s3::Client, Option<String>) {
    let config = config(resolved, aws, "https://s3.amazonaws.com").await;
    let region = config.region().map(|r| r.to_string());
    let mut builder = aws_sdk_s3::config::Builder::from(&config);
    if let Some(url) = &resolved.endpoint {
        builder = builder.endpoint_url(url).force_path_style(!is_aws(url));
    }
    (aws_sdk_s3::Client::from_conf(builder.build()), region)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    const MOTO: &str = "http://127.0.0.1:5000/123456789012/failures";
    const AWS: &str = "https://sqs.eu-west-1.amazonaws.com/123456789012/failures";

    #[test]
    fn a_queue_url_not_on_aws_is_its_own_endpoint() {
        let r = resolve_sqs(None, MOTO, env(&[]));
        assert_eq!(r.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
        assert_eq!((r.from, r.region), ("the queue URL", None));
        // Over AWS_ENDPOINT_URL (often DynamoDB Local's), not over SQS's own.
        let global = [("AWS_ENDPOINT_URL", "http://127.0.0.1:8000")];
        let r = resolve_sqs(None, MOTO, env(&global));
        assert_eq!(r.endpoint.as_deref(), Some("http://127.0.0.1:5000"));
        let own = [
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:8000"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:9324"),
        ];
        let r = resolve_sqs(None, MOTO, env(&own));
        assert_eq!(r.endpoint.as_deref(), Some("http://127.0.0.1:9324"));
        assert_eq!(r.from, "AWS_ENDPOINT_URL_SQS");
        // The flag over everything.
        let r = resolve_sqs(Some("http://localhost:4566"), MOTO, env(&own));
        assert_eq!(r.endpoint.as_deref(), Some("http://localhost:4566"));
        assert_eq!(r.from, "--sqs-endpoint-url");
    }

    #[test]
    fn an_aws_queue_url_gives_the_region_its_host_names() {
        let r = resolve_sqs(None, AWS, env(&[]));
        assert_eq!(r.endpoint, None);
        assert_eq!(r.region.as_deref(), Some("eu-west-1"));
        // The SDK's variables still route it (a proxy, LocalStack), with
        // the queue's region.
        let global = [("AWS_ENDPOINT_URL", "http://localhost:4566")];
        let r = resolve_sqs(None, AWS, env(&global));
        assert_eq!(r.endpoint.as_deref(), Some("http://localhost:4566"));
        assert_eq!(r.region.as_deref(), Some("eu-west-1"));
        // An AWS endpoint's own region first (a VPC endpoint).
        let vpce = "https://vpce-0a1b-2c3d.sqs.eu-central-1.vpce.amazonaws.com";
        let r = resolve_sqs(Some(vpce), AWS, env(&[]));
        assert_eq!(r.region.as_deref(), Some("eu-central-1"));
        // Ignored variables.
        let ignored = [
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
            ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:9324"),
        ];
        assert_eq!(resolve_sqs(None, AWS, env(&ignored)).endpoint, None);
    }

    #[test]
    fn regions_are_read_from_every_form_of_aws_host() {
        let cases = [
            (
                "https://sqs.us-east-2.amazonaws.com/1/q",
                "sqs",
                Some("us-east-2"),
            ),
            (
                "https://sqs-fips.us-gov-west-1.amazonaws.com/1/q",
                "sqs",
                Some("us-gov-west-1"),
            ),
            (
                "https://sqs.cn-north-1.amazonaws.com.cn/1/q",
                "sqs",
                Some("cn-north-1"),
            ),
            (
                "https://ap-south-1.queue.amazonaws.com/1/q",
                "sqs",
                Some("ap-south-1"),
            ),
            ("https://queue.amazonaws.com/1/q", "sqs", Some("us-east-1")),
            (
                "https://s3.eu-west-3.amazonaws.com",
                "s3",
                Some("eu-west-3"),
            ),
            (
                "https://s3.dualstack.eu-west-3.amazonaws.com",
                "s3",
                Some("eu-west-3"),
            ),
            ("https://s3.amazonaws.com", "s3", None),
            (
                "http://sqs.us-east-1.localhost.localstack.cloud:4566/1/q",
                "sqs",
                None,
            ),
            ("http://127.0.0.1:5000/1/q", "sqs", None),
        ];
        for (url, service, region) in cases {
            assert_eq!(aws_region(url, service).as_deref(), region, "{url}");
        }
        assert_eq!(origin("http://127.0.0.1:5000/1/q"), "http://127.0.0.1:5000");
        assert_eq!(
            origin("https://sqs.eu-west-1.amazonaws.com"),
            "https://sqs.eu-west-1.amazonaws.com"
        );
    }

    #[test]
    fn s3_follows_its_flag_then_the_sdks_variables() {
        assert_eq!(resolve_s3(None, env(&[])).endpoint, None);
        let vars = [
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:8000"),
            ("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:5000"),
        ];
        let r = resolve_s3(None, env(&vars));
        assert_eq!(
            (r.endpoint.as_deref(), r.from),
            (Some("http://127.0.0.1:5000"), "AWS_ENDPOINT_URL_S3")
        );
        let r = resolve_s3(Some("https://s3.eu-west-3.amazonaws.com"), env(&vars));
        assert_eq!(r.region.as_deref(), Some("eu-west-3"));
        assert_eq!(r.from, "--s3-endpoint-url");
    }
}
