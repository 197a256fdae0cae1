//! Loading a `.wasm` file as a lambda: checks, compilation, linking.
//!
//! Everything that can be done once per lambda version is done here, so that
//! running a task only creates a store and instantiates a pre-linked
//! component (`InstancePre`).

use std::fmt;

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;
use wasmtime::{Engine, Trap};

use std::sync::Arc;
use std::time::Instant;

use waft_core::{Grants, Limits};

use crate::contract::{HANDLER_EXPORTS, Handler};
use crate::durable::Journal;
use crate::error::LoadError;
use crate::log::LogSink;
use crate::run::{HostState, Sandbox, Stop, new_store};
use crate::{KillSwitch, RecordingHost, Runtime};

/// SHA-256 of a component's bytes: the identity of a lambda version's code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    ///
    /// ```
    /// let digest = waft_runtime::Digest::of(b"");
    /// assert!(digest.to_string().starts_with("e3b0c442"));
    /// ```
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }
}

impl std::str::FromStr for Digest {
    type Err = String;

    /// Reads the 64 hex digits [`Display`](fmt::Display) writes.
    fn from_str(hex: &str) -> Result<Self, Self::Err> {
        let bytes = hex::decode(hex).map_err(|_| format!("{hex:?} is not a hex digest"))?;
        let bytes: [u8; 32] = bytes
            .try_into()
            .map_err(|_| format!("{hex:?} is not a SHA-256 digest (64 hex digits)"))?;
        Ok(Self(bytes))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// A lambda version compiled and linked, ready to run tasks. Cheap to clone.
#[derive(Clone)]
pub struct PreparedLambda {
    pub(crate) runtime: Runtime,
    pub(crate) handler: Handler,
    /// Link imports on every instantiation instead of using `InstancePre`.
    pub(crate) relink: bool,
    digest: Digest,
}

impl PreparedLambda {
    /// The content hash of the component.
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// The interfaces the component imports (`wasi:http/outgoing-handler@0.2.4`…).
    pub fn imports(&self) -> Vec<String> {
        let engine = &self.runtime.inner.engine;
        let component = self.handler.instance_pre().component();
        component
            .component_type()
            .imports(engine)
            .map(|(name, _)| name.to_owned())
            .collect()
    }

    /// Refuses a component that imports a capability its lambda is not
    /// granted, naming the import and the flag that grants it: deploying
    /// it would only fail every call at run time.
    pub fn check_grants(&self, grants: &Grants) -> Result<(), String> {
        for import in self.imports() {
            if import.starts_with("wasi:http/outgoing-handler@") && grants.outbound.is_empty() {
                return Err(format!(
                    "the component imports {import}, and the lambda is granted no destination: \
                     deploy it with --allow-outbound PATTERN for each host it calls"
                ));
            }
        }
        Ok(())
    }

    /// The same lambda, linked afresh for every task instead of
    /// pre-instantiated: slower, and only there so benchmarks can measure
    /// what pre-instantiation saves.
    pub fn relinking_every_task(&self) -> Self {
        Self {
            relink: true,
            ..self.clone()
        }
    }
}

impl fmt::Debug for PreparedLambda {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedLambda")
            .field("digest", &self.digest)
            .finish()
    }
}

impl Runtime {
    /// Checks that `wasm` is a component of the `waft:lambda` world,
    /// compiles it (or loads it from the artifact cache), pre-links it and
    /// instantiates it once, under the default [`Limits`], to check the
    /// handler's type.
    ///
    /// Compiling takes tens of milliseconds of CPU, on a blocking thread
    /// (`spawn_blocking`); call this once per lambda version, not per task.
    pub async fn prepare(&self, wasm: &[u8]) -> Result<PreparedLambda, LoadError> {
        self.prepare_with_limits(wasm, &Limits::default()).await
    }

    /// [`Runtime::prepare`], its trial instantiation under `limits` (the
    /// lambda's own: what a deploy checks with) rather than the defaults:
    /// a start-up that would breach them at every run is refused now, with
    /// [`LoadError::LimitExceeded`], and costs the host no more than one run
    /// would.
    pub async fn prepare_with_limits(
        &self,
        wasm: &[u8],
        limits: &Limits,
    ) -> Result<PreparedLambda, LoadError> {
        check_header(wasm)?;
        let digest = Digest::of(wasm);
        // Compiling is CPU work: off the async threads, or every other task
        // of the caller's runtime (an executor's heartbeats among them)
        // would wait for it.
        let runtime = self.clone();
        let bytes = wasm.to_vec();
        let component = tokio::task::spawn_blocking(move || {
            let engine = &runtime.inner.engine;
            match &runtime.inner.cache {
                Some(cache) => cache.load_or_compile(engine, &bytes, &digest),
                None => compile(engine, &bytes),
            }
        })
        .await
        .map_err(|e| LoadError::CompilerStopped(e.to_string()))??;
        self.link(component, digest, limits).await
    }

    /// Pre-links a compiled component and instantiates it once, under
    /// `limits`, to check its handler: what [`Runtime::prepare`] does after
    /// compiling, and [`Runtime::prepare_sealed`] after loading an artifact.
    pub(crate) async fn link(
        &self,
        component: Component,
        digest: Digest,
        limits: &Limits,
    ) -> Result<PreparedLambda, LoadError> {
        let engine = &self.inner.engine;
        let component_type = component.component_type();
        // By a semver-compatible match, as the linker matches imports: a
        // handler of 0.2.0 is found by the name of 0.2.2, and the other way.
        let Some(export) = HANDLER_EXPORTS
            .into_iter()
            .find(|export| component.get_export_index(None, export).is_some())
        else {
            let mut found: Vec<&str> = component_type
                .exports(engine)
                .map(|(name, _)| name)
                .collect();
            found.sort_unstable();
            let found = if found.is_empty() {
                "none".to_owned()
            } else {
                found.join(", ")
            };
            return Err(LoadError::MissingExport {
                expected: HANDLER_EXPORTS.join("` or `"),
                found,
            });
        };
        let instance_pre = self.inner.linker.instantiate_pre(&component).map_err(|e| {
            LoadError::UnsupportedImport {
                detail: error_chain(&e),
            }
        })?;
        let handler =
            Handler::new(instance_pre, export).map_err(|e| LoadError::ExportMismatch {
                export: export.to_owned(),
                detail: error_chain(&e),
            })?;
        self.trial_instantiation(&handler, export, limits).await?;
        Ok(PreparedLambda {
            runtime: self.clone(),
            handler,
            relink: false,
            digest,
        })
    }
}

impl Runtime {
    /// Instantiates the component once, under `limits` (but within
    /// `max_startup`), without calling it: the handler's type is only
    /// checked against an instance, and a component whose start-up traps,
    /// breaches its limits or never ends is better refused at deploy.
    async fn trial_instantiation(
        &self,
        handler: &Handler,
        export: &str,
        limits: &Limits,
    ) -> Result<(), LoadError> {
        let limits = Limits {
            timeout: self.inner.max_startup,
            ..*limits
        };
        let kill = KillSwitch::new();
        let started = Instant::now();
        let log = LogSink::new(
            limits.max_log.bytes(),
            started,
            kill.clone(),
            Arc::default(),
        );
        let host: Arc<RecordingHost> = Arc::default();
        let journal = Journal::new(host.clone(), 1, Vec::new(), Arc::default());
        let sandbox = Sandbox::from(limits);
        let deadline = started + limits.timeout;
        let (mut store, _) = new_store(self, &sandbox, deadline, log, host, journal, &kill);
        let instance = match handler.instance_pre().instantiate_async(&mut store).await {
            Ok(instance) => instance,
            Err(_) if store.data().stopped == Some(Stop::Deadline) => {
                return Err(LoadError::SlowStartup {
                    limit: limits.timeout,
                });
            }
            Err(e) => return Err(start_up_failure(&e, store.data(), &limits)),
        };
        handler
            .check_exports(&mut store, &instance)
            .map_err(|e| LoadError::ExportMismatch {
                export: export.to_owned(),
                detail: error_chain(&e),
            })
    }
}

/// Why a start-up failed: the limit it breached, or the error itself.
fn start_up_failure(error: &wasmtime::Error, state: &HostState, limits: &Limits) -> LoadError {
    if let Some(detail) = state.limiter.breach(error) {
        return LoadError::LimitExceeded { detail };
    }
    if let (Some(Trap::OutOfFuel), Some(fuel)) = (error.downcast_ref::<Trap>(), limits.fuel) {
        let detail = format!("burnt all {fuel} units of fuel");
        return LoadError::LimitExceeded { detail };
    }
    LoadError::Instantiation(error_chain(error))
}

fn check_header(wasm: &[u8]) -> Result<(), LoadError> {
    if wasm.is_empty() {
        return Err(LoadError::Empty);
    }
    if !wasm.starts_with(b"\0asm") {
        return Err(LoadError::NotWasm);
    }
    // Bytes 4..8 are the version and layer: 1 and 0 for a core module.
    if wasm.get(4..8) == Some(&[1, 0, 0, 0]) {
        return Err(LoadError::CoreModule);
    }
    Ok(())
}

/// Compiles `wasm` on threads of its own.
///
/// Cranelift compiles a component's functions in parallel on rayon's pool;
/// on the global one, shared by every compile of the process, a small
/// lambda's functions would queue behind all of a large one's (a 15 MB
/// JavaScript component takes 32–38 s of CPU in a debug build), and its
/// first task with them. A pool per compile leaves the sharing of the cores to the
/// operating system, as between any other threads.
pub(crate) fn compile(engine: &Engine, wasm: &[u8]) -> Result<Component, LoadError> {
    let compile =
        || Component::from_binary(engine, wasm).map_err(|e| LoadError::Invalid(error_chain(&e)));
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("waft-compile-{i}"))
        .build()
    {
        Ok(pool) => pool.install(compile),
        // Without threads of its own, on the shared pool.
        Err(_) => compile(),
    }
}

/// An error and its causes on one line.
pub(crate) fn error_chain(error: &wasmtime::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        text.push_str(": ");
        text.push_str(&cause.to_string());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_told_apart() {
        assert!(matches!(check_header(b""), Err(LoadError::Empty)));
        assert!(matches!(
            check_header(b"\x7fELF\x02\x01"),
            Err(LoadError::NotWasm)
        ));
        assert!(matches!(
            check_header(b"\0asm\x01\0\0\0"),
            Err(LoadError::CoreModule)
        ));
        assert!(check_header(b"\0asm\x0d\0\x01\0").is_ok());
    }
}
