//! Compiled components on disk, keyed by content hash and engine.
//!
//! Compiling a component takes tens of milliseconds; loading a compiled
//! artifact takes a fraction of one. An artifact is only valid for the
//! engine settings it was compiled with, so the key holds both the hash of
//! the `.wasm` and the engine's fingerprint (its compatibility settings:
//! wasmtime version, target, fuel on/off...). A stale or corrupt file is
//! recompiled.
//!
//! Loading an artifact runs its bytes as native code, so whoever can write
//! the directory could run code in the process. Two checks keep the cache
//! within the runtime's user: the directory must belong to the process's
//! user and be writable by no one else (checked when the runtime starts;
//! Linux), and every file is sealed as the store's artifacts are
//! (`artifact.rs`): an HMAC-SHA256 over the engine's fingerprint, the
//! component's digest and the bytes, under a key of the directory's
//! (`seal.key`, 32 random bytes, readable by its owner alone). A file whose
//! seal does not verify (corrupt, or another component's artifact put in
//! its place) is logged and compiled again, never loaded.

use std::io::Write;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use crate::artifact::ArtifactKey;
use crate::error::{LoadError, RuntimeError};
use crate::lambda::Digest;

pub(crate) struct ArtifactCache {
    dir: PathBuf,
    engine_tag: String,
    key: ArtifactKey,
}

/// The seal's bytes, before the artifact's in a cached file.
const SEAL_LEN: usize = 32;

impl ArtifactCache {
    pub(crate) fn open(dir: PathBuf, engine: &Engine) -> Result<Self, RuntimeError> {
        let failed = |source| RuntimeError::Cache {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(failed)?;
        trusted(&dir).map_err(failed)?;
        let key = key(&dir.join("seal.key")).map_err(failed)?;
        Ok(Self {
            engine_tag: crate::artifact::fingerprint(engine),
            dir,
            key,
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
            match self.load(engine, &path, digest) {
                Ok(component) => return Ok(component),
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "discarding a cached compiled artifact, compiling it again");
                }
            }
        }
        let component = crate::lambda::compile(engine, wasm)?;
        let artifact = component
            .serialize()
            .map_err(|e| LoadError::Cache(std::io::Error::other(e.to_string())))?;
        let seal = self.key.tag(&self.engine_tag, digest, &artifact);
        let mut sealed = Vec::with_capacity(SEAL_LEN + artifact.len());
        sealed.extend_from_slice(seal.as_ref());
        sealed.extend_from_slice(&artifact);
        write_atomically(&path, &sealed).map_err(LoadError::Cache)?;
        Ok(component)
    }

    /// The artifact at `path`, once its seal verifies.
    fn load(&self, engine: &Engine, path: &Path, digest: &Digest) -> wasmtime::Result<Component> {
        // Read into memory rather than map the file: a mapped file truncated
        // by someone else would crash the process with SIGBUS.
        let mut bytes = std::fs::read(path)?;
        if bytes.len() < SEAL_LEN
            || !self.key.verifies(
                &self.engine_tag,
                digest,
                &bytes[SEAL_LEN..],
                &bytes[..SEAL_LEN],
            )
        {
            wasmtime::bail!("its seal does not verify under the cache's key");
        }
        bytes.drain(..SEAL_LEN);
        deserialize(engine, bytes)
    }
}

#[allow(
    unsafe_code,
    reason = "deserializing runs native code. The bytes' seal verified under the \
              cache's key, which only this runtime's user can read: they were \
              written by `load_or_compile` for this component and engine; wasmtime \
              checks the header against the engine"
)]
fn deserialize(engine: &Engine, bytes: Vec<u8>) -> wasmtime::Result<Component> {
    // SAFETY: see the reason above: the artifact was produced by
    // `Component::serialize` of a compatible engine.
    unsafe { Component::deserialize(engine, bytes) }
}

/// Refuses a directory owned by another user or writable by group or
/// others: whoever can write it could put native code there.
#[cfg(target_os = "linux")]
fn trusted(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir)?;
    let user = rustix::process::geteuid().as_raw();
    if meta.uid() != user {
        return Err(std::io::Error::other(format!(
            "the compile cache belongs to user {}, not this process's ({user}): \
             whoever owns it could run code here; use a directory of this user's",
            meta.uid()
        )));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "the compile cache is writable by others (mode {:o}), who could run code \
             here: chmod go-w {}",
            meta.mode() & 0o7777,
            dir.display()
        )));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn trusted(_: &Path) -> std::io::Result<()> {
    Ok(())
}

/// The cache's sealing key at `path`, made on first use: 32 bytes of the
/// operating system's randomness, readable by the owner alone.
fn key(path: &Path) -> std::io::Result<ArtifactKey> {
    match std::fs::read(path) {
        Ok(bytes) if !bytes.is_empty() => return Ok(ArtifactKey::new(&bytes)),
        Ok(_) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(error),
    }
    let mut secret = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret)
        .map_err(|_| std::io::Error::other("the operating system gave no random bytes"))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(&secret)?;
    // Another process may have made one meanwhile: the first one stays.
    match file.persist_noclobber(path) {
        Ok(_) => Ok(ArtifactKey::new(&secret)),
        Err(_) => {
            let bytes = std::fs::read(path)?;
            Ok(ArtifactKey::new(&bytes))
        }
    }
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
