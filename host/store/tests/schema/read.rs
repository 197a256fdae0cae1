//! Reading a migrated schema back from each database's catalog: its
//! tables, columns with their defaults, keys, checks, indexes, triggers and
//! views, and every row.

use sqlx::postgres::PgRow;
use sqlx::{PgPool, Row, SqlitePool};

use crate::shape::{
    Column, ForeignKey, Index, Schema, Table, normalize, parenthesized, sqlite_predicate,
};

/// SQLite's schema, from `sqlite_master` and the `pragma_*` functions.
pub async fn sqlite(pool: &SqlitePool) -> Schema {
    let tables: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut schema = Schema::default();
    for (name, sql) in tables {
        let mut table = Table {
            checks: sqlite_checks(&sql),
            ..Table::default()
        };
        sqlite_columns(pool, &name, &mut table).await;
        sqlite_indexes(pool, &name, &mut table).await;
        sqlite_foreign_keys(pool, &name, &mut table).await;
        let rows = sqlite_rows(pool, &name, &table.order).await;
        schema.rows.insert(name.clone(), rows);
        schema.tables.insert(name, table);
    }
    let objects: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT type, name, tbl_name FROM sqlite_master WHERE type IN ('trigger', 'view')",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for (kind, name, table) in objects {
        if kind == "trigger" {
            schema.triggers.insert(name, table);
        } else {
            schema.views.insert(name);
        }
    }
    schema
}

/// Every row of `table`, each as its values quoted and joined, in order.
async fn sqlite_rows(pool: &SqlitePool, table: &str, columns: &[String]) -> Vec<String> {
    let values = columns
        .iter()
        .map(|c| format!("quote(\"{c}\")"))
        .collect::<Vec<_>>()
        .join(" || ', ' || ");
    let sql = format!("SELECT {values} FROM \"{table}\" ORDER BY 1");
    let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_all(pool)
        .await
        .unwrap();
    rows.into_iter().map(|(row,)| row).collect()
}

/// The `CHECK (...)` constraints of a `CREATE TABLE` statement.
fn sqlite_checks(create: &str) -> std::collections::BTreeSet<String> {
    let upper = create.to_uppercase();
    upper
        .match_indices("CHECK")
        .map(|(at, _)| {
            let open = at + upper[at..].find('(').expect("CHECK (");
            normalize(parenthesized(create, open))
        })
        .collect()
}

async fn sqlite_columns(pool: &SqlitePool, name: &str, table: &mut Table) {
    let columns: Vec<(String, String, bool, Option<String>, i64)> = sqlx::query_as(
        "SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_xinfo($1) ORDER BY cid",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap();
    let mut key: Vec<(i64, String)> = Vec::new();
    for (column, ty, not_null, default, pk) in columns {
        if pk > 0 {
            key.push((pk, column.clone()));
        }
        let nullable = !not_null && pk == 0;
        table.order.push(column.clone());
        table.columns.insert(
            column,
            Column {
                ty,
                nullable,
                default,
            },
        );
    }
    key.sort();
    table.primary_key = key.into_iter().map(|(_, column)| column).collect();
}

async fn sqlite_indexes(pool: &SqlitePool, name: &str, table: &mut Table) {
    let indexes: Vec<(String, bool, String, Option<String>)> = sqlx::query_as(
        "SELECT l.name, l.\"unique\", l.origin, m.sql FROM pragma_index_list($1) l \
         LEFT JOIN sqlite_master m ON m.type = 'index' AND m.name = l.name",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap();
    for (index, unique, origin, sql) in indexes {
        let columns: Vec<(String,)> =
            sqlx::query_as("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                .bind(&index)
                .fetch_all(pool)
                .await
                .unwrap();
        let columns = columns.into_iter().map(|(c,)| c).collect();
        match origin.as_str() {
            "u" => {
                table.unique.insert(columns);
            }
            "c" => {
                let sql = sql.expect("a created index has its statement");
                let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
                let predicate = sql
                    .to_uppercase()
                    .find(" WHERE ")
                    .map(|at| sqlite_predicate(&sql[at + " WHERE ".len()..]));
                let index_shape = Index {
                    unique,
                    columns,
                    predicate,
                };
                table.indexes.insert(index, index_shape);
            }
            _ => {} // the primary key's, read from the columns
        }
    }
}

async fn sqlite_foreign_keys(pool: &SqlitePool, name: &str, table: &mut Table) {
    let rows: Vec<(i64, String, String, String, String, String, String)> = sqlx::query_as(
        "SELECT id, \"table\", \"from\", \"to\", on_delete, on_update, \"match\" \
         FROM pragma_foreign_key_list($1) ORDER BY id, seq",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap();
    let mut keys: std::collections::BTreeMap<i64, ForeignKey> = Default::default();
    for (id, references, from, to, on_delete, on_update, matching) in rows {
        // Neither is ever set: a key that sets one differs from Postgres's.
        assert_eq!((&*on_update, &*matching), ("NO ACTION", "NONE"), "{name}");
        let key = keys.entry(id).or_insert_with(|| ForeignKey {
            columns: Vec::new(),
            references,
            referenced: Vec::new(),
            on_delete,
        });
        key.columns.push(from);
        key.referenced.push(to);
    }
    table.foreign_keys = keys.into_values().collect();
}

/// Postgres's schema (the connection's current one), from its catalog.
pub async fn postgres(pool: &PgPool) -> Schema {
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
         AND table_name <> '_sqlx_migrations'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut schema = Schema::default();
    for (name,) in tables {
        let mut table = Table::default();
        postgres_columns(pool, &name, &mut table).await;
        postgres_constraints(pool, &name, &mut table).await;
        postgres_indexes(pool, &name, &mut table).await;
        let sql = format!("SELECT row_to_json(t)::text FROM \"{name}\" t ORDER BY 1");
        let rows: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap();
        let rows = rows.into_iter().map(|(row,)| row).collect();
        schema.rows.insert(name.clone(), rows);
        schema.tables.insert(name, table);
    }
    postgres_objects(pool, &mut schema).await;
    schema
}

/// The schema's triggers and views.
async fn postgres_objects(pool: &PgPool, schema: &mut Schema) {
    let triggers: Vec<(String, String)> = sqlx::query_as(
        "SELECT t.tgname::text, c.relname::text FROM pg_trigger t \
         JOIN pg_class c ON c.oid = t.tgrelid \
         WHERE NOT t.tgisinternal AND c.relnamespace = current_schema()::regnamespace",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    schema.triggers.extend(triggers);
    let views: Vec<(String,)> = sqlx::query_as(
        "SELECT c.relname::text FROM pg_class c \
         WHERE c.relkind IN ('v', 'm') AND c.relnamespace = current_schema()::regnamespace",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    schema.views.extend(views.into_iter().map(|(name,)| name));
}

async fn postgres_columns(pool: &PgPool, name: &str, table: &mut Table) {
    let columns: Vec<(String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text, is_nullable::text, column_default::text \
         FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
    )
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap();
    for (column, ty, nullable, default) in columns {
        let nullable = nullable == "YES";
        table.order.push(column.clone());
        table.columns.insert(
            column,
            Column {
                ty,
                nullable,
                default,
            },
        );
    }
}

/// The names of the columns `numbers` of table `relation`, in order.
const COLUMN_NAMES: &str = "ARRAY(SELECT a.attname::text FROM unnest({numbers}) WITH ORDINALITY k(n, o) \
     JOIN pg_attribute a ON a.attrelid = {relation} AND a.attnum = k.n ORDER BY k.o)";

fn column_names(numbers: &str, relation: &str) -> String {
    COLUMN_NAMES
        .replace("{numbers}", numbers)
        .replace("{relation}", relation)
}

/// A row of `pg_constraint`, its column numbers as names.
struct Constraint {
    kind: String,
    definition: String,
    columns: Vec<String>,
    references: String,
    referenced: Vec<String>,
    on_delete: String,
}

impl sqlx::FromRow<'_, PgRow> for Constraint {
    fn from_row(row: &PgRow) -> sqlx::Result<Self> {
        Ok(Constraint {
            kind: row.try_get("kind")?,
            definition: row.try_get("definition")?,
            columns: row.try_get("columns")?,
            references: row.try_get("references")?,
            referenced: row.try_get("referenced")?,
            on_delete: row.try_get("on_delete")?,
        })
    }
}

async fn postgres_constraints(pool: &PgPool, name: &str, table: &mut Table) {
    let sql = format!(
        "SELECT c.contype::text AS kind, pg_get_constraintdef(c.oid) AS definition, \
         {} AS columns, COALESCE(c.confrelid::regclass::text, '') AS \"references\", \
         {} AS referenced, c.confdeltype::text AS on_delete \
         FROM pg_constraint c WHERE c.conrelid = to_regclass($1)",
        column_names("c.conkey", "c.conrelid"),
        column_names("c.confkey", "c.confrelid"),
    );
    let constraints: Vec<Constraint> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(name)
        .fetch_all(pool)
        .await
        .unwrap();
    for Constraint {
        kind,
        definition,
        columns,
        references,
        referenced,
        on_delete,
    } in constraints
    {
        match kind.as_str() {
            "p" => table.primary_key = columns,
            "u" => {
                table.unique.insert(columns);
            }
            "c" => {
                let check = definition.strip_prefix("CHECK ").expect("CHECK (...)");
                table.checks.insert(normalize(check));
            }
            "f" => {
                let on_delete = match on_delete.as_str() {
                    "a" => "NO ACTION",
                    "r" => "RESTRICT",
                    "c" => "CASCADE",
                    "n" => "SET NULL",
                    "d" => "SET DEFAULT",
                    other => panic!("on delete {other:?}"),
                };
                table.foreign_keys.insert(ForeignKey {
                    columns,
                    references,
                    referenced,
                    on_delete: on_delete.to_owned(),
                });
            }
            _ => {} // NOT NULL, read from the columns
        }
    }
}

/// Indexes other than those of primary keys and unique constraints.
async fn postgres_indexes(pool: &PgPool, name: &str, table: &mut Table) {
    let sql = format!(
        "SELECT i.relname::text, x.indisunique, pg_get_expr(x.indpred, x.indrelid), {} \
         FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid \
         WHERE x.indrelid = to_regclass($1) AND NOT EXISTS (SELECT 1 FROM pg_constraint c \
             WHERE c.conindid = x.indexrelid AND c.conrelid = x.indrelid)",
        column_names("x.indkey::int2[]", "x.indrelid"),
    );
    let indexes: Vec<(String, bool, Option<String>, Vec<String>)> =
        sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_all(pool)
            .await
            .unwrap();
    for (index, unique, predicate, columns) in indexes {
        let predicate = predicate.as_deref().map(normalize);
        table.indexes.insert(
            index,
            Index {
                unique,
                columns,
                predicate,
            },
        );
    }
}
