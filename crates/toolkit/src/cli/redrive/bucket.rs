//! The S3 on-failure destination: the invocation records Lambda wrote under
//! a prefix ([`crate::failure_message`] gives their layout and format),
//! listed, read and deleted with the AWS SDK.

use aws_smithy_types::error::display::DisplayErrorContext;

use super::endpoints;
use crate::cli::CliError;
use crate::cli::target::AwsOpts;
use crate::failure_message::{self, InvocationRecord};

/// `s3://BUCKET/PREFIX`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket's name.
    pub bucket: String,
    /// Keys under it (may be empty: the whole bucket).
    pub prefix: String,
}

impl S3Location {
    /// Parse `--s3`'s value; a [`CliError::Usage`] saying what is wrong
    /// when it is not `s3://BUCKET[/PREFIX]` with a bucket.
    pub fn parse(url: &str) -> Result<Self, CliError> {
        let usage = |why: &str| {
            CliError::Usage(format!(
                "--s3 {url}: {why} (expected s3://BUCKET/PREFIX, e.g. s3://failures/aws/lambda/)"
            ))
        };
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| usage("not an s3:// URL"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(usage("no bucket"));
        }
        Ok(S3Location {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// `s3://BUCKET/KEY` of an object.
    pub fn url_of(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket)
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

pub(super) struct Bucket {
    client: aws_sdk_s3::Client,
    pub location: S3Location,
    /// Where the client goes (for the report).
    pub endpoint: String,
}

fn sdk_error(what: String, e: impl std::error::Error) -> CliError {
    CliError::Usage(format!("{what}: {}", DisplayErrorContext(e)))
}

impl Bucket {
    /// The objects at `location`, its client made as [`endpoints`] says.
    pub(super) async fn new(location: S3Location, flag: Option<&str>, aws: &AwsOpts) -> Self {
        let resolved = endpoints::resolve_s3(flag, |name| std::env::var(name).ok());
        let (client, region) = endpoints::s3_client(&resolved, aws).await;
        Bucket {
            client,
            endpoint: resolved.describe(region.as_deref()),
            location,
        }
    }

    /// Every key under the prefix, in S3's order (by mapping, shard, then
    /// time, for Lambda's keys): ListObjectsV2, every page.
    pub(super) async fn keys(&self) -> Result<Vec<String>, CliError> {
        self.keys_paged(None).await
    }

    /// [`Self::keys`] with pages of `page_size` keys (S3's default, 1,000,
    /// when `None`).
    pub(super) async fn keys_paged(&self, page_size: Option<i32>) -> Result<Vec<String>, CliError> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.location.bucket)
                .prefix(&self.location.prefix)
                .set_max_keys(page_size)
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| sdk_error(format!("cannot list {}", self.location), e))?;
            keys.extend(
                page.contents
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|o| o.key),
            );
            match page.next_continuation_token {
                Some(next) if page.is_truncated == Some(true) => token = Some(next),
                _ => return Ok(keys),
            }
        }
    }

    /// An object, read as an invocation record: `Err` says why it is not
    /// one (not JSON, not a DynamoDB stream's invocation record). A failure
    /// to read it at all is the command's error.
    pub(super) async fn read(
        &self,
        key: &str,
    ) -> Result<Result<InvocationRecord, String>, CliError> {
        let url = self.location.url_of(key);
        let object = self
            .client
            .get_object()
            .bucket(&self.location.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_error(format!("cannot read {url}"), e))?;
        let bytes = object
            .body
            .collect()
            .await
            .map_err(|e| CliError::Usage(format!("cannot read {url}: {e}")))?
            .into_bytes();
        Ok(serde_json::from_slice(&bytes)
            .map_err(|e| format!("not JSON: {e}"))
            .and_then(|v| failure_message::parse_invocation_record(&v).map_err(|e| e.to_string())))
    }

    /// Delete an object (every record in it is handled or parked).
    pub(super) async fn delete(&self, key: &str) -> Result<(), CliError> {
        self.client
            .delete_object()
            .bucket(&self.location.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_error(format!("cannot delete {}", self.location.url_of(key)), e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_urls_give_the_bucket_and_the_prefix() {
        let l = S3Location::parse("s3://failures/aws/lambda/").unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("failures", "aws/lambda/")
        );
        assert_eq!(l.url_of("aws/lambda/x"), "s3://failures/aws/lambda/x");
        let l = S3Location::parse("s3://failures").unwrap();
        assert_eq!(l.prefix, "");
        assert!(S3Location::parse("https://failures/x").is_err());
        assert!(S3Location::parse("s3:///x").is_err());
    }

    /// Every page of the listing (pages of 2 here), only under the prefix,
    /// each object read as an invocation record or refused with the reason.
    #[tokio::test]
    async fn every_page_of_the_listing_is_read() {
        let moto = worker_testkit::moto::moto().await;
        let name = format!("redrive-pages-{}", std::process::id());
        worker_testkit::on_failure::create_bucket(moto, &name).await;
        for n in 0..5 {
            let key = format!("aws/lambda/m/shardId-1/2024/03/25/2024-03-25T09.00.0{n}-x");
            worker_testkit::on_failure::put_object(moto, &name, &key, "{}").await;
        }
        worker_testkit::on_failure::put_object(moto, &name, "elsewhere/x", "{}").await;
        let aws = AwsOpts::default();
        let location = S3Location::parse(&format!("s3://{name}/aws/lambda/")).unwrap();
        let bucket = Bucket::new(location, Some(moto.endpoint_url()), &aws).await;
        assert!(
            bucket.endpoint.contains("--s3-endpoint-url"),
            "{}",
            bucket.endpoint
        );
        let keys = bucket.keys_paged(Some(2)).await.unwrap();
        assert_eq!(keys.len(), 5, "{keys:?}");
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "in S3's order: {keys:?}"
        );
        let read = bucket.read(&keys[0]).await.unwrap();
        assert!(read.unwrap_err().contains("DDBStreamBatchInfo"));
        bucket.delete(&keys[0]).await.unwrap();
        assert_eq!(bucket.keys().await.unwrap().len(), 4);
    }
}
