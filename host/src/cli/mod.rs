//! The command line: what each `stepstone` subcommand takes, and the shared
//! setup (data directory, host) they run on.

mod batch;
mod drive;
mod group;
mod hook;
mod inspect;
mod remote;
mod scaffold;
mod scenarios;
mod schedule;
mod serve;
mod upgrade;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use stepstone::api;
use stepstone::component::CodeCache;
use stepstone::config::{
    HostConfig, LeasePolicy, RetryLimits, RunLimits, SnapshotPolicy, StepLimits, WaitPolicy, WorkflowLimits,
};
use stepstone::egress::{AllowedOrigin, AllowlistSetting, EgressConfig, Outbound};
use stepstone::policy::TenantPolicy;
use stepstone::runtime::{AttemptUnderWay, Runtime};
use stepstone::secrets::SecretKey;
use stepstone::store::{
    ComponentName, CrashPoint, Durability, FaultConfig, Faults, Probes, RunId, SecretName, SignalId, Storage,
    StreamName, TenantId,
};
use stepstone::telemetry::LogFormat;

/// Stepstone: durable workflows and steps as WebAssembly components.
/// Prints `answer` as pretty JSON on standard output: what a command that
/// answers with a record says.
fn print_json(answer: &serde_json::Value) -> anyhow::Result<ExitCode> {
    println!("{}", serde_json::to_string_pretty(answer)?);
    Ok(ExitCode::SUCCESS)
}

#[derive(Parser)]
#[command(version, about)]
pub struct Cli {
    /// Where runs, journals and compiled code are kept.
    #[arg(long, global = true, env = "STEPSTONE_DATA", default_value = "./stepstone-data")]
    data_dir: PathBuf,
    /// The object store runs and journals are kept in: file:///PATH,
    /// memory://, s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or
    /// az://CONTAINER/PREFIX, with credentials and endpoint from the
    /// backend's environment variables (AWS_ENDPOINT, AWS_ACCESS_KEY_ID, ...)
    /// [default: DATA_DIR/objects on the local file system].
    #[arg(long, global = true, env = "STEPSTONE_STORE")]
    store: Option<String>,
    /// What an acknowledged write to a local store (the data directory's,
    /// or a file:// one) survives: `log`, a power loss (each write is
    /// recorded in a write-ahead log, `write-log#0` in the store's
    /// directory, synced before it is acknowledged, the writes in flight
    /// together sharing one sync); `fsync`, a power loss too (each write's
    /// file and directory synced, two syncs a write); `no-fsync`, a crash of
    /// the process only (faster; the last writes may be lost or left empty
    /// when the machine stops). Other stores keep their own guarantees.
    #[arg(long, global = true, env = "STEPSTONE_DURABILITY", default_value_t = Durability::default())]
    durability: Durability,
    /// Where compiled code is cached [default: DATA_DIR/cache]. Hosts may
    /// share one: entries are keyed by component digest and engine settings.
    #[arg(long, global = true, env = "STEPSTONE_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// A run waiting longer than this drops its instance and is replayed
    /// when woken, so waiting runs hold no memory [default: 5s; 250ms for serve].
    #[arg(long, global = true, env = "STEPSTONE_EVICT_AFTER", value_parser = humantime::parse_duration)]
    evict_after: Option<Duration>,
    /// Talk to this `stepstone serve` instead of the embedded store.
    #[arg(long, global = true, env = "STEPSTONE_SERVER")]
    server: Option<String>,
    /// The tenant token for --server.
    #[arg(long, global = true, env = "STEPSTONE_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Durable calls one run may journal.
    #[arg(long, global = true, env = "STEPSTONE_MAX_JOURNAL_ENTRIES", default_value_t = RunLimits::default().max_journal_entries)]
    max_journal_entries: u64,
    /// Signals one run may hold untaken.
    #[arg(long, global = true, env = "STEPSTONE_MAX_BUFFERED_SIGNALS", default_value_t = RunLimits::default().max_buffered_signals)]
    max_buffered_signals: usize,
    /// Bytes of guest log lines one execution of a run may write (each line
    /// counts its length plus 64, what keeping it costs).
    #[arg(long, global = true, env = "STEPSTONE_MAX_LOG_BYTES", default_value_t = RunLimits::default().max_log_bytes)]
    max_log_bytes: usize,
    /// Values one run may append to its streams, every stream together.
    #[arg(long, global = true, env = "STEPSTONE_MAX_STREAM_VALUES", default_value_t = RunLimits::default().max_stream_values)]
    max_stream_values: u64,
    /// Bytes of values one run may append to its streams, every stream together.
    #[arg(long, global = true, env = "STEPSTONE_MAX_STREAM_BYTES", default_value_t = RunLimits::default().max_stream_bytes)]
    max_stream_bytes: u64,
    /// A payload (an input, a step's output, a signal, a memo, a child's or
    /// a run's output) larger than this many bytes is stored as an object
    /// of its own, which the record holding it names.
    #[arg(long, global = true, env = "STEPSTONE_OFFLOAD_PAYLOADS_ABOVE", default_value_t = HostConfig::default().offload_payloads_above)]
    offload_payloads_above: usize,
    /// The largest payload a workflow may pass or return: a run's input, a
    /// step's input, a memo, a child's input, its output. (A tenant's
    /// `max_payload_bytes` bounds what it sends; its `step_output_bytes`,
    /// its steps' outputs.)
    #[arg(long, global = true, env = "STEPSTONE_MAX_PAYLOAD_BYTES", default_value_t = WorkflowLimits::default().max_payload_bytes)]
    max_payload_bytes: usize,
    /// Compact a suspended run's journal into one snapshot object once it
    /// has grown by this many entries (and a quarter) since the last; 0: never.
    #[arg(long, global = true, env = "STEPSTONE_SNAPSHOT_EVERY", default_value_t = SnapshotPolicy::default().every)]
    snapshot_every: u64,
    /// Fuel a workflow may burn between two durable calls.
    #[arg(long, global = true, env = "STEPSTONE_ACTIVATION_FUEL", default_value_t = WorkflowLimits::default().activation_fuel)]
    activation_fuel: u64,
    /// Wall-clock time a workflow may run between two durable calls [default: 10s].
    #[arg(long, global = true, env = "STEPSTONE_ACTIVATION_TIMEOUT", value_parser = humantime::parse_duration)]
    activation_timeout: Option<Duration>,
    /// Inject storage faults, for testing: `errors=0.1,latency=2ms,seed=7,on=writes`.
    #[arg(long, global = true, env = "STEPSTONE_FAULTS", hide = true)]
    faults: Option<FaultConfig>,
    /// Instances of each role (workflow, step) the host holds at once;
    /// more wait for a slot, shared fairly between tenants [default: 256].
    #[arg(long, global = true, env = "STEPSTONE_INSTANCES")]
    instances: Option<u32>,
    /// Attempts one step call may make, whatever its `max-attempts` asks.
    #[arg(long, global = true, env = "STEPSTONE_MAX_ATTEMPTS", default_value_t = RetryLimits::default().max_attempts)]
    max_attempts: u32,
    /// The shortest wait between two attempts of a step call [default: 100ms].
    #[arg(long, global = true, env = "STEPSTONE_MIN_BACKOFF", value_parser = humantime::parse_duration)]
    min_backoff: Option<Duration>,
    /// Give each step attempt a fresh scratch directory, `/scratch` in the
    /// guest, removed after the attempt (made under DATA_DIR/scratch).
    #[arg(long, global = true, env = "STEPSTONE_STEP_SCRATCH_DIR")]
    step_scratch_dir: bool,
    /// Bytes one step attempt may write into its scratch directory (each
    /// write at a new place costs 8 KiB more, each file or directory
    /// created 4 KiB); past it, writes fail as on a full disk.
    #[arg(long, global = true, env = "STEPSTONE_STEP_SCRATCH_BYTES", default_value_t = StepLimits::default().scratch_bytes)]
    step_scratch_bytes: u64,
    /// How long this host's claim on the runs it drives lasts without
    /// renewal: hosts sharing a store take over the runs of one that has
    /// not renewed for this long. At least 1s.
    #[arg(long, global = true, env = "STEPSTONE_LEASE_TTL", value_parser = lease_ttl, default_value = "10s")]
    lease_ttl: Duration,
    /// Let steps send HTTP requests to this origin (SCHEME://HOST[:PORT],
    /// `*.` for any subdomain); repeat for more. None by default. For
    /// `serve`, each tenant's `allowed_outbound_hosts` says instead.
    #[arg(
        long = "allow-outbound",
        global = true,
        value_name = "ORIGIN",
        env = "STEPSTONE_ALLOW_OUTBOUND",
        value_delimiter = ','
    )]
    allow_outbound: Vec<AllowedOrigin>,
    /// Resolve the names steps and webhooks reach from this file (hosts(5)
    /// format: ADDRESS NAME...) before asking the system's resolver. What
    /// a name resolves to is checked like any address: one that is not
    /// global is reached only if the allowlist names it as an IP literal.
    #[arg(long, global = true, env = "STEPSTONE_HOSTS_FILE", value_name = "FILE")]
    hosts_file: Option<PathBuf>,
    /// How log lines on stderr look: `text`, in words, or `json`, one
    /// JSON object a line for log shippers.
    #[arg(long, global = true, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }

    /// What is logged unless `RUST_LOG` says otherwise: the host's course,
    /// but for `test`, whose scenarios' steps fail and retry on purpose and
    /// whose report says what happened, only errors.
    pub fn default_log_filter(&self) -> &'static str {
        match self.command {
            Command::Test(_) => "stepstone=error",
            _ => "stepstone=info",
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Write a new guest project (a workflow calling a step, in Rust,
    /// Python, JavaScript or C) that builds and runs as its README says.
    New(scaffold::NewArgs),
    /// Start a run (or continue one, given its id) and drive it until it finishes.
    Run(drive::RunArgs),
    /// Store a component (validated first); with --name, the name points at it.
    Upload {
        component: PathBuf,
        #[arg(long)]
        name: Option<String>,
    },
    /// Delete a stored component by digest, once no name, schedule or stored
    /// run refers to it.
    DeleteComponent { digest: String },
    /// List every build a component name has pointed at, oldest first.
    Versions { name: ComponentName },
    /// Move the unfinished runs of a build to a new one: each is replayed
    /// against it first and moves only if it replays identically; the
    /// others are listed with their first divergence (exit 1 if any).
    Upgrade(upgrade::UpgradeArgs),
    /// Start a run without waiting for it (`wait` waits; on the embedded
    /// store, `resume` drives it).
    Start {
        /// A component name or digest (see `upload`); `NAME@3` runs version
        /// 3 of the name (`versions NAME` lists them).
        component: String,
        workflow: String,
        #[arg(long, default_value = "null")]
        input: String,
        #[arg(long)]
        run_id: Option<RunId>,
        #[command(flatten)]
        when: drive::RunLifecycle,
    },
    /// Wait until a run finishes, or the timeout passes; prints its status.
    Wait {
        run: RunId,
        #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
        timeout: Duration,
    },
    /// Drive every unfinished run to completion or its next long wait (crash
    /// recovery); given a paused run, lift its pause first (with --server,
    /// only that).
    Resume {
        /// A paused run to resume.
        run: Option<RunId>,
        /// Leave runs that would wait longer than this suspended in the store.
        #[arg(long, value_parser = humantime::parse_duration, default_value = "0s")]
        detach_after: Duration,
    },
    /// Send a signal to a run; it is buffered until the run waits for it.
    Signal {
        run: RunId,
        name: String,
        /// The payload, as JSON.
        payload: String,
        /// An idempotency key: sending again with the same id stores the signal once.
        #[arg(long)]
        id: Option<SignalId>,
    },
    /// Cancel a run: its running step attempt is interrupted and the run ends `cancelled`.
    Cancel {
        run: RunId,
        #[arg(long, default_value = "cancelled by the user")]
        reason: String,
    },
    /// Pause a run: it keeps its place and buffered signals and starts
    /// nothing until resumed; an attempt under way finishes, unless
    /// `--interrupt` stops it (it runs again once resumed).
    Pause {
        run: RunId,
        #[arg(long, default_value = "paused by the user")]
        reason: String,
        #[arg(long)]
        interrupt: bool,
    },
    /// End a run's current wait (a sleep, or a signal wait's timeout) now,
    /// as if its timer had run out; a server driving the run goes on at
    /// once (without one, `stepstone resume` drives it on).
    Advance { run: RunId },
    /// Restart a run from a point: a new run keeps its journal before
    /// `--seq` (those calls are not executed again) and executes from
    /// there, on its build or `--component`; the run is cancelled unless it
    /// finished or `--keep-old`. Prints the new run.
    Restart {
        run: RunId,
        /// The first seq to execute anew (0 keeps nothing).
        #[arg(long)]
        seq: u64,
        /// A component name or digest to run on instead of the run's build.
        #[arg(long)]
        component: Option<String>,
        /// The new run's id (restarting again with it is a no-op).
        #[arg(long)]
        run_id: Option<RunId>,
        /// Leave the run going if it has not finished.
        #[arg(long)]
        keep_old: bool,
    },
    /// Show where a run stands.
    Status {
        run: RunId,
        #[arg(long)]
        json: bool,
    },
    /// Show a run's journal: every durable call and its outcome.
    History {
        run: RunId,
        #[arg(long)]
        json: bool,
    },
    /// Print a payload the run stored apart (an input, an output, a signal,
    /// a memo), by the SHA-256 that `status` or `history` names it by.
    Payload { run: RunId, sha256: String },
    /// Print the values of a run's stream, one JSON value a line, from
    /// `--offset` on; with --follow, also each as it is appended, until
    /// the run ends.
    Stream {
        run: RunId,
        name: StreamName,
        /// The offset of the first value to print.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Wait for the values still to come, until the run ends.
        #[arg(long)]
        follow: bool,
    },
    /// List the runs (oldest first), or those of a workflow or with a tag.
    List {
        #[arg(long)]
        json: bool,
        #[arg(long)]
        workflow: Option<String>,
        #[arg(long)]
        tag: Option<stepstone::store::RunTag>,
    },
    /// Test workflows on virtual time: run scenario files (steps stubbed,
    /// signals at virtual times, expectations), replay each run against its
    /// journal, and exit 1 if any scenario fails.
    Test(scenarios::TestArgs),
    /// Re-execute a run against its journal, running no step, and report any divergence.
    Replay {
        run: RunId,
        /// Check this build of the component instead of the one the run started with.
        #[arg(long)]
        component: Option<PathBuf>,
    },
    /// Serve the HTTP API to the tenants of a config file.
    Serve {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: String,
        /// The tenants file (`stepstone tenant add` writes it); without it, one
        /// tenant `default` with a token printed at start.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Serve the operator's `/metrics` (Prometheus, every tenant's) on
        /// this address; without it, no metrics are served. Keep it off
        /// the tenants' network.
        #[arg(long)]
        metrics_listen: Option<String>,
        /// Connections one source (an IPv4 address, or an IPv6 /64) may
        /// hold open at once; more are closed as they are accepted. Behind
        /// a balancer or a proxy every client shares its address: raise
        /// this to what it opens.
        #[arg(long, default_value_t = api::MAX_CONNECTIONS_PER_SOURCE as u32,
              value_parser = clap::value_parser!(u32).range(1..=api::MAX_CONNECTIONS as i64))]
        max_connections_per_source: u32,
    },
    /// Check the store: that it answers, and that it honours the
    /// create-only writes Stepstone's journal and its claims on runs stand
    /// on (every command checks this first; this one only checks).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Manage the tenants of a config file.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// Manage the secrets steps read through `wasi:config/store`, sealed with
    /// the host key in $STEPSTONE_SECRET_KEY (64 hex digits; with --server,
    /// the server's).
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Start many runs at once as a group, count their states, follow
    /// their ends, cancel them together (with --server).
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Manage the cron schedules that start runs (they fire while `stepstone serve` runs).
    #[command(subcommand)]
    Schedule(schedule::ScheduleCommand),
    /// Manage the HTTP hooks: paths on the host, `/hooks/{tenant}/{name}`,
    /// each starting a run per signed request (while `stepstone serve` runs).
    #[command(subcommand)]
    Hook(hook::HookCommand),
    /// Pause or resume many unfinished runs at once: every one, or those of
    /// a component, workflow or tag (how an operator stops a bad deploy).
    #[command(subcommand)]
    Batch(batch::BatchCommand),
    /// Declare the JSON Schema of each signal a component's workflows await:
    /// writes a copy of COMPONENT with SCHEMAS (a JSON object, signal name →
    /// schema) embedded. Sends that do not match are then refused.
    SignalSchemas {
        component: PathBuf,
        schemas: PathBuf,
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Make a component of a core WebAssembly module (binary or WAT text).
    Componentize {
        input: PathBuf,
        /// Embed this world of the contract first (for modules without a component type).
        #[arg(long)]
        world: Option<String>,
        #[arg(short, long)]
        output: PathBuf,
    },
}

#[derive(Subcommand)]
enum SecretCommand {
    /// Set a secret to the value read from standard input (a final newline
    /// dropped), so it appears in no command line.
    Set {
        name: SecretName,
        #[command(flatten)]
        scope: SecretScope,
    },
    /// List the secrets' names (never their values).
    List {
        #[command(flatten)]
        scope: SecretScope,
    },
    /// Delete a secret.
    Delete {
        name: SecretName,
        #[command(flatten)]
        scope: SecretScope,
    },
}

/// Whose secret: the tenant's, or one component name's.
#[derive(clap::Args)]
struct SecretScope {
    /// A component name: its secret, which the steps a workflow calls as
    /// `COMPONENT/step` read in place of the tenant's of the same name.
    #[arg(long)]
    component: Option<ComponentName>,
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Write probe objects (then delete them): a key read absent, then
    /// written, must be read back at once; a key created twice must be
    /// refused the second time, and of 8 creates of one key at once
    /// exactly one may land.
    Check,
}

#[derive(Subcommand)]
enum TenantCommand {
    /// Add a tenant (or a token to an existing one) and print its new token once.
    Add {
        id: TenantId,
        #[arg(long, default_value = "stepstone.toml")]
        config: PathBuf,
    },
}

fn lease_ttl(text: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if ttl < LeasePolicy::MIN_TTL {
        return Err(format!(
            "{text} is shorter than {:?}: a host renews every quarter of its lease, and a shorter one lapses at the first slow store call",
            LeasePolicy::MIN_TTL
        ));
    }
    Ok(ttl)
}

pub async fn execute(cli: Cli) -> anyhow::Result<ExitCode> {
    if let Some(server) = &cli.server {
        return remote::execute(remote::Remote::new(server, cli.token)?, cli.command).await;
    }
    let mut config = HostConfig::new();
    config.run = RunLimits {
        max_journal_entries: cli.max_journal_entries,
        max_buffered_signals: cli.max_buffered_signals,
        max_log_bytes: cli.max_log_bytes,
        max_stream_values: cli.max_stream_values,
        max_stream_bytes: cli.max_stream_bytes,
        ..RunLimits::default()
    };
    config.snapshots.every = cli.snapshot_every;
    config.offload_payloads_above = cli.offload_payloads_above;
    config.workflow.activation_fuel = cli.activation_fuel;
    config.workflow.max_payload_bytes = cli.max_payload_bytes;
    if let Some(timeout) = cli.activation_timeout {
        config.workflow.activation_timeout = timeout;
    }
    config.step.scratch_dir = cli.step_scratch_dir;
    config.step.scratch_bytes = cli.step_scratch_bytes;
    config.step.retry.max_attempts = cli.max_attempts;
    if let Some(instances) = cli.instances {
        config.pool_instances = instances.max(1);
    }
    if let Some(floor) = cli.min_backoff {
        config.step.retry.min_backoff = floor;
    }
    config.scratch_root = cli.data_dir.join("scratch");
    config.lease.ttl = cli.lease_ttl;
    config.egress = EgressConfig {
        hosts_file: cli.hosts_file,
        setting: match cli.command {
            Command::Serve { .. } => AllowlistSetting::TenantsFile,
            _ => AllowlistSetting::Flag,
        },
    };
    if matches!(cli.command, Command::Serve { .. }) {
        config.wait = WaitPolicy::serving();
    }
    if let Some(evict_after) = cli.evict_after {
        config.wait.eviction_threshold = evict_after;
    }
    let cache_dir = cli.cache_dir.unwrap_or_else(|| cli.data_dir.join("cache"));
    // Racing creates can take seconds on some stores: probed where a host
    // starts to stay, and where the user asks.
    let probes = match cli.command {
        Command::Serve { .. } | Command::Store(StoreCommand::Check) => Probes::Thorough,
        _ => Probes::Quick,
    };
    let data = DataDir::new(
        cli.data_dir,
        cli.store,
        cli.durability,
        cache_dir,
        cli.faults,
        Outbound::from(cli.allow_outbound),
        probes,
    );
    let host = || data.host(config.clone());
    let result = match cli.command {
        Command::New(args) => scaffold::create(&args),
        Command::Test(args) => {
            let cache = data.cache.clone();
            tokio::task::spawn_blocking(move || scenarios::run(args, &cache))
                .await
                .context("the scenarios' thread stopped")?
        }
        Command::Componentize { input, world, output } => componentize(&input, world.as_deref(), &output),
        Command::SignalSchemas {
            component,
            schemas,
            output,
        } => signal_schemas(&component, &schemas, &output),
        Command::Tenant(TenantCommand::Add { id, config }) => serve::add_tenant(&id, &config),
        Command::Store(StoreCommand::Check) => {
            host().await?;
            println!(
                "the store at {} answers and honours create-only writes: a second create of one key was refused, and 1 of 8 creates of one key at once landed",
                data.location()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Secret(command) => secret(&host().await?, command).await,
        Command::Schedule(command) => schedule::local(&host().await?, command).await,
        Command::Batch(command) => batch::local(&host().await?, command).await,
        Command::Hook(command) => hook::local(&host().await?, command).await,
        Command::Upgrade(args) => upgrade::local(&host().await?, args).await,
        Command::Group(_) => {
            anyhow::bail!("a group's runs are driven by `stepstone serve`: give --server URL --token T")
        }
        Command::Serve {
            listen,
            config,
            metrics_listen,
            max_connections_per_source,
        } => {
            let listening = serve::Listening {
                api: &listen,
                metrics: metrics_listen.as_deref(),
                per_source: max_connections_per_source as usize,
            };
            serve::serve(host().await?, listening, config.as_deref()).await
        }
        Command::Run(args) => drive::run(&host().await?, args).await,
        Command::Resume { run, detach_after } => drive::resume(&host().await?, run.as_ref(), detach_after).await,
        Command::Signal { run, name, payload, id } => {
            drive::signal(&host().await?, &run, &name, &payload, id.as_ref()).await
        }
        Command::Upload { component, name } => drive::upload(&host().await?, &component, name.as_deref()).await,
        Command::Versions { name } => {
            let versions = host()
                .await?
                .catalog()
                .component_versions(&TenantId::default_tenant(), &name)
                .await?;
            println!("{}", serde_json::to_string_pretty(&versions)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::DeleteComponent { digest } => {
            let runtime = host().await?;
            runtime
                .catalog()
                .delete_component(&TenantId::default_tenant(), &digest)
                .await?;
            eprintln!("component {digest} deleted");
            Ok(ExitCode::SUCCESS)
        }
        Command::Start {
            component,
            workflow,
            input,
            run_id,
            when,
        } => drive::start(&host().await?, &component, &workflow, &input, run_id, &when).await,
        Command::Wait { run, timeout } => inspect::wait(&host().await?, &run, timeout).await,
        Command::Cancel { run, reason } => drive::cancel(&host().await?, &run, &reason).await,
        Command::Pause { run, reason, interrupt } => {
            drive::pause(&host().await?, &run, &reason, AttemptUnderWay::stopped_if(interrupt)).await
        }
        Command::Advance { run } => drive::advance(&host().await?, &run).await,
        Command::Restart {
            run,
            seq,
            component,
            run_id,
            keep_old,
        } => drive::restart(&host().await?, &run, seq, component.as_deref(), run_id, keep_old).await,
        Command::Status { run, json } => inspect::status(&host().await?, &run, json).await,
        Command::History { run, json } => inspect::history(&host().await?, &run, json).await,
        Command::Stream {
            run,
            name,
            offset,
            follow,
        } => inspect::stream(&host().await?, &run, name, offset, follow).await,
        Command::Payload { run, sha256 } => inspect::payload(&host().await?, &run, &sha256).await,
        Command::List { json, workflow, tag } => {
            let query = stepstone::runtime::RunQuery {
                workflow,
                tag,
                ..stepstone::runtime::RunQuery::default()
            };
            inspect::list(&host().await?, &query, json).await
        }
        Command::Replay { run, component } => inspect::replay(&host().await?, &run, component.as_deref()).await,
    };
    data.leave().await;
    data.report_faults();
    result
}

/// The data directory (with the store in it, unless a `--store` URL names
/// another), the compiled-code cache, and the storage faults to inject, if
/// any.
struct DataDir {
    path: PathBuf,
    store: Option<String>,
    durability: Durability,
    cache: PathBuf,
    faults: Option<FaultConfig>,
    /// What the fault injector did, once a host was opened with one.
    injected: std::sync::OnceLock<std::sync::Arc<Faults>>,
    /// The host opened, to take out of the cluster when the command ends.
    opened: std::sync::OnceLock<Runtime>,
    /// The origins the embedded tenant's steps may reach.
    outbound: Outbound,
    /// How thoroughly the store is probed before the host opens on it.
    probes: Probes,
}

impl DataDir {
    fn new(
        path: PathBuf,
        store: Option<String>,
        durability: Durability,
        cache: PathBuf,
        faults: Option<FaultConfig>,
        outbound: Outbound,
        probes: Probes,
    ) -> Self {
        Self {
            path,
            store,
            durability,
            cache,
            faults,
            injected: std::sync::OnceLock::new(),
            opened: std::sync::OnceLock::new(),
            outbound,
            probes,
        }
    }

    /// Where the store is, as the user named it.
    fn location(&self) -> String {
        match &self.store {
            Some(location) => location.clone(),
            None => format!("file://{}", self.path.join("objects").display()),
        }
    }

    /// Takes the host out of the hosts sharing the store, if one joined.
    async fn leave(&self) {
        if let Some(runtime) = self.opened.get() {
            runtime.usage().flush_or_log().await;
            runtime.runs().leave().await;
        }
    }

    /// The host over its store, checked to answer before anything runs.
    async fn host(&self, config: HostConfig) -> anyhow::Result<Runtime> {
        let mut storage = match &self.store {
            Some(location) => Storage::open(location, self.durability)?,
            None => Storage::local_with(&self.path.join("objects"), self.durability)?,
        };
        tracing::debug!(durability = %self.durability, "local store writes: {}", match self.durability {
            Durability::Fsync => "synced to disk before they are acknowledged",
            Durability::Log => "recorded in a write-ahead log synced before they are acknowledged",
            Durability::NoFsync => "not synced: a power loss may lose the last ones",
        });
        storage.check(self.probes).await?;
        if let Some(point) = CrashPoint::from_env()? {
            storage = point.arm(storage);
        }
        if let Some(faults) = self.faults {
            tracing::warn!(%faults, "storage fault injection is ON: store calls fail and slow down on purpose");
            let (faulty, counts) = storage.with_faults(faults);
            storage = faulty;
            let _ = self.injected.set(counts);
        }
        let cache = CodeCache::open(&self.cache);
        let runtime = Runtime::new(config, storage, cache)?;
        let tenant = TenantId::default_tenant();
        let policy = TenantPolicy {
            outbound: Arc::new(self.outbound.clone()),
            ..(*runtime.policy(&tenant)).clone()
        };
        runtime.set_policy(&tenant, policy);
        if let Some(key) = SecretKey::from_env()? {
            runtime.secrets().set_key(key);
        }
        let _ = self.opened.set(runtime.clone());
        Ok(runtime)
    }

    /// Logs how many store calls were made and failed on purpose.
    fn report_faults(&self) {
        if let Some(counts) = self.injected.get() {
            tracing::info!(
                operations = counts.operations(),
                injected = counts.injected(),
                "storage faults injected"
            );
        }
    }
}

/// `stepstone secret`, for the embedded tenant.
async fn secret(runtime: &Runtime, command: SecretCommand) -> anyhow::Result<ExitCode> {
    let (secrets, tenant) = (runtime.secrets(), TenantId::default_tenant());
    match command {
        SecretCommand::Set { name, scope } => {
            secrets
                .set(&tenant, scope.component.as_ref(), &name, &secret_from_stdin()?)
                .await?;
            eprintln!("secret `{name}` set");
        }
        SecretCommand::List { scope } => {
            for name in secrets.names(&tenant, scope.component.as_ref()).await? {
                println!("{name}");
            }
        }
        SecretCommand::Delete { name, scope } => {
            let deleted = secrets.delete(&tenant, scope.component.as_ref(), &name).await?;
            anyhow::ensure!(deleted, "no secret `{name}`");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The value of `secret set`: standard input, a final newline dropped.
fn secret_from_stdin() -> anyhow::Result<String> {
    let mut value = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut value)
        .context("cannot read the secret's value from standard input (UTF-8 text)")?;
    if value.ends_with('\n') {
        value.pop();
    }
    Ok(value)
}

/// Reads a file the user named, saying which one failed.
fn read_file(path: &Path) -> anyhow::Result<bytes::Bytes> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(bytes.into())
}

fn signal_schemas(component: &Path, schemas: &Path, output: &Path) -> anyhow::Result<ExitCode> {
    let embedded = stepstone::component::signal_schemas::embed(&read_file(component)?, &read_file(schemas)?)
        .map_err(|reason| anyhow::anyhow!("cannot embed {}: {reason}", schemas.display()))?;
    std::fs::write(output, embedded).with_context(|| format!("cannot write {}", output.display()))?;
    eprintln!(
        "wrote {} with the signal schemas of {}",
        output.display(),
        schemas.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn componentize(input: &Path, world: Option<&str>, output: &Path) -> anyhow::Result<ExitCode> {
    let bytes = read_file(input)?;
    let component = stepstone::componentize::componentize(input.to_owned(), &bytes, world)?;
    std::fs::write(output, component).with_context(|| format!("cannot write {}", output.display()))?;
    Ok(ExitCode::SUCCESS)
}
