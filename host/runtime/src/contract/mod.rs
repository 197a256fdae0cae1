//! The versions of the `waft:lambda` contract (`wit/`), and the one place
//! `bindgen!` runs.
//!
//! A lambda exports the handler of one version. The host links every
//! version's imports side by side, so a component built against 0.1.0 keeps
//! deploying and running beside 0.2.0 ones, unchanged. The newest version is
//! the canonical one, [`current`]: the [`capabilities`](crate::capabilities)
//! implement its interfaces, and an earlier version's calls, tasks and
//! outcomes are converted to and from it in its own module here.
//!
//! Releasing a version is: its `bindgen!` in a module of its own, `current`
//! pointed at it, and the version it replaces turned into a converter like
//! [`v0_1`]. Nothing outside this module names a version.

pub(crate) mod v0_1;
pub(crate) mod v0_2;

/// The newest version, which the host implements; earlier ones convert to it.
pub(crate) use v0_2 as current;

use wasmtime::Store;
use wasmtime::component::{HasSelf, Instance, InstancePre, Linker};

use crate::run::HostState;

/// The handler exports Waft runs, newest first: a lambda exports one.
pub const HANDLER_EXPORTS: [&str; 2] = [current::HANDLER_EXPORT, v0_1::HANDLER_EXPORT];

/// A lambda's component pre-linked, typed by the version it implements.
#[derive(Clone)]
pub(crate) enum Handler {
    V0_1(v0_1::LambdaPre<HostState>),
    Current(current::LambdaPre<HostState>),
}

impl Handler {
    /// Types `instance_pre` by the handler it exports (`export`, one of
    /// [`HANDLER_EXPORTS`]); fails when the export's type does not match.
    pub(crate) fn new(
        instance_pre: InstancePre<HostState>,
        export: &str,
    ) -> wasmtime::Result<Self> {
        if export == v0_1::HANDLER_EXPORT {
            Ok(Self::V0_1(v0_1::LambdaPre::new(instance_pre)?))
        } else {
            Ok(Self::Current(current::LambdaPre::new(instance_pre)?))
        }
    }

    pub(crate) fn instance_pre(&self) -> &InstancePre<HostState> {
        match self {
            Self::V0_1(pre) => pre.instance_pre(),
            Self::Current(pre) => pre.instance_pre(),
        }
    }

    /// Checks that an instance's handler has the type its version says.
    pub(crate) fn check_exports(
        &self,
        store: &mut Store<HostState>,
        instance: &Instance,
    ) -> wasmtime::Result<()> {
        match self {
            Self::V0_1(_) => {
                v0_1::LambdaIndices::new(self.instance_pre())?.load(store, instance)?;
            }
            Self::Current(_) => {
                current::LambdaIndices::new(self.instance_pre())?.load(store, instance)?;
            }
        }
        Ok(())
    }

    /// Instantiates the component and runs `task` through its handler.
    /// With `relink`, links the imports afresh instead of using the
    /// pre-linked instance (what benchmarks compare against).
    pub(crate) async fn handle(
        &self,
        store: &mut Store<HostState>,
        task: current::Task,
        relink: Option<&Linker<HostState>>,
    ) -> wasmtime::Result<current::Outcome> {
        let component = self.instance_pre().component();
        match self {
            Self::V0_1(pre) => {
                let instance = match relink {
                    Some(linker) => {
                        v0_1::Lambda::instantiate_async(&mut *store, component, linker).await?
                    }
                    None => pre.instantiate_async(&mut *store).await?,
                };
                v0_1::handle(&instance, store, task).await
            }
            Self::Current(pre) => {
                let instance = match relink {
                    Some(linker) => {
                        current::Lambda::instantiate_async(&mut *store, component, linker).await?
                    }
                    None => pre.instantiate_async(&mut *store).await?,
                };
                current::handle(&instance, store, &task).await
            }
        }
    }
}

/// Links Waft's own interfaces, of every version, and `wasi:config`,
/// answered by a [`capabilities`](crate::capabilities) module like them.
/// (WASI and `wasi:http` come from their crates.)
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    fn state(state: &mut HostState) -> &mut HostState {
        state
    }
    current::Lambda::add_to_linker::<HostState, HasSelf<HostState>>(linker, state)?;
    v0_1::Lambda::add_to_linker::<HostState, HasSelf<HostState>>(linker, state)?;
    Ok(())
}
