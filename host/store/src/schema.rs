//! Migrating the schema at start, and refusing a schema newer than this
//! binary knows.
//!
//! Every process that opens the store (`waft dev`; the Frontend, Store
//! Consumer and HSC of `waft serve`) runs the migrations it carries, so the
//! first new binary to start migrates the database, and the others find it
//! done. Migrations are additive (new tables, new columns with defaults,
//! new indexes; a new state is allowed by the checks before any binary
//! writes it), so processes of the previous release that are still running
//! keep working on the migrated schema during a rolling upgrade, and read
//! what the new release writes leniently (see `waft_core::grants`).
//!
//! A binary that *starts* on a database a newer release has migrated stops
//! with a message saying so, instead of running: it cannot know what the
//! newer migrations mean, and starting is the one moment it can refuse
//! without leaving work half done. Rolling back a release therefore means
//! running a binary at least as new as the database (or restoring the
//! database from before the upgrade): docs/upgrades.md.

use sqlx::migrate::{MigrateError, Migrator};

use crate::StoreError;

/// The result of `migrator.run(...)`, with a database newer than
/// `migrator` told apart from other failures.
pub(crate) fn migrated(
    result: Result<(), MigrateError>,
    migrator: &Migrator,
) -> Result<(), StoreError> {
    match result {
        Err(MigrateError::VersionMissing(applied)) if applied > newest(migrator) => {
            Err(StoreError::SchemaNewer {
                applied,
                known: newest(migrator),
            })
        }
        other => other.map_err(StoreError::from),
    }
}

/// The newest migration `migrator` carries.
fn newest(migrator: &Migrator) -> i64 {
    migrator.iter().map(|m| m.version).max().unwrap_or(0)
}
