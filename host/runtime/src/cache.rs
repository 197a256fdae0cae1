//! Compiled components on disk, keyed by content hash and engine.
//!
//! Compiling a component takes tens of milliseconds; loading a compiled
//! artifact takes a fraction of one. An artifact is only valid for the
//! engine settings it was compiled with, so the key holds both the hash of
//! the `.wasm` and the engine's fingerprint (its compatibility settings:
//! wasmtime version, target, fuel on/off...). A stale or corrupt file is
//! recompiled. (Artifacts shared between processes through the store are
//! sealed instead: see `artifact.rs`.)

use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::{LoadError, RuntimeError};
use crate::lambda::Digest;

pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_tag: String,
}

impl ArtifactCache {
    pub(crate) fn open(dir: PathBuf, engine: &Engine) -> Result<Self, RuntimeError> {
        std::fs::create_dir_all(&dir).map_err(|source| RuntimeError::Cache {
            path: dir.clone(),
            source,
        })?;
        Ok(Self {
            dir,
            engine_tag: crate::artifact::fingerprint(engine),
        })
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{digest}-{}.cwasm", self.engine_tag))
    }

    /// The compiled component for `wasm`, from the cache or freshly compiled
    /// (and then cached).
    pub(crate) fn load_or_compile(
        &self,
        engine: &Engine,
        wasm: &[u8],
        digest: &Digest,
    ) -> Result<Component, LoadError> {
        let path = self.path(digest);
        if path.exists() {
            match deserialize(engine, &path) {
                Ok(component) => return Ok(component),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "discarding an unreadable compiled artifact");
                }
            }
        }
        let component = crate::lambda::compile(engine, wasm)?;
        let artifact = component
            .serialize()
            .map_err(|e| LoadError::Cache(std::io::Error::other(e.to_string())))?;
        write_atomically(&path, &artifact).map_err(LoadError::Cache)?;
        Ok(component)
    }
}

#[allow(
    unsafe_code,
    reason = "deserializing runs native code. The file is only ever written by \
              `load_or_compile` into a directory the operator gave the runtime, \
              under a name that holds the hash of its source and of the engine's \
              settings; wasmtime checks the header against the engine"
)]
fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // Read into memory rather than map the file: a mapped file truncated by
    // someone else would crash the process with SIGBUS.
    let bytes = std::fs::read(path)?;
    // SAFETY: see the reason above: the artifact was produced by
    // `Component::serialize` of a compatible engine.
    unsafe { Component::deserialize(engine, bytes) }
}

/// Writes through a temporary file and a rename, so a reader sees either no
/// artifact or a whole one, even with several processes sharing the cache.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}
