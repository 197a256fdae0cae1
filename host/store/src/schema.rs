//! Migrating the schema at start, and refusing a schema this binary cannot
//! take: one a newer release migrated, or one a pre-release build made.
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
//!
//! The schema starts at release 0.1.0 with one migration per backend (the
//! baseline, version 1). A database made by a build before that release
//! holds a version 1 of other text: sqlx would refuse it with a bare
//! checksum or version error, so it is recognized by that first migration
//! and refused with what to do instead. No upgrade path leads from it.

use sqlx::migrate::{Migrate, MigrateError, Migrator};
use sqlx::{Database, Pool};

use crate::StoreError;

/// Runs `migrator` on `pool`, telling apart a database newer than
/// `migrator` and one a pre-release build made (`place` names it, and
/// `remedy` says what to do with it) from other failures.
pub(crate) async fn migrate<DB>(
    pool: &Pool<DB>,
    migrator: &Migrator,
    remedy: impl FnOnce() -> String,
) -> Result<(), StoreError>
where
    DB: Database,
    DB::Connection: Migrate,
{
    let result = migrator.run(pool).await;
    if let Err(MigrateError::VersionMissing(_) | MigrateError::VersionMismatch(_)) = &result {
        let mut connection = pool.acquire().await?;
        let applied = connection
            .list_applied_migrations(&migrator.table_name)
            .await?;
        let first = migrator.iter().find(|m| m.version == 1);
        let pre_release = applied
            .iter()
            .any(|a| a.version == 1 && first.is_some_and(|m| m.checksum != a.checksum));
        if pre_release {
            return Err(StoreError::PreRelease {
                applied: applied.iter().map(|a| a.version).max().unwrap_or(1),
                release: env!("CARGO_PKG_VERSION"),
                remedy: remedy(),
            });
        }
    }
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
