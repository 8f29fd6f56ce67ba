//! Which origins a tenant may reach: its allowlist, matched against a
//! request's scheme, host and port as written (no lookup decides).

use std::net::IpAddr;

/// An origin a tenant's steps may reach: `https://api.example.com`,
/// `http://127.0.0.1:8099`, `https://*.example.com:443`. Without a port, the
/// scheme's (443, 80); `*.` matches one or more labels before the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedOrigin {
    scheme: String,
    host: HostPattern,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exactly(String),
    /// `*.suffix`: any host ending in `.suffix`.
    Below(String),
}

/// An entry of an allowlist that names no origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{entry}` is not an allowed origin: write SCHEME://HOST[:PORT] with scheme http or https, and no path (e.g. https://api.example.com, https://*.example.com:443)"
)]
pub struct InvalidOrigin {
    entry: String,
}

impl std::str::FromStr for AllowedOrigin {
    type Err = InvalidOrigin;

    fn from_str(entry: &str) -> Result<Self, InvalidOrigin> {
        let invalid = || InvalidOrigin {
            entry: entry.to_owned(),
        };
        let uri: http::Uri = entry.parse().map_err(|_| invalid())?;
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(invalid()),
        };
        let bare = uri.path_and_query().is_none_or(|path| path.as_str() == "/");
        let credentials = uri
            .authority()
            .is_some_and(|authority| authority.as_str().contains('@'));
        let host = uri.host().filter(|host| bare && !credentials && !host.is_empty());
        let host = host.ok_or_else(invalid)?;
        let host_len = host.len();
        let host = host.to_ascii_lowercase();
        let host = match host.strip_prefix("*.") {
            Some(suffix) if !suffix.is_empty() && !suffix.contains('*') => HostPattern::Below(suffix.to_owned()),
            None if !host.contains('*') => HostPattern::Exactly(host),
            _ => return Err(invalid()),
        };
        // Read from the text: `http` reads an out-of-range port as none.
        let written = uri.authority().map_or("", |authority| authority.as_str());
        let port = match written.get(host_len..).unwrap_or_default() {
            "" => default_port,
            port => port
                .strip_prefix(':')
                .and_then(|port| port.parse().ok())
                .ok_or_else(invalid)?,
        };
        Ok(Self {
            scheme: uri.scheme_str().unwrap_or_default().to_owned(),
            host,
            port,
        })
    }
}

impl AllowedOrigin {
    fn allows(&self, scheme: &str, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let host_matches = match &self.host {
            HostPattern::Exactly(allowed) => host == *allowed,
            HostPattern::Below(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|labels| labels.len() > 1 && labels.ends_with('.')),
        };
        self.scheme == scheme && self.port == port && host_matches
    }
}

impl std::fmt::Display for AllowedOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = match &self.host {
            HostPattern::Exactly(host) => host.clone(),
            HostPattern::Below(suffix) => format!("*.{suffix}"),
        };
        write!(f, "{}://{host}:{}", self.scheme, self.port)
    }
}

/// The origins a tenant's steps may reach; by default, none. In a tenants
/// file, a list of origins (`allowed_outbound_hosts = ["https://api.example.com"]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "Vec<String>", into = "Vec<String>")]
pub struct Outbound {
    origins: Vec<AllowedOrigin>,
}

impl From<Vec<AllowedOrigin>> for Outbound {
    fn from(origins: Vec<AllowedOrigin>) -> Self {
        Self { origins }
    }
}

impl TryFrom<Vec<String>> for Outbound {
    type Error = InvalidOrigin;

    fn try_from(entries: Vec<String>) -> Result<Self, InvalidOrigin> {
        Self::parse(&entries)
    }
}

impl From<Outbound> for Vec<String> {
    fn from(outbound: Outbound) -> Self {
        outbound.origins.iter().map(ToString::to_string).collect()
    }
}

impl Outbound {
    /// Parses each entry, naming the first that is not an origin.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, InvalidOrigin> {
        let origins = entries
            .iter()
            .map(|entry| entry.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self { origins })
    }

    /// Whether an entry names `address` as an IP literal: the operator's
    /// word that this tenant may reach it although it is not global.
    pub fn names_address(&self, address: IpAddr) -> bool {
        self.origins.iter().any(|origin| match &origin.host {
            HostPattern::Exactly(host) => {
                ip_literal(host).is_some_and(|named| named.to_canonical() == address.to_canonical())
            }
            HostPattern::Below(_) => false,
        })
    }

    /// Whether a request to `uri` may be sent.
    pub fn allows(&self, uri: &http::Uri) -> bool {
        let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return false;
        };
        let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        self.origins.iter().any(|origin| origin.allows(scheme, host, port))
    }
}

/// The address a URI's host names literally (`10.0.0.1`, `[::1]`), if it
/// is an IP literal and not a name.
pub fn ip_literal(host: &str) -> Option<IpAddr> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse().ok()
}

/// `uri`'s origin, `scheme://host:port` (the port its scheme's if none is
/// written): what a refusal names, never the path or query, which may
/// carry a tenant's tokens.
pub fn origin_of(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("?");
    let default_port = if scheme == "https" { 443 } else { 80 };
    let port = uri.port_u16().unwrap_or(default_port);
    format!("{scheme}://{}:{port}", uri.host().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbound(entries: &[&str]) -> Outbound {
        Outbound::parse(entries).expect("valid origins")
    }

    fn allows(outbound: &Outbound, url: &str) -> bool {
        outbound.allows(&url.parse().expect("a valid URL"))
    }

    #[test]
    fn origins_match_by_scheme_host_and_port_as_written() {
        let list = outbound(&[
            "https://api.example.com",
            "http://127.0.0.1:8099",
            "https://*.example.org:8443",
        ]);
        assert!(allows(&list, "https://api.example.com/v1/charges?x=1"));
        assert!(allows(&list, "https://API.example.com:443/"));
        assert!(!allows(&list, "http://api.example.com/"), "another scheme");
        assert!(!allows(&list, "https://api.example.com:444/"), "another port");
        assert!(
            !allows(&list, "https://api.example.com.evil.net/"),
            "a suffix is not the host"
        );
        assert!(allows(&list, "http://127.0.0.1:8099/pay"));
        assert!(
            !allows(&list, "http://localhost:8099/pay"),
            "no lookup makes localhost 127.0.0.1"
        );
        assert!(allows(&list, "https://a.b.example.org:8443/"));
        assert!(
            !allows(&list, "https://example.org:8443/"),
            "the wildcard needs a label"
        );
        assert!(!allows(&list, "https://evilexample.org:8443/"));
        assert!(
            !allows(&Outbound::default(), "https://api.example.com/"),
            "nothing by default"
        );
    }

    #[test]
    fn entries_that_name_no_origin_are_refused_with_the_entry() {
        for bad in [
            "api.example.com",
            "ftp://x.org",
            "https://",
            "https://x.org:99999",
            "https://x.org/path",
            "https://a b",
            "https://user@x.org",
            "https://*.*.x.org",
        ] {
            let error = bad.parse::<AllowedOrigin>().expect_err(bad).to_string();
            assert!(error.contains(bad), "{error}");
        }
    }

    #[test]
    fn only_an_entry_written_as_an_ip_literal_names_an_address() {
        let list = outbound(&[
            "http://10.0.0.5:80",
            "https://[::1]:8443",
            "https://*.0.0.1",
            "http://api.test",
        ]);
        let named = |address: &str| list.names_address(address.parse().expect("an address"));
        assert!(named("10.0.0.5"));
        assert!(named("::ffff:10.0.0.5"), "an IPv4-mapped form is the same address");
        assert!(named("::1"));
        assert!(!named("127.0.0.1"), "a wildcard names no address");
        assert!(!named("10.0.0.6"));
    }

    #[test]
    fn an_origin_names_no_path_query_or_credentials() {
        let origin = |url: &str| origin_of(&url.parse().expect("a URI"));
        assert_eq!(origin("http://api.test/pay?token=s3cret"), "http://api.test:80");
        assert_eq!(origin("https://API.test:8443/x"), "https://API.test:8443");
        assert_eq!(origin("https://[::1]/"), "https://[::1]:443");
    }
}
