//! Tenants of a shared host: who they are, how they authenticate, and their
//! quotas, as read from `stepstone.toml`, and read again when it changes.
//! The quotas are the file's flat form of a [`TenantPolicy`], which the
//! runtime enforces ([`crate::policy`]).
//!
//! Invariants: tokens are never stored in clear. The file holds SHA-256
//! hashes; a token exists in clear only once, when `stepstone tenant add`
//! prints it. A served file is read again on SIGHUP and within
//! [`RELOAD_POLL`] of any change ([`LiveTenants::follow`]), so a token
//! taken out of it stops authenticating within seconds on every host that
//! serves it; a file that cannot be read, does not parse or lists no tenant
//! is refused with an error in the log and the tenants read before stay.
//!
//! ```toml
//! [[tenants]]
//! id = "acme"
//! token_sha256 = ["5e88..."]
//! [tenants.quotas]
//! max_active_runs = 100
//! step_fuel = 1_000_000_000
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::{HttpLimits, RetryLimits, StepLimits};
use crate::egress::Outbound;
use crate::policy::{ComponentQuotas, DEFAULT_MAX_PAYLOAD_BYTES, RunQuotas, TenantPolicy};
use crate::store::TenantId;

/// What one tenant may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Quotas {
    /// Bytes of one component the tenant may upload.
    pub max_component_bytes: usize,
    /// Components the tenant may have stored.
    pub max_components: usize,
    /// Bytes of components the tenant may have stored.
    pub max_component_storage_bytes: u64,
    /// How long validating and compiling one upload may take.
    pub compile_timeout_ms: u64,
    /// Bytes of one input, signal payload or schedule input.
    pub max_payload_bytes: usize,
    /// Runs of the tenant being driven at once, child runs included.
    pub max_active_runs: usize,
    /// Runs the tenant may start a minute, child runs included.
    pub max_new_runs_per_minute: u32,
    /// How deep child workflows may nest (a top-level run is at depth 0).
    pub max_child_depth: u32,
    /// Child workflows one run may start.
    pub max_children_per_run: u32,
    /// Fuel one step attempt may burn (about one unit per WebAssembly instruction).
    pub step_fuel: u64,
    /// Linear memory one step attempt may grow to, in bytes.
    pub step_memory_bytes: usize,
    /// Wall-clock time one step attempt may take, in ms.
    pub step_timeout_ms: u64,
    /// Bytes of one step's output.
    pub step_output_bytes: usize,
    /// Whether each step attempt gets a fresh scratch directory (`/scratch`
    /// in the guest, removed after the attempt). Off by default: steps get
    /// no files at all.
    pub step_scratch_dir: bool,
    /// What one attempt may write into its scratch directory: its bytes,
    /// 8 KiB more for each write at a new place and 4 KiB for each file or
    /// directory created. Past it, writes fail as on a full disk.
    pub step_scratch_bytes: u64,
    /// Attempts one step call may make, whatever its `max-attempts` asks.
    pub step_max_attempts: u32,
    /// The shortest wait between two attempts of a step call.
    pub step_min_backoff_ms: u64,
    /// The longest wait between two attempts of a step call.
    pub step_max_backoff_ms: u64,
    /// The origins the tenant's steps may send HTTP requests to
    /// (`https://api.example.com`, `http://127.0.0.1:8099`,
    /// `https://*.example.com:443`); none by default.
    pub allowed_outbound_hosts: Outbound,
    /// HTTP requests one step attempt may send.
    pub http_max_requests: u32,
    /// Bytes of one request body, and of one response body.
    pub http_max_request_bytes: u64,
    /// Bytes of one response body.
    pub http_max_response_bytes: u64,
    /// How long a connection may take to open, and a response's first byte
    /// (and each next one) to arrive.
    pub http_connect_timeout_ms: u64,
    /// How long a response's first byte, and each next one, may take to arrive, in ms.
    pub http_first_byte_timeout_ms: u64,
    /// How long the tenant's finished runs are kept before every object of
    /// theirs is deleted; absent, for ever.
    pub retention_ms: Option<u64>,
    /// Fuel the tenant's step attempts may burn a UTC day, over every host;
    /// past it, new runs are refused (429) and new attempts wait for the
    /// next day. Absent: no daily budget.
    pub fuel_per_day: Option<u64>,
}

impl Default for Quotas {
    /// The file's form of [`TenantPolicy`]'s defaults: a tenant the file
    /// sets no quota for is held to what a tenant it does not list gets,
    /// but for steps, whose limits are the library's defaults rather than
    /// the host's.
    fn default() -> Self {
        let step = StepLimits::default();
        let (retry, http) = (step.retry, step.http);
        let runs = RunQuotas::default();
        let components = ComponentQuotas::default();
        Self {
            max_component_bytes: components.max_bytes,
            max_components: components.max_count,
            max_component_storage_bytes: components.max_stored_bytes,
            compile_timeout_ms: millis(components.compile_timeout),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            max_active_runs: runs.max_active_runs,
            max_new_runs_per_minute: runs.max_new_runs_per_minute,
            max_child_depth: runs.max_child_depth,
            max_children_per_run: runs.max_children_per_run,
            step_fuel: step.fuel,
            step_memory_bytes: step.memory_bytes,
            step_timeout_ms: millis(step.timeout),
            step_output_bytes: step.max_output_bytes,
            step_scratch_dir: step.scratch_dir,
            step_scratch_bytes: step.scratch_bytes,
            step_max_attempts: retry.max_attempts,
            step_min_backoff_ms: millis(retry.min_backoff),
            step_max_backoff_ms: millis(retry.max_backoff),
            allowed_outbound_hosts: Outbound::default(),
            http_max_requests: http.max_requests,
            http_max_request_bytes: http.max_request_bytes,
            http_max_response_bytes: http.max_response_bytes,
            http_connect_timeout_ms: millis(http.connect_timeout),
            http_first_byte_timeout_ms: millis(http.first_byte_timeout),
            retention_ms: None,
            fuel_per_day: None,
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Quotas {
    /// The policy these quotas set, in the runtime's own types.
    pub fn policy(&self) -> TenantPolicy {
        TenantPolicy {
            steps: StepLimits {
                fuel: self.step_fuel,
                memory_bytes: self.step_memory_bytes,
                timeout: Duration::from_millis(self.step_timeout_ms),
                max_output_bytes: self.step_output_bytes,
                scratch_dir: self.step_scratch_dir,
                scratch_bytes: self.step_scratch_bytes,
                retry: RetryLimits {
                    max_attempts: self.step_max_attempts,
                    min_backoff: Duration::from_millis(self.step_min_backoff_ms),
                    max_backoff: Duration::from_millis(self.step_max_backoff_ms),
                },
                http: HttpLimits {
                    max_requests: self.http_max_requests,
                    max_request_bytes: self.http_max_request_bytes,
                    max_response_bytes: self.http_max_response_bytes,
                    connect_timeout: Duration::from_millis(self.http_connect_timeout_ms),
                    first_byte_timeout: Duration::from_millis(self.http_first_byte_timeout_ms),
                },
                ..StepLimits::default()
            },
            outbound: Arc::new(self.allowed_outbound_hosts.clone()),
            runs: RunQuotas {
                max_active_runs: self.max_active_runs,
                max_new_runs_per_minute: self.max_new_runs_per_minute,
                max_child_depth: self.max_child_depth,
                max_children_per_run: self.max_children_per_run,
            },
            components: ComponentQuotas {
                max_bytes: self.max_component_bytes,
                max_count: self.max_components,
                max_stored_bytes: self.max_component_storage_bytes,
                compile_timeout: Duration::from_millis(self.compile_timeout_ms),
            },
            max_payload_bytes: self.max_payload_bytes,
            retention: self.retention_ms.map(Duration::from_millis),
            fuel_per_day: self.fuel_per_day,
        }
    }
}

/// One tenant's entry in `stepstone.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    /// The tenant's id, which its runs, components and schedules are stored under.
    pub id: TenantId,
    /// SHA-256 (hex) of each token that authenticates as this tenant.
    #[serde(default)]
    pub token_sha256: Vec<String>,
    /// What the tenant may use; a quota left out takes its default.
    #[serde(default)]
    pub quotas: Quotas,
}

/// Why the tenants file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TenancyError {
    /// The file exists but could not be read.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        reason: String,
    },
    /// The file does not parse as a tenants file or, when read again, lists no tenant.
    #[error("{path} is not a valid tenants file: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The tenants could not be written to the file.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O or TOML error.
        reason: String,
    },
    /// The file lists the tenant twice: keep one entry.
    #[error("tenant `{0}` is listed twice")]
    Duplicate(TenantId),
}

/// The tenants of a host, as `stepstone.toml` lists them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tenants {
    #[serde(default)]
    tenants: Vec<Tenant>,
}

impl Tenants {
    /// Reads `path`; a missing file is no tenants.
    pub fn load(path: &Path) -> Result<Self, TenancyError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(TenancyError::Read {
                    path: path.into(),
                    reason: e.to_string(),
                });
            }
        };
        let tenants: Self = toml::from_str(&text).map_err(|e| TenancyError::Parse {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let mut seen = std::collections::HashSet::new();
        if let Some(twice) = tenants.tenants.iter().find(|t| !seen.insert(&t.id)) {
            return Err(TenancyError::Duplicate(twice.id.clone()));
        }
        Ok(tenants)
    }

    /// Writes the tenants to `path` as TOML, replacing what is there.
    pub fn save(&self, path: &Path) -> Result<(), TenancyError> {
        let text = toml::to_string_pretty(self).map_err(|e| TenancyError::Write {
            path: path.into(),
            reason: e.to_string(),
        })?;
        std::fs::write(path, text).map_err(|e| TenancyError::Write {
            path: path.into(),
            reason: e.to_string(),
        })
    }

    /// A host with one tenant and one token.
    pub fn single(id: TenantId, token: &str) -> Self {
        Self {
            tenants: vec![Tenant {
                id,
                token_sha256: vec![token_hash(token)],
                quotas: Quotas::default(),
            }],
        }
    }

    /// Adds a token for tenant `id` (adding the tenant if new) and returns
    /// the token, which is not kept anywhere in clear.
    pub fn add_token(&mut self, id: &TenantId) -> String {
        let token = new_token();
        let hash = token_hash(&token);
        match self.tenants.iter_mut().find(|t| &t.id == id) {
            Some(tenant) => tenant.token_sha256.push(hash),
            None => self.tenants.push(Tenant {
                id: id.clone(),
                token_sha256: vec![hash],
                quotas: Quotas::default(),
            }),
        }
        token
    }

    /// Every tenant, in the file's order.
    pub fn iter(&self) -> impl Iterator<Item = &Tenant> {
        self.tenants.iter()
    }

    /// The tenant a bearer token authenticates, if any.
    pub fn authenticate(&self, token: &str) -> Option<&Tenant> {
        let hash = token_hash(token);
        self.tenants.iter().find(|t| t.token_sha256.contains(&hash))
    }

    /// Tenants by id, for lookups on every request.
    pub fn by_id(&self) -> HashMap<TenantId, Tenant> {
        self.tenants.iter().map(|t| (t.id.clone(), t.clone())).collect()
    }
}

/// How often a followed tenants file is read for changes.
pub const RELOAD_POLL: Duration = Duration::from_secs(1);

/// The tenants a host serves now: those of its tenants file, as last read.
/// Cheap to clone; every clone sees the same tenants.
#[derive(Clone)]
pub struct LiveTenants {
    current: Arc<tokio::sync::watch::Sender<Arc<Tenants>>>,
}

impl From<Tenants> for LiveTenants {
    fn from(tenants: Tenants) -> Self {
        Self {
            current: Arc::new(tokio::sync::watch::Sender::new(Arc::new(tenants))),
        }
    }
}

impl LiveTenants {
    /// The tenants now.
    pub fn current(&self) -> Arc<Tenants> {
        self.current.borrow().clone()
    }

    /// Sees each change of the tenants.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Tenants>> {
        self.current.subscribe()
    }

    /// Takes `path` again, if it reads as a tenants file listing at least
    /// one tenant and differs from the tenants now; says why not otherwise.
    pub fn reload(&self, path: &Path) -> Result<bool, TenancyError> {
        let tenants = Tenants::load(path)?;
        if tenants.tenants.is_empty() {
            return Err(TenancyError::Parse {
                path: path.into(),
                reason: "it lists no tenants (a file being written?)".into(),
            });
        }
        Ok(self.current.send_if_modified(|current| {
            let changed = **current != tenants;
            if changed {
                *current = Arc::new(tenants);
            }
            changed
        }))
    }

    /// Reads `path` again on SIGHUP and whenever its bytes change (looked
    /// at every [`RELOAD_POLL`]), from a background task, for as long as
    /// the process lives.
    pub fn follow(&self, path: PathBuf) {
        let live = self.clone();
        crate::task::spawn(async move {
            let mut hangups = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
                Ok(hangups) => Some(hangups),
                Err(e) => {
                    tracing::warn!("cannot watch for SIGHUP; the tenants file is still read when it changes: {e}");
                    None
                }
            };
            let mut last = std::fs::read(&path).ok();
            loop {
                let hangup = async {
                    match hangups.as_mut() {
                        Some(hangups) => drop(hangups.recv().await),
                        None => std::future::pending().await,
                    }
                };
                let asked = tokio::select! {
                    () = hangup => true,
                    () = tokio::time::sleep(RELOAD_POLL) => false,
                };
                if asked {
                    tracing::info!(path = %path.display(), "SIGHUP: reading the tenants file again");
                }
                let bytes = std::fs::read(&path).ok();
                if !asked && bytes == last {
                    continue;
                }
                last = bytes;
                match live.reload(&path) {
                    Ok(true) => {
                        let count = live.current().tenants.len();
                        tracing::info!(path = %path.display(), tenants = count, "read the tenants file again");
                    }
                    Ok(false) => {}
                    Err(e) => tracing::error!("keeping the tenants read before: {e}"),
                }
            }
        });
    }
}

/// A fresh token: 256 random bits, hex.
fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("sst_{}", hex::encode(bytes))
}

/// How a token is stored: SHA-256, hex. Tokens are random 256-bit values,
/// so a fast hash is enough (no password stretching needed).
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_authenticates_only_its_tenant_and_is_stored_hashed() -> Result<(), Box<dyn std::error::Error>> {
        let mut tenants = Tenants::default();
        let acme = tenants.add_token(&TenantId::new("acme")?);
        let globex = tenants.add_token(&TenantId::new("globex")?);
        assert_eq!(tenants.authenticate(&acme).map(|t| t.id.as_str()), Some("acme"));
        assert_eq!(tenants.authenticate(&globex).map(|t| t.id.as_str()), Some("globex"));
        assert!(tenants.authenticate("sst_wrong").is_none());

        let dir = tempfile::tempdir()?;
        let path = dir.path().join("stepstone.toml");
        tenants.save(&path)?;
        let text = std::fs::read_to_string(&path)?;
        assert!(!text.contains(&acme) && text.contains(&token_hash(&acme)), "{text}");
        assert_eq!(Tenants::load(&path)?, tenants);
        Ok(())
    }

    #[test]
    fn quotas_default_and_parse_with_unknown_keys_refused() {
        let parsed: Tenants =
            toml::from_str("[[tenants]]\nid = \"a\"\n[tenants.quotas]\nmax_active_runs = 2\n").expect("a valid file");
        let quotas = &parsed.tenants[0].quotas;
        assert_eq!(quotas.max_active_runs, 2);
        assert_eq!(quotas.step_fuel, Quotas::default().step_fuel);
        assert!(!quotas.policy().steps.scratch_dir, "no files unless granted");
        let typo = toml::from_str::<Tenants>("[[tenants]]\nid = \"a\"\n[tenants.quotas]\nmax_runs = 2\n");
        assert!(typo.is_err());
        let granted: Tenants = toml::from_str(
            "[[tenants]]\nid = \"a\"\n[tenants.quotas]\nstep_scratch_dir = true\nstep_scratch_bytes = 1024\n",
        )
        .expect("a valid file");
        let limits = granted.tenants[0].quotas.policy().steps;
        assert!(limits.scratch_dir);
        assert_eq!(limits.scratch_bytes, 1024);
    }

    /// A tenant listed without quotas is held to what an unlisted one is.
    #[test]
    fn default_quotas_are_the_default_policy() {
        let listed = Quotas::default().policy();
        assert_eq!(listed, TenantPolicy::default_for(&crate::config::HostConfig::new()));
    }
}
