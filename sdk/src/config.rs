//! A lambda's configuration: the variables its deploy set (`waft lambda
//! deploy … --env KEY=VALUE`) and its secrets (`waft secret set`), read
//! through the standard `wasi:config/store` interface.
//!
//! ```no_run
//! let region = waft_sdk::config::get("REGION").unwrap_or_else(|| "eu-west-1".into());
//! ```
//!
//! A lambda sees its own values only: a key it was not given is `None`,
//! whatever other lambdas hold.

use crate::bindings::wasi::config::store;

/// The value of `key`, if the lambda was given one.
pub fn get(key: &str) -> Option<String> {
    store::get(key).ok().flatten()
}

/// Every key and value the lambda was given, by key.
pub fn all() -> Vec<(String, String)> {
    let mut all = store::get_all().unwrap_or_default();
    all.sort();
    all
}
