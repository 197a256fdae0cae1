//! Compiled components that travel: compiled once at deploy, loaded by
//! every executor instead of compiled again.
//!
//! Compiling a large component (a Python or JavaScript lambda: an
//! interpreter of some 15 MB) takes seconds of CPU and hundreds of
//! megabytes; loading its compiled artifact takes milliseconds. So the
//! Frontend compiles a component when it is deployed and stores the
//! artifact beside it, and executors load that.
//!
//! # Trust
//!
//! Loading an artifact maps its bytes as native code: whoever can write
//! those bytes runs code in the executor, outside the sandbox. The store is
//! not trusted that far (a database account, a backup restored, a row
//! copied), so an artifact is **sealed**: an HMAC-SHA256 under the
//! installation's artifact key (derived from its secrets key) over the
//! engine's fingerprint, the component's digest and the artifact's bytes.
//! [`Runtime::prepare_sealed`] checks the seal before wasmtime sees a byte,
//! and refuses an artifact made for another engine (a mixed-version
//! rollout) or another component. Only a process holding the key can make
//! a seal: the installation's Frontends and executors, which hold it to
//! seal and open secrets already, and are trusted with native code anyway.
//! A process without the key compiles locally.
//!
//! The fingerprint is a SHA-256 of wasmtime's
//! `Engine::precompile_compatibility_hash` (wasmtime's version, the target,
//! the compiler's settings, fuel on or off): two engines that could load
//! each other's artifacts have the same fingerprint.

use std::fmt;
use std::hash::Hasher;

use ring::hmac;
use sha2::{Digest as _, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use waft_core::Limits;
use waft_core::model::Artifact;

use crate::error::LoadError;
use crate::lambda::Digest;
use crate::{PreparedLambda, Runtime};

/// The key that seals artifacts: 32 bytes every process of an installation
/// derives from the same secret.
pub struct ArtifactKey(hmac::Key);

impl ArtifactKey {
    /// The key for `secret` (the installation's secrets key, or any 32
    /// bytes its processes share).
    pub fn new(secret: &[u8]) -> Self {
        // A key of its own, so a seal never doubles as anything the secrets
        // key does.
        let derived = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, secret),
            b"waft artifact key v1",
        );
        Self(hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref()))
    }

    pub(crate) fn tag(&self, engine: &str, digest: &Digest, bytes: &[u8]) -> hmac::Tag {
        let mut context = hmac::Context::with_key(&self.0);
        context.update(&(engine.len() as u64).to_le_bytes());
        context.update(engine.as_bytes());
        context.update(digest.to_string().as_bytes());
        context.update(bytes);
        context.sign()
    }

    fn verify(&self, artifact: &Artifact, digest: &Digest) -> bool {
        self.verifies(&artifact.engine, digest, &artifact.bytes, &artifact.seal)
    }

    /// Whether `seal` is this key's over `engine`, `digest` and `bytes`.
    pub(crate) fn verifies(
        &self,
        engine: &str,
        digest: &Digest,
        bytes: &[u8],
        seal: &[u8],
    ) -> bool {
        let expected = self.tag(engine, digest, bytes);
        let expected = expected.as_ref();
        // In constant time: how far a forged seal got tells nothing.
        expected.len() == seal.len()
            && expected
                .iter()
                .zip(seal)
                .fold(0u8, |differ, (a, b)| differ | (a ^ b))
                == 0
    }
}

impl fmt::Debug for ArtifactKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArtifactKey(..)")
    }
}

impl Runtime {
    /// The fingerprint of this runtime's engine: artifacts load only into
    /// an engine with the same one.
    pub fn fingerprint(&self) -> &str {
        &self.inner.fingerprint
    }

    /// Prepares a lambda from the artifact its Frontend compiled, after
    /// checking its seal under `key` for the component `digest` and this
    /// engine. A refused artifact is an error, never loaded: the caller
    /// compiles the component instead.
    pub async fn prepare_sealed(
        &self,
        digest: Digest,
        artifact: Artifact,
        key: &ArtifactKey,
    ) -> Result<PreparedLambda, LoadError> {
        self.prepare_sealed_with_limits(digest, artifact, key, &Limits::default())
            .await
    }

    /// [`Runtime::prepare_sealed`], its trial instantiation under `limits`
    /// (see [`Runtime::prepare_with_limits`]).
    pub async fn prepare_sealed_with_limits(
        &self,
        digest: Digest,
        artifact: Artifact,
        key: &ArtifactKey,
        limits: &Limits,
    ) -> Result<PreparedLambda, LoadError> {
        if artifact.engine != self.fingerprint() {
            return Err(LoadError::ArtifactRefused(format!(
                "compiled by an engine of fingerprint {}, this one is {}",
                artifact.engine,
                self.fingerprint()
            )));
        }
        if !key.verify(&artifact, &digest) {
            return Err(LoadError::ArtifactRefused(
                "its seal does not verify under this installation's key".into(),
            ));
        }
        let engine = self.inner.engine.clone();
        let component = tokio::task::spawn_blocking(move || deserialize(&engine, artifact.bytes))
            .await
            .map_err(|e| LoadError::CompilerStopped(e.to_string()))?
            .map_err(|e| LoadError::ArtifactRefused(crate::lambda::error_chain(&e)))?;
        self.link(component, digest, limits).await
    }
}

impl PreparedLambda {
    /// The lambda's compiled code, sealed under `key` for this engine.
    pub fn seal(&self, key: &ArtifactKey) -> Result<Artifact, LoadError> {
        let bytes = self
            .handler
            .instance_pre()
            .component()
            .serialize()
            .map_err(|e| LoadError::Cache(std::io::Error::other(e.to_string())))?;
        let engine = self.runtime.fingerprint().to_owned();
        let seal = key.tag(&engine, &self.digest(), &bytes).as_ref().to_vec();
        Ok(Artifact {
            engine,
            bytes,
            seal,
        })
    }
}

/// The fingerprint of `engine`: hex SHA-256 of its compatibility hash.
pub(crate) fn fingerprint(engine: &Engine) -> String {
    use std::hash::Hash;
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..16])
}

/// Feeds what `Hash` writes into SHA-256: a fingerprint that does not
/// depend on std's hasher, which may change between Rust releases.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn finish(&self) -> u64 {
        unreachable!("only the whole digest is read")
    }
}

#[allow(
    unsafe_code,
    reason = "deserializing maps native code. Callers pass only bytes whose seal \
              verified under the installation's key, for this engine's fingerprint: \
              bytes a Frontend of this installation compiled with `Component::serialize`"
)]
fn deserialize(engine: &Engine, bytes: Vec<u8>) -> wasmtime::Result<Component> {
    // SAFETY: see the reason above.
    unsafe { Component::deserialize(engine, bytes) }
}
