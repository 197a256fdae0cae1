//! The wasmtime engine: the one place that sets `wasmtime::Config`.
//!
//! Settings chosen here hold for every lambda: the component model, async
//! execution on tokio (so a slow guest yields instead of holding a thread),
//! epoch interruption as the always-on deadline and kill mechanism, fuel
//! metering when enabled, the pooling allocator so a task's instance is
//! carved from pre-reserved slots instead of fresh mappings, and
//! deterministic execution, which durable lambdas replay on.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use waft_core::{ByteSize, Limits};
use wasmtime::component::Linker;
use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::cache::ArtifactCache;
use crate::error::RuntimeError;
use crate::guests::{GuestThreads, GuestThreadsConfig};
use crate::limiter::{MAX_INSTANCES, MAX_MEMORIES, MAX_TABLE_ELEMENTS, MAX_TABLES};
use crate::outbound::{Connections, Tls};
use crate::run::HostState;

/// How instances get their memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Allocator {
    /// The pooling allocator when the address space allows it, on-demand
    /// otherwise (the default).
    #[default]
    Auto,
    /// The pooling allocator, or fail.
    Pooling,
    /// Fresh mappings for every instance: slower to instantiate, no
    /// reservation up front.
    OnDemand,
}

/// Settings of a [`Runtime`]; every field has a default fit for an executor.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Instances that may exist at once (pooling slots). Default 256.
    pub max_instances: u32,
    /// The largest `max_memory` any lambda may be given. Default 4 GiB.
    pub max_memory_per_instance: ByteSize,
    /// How often the epoch advances: the resolution of deadlines, the
    /// worst-case latency of a kill, and how long a guest that computes
    /// holds its thread before it yields. Default 1 ms.
    pub epoch_tick: Duration,
    /// Meter fuel so lambdas can be given a `fuel` limit. Costs some guest
    /// speed; default on.
    pub fuel: bool,
    /// Where compiled components are cached across restarts; `None` keeps
    /// them in memory only. Default none.
    pub cache_dir: Option<PathBuf>,
    pub allocator: Allocator,
    /// With the pooling allocator, how much of an instance's memory stays
    /// mapped between tasks and is reset in place. Default 2 MiB, enough for
    /// a small Rust lambda's stack and data.
    pub keep_resident: ByteSize,
    /// Threads that run guests for
    /// [`crate::PreparedLambda::run_on_guest_threads`]; 0 means four per
    /// CPU (the default). More threads than CPUs let the kernel preempt a
    /// guest that computes for a short one that just woke, instead of the
    /// short one waiting for the long one's epoch tick to yield.
    pub guest_threads: usize,
    /// How much lower than the platform's threads the guest threads are
    /// scheduled (a nice value added, 0–19; Linux only). Default 10: a
    /// thread of the platform outweighs a guest thread about ninefold.
    pub guest_nice: u8,
    /// How long a component's start-up (its instantiation, start functions
    /// included) may take when [`Runtime::prepare`] tries it; a component
    /// that takes longer is refused. Every task instantiates its lambda
    /// anew, so a slow start-up is paid on every run. Default 5 s.
    pub max_startup: Duration,
    /// A CA certificate file (PEM) that outbound HTTPS trusts besides the
    /// system's roots: a private CA's. None by default.
    pub outbound_ca: Option<PathBuf>,
    /// Outbound HTTP connections open at once, every execution together
    /// (each also has its own `max_connections`). A request beyond it is
    /// refused, and the task's log says so. Default: half the process's
    /// limit on open files, at most 4,096 — so that lambdas never take the
    /// file descriptors the executor needs for its own connections.
    pub max_outbound_connections: usize,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            max_instances: 256,
            max_memory_per_instance: Limits::MAX_MEMORY,
            epoch_tick: Duration::from_millis(1),
            fuel: true,
            cache_dir: None,
            allocator: Allocator::Auto,
            keep_resident: ByteSize::mib(2),
            guest_threads: 0,
            guest_nice: 10,
            max_startup: Duration::from_secs(5),
            outbound_ca: None,
            max_outbound_connections: default_outbound_connections(),
        }
    }
}

/// Runs lambdas. Cheap to clone; clones share the engine, the linker and the
/// artifact cache.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) cache: Option<ArtifactCache>,
    pub(crate) fuel: bool,
    pub(crate) max_startup: Duration,
    pub(crate) tls: Arc<Tls>,
    /// The outbound connections of all executions together.
    pub(crate) connections: Arc<Connections>,
    /// See [`Runtime::fingerprint`].
    pub(crate) fingerprint: String,
    pooling: bool,
    pub(crate) guests: GuestThreads,
    pub(crate) ticker: EpochTicker,
}

impl Runtime {
    /// Builds the engine and the linker. Fails on a configuration out of
    /// range, when the pooling allocator is required and cannot reserve
    /// its address space, or when the thread that enforces deadlines
    /// cannot start.
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        Self::with_spawn(config, spawn_thread)
    }

    /// [`Runtime::new`], starting its epoch thread with `spawn` (a test's
    /// that fails, say).
    fn with_spawn(config: RuntimeConfig, spawn: Spawn) -> Result<Self, RuntimeError> {
        validate(&config)?;
        let (engine, pooling) = choose_engine(&config)?;
        let linker = link(&engine)?;
        let tls = Arc::new(Tls::new(config.outbound_ca.as_deref()).map_err(RuntimeError::Config)?);
        let cache = config
            .cache_dir
            .map(|dir| ArtifactCache::open(dir, &engine))
            .transpose()?;
        let ticker = EpochTicker::start(engine.clone(), config.epoch_tick, spawn)?;
        let guests = GuestThreads::new(GuestThreadsConfig {
            threads: match config.guest_threads {
                0 => 4 * std::thread::available_parallelism().map_or(1, usize::from),
                n => n,
            },
            nice: config.guest_nice,
        });
        Ok(Self {
            inner: Arc::new(Inner {
                fingerprint: crate::artifact::fingerprint(&engine),
                engine,
                linker,
                cache,
                fuel: config.fuel,
                max_startup: config.max_startup,
                tls,
                connections: Arc::new(Connections::new(config.max_outbound_connections)),
                pooling,
                guests,
                ticker,
            }),
        })
    }

    /// Whether instances come from the pooling allocator.
    pub fn is_pooling(&self) -> bool {
        self.inner.pooling
    }

    /// Whether the engine meters fuel.
    pub fn meters_fuel(&self) -> bool {
        self.inner.fuel
    }
}

/// The most outbound connections a runtime opens by default: half the
/// process's soft limit on open files, leaving the rest to the host, and at
/// most 4,096 (or 4,096 where the limit cannot be read).
fn default_outbound_connections() -> usize {
    const MOST: usize = 4096;
    #[cfg(target_os = "linux")]
    {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(files) = limit.current {
            let half = usize::try_from(files / 2).unwrap_or(MOST);
            return half.clamp(1, MOST);
        }
    }
    MOST
}

/// Refuses a configuration out of range, saying which setting and why.
fn validate(config: &RuntimeConfig) -> Result<(), RuntimeError> {
    if config.max_instances == 0 {
        return Err(RuntimeError::Config(
            "max_instances must be at least 1".into(),
        ));
    }
    if config.max_memory_per_instance > Limits::MAX_MEMORY {
        return Err(RuntimeError::Config(format!(
            "max_memory_per_instance is {}, above the 32-bit limit of {}",
            config.max_memory_per_instance,
            Limits::MAX_MEMORY
        )));
    }
    if config.guest_nice > 19 {
        return Err(RuntimeError::Config(format!(
            "guest_nice is {}; it must be within 0..=19",
            config.guest_nice
        )));
    }
    if config.max_startup < Limits::MIN_TIMEOUT {
        return Err(RuntimeError::Config(format!(
            "max_startup is {:?}; it must be at least {:?}",
            config.max_startup,
            Limits::MIN_TIMEOUT
        )));
    }
    if config.max_outbound_connections == 0 {
        return Err(RuntimeError::Config(
            "max_outbound_connections must be at least 1".into(),
        ));
    }
    if config.epoch_tick.is_zero() || config.epoch_tick > Duration::from_secs(1) {
        return Err(RuntimeError::Config(format!(
            "epoch_tick is {:?}; it must be within 1ns..=1s",
            config.epoch_tick
        )));
    }
    Ok(())
}

/// The engine the allocator setting asks for, and whether it pools
/// instances: `Auto` falls back to on-demand allocation when the pool
/// cannot reserve its address space.
fn choose_engine(config: &RuntimeConfig) -> Result<(Engine, bool), RuntimeError> {
    Ok(match config.allocator {
        Allocator::OnDemand => (build_engine(config, false)?, false),
        Allocator::Pooling => (build_engine(config, true)?, true),
        Allocator::Auto => match build_engine(config, true) {
            Ok(engine) => (engine, true),
            Err(error) => {
                tracing::warn!(%error, "pooling allocator unavailable; instances will be allocated on demand");
                (build_engine(config, false)?, false)
            }
        },
    })
}

/// The linker every lambda is instantiated with: WASI, outbound HTTP and
/// the contract's interfaces of every version. The clocks and randomness
/// are the journal's (the `durable` module), in place of WASI's own.
fn link(engine: &Engine) -> Result<Linker<HostState>, RuntimeError> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(RuntimeError::Linker)?;
    linker.allow_shadowing(true);
    crate::durable::add_to_linker(&mut linker).map_err(RuntimeError::Linker)?;
    linker.allow_shadowing(false);
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
        .map_err(RuntimeError::Linker)?;
    crate::contract::add_to_linker(&mut linker).map_err(RuntimeError::Linker)?;
    Ok(linker)
}

fn build_engine(config: &RuntimeConfig, pooling: bool) -> Result<Engine, RuntimeError> {
    let mut wasm = Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(config.fuel)
        // Durable executions replay: the same calls answered the same way
        // must compute the same, on any host. NaNs are canonicalised and
        // relaxed SIMD gives its deterministic answers; threads that share
        // memory are not built in (wasmtime's `threads` feature is off).
        .cranelift_nan_canonicalization(true)
        .relaxed_simd_deterministic(true);
    if pooling {
        let slots = config.max_instances;
        let mut pool = PoolingAllocationConfig::new();
        // The same bounds as every store's limiter (see the `limiter`
        // module): a component the pool takes is one an on-demand
        // instance takes too.
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(MAX_INSTANCES))
            .max_core_instances_per_component(MAX_INSTANCES)
            .total_memories(slots.saturating_mul(MAX_MEMORIES))
            .max_memories_per_component(MAX_MEMORIES)
            .total_tables(slots.saturating_mul(MAX_TABLES))
            .max_tables_per_component(MAX_TABLES)
            .max_tables_per_module(2)
            .table_elements(MAX_TABLE_ELEMENTS)
            .total_stacks(slots)
            .max_memory_size(config.max_memory_per_instance.as_usize())
            // Between tasks, reset the pages a task dirtied (found with the
            // PAGEMAP_SCAN ioctl where the kernel has it) with memset rather
            // than returning them to the kernel: fewer syscalls and page
            // faults per task.
            .pagemap_scan(Enabled::Auto)
            .linear_memory_keep_resident(config.keep_resident.as_usize())
            .table_keep_resident(64 << 10);
        wasm.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    Engine::new(&wasm).map_err(RuntimeError::Engine)
}

/// Starts a named thread running `body`: [`spawn_thread`], but where a test
/// makes it fail.
type Spawn = fn(std::thread::Builder, Box<dyn FnOnce() + Send>) -> io::Result<JoinHandle<()>>;

fn spawn_thread(
    builder: std::thread::Builder,
    body: Box<dyn FnOnce() + Send>,
) -> io::Result<JoinHandle<()>> {
    builder.spawn(body)
}

/// Advances the engine's epoch every tick, on a thread of its own, until
/// dropped. Deadlines and kills are checked when the epoch advances.
///
/// It ticks only while a store lives ([`EpochTicker::hold`]): deadlines
/// count from the epoch when their store starts, so an idle runtime — a
/// Frontend between deploys, an executor with nothing to run — need not
/// wake a thousand times a second.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    /// Stores alive, and how to wake the thread when the first starts.
    live: Arc<Live>,
    /// Taken when dropped, to join it.
    thread: Option<JoinHandle<()>>,
}

struct Live {
    stores: AtomicUsize,
    thread: std::sync::OnceLock<Thread>,
}

/// Keeps the epoch ticking while it lives: one per store.
pub(crate) struct Ticking(Arc<Live>);

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.stores.fetch_sub(1, Ordering::AcqRel);
    }
}

impl EpochTicker {
    /// Fails when the thread cannot start: without it no deadline or kill
    /// would ever stop a guest that computes, so no runtime may run.
    fn start(engine: Engine, tick: Duration, spawn: Spawn) -> Result<Self, RuntimeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let live = Arc::new(Live {
            stores: AtomicUsize::new(0),
            thread: std::sync::OnceLock::new(),
        });
        let (stopped, watched) = (stop.clone(), live.clone());
        let thread = spawn(
            std::thread::Builder::new().name("waft-epoch".into()),
            Box::new(move || {
                while !stopped.load(Ordering::Relaxed) {
                    if watched.stores.load(Ordering::Acquire) == 0 {
                        // Woken by the first store (an unpark before the
                        // park makes it return at once) or by the drop.
                        std::thread::park();
                        continue;
                    }
                    std::thread::park_timeout(tick);
                    engine.increment_epoch();
                }
            }),
        )
        .map_err(RuntimeError::EpochThread)?;
        let _ = live.thread.set(thread.thread().clone());
        Ok(Self {
            stop,
            live,
            thread: Some(thread),
        })
    }

    /// Ticks until the answer is dropped: hold it as long as a store lives.
    pub(crate) fn hold(&self) -> Ticking {
        if self.live.stores.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(thread) = self.live.thread.get()
        {
            thread.unpark();
        }
        Ticking(self.live.clone())
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runtime_whose_epoch_thread_cannot_start_is_refused() {
        fn refuse(
            _: std::thread::Builder,
            _: Box<dyn FnOnce() + Send>,
        ) -> io::Result<JoinHandle<()>> {
            Err(io::Error::other("no threads left"))
        }
        let config = RuntimeConfig {
            allocator: Allocator::OnDemand,
            ..RuntimeConfig::default()
        };
        match Runtime::with_spawn(config, refuse) {
            Ok(_) => panic!("a runtime without its epoch thread enforces no deadline"),
            Err(error) => {
                let message = error.to_string();
                assert!(message.contains("epoch thread"), "{message}");
                assert!(message.contains("no threads left"), "{message}");
            }
        }
    }
}
