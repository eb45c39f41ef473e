//! A store's address as operators write it, and the connection it makes: `file:///dir` (or an
//! absolute path) for a local directory, `s3://bucket[/prefix]?endpoint=URL&region=R` for an
//! S3-compatible store, whose credentials come from the usual AWS variables
//! (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`) unless given ([`Credentials`]). Query keys:
//! `endpoint` (default: AWS's), `region` (default `us-east-1`), `allow_http` (`true` for a
//! store without TLS; implied by an `http://` endpoint), `virtual_hosted` (`true` for
//! bucket-in-hostname requests; path style otherwise, which Garage and MinIO want).

use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path;

use crate::{Error, Result};

/// An S3 key pair.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub key_id: String,
    pub secret: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// Where a store is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    /// A directory of this host (made if missing).
    Local(PathBuf),
    S3 {
        bucket: String,
        /// Where under the bucket the slices go ("" for its root).
        prefix: String,
        endpoint: Option<String>,
        region: String,
        allow_http: bool,
        virtual_hosted: bool,
        /// None: from the environment.
        credentials: Option<Credentials>,
    },
}

impl Address {
    /// Reads an address (see the module's documentation); a clear error for anything else.
    pub fn parse(text: &str) -> Result<Address> {
        let bad = |why: &str| Error::Address {
            address: text.to_owned(),
            why: why.to_owned(),
        };
        if let Some(path) = text.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad(
                    "a file:// address names an absolute path (file:///dir)",
                ));
            }
            return Ok(Address::Local(PathBuf::from(path)));
        }
        if text.starts_with('/') {
            return Ok(Address::Local(PathBuf::from(text)));
        }
        let Some(rest) = text.strip_prefix("s3://") else {
            return Err(bad(
                "expected file:///dir, an absolute path, or s3://bucket",
            ));
        };
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (bucket, prefix) = location.split_once('/').unwrap_or((location, ""));
        if bucket.is_empty() {
            return Err(bad("no bucket after s3://"));
        }
        let (mut endpoint, mut region, mut allow_http, mut virtual_hosted) =
            (None, "us-east-1".to_owned(), false, false);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(&format!("{pair:?} is not key=value")))?;
            let flag = || match value {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(bad(&format!("{key} is true or false, not {value:?}"))),
            };
            match key {
                "endpoint" => {
                    allow_http |= value.starts_with("http://");
                    endpoint = Some(value.to_owned());
                }
                "region" => value.clone_into(&mut region),
                "allow_http" => allow_http = flag()?,
                "virtual_hosted" => virtual_hosted = flag()?,
                _ => return Err(bad(&format!("unknown key {key:?}"))),
            }
        }
        Ok(Address::S3 {
            bucket: bucket.to_owned(),
            prefix: prefix.trim_matches('/').to_owned(),
            endpoint,
            region,
            allow_http,
            virtual_hosted,
            credentials: None,
        })
    }

    /// The same S3 address with these credentials instead of the environment's.
    #[must_use]
    pub fn with_credentials(mut self, given: Credentials) -> Address {
        if let Address::S3 { credentials, .. } = &mut self {
            *credentials = Some(given);
        }
        self
    }

    /// The address as [`Address::parse`] reads it, without credentials: what a server tells
    /// its clients, each of which brings its own.
    pub fn text(&self) -> String {
        match self {
            Address::Local(dir) => format!("file://{}", dir.display()),
            Address::S3 {
                bucket,
                prefix,
                endpoint,
                region,
                allow_http,
                virtual_hosted,
                credentials: _,
            } => {
                let slash = if prefix.is_empty() { "" } else { "/" };
                let endpoint = endpoint
                    .as_ref()
                    .map_or_else(String::new, |e| format!("&endpoint={e}"));
                format!(
                    "s3://{bucket}{slash}{prefix}?region={region}&allow_http={allow_http}\
                     &virtual_hosted={virtual_hosted}{endpoint}"
                )
            }
        }
    }

    /// The store's client, and the prefix the slices go under.
    pub(crate) fn connect(&self) -> Result<(Arc<dyn ObjectStore>, Path)> {
        match self {
            Address::Local(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::Address {
                    address: dir.display().to_string(),
                    why: format!("cannot make the directory: {e}"),
                })?;
                let store = LocalFileSystem::new_with_prefix(dir)?.with_fsync(true);
                Ok((Arc::new(store), Path::default()))
            }
            Address::S3 {
                bucket,
                prefix,
                endpoint,
                region,
                allow_http,
                virtual_hosted,
                credentials,
            } => {
                // reqwest's TLS is rustls without a provider of its own: ring, as the rest of
                // the process uses (a second install is refused, harmlessly).
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut builder = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_allow_http(*allow_http)
                    .with_virtual_hosted_style_request(*virtual_hosted);
                if let Some(endpoint) = endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                if let Some(c) = credentials {
                    builder = builder
                        .with_access_key_id(&c.key_id)
                        .with_secret_access_key(&c.secret);
                }
                let prefix = if prefix.is_empty() {
                    Path::default()
                } else {
                    Path::parse(prefix).map_err(|e| Error::Address {
                        address: format!("s3://{bucket}/{prefix}"),
                        why: e.to_string(),
                    })?
                };
                Ok((Arc::new(builder.build()?), prefix))
            }
        }
    }
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Local(dir) => write!(f, "file://{}", dir.display()),
            Address::S3 {
                bucket,
                prefix,
                endpoint,
                ..
            } => {
                write!(f, "s3://{bucket}")?;
                if !prefix.is_empty() {
                    write!(f, "/{prefix}")?;
                }
                if let Some(endpoint) = endpoint {
                    write!(f, " at {endpoint}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_as_text_parses_back_without_its_credentials() {
        for text in [
            "file:///var/lib/mds/objects",
            "s3://b/some/prefix?endpoint=http://127.0.0.1:3900&region=garage",
            "s3://b?virtual_hosted=true",
        ] {
            let address = Address::parse(text).unwrap();
            assert_eq!(Address::parse(&address.text()).unwrap(), address, "{text}");
        }
        let given = Address::parse("s3://b")
            .unwrap()
            .with_credentials(Credentials {
                key_id: "GK1".into(),
                secret: "s3cret".into(),
            });
        assert!(!given.text().contains("s3cret"));
    }

    #[test]
    fn addresses_parse_and_bad_ones_say_why() {
        assert_eq!(
            Address::parse("file:///var/lib/mds/objects").unwrap(),
            Address::Local("/var/lib/mds/objects".into())
        );
        assert_eq!(
            Address::parse("/srv/o").unwrap(),
            Address::Local("/srv/o".into())
        );
        let Address::S3 {
            bucket,
            prefix,
            endpoint,
            region,
            allow_http,
            virtual_hosted,
            credentials,
        } = Address::parse("s3://data/mds/a?endpoint=http://127.0.0.1:3900&region=garage").unwrap()
        else {
            panic!("not S3")
        };
        assert_eq!((bucket.as_str(), prefix.as_str()), ("data", "mds/a"));
        assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:3900"));
        assert_eq!(region, "garage");
        assert!(allow_http, "an http:// endpoint allows http");
        assert!(!virtual_hosted);
        assert!(credentials.is_none());
        for (bad, says) in [
            ("file://relative", "absolute path"),
            ("objects", "expected"),
            ("s3://", "no bucket"),
            ("s3://b?region", "key=value"),
            ("s3://b?colour=red", "unknown key"),
            ("s3://b?allow_http=yes", "true or false"),
        ] {
            let e = Address::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn credentials_never_print_their_secret() {
        let c = Credentials {
            key_id: "GK1".into(),
            secret: "hunter2".into(),
        };
        let shown = format!(
            "{:?}",
            Address::parse("s3://b").unwrap().with_credentials(c)
        );
        assert!(
            shown.contains("GK1") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
