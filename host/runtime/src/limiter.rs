//! What one execution's store may make the host hold, besides time.
//!
//! A lambda spends host memory in four ways, each bounded here for the
//! whole store (one instance of one component), whatever allocator carves
//! its instance:
//!
//! - linear memory: all its memories together, against `max_memory` —
//!   not each on its own, or a component of many memories would multiply
//!   its budget;
//! - tables: all their elements together, against [`MAX_TABLE_ELEMENTS`];
//!   a table that declares no maximum could otherwise grow to 2³² elements
//!   of host memory;
//! - memories, tables and core instances, counted against
//!   [`MAX_MEMORIES`], [`MAX_TABLES`] and [`MAX_INSTANCES`] (each has a
//!   fixed host cost, and the pooling allocator has the same bounds);
//! - host resources (`wasi:http` fields, streams, pollables…), live at
//!   once, against [`MAX_HOST_RESOURCES`].
//!
//! A growth refused is refused to the guest (`memory.grow` and
//! `table.grow` answer -1) and remembered: when the instance then traps, as
//! a guest that cannot allocate does, the execution is reported as a limit
//! breach naming the limit rather than as an anonymous crash.

use std::fmt;

use waft_core::ByteSize;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTableError;

/// Memories a store may define: a lambda's module and, at most, one
/// adapter's.
pub(crate) const MAX_MEMORIES: u32 = 2;
/// Tables a store may define: a module's own and the small ones of the
/// shim modules the component tooling adds.
pub(crate) const MAX_TABLES: u32 = 8;
/// Core instances a store may create: a component's module and its shims.
pub(crate) const MAX_INSTANCES: u32 = 16;
/// Elements of all a store's tables together. A table element is a pointer
/// of host memory (8 bytes), so 100,000 of them are under 1 MiB; the
/// CPython and JavaScript runtimes use a few thousand.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Host resources a store may hold at once: entries of its
/// `ResourceTable` (each a few hundred bytes of host memory with what it
/// owns), and the component-model handles that name them. A lambda uses a
/// handful per outbound request.
pub(crate) const MAX_HOST_RESOURCES: usize = 10_000;

/// Which budget a store ran out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Breach {
    Memory,
    Tables,
}

/// The [`ResourceLimiter`] of one store.
pub(crate) struct StoreLimiter {
    max_memory: ByteSize,
    /// All memories' bytes together, as granted.
    memory: usize,
    peak: usize,
    /// All tables' elements together, as granted.
    table_elements: usize,
    refused: Option<Breach>,
}

impl StoreLimiter {
    pub(crate) fn new(max_memory: ByteSize) -> Self {
        Self {
            max_memory,
            memory: 0,
            peak: 0,
            table_elements: 0,
            refused: None,
        }
    }

    /// The most linear memory the store's memories held together.
    pub(crate) fn peak(&self) -> usize {
        self.peak
    }

    /// The limit an instance that failed with `error` breached, if any,
    /// said for its owner: a growth refused earlier, a count or the host
    /// resources exhausted now.
    pub(crate) fn breach(&self, error: &wasmtime::Error) -> Option<String> {
        match self.refused {
            Some(Breach::Memory) => {
                return Some(format!(
                    "tried to grow memory beyond {} (all its memories together)",
                    self.max_memory
                ));
            }
            Some(Breach::Tables) => {
                return Some(format!(
                    "tried to grow its tables beyond {MAX_TABLE_ELEMENTS} elements \
                     (all its tables together)"
                ));
            }
            None => {}
        }
        let resources_exhausted = error.chain().any(|cause| {
            matches!(
                cause.downcast_ref::<ResourceTableError>(),
                Some(ResourceTableError::Full)
            ) || cause.to_string().contains("store handle limit exceeded")
        });
        if resources_exhausted {
            return Some(format!(
                "held more than {MAX_HOST_RESOURCES} host resources at once \
                 (wasi:http fields, streams, pollables…)"
            ));
        }
        error.chain().find_map(|cause| {
            let message = cause.to_string();
            let (_, rest) = message.split_once("resource limit exceeded: ")?;
            let (what, limit) = if rest.starts_with("memory") {
                ("memories", MAX_MEMORIES)
            } else if rest.starts_with("table") {
                ("tables", MAX_TABLES)
            } else {
                ("module instances", MAX_INSTANCES)
            };
            Some(format!("defines more than {limit} {what}"))
        })
    }
}

impl fmt::Debug for StoreLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreLimiter")
            .field("memory", &self.memory)
            .field("table_elements", &self.table_elements)
            .finish_non_exhaustive()
    }
}

impl ResourceLimiter for StoreLimiter {
    /// Called for each memory when it is created (from 0) and when it
    /// grows; a growth that fails afterwards stays counted, which errs on
    /// the side of the host.
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self.memory.saturating_sub(current).saturating_add(desired);
        if total > self.max_memory.as_usize() || maximum.is_some_and(|max| desired > max) {
            self.refused = Some(Breach::Memory);
            return Ok(false);
        }
        self.memory = total;
        self.peak = self.peak.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let total = self
            .table_elements
            .saturating_sub(current)
            .saturating_add(desired);
        if total > MAX_TABLE_ELEMENTS || maximum.is_some_and(|max| desired > max) {
            self.refused = Some(Breach::Tables);
            return Ok(false);
        }
        self.table_elements = total;
        Ok(true)
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES as usize
    }

    fn tables(&self) -> usize {
        MAX_TABLES as usize
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_count_together() {
        let mut limiter = StoreLimiter::new(ByteSize::mib(3));
        let mib = 1 << 20;
        assert!(limiter.memory_growing(0, 2 * mib, None).unwrap());
        assert!(limiter.memory_growing(0, mib, None).unwrap());
        // A third MiB for either memory is over the sum.
        assert!(!limiter.memory_growing(mib, 2 * mib, None).unwrap());
        assert_eq!(limiter.peak(), 3 * mib);
        let detail = limiter.breach(&wasmtime::Error::msg("trap")).unwrap();
        assert!(
            detail.contains("3MiB") || detail.contains("3 MiB"),
            "{detail}"
        );
    }

    #[test]
    fn tables_count_together() {
        let mut limiter = StoreLimiter::new(ByteSize::mib(1));
        assert!(
            limiter
                .table_growing(0, MAX_TABLE_ELEMENTS - 10, None)
                .unwrap()
        );
        assert!(limiter.table_growing(0, 10, None).unwrap());
        assert!(!limiter.table_growing(10, 11, None).unwrap());
        let detail = limiter.breach(&wasmtime::Error::msg("trap")).unwrap();
        assert!(detail.contains("tables"), "{detail}");
    }

    #[test]
    fn a_growth_past_a_declared_maximum_is_refused() {
        let mut limiter = StoreLimiter::new(ByteSize::mib(1));
        assert!(!limiter.table_growing(0, 11, Some(10)).unwrap());
    }

    #[test]
    fn counts_and_resources_are_named() {
        let limiter = StoreLimiter::new(ByteSize::mib(1));
        let counted = wasmtime::Error::msg("resource limit exceeded: memory count too high at 3");
        assert_eq!(
            limiter.breach(&counted).unwrap(),
            format!("defines more than {MAX_MEMORIES} memories")
        );
        let full = wasmtime::Error::new(ResourceTableError::Full).context("calling new");
        assert!(limiter.breach(&full).unwrap().contains("host resources"));
        assert_eq!(limiter.breach(&wasmtime::Error::msg("unreachable")), None);
    }
}
