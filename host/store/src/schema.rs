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
//!
//! The migrations are embedded in the binary ([`migrations!`] lists them),
//! each read as sqlx reads a migrations directory, so every database keeps
//! the versions, descriptions and checksums its `_sqlx_migrations` holds.

use sqlx::migrate::{Migrate, MigrateError, Migration, MigrationType, Migrator};
use sqlx::{Database, Pool, SqlStr};

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

/// The text of every migration of one backend (`"sqlite"`, `"postgres"`),
/// by file name, oldest first: the pairs of `migrations/`, one file of each
/// in each backend's directory. A new pair is added to this list; a test
/// holds it to both directories.
macro_rules! migrations {
    ($backend:literal) => {
        $crate::schema::migrations!(
            $backend:
            "0001_baseline.sql",
            "0002_live_index.sql",
            "0003_task_lambda_checked_per_batch.sql",
            "0004_final_attempt_in_task.sql",
            "0005_landings_wait_for_polls.sql",
        )
    };
    ($backend:literal: $($file:literal),+ $(,)?) => {
        [$((
            $file,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/", $backend, "/", $file)),
        )),+]
    };
}
pub(crate) use migrations;

/// The migrator of migration files given as `(file name, text)`, each read
/// as sqlx reads a migrations directory: `<version>_<description>.sql`, the
/// description's underscores read as spaces, a text that starts with
/// `-- no-transaction` run outside a transaction, and the text's SHA-384 as
/// its checksum.
pub(crate) fn migrator(files: &[(&'static str, &'static str)]) -> Migrator {
    let migrations = files
        .iter()
        .map(|&(file, sql)| {
            let (version, name) = file
                .split_once('_')
                .filter(|(_, name)| name.ends_with(".sql"))
                .unwrap_or_else(|| panic!("migration {file:?} is not <version>_<description>.sql"));
            let version = version
                .parse()
                .unwrap_or_else(|_| panic!("migration {file:?} has no version"));
            let kind = MigrationType::from_filename(name);
            let description = name.trim_end_matches(kind.suffix()).replace('_', " ");
            let no_tx = sql.starts_with("-- no-transaction");
            Migration::new(
                version,
                description.into(),
                kind,
                SqlStr::from_static(sql),
                no_tx,
            )
        })
        .collect();
    Migrator::with_migrations(migrations)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use sqlx::migrate::Migrator;

    /// Each backend carries exactly the migrations of its directory, each
    /// as sqlx reads it from there: the same version, description, kind and
    /// checksum (of the text: the checksum databases migrated so far hold),
    /// so a file added to a directory but not to [`migrations!`] fails here.
    #[tokio::test]
    async fn the_embedded_migrations_are_the_directories() {
        let backends = [
            ("sqlite", &crate::sqlite::MIGRATOR),
            ("postgres", &crate::postgres::MIGRATOR),
        ];
        for (backend, embedded) in backends {
            let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(backend);
            let read = Migrator::new(dir.as_path()).await.unwrap();
            let facts = |migrator: &Migrator| -> Vec<_> {
                migrator
                    .iter()
                    .map(|m| {
                        let checksum = hex::encode(&m.checksum);
                        let kind = m.migration_type;
                        (
                            m.version,
                            m.description.to_string(),
                            kind,
                            m.no_tx,
                            checksum,
                        )
                    })
                    .collect()
            };
            assert!(!read.migrations.is_empty(), "{backend}: no migrations read");
            assert_eq!(
                facts(embedded),
                facts(&read),
                "{backend}: the list of `migrations!` (left) against {} (right)",
                dir.display()
            );
        }
    }
}
