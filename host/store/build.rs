//! Rebuilds the store when a migration changes: `sqlx::migrate!` embeds
//! the files of `migrations/` at compile time, and a stable compiler
//! cannot tell cargo that the macro read them.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
