//! One wasmtime [`Engine`] per role, built by one function, and the epoch
//! ticker that gives every store its wall clock.
//!
//! Both roles compile code alike (see [`Role`]), so one compile of a
//! component that exports workflows and steps serves both engines
//! ([`Engines::share_code`]); only their pools and slots differ. A host
//! whose steps are unmetered compiles steps apart, since fuel is compiled in.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::SandboxError;
use super::slots::{FairSlots, Slot};
use crate::config::HostConfig;
use crate::store::TenantId;

/// How often the epoch advances: the granularity of every wall-clock limit.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// What an engine runs. Workflows must be deterministic, so their engine
/// canonicalises NaNs and fixes relaxed-SIMD results; steps need not be,
/// but their engine does the same, so that their code is the workflows'
/// (one compile for both), at a small cost to float-heavy steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Workflow code: deterministic, and always fuel-metered.
    Workflow,
    /// Step code: need not be deterministic; fuel-metered unless `HostConfig::unmetered_steps`.
    Step,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Workflow => "workflow",
            Role::Step => "step",
        })
    }
}

/// The host's engines and the thread that ticks their epochs. Dropping the
/// last clone stops the ticker.
#[derive(Clone)]
pub struct Engines {
    workflow: Engine,
    step: Engine,
    /// Instances each role may hold at once: the pool's size. Waiting for a
    /// slot, rather than failing when the pool is full, lets any number of
    /// runs share a bounded pool; the slots are shared fairly by tenant.
    workflow_slots: Arc<FairSlots>,
    step_slots: Arc<FairSlots>,
    unmetered_steps: bool,
    /// Whether code compiled for one role runs on the other's engine.
    shared_code: bool,
    /// `None` for untimed guests (see `HostConfig::untimed_guests`).
    _ticker: Option<Arc<EpochTicker>>,
}

impl Engines {
    /// Builds both engines from `config`, and starts the epoch ticker unless
    /// guests are untimed (`HostConfig::untimed_guests`).
    pub fn new(config: &HostConfig) -> Result<Self, SandboxError> {
        let workflow = build_engine(Role::Workflow, config)?;
        let step = build_engine(Role::Step, config)?;
        let ticker = if config.untimed_guests {
            None
        } else {
            let ticker = EpochTicker::start(vec![workflow.clone(), step.clone()]);
            Some(Arc::new(ticker.map_err(|e| SandboxError::Ticker(e.to_string()))?))
        };
        let slots = || FairSlots::new(config.pool_instances as usize);
        let shared_code = compatibility(&workflow) == compatibility(&step);
        Ok(Self {
            workflow,
            step,
            workflow_slots: slots(),
            step_slots: slots(),
            unmetered_steps: config.unmetered_steps,
            shared_code,
            _ticker: ticker,
        })
    }

    /// Whether code compiled for one role runs on the other's engine: both
    /// compile alike unless steps are unmetered.
    pub fn share_code(&self) -> bool {
        self.shared_code
    }

    /// Waits for a free instance slot of `role` for `tenant`, in line by
    /// `priority` among the tenant's waiters; the slot is held until
    /// dropped, with the store that uses it.
    pub async fn slot(&self, role: Role, tenant: &TenantId, priority: u8) -> Slot {
        let slots = match role {
            Role::Workflow => &self.workflow_slots,
            Role::Step => &self.step_slots,
        };
        slots.acquire(tenant, priority).await
    }

    /// Whether the engine of `role` meters fuel.
    pub fn meters_fuel(&self, role: Role) -> bool {
        role == Role::Workflow || !self.unmetered_steps
    }

    /// The engine that runs components of `role`.
    pub fn get(&self, role: Role) -> &Engine {
        match role {
            Role::Workflow => &self.workflow,
            Role::Step => &self.step,
        }
    }
}

/// Builds the engine for `role`: pooled instances when the platform can
/// reserve the address space, on-demand allocation otherwise.
fn build_engine(role: Role, config: &HostConfig) -> Result<Engine, SandboxError> {
    let mut wasm = base_config(role, config.unmetered_steps);
    if config.pooling {
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool(role, config)));
        match Engine::new(&wasm) {
            Ok(engine) => return Ok(engine),
            Err(e) => tracing::warn!(%role, "pooling allocator unavailable, allocating on demand: {e}"),
        }
        wasm.allocation_strategy(InstanceAllocationStrategy::OnDemand);
    }
    Engine::new(&wasm).map_err(|e| SandboxError::Engine {
        role,
        reason: format!("{e:#}"),
    })
}

fn base_config(role: Role, unmetered_steps: bool) -> Config {
    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .consume_fuel(role == Role::Workflow || !unmetered_steps)
        .epoch_interruption(true)
        .max_wasm_stack(1 << 20)
        .cranelift_nan_canonicalization(true)
        .relaxed_simd_deterministic(true);
    wasm
}

/// What code compiled by `engine` depends on, as a number: engines with the
/// same run each other's code.
fn compatibility(engine: &Engine) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hasher.finish()
}

/// One component instance's share of the pool.
const CORE_INSTANCES_PER_COMPONENT: u32 = 16;
const MEMORIES_PER_COMPONENT: u32 = 2;
const TABLES_PER_COMPONENT: u32 = 4;

/// Bytes of each pooled table kept resident between instances (the largest
/// measured, Python's, is 45 KiB).
const TABLE_KEEP_RESIDENT: usize = 256 << 10;

fn pool(role: Role, config: &HostConfig) -> PoolingAllocationConfig {
    // The pool's limits are the store limits, so growth is refused by the
    // store's `MemoryGuard`, which names the limit, and never first by the pool.
    let (memory_bytes, table_elements) = match role {
        Role::Workflow => (config.workflow.memory_bytes, config.workflow.table_elements),
        Role::Step => (config.step.memory_bytes, config.step.table_elements),
    };
    let instances = config.pool_instances;
    let mut pool = PoolingAllocationConfig::default();
    // Every component instance may take its full share, so an instance
    // slot (see `Engines::slot`) never finds the pool exhausted. Measured:
    // a Rust guest holds 3 core instances, 1 memory, 2 tables; JavaScript
    // (componentize-js 0.23) 4, 1, 2; Python (componentize-py 0.25) 14,
    // 1, 2 (its table 5,684 elements, within the default 20,000; its vmctx
    // fits the 1 MiB instance size). A component over a share is refused
    // when instantiated, with the limit named.
    pool.total_component_instances(instances)
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT)
        .total_core_instances(instances * CORE_INSTANCES_PER_COMPONENT)
        .max_memories_per_component(MEMORIES_PER_COMPONENT)
        .total_memories(instances * MEMORIES_PER_COMPONENT)
        .max_tables_per_component(TABLES_PER_COMPONENT)
        .total_tables(instances * TABLES_PER_COMPONENT)
        .max_memory_size(memory_bytes)
        .table_elements(table_elements)
        .max_component_instance_size(1 << 20)
        .max_core_instance_size(1 << 20)
        // A slot's pages stay resident between instances (reset in place,
        // found with PAGEMAP_SCAN where the kernel has it) instead of being
        // unmapped and faulted in again: a step attempt is a fresh instance,
        // so this is on every step's path. wasmtime 48's scan reports at most
        // 32 runs of touched pages and releases everything past the 32nd, so
        // a runtime that touches its heap in many places (Python) still
        // faults part of it in again. Fiber stacks are not reset at all
        // (`async_stack_zeroing` is off: guest code cannot read them).
        .linear_memory_keep_resident(config.pool_memory_keep_resident)
        .table_keep_resident(TABLE_KEEP_RESIDENT)
        .pagemap_scan(Enabled::Auto);
    pool
}

/// Advances the epoch of every engine it holds until dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engines: Vec<Engine>) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        thread::Builder::new().name("stepstone-epoch".into()).spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                thread::sleep(EPOCH_TICK);
                engines.iter().for_each(Engine::increment_epoch);
            }
        })?;
        Ok(Self { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::attempt_example_step;

    #[test]
    fn a_pool_the_platform_cannot_reserve_falls_back_to_on_demand() {
        // Millions of 256 MiB slots: far more address space than exists.
        let config = HostConfig {
            pool_instances: 50_000_000,
            ..HostConfig::new()
        };
        let mut impossible = base_config(Role::Step, false);
        impossible.allocation_strategy(InstanceAllocationStrategy::Pooling(pool(Role::Step, &config)));
        assert!(
            Engine::new(&impossible).is_err(),
            "the test needs a pool that cannot be reserved"
        );
        assert!(build_engine(Role::Step, &config).is_ok());
        assert!(
            Engines::new(&HostConfig::new()).is_ok(),
            "the default pool is reservable here"
        );
    }

    #[tokio::test]
    async fn a_pooled_memory_keeps_the_pages_it_touched_only_when_configured_to() {
        for (keep_resident, kept) in [(0, false), (1 << 20, true)] {
            let config = HostConfig {
                pool_memory_keep_resident: keep_resident,
                ..HostConfig::new()
            };
            // The loaded component holds the module whose image the slot
            // keeps: dropped, the pool would release the slot's pages.
            let (components, _loaded, report) = attempt_example_step(&config).await;
            assert!(report.result.is_ok(), "the step ran");
            let metrics = components.engines().get(Role::Step).pooling_allocator_metrics();
            let resident = metrics.expect("a pooled engine").unused_memory_bytes_resident();
            assert_eq!(
                resident > 0,
                kept,
                "{resident} bytes resident, keeping up to {keep_resident}"
            );
        }
    }

    #[test]
    fn both_roles_share_compiled_code_unless_steps_are_unmetered() {
        assert!(Engines::new(&HostConfig::new()).expect("engines").share_code());
        let unpooled = HostConfig {
            pooling: false,
            ..HostConfig::new()
        };
        assert!(Engines::new(&unpooled).expect("engines").share_code());
        let unmetered = HostConfig {
            unmetered_steps: true,
            ..HostConfig::new()
        };
        assert!(!Engines::new(&unmetered).expect("engines").share_code());
    }

    #[test]
    fn unmetered_steps_leave_workflows_metered() {
        let config = HostConfig {
            unmetered_steps: true,
            ..HostConfig::new()
        };
        let engines = Engines::new(&config).expect("engines");
        assert!(!engines.meters_fuel(Role::Step));
        assert!(engines.meters_fuel(Role::Workflow));
        let mut step_store = wasmtime::Store::new(engines.get(Role::Step), ());
        assert!(step_store.set_fuel(1).is_err(), "the step engine must not meter fuel");
        let mut workflow_store = wasmtime::Store::new(engines.get(Role::Workflow), ());
        assert!(workflow_store.set_fuel(1).is_ok());
    }
}
