//! Turning a name into the addresses a request may connect to: the
//! operator's hosts file first, then the system's resolver.
//!
//! Invariant: a name is looked up once per connection, here; the connector
//! checks and connects to exactly the addresses this returns, so what the
//! name resolves to a moment later (DNS rebinding) changes nothing.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a hosts file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum HostsFileError {
    /// The file could not be read: the operator fixes the path or its
    /// permissions.
    #[error("cannot read the hosts file {path}: {reason}")]
    Read {
        /// The hosts file, as configured.
        path: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// A line does not start with an IP address: the operator fixes that
    /// line.
    #[error("{path}:{line}: `{address}` is not an IP address: write ADDRESS NAME [NAME...] (hosts(5))")]
    Address {
        /// The hosts file, as configured.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// The line's first word, which is not an IP address.
        address: String,
    },
}

/// Why a name has no address to connect to.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The system's resolver did not answer in time.
    #[error("looking up `{name}` took over {timeout:?}")]
    Timeout {
        /// The name looked up.
        name: String,
        /// How long the lookup was given.
        timeout: Duration,
    },
    /// The system's resolver failed, or found no address.
    #[error("`{name}` has no address: {reason}")]
    NotFound {
        /// The name looked up.
        name: String,
        /// The resolver's error, or that it returned no address.
        reason: String,
    },
}

/// Resolves names for the host's outgoing connections.
#[derive(Debug, Default)]
pub struct Resolver {
    /// Names the operator pinned (`--hosts-file`), lower-case.
    pinned: HashMap<String, Vec<IpAddr>>,
}

impl Resolver {
    /// A resolver that reads `hosts` (in hosts(5) format) before asking the
    /// system, if given.
    pub fn new(hosts: Option<&Path>) -> Result<Self, HostsFileError> {
        let Some(path) = hosts else {
            return Ok(Self::default());
        };
        let text = std::fs::read_to_string(path).map_err(|e| HostsFileError::Read {
            path: path.into(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            pinned: parse_hosts(path, &text)?,
        })
    }

    /// The addresses of `name` at `port`, within `timeout`.
    pub async fn lookup(&self, name: &str, port: u16, timeout: Duration) -> Result<Vec<SocketAddr>, LookupError> {
        if let Some(addresses) = self.pinned.get(&name.to_ascii_lowercase()) {
            return Ok(addresses.iter().map(|ip| SocketAddr::new(*ip, port)).collect());
        }
        let found = tokio::time::timeout(timeout, tokio::net::lookup_host((name, port)))
            .await
            .map_err(|_| LookupError::Timeout {
                name: name.to_owned(),
                timeout,
            })?;
        let not_found = |reason: String| LookupError::NotFound {
            name: name.to_owned(),
            reason,
        };
        let addresses: Vec<SocketAddr> = found.map_err(|e| not_found(e.to_string()))?.collect();
        if addresses.is_empty() {
            return Err(not_found("the resolver returned none".into()));
        }
        Ok(addresses)
    }
}

/// `ADDRESS NAME [NAME...]` a line, `#` to the end of a line a comment.
fn parse_hosts(path: &Path, text: &str) -> Result<HashMap<String, Vec<IpAddr>>, HostsFileError> {
    let mut pinned: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let mut words = line.split_whitespace();
        let Some(address) = words.next() else {
            continue;
        };
        let address: IpAddr = address.parse().map_err(|_| HostsFileError::Address {
            path: path.into(),
            line: index + 1,
            address: address.to_owned(),
        })?;
        for name in words {
            pinned.entry(name.to_ascii_lowercase()).or_default().push(address);
        }
    }
    Ok(pinned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pinned_names_resolve_from_the_file_in_any_case() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("hosts");
        std::fs::write(
            &path,
            "# pinned\n127.0.0.1 api.tenant.test Other.test\n\n::1 api.tenant.test # and v6\n",
        )?;
        let resolver = Resolver::new(Some(&path))?;
        let found = resolver.lookup("API.tenant.test", 8080, Duration::from_secs(1)).await?;
        let expected: Vec<SocketAddr> = vec!["127.0.0.1:8080".parse()?, "[::1]:8080".parse()?];
        assert_eq!(found, expected);
        assert_eq!(
            resolver.lookup("other.test", 1, Duration::from_secs(1)).await?,
            vec!["127.0.0.1:1".parse::<SocketAddr>()?]
        );
        Ok(())
    }

    #[test]
    fn a_line_without_an_address_is_refused_with_its_place() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("hosts");
        std::fs::write(&path, "127.0.0.1 a\nnot-an-address b\n")?;
        let error = Resolver::new(Some(&path)).expect_err("refused").to_string();
        assert!(error.contains(":2: `not-an-address` is not an IP address"), "{error}");
        let missing = Resolver::new(Some(&dir.path().join("absent"))).expect_err("refused");
        assert!(missing.to_string().contains("cannot read the hosts file"), "{missing}");
        Ok(())
    }
}
