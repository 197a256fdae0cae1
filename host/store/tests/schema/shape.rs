//! A schema as both databases can describe it, and what may differ in
//! spelling between SQLite and Postgres without differing in meaning.

use std::collections::{BTreeMap, BTreeSet};

/// SQLite's declared column type beside the Postgres type that holds the
/// same values. Anything else is a difference.
pub const SAME_TYPE: &[(&str, &str)] = &[
    ("TEXT", "text"),
    ("INTEGER", "bigint"),
    ("BIGINT", "bigint"),
    // SQLite has no boolean: 0 and 1 in an INTEGER.
    ("INTEGER", "boolean"),
    ("REAL", "double precision"),
    ("BLOB", "bytea"),
];

/// SQLite's spelling of a predicate beside Postgres's, where they differ
/// only because SQLite has no boolean, or in the parentheses Postgres puts
/// around each side of an `and` (after [`normalize`]).
pub const SAME_PREDICATE: &[(&str, &str)] = &[
    ("held = 1", "held"),
    (
        "limited and status in ('enqueued', 'claimed', 'processing')",
        "limited and (status in ('enqueued', 'claimed', 'processing'))",
    ),
    (
        "debounced and status = 'new' and not held and not parked",
        "debounced and (status = 'new') and (not held) and (not parked)",
    ),
    (
        "key is not null and (paced or key_paced) and not parked and status in ('new', 'retriable_failure')",
        "(key is not null) and (paced or key_paced) and (not parked) and (status in ('new', 'retriable_failure'))",
    ),
];

/// A SQLite predicate as Postgres would spell it: [`normalize`]d, then
/// [`SAME_PREDICATE`] applied.
pub fn sqlite_predicate(expression: &str) -> String {
    let text = normalize(expression);
    SAME_PREDICATE
        .iter()
        .find(|(sqlite, _)| *sqlite == text)
        .map_or(text, |(_, postgres)| (*postgres).to_owned())
}

/// Foreign keys only SQLite has, by table and referenced table: Postgres
/// has no keys from a task's rows to the task, whose triggers would be most
/// of what deleting a task costs there; the store deletes those rows itself
/// with the task. Nor from a task to its lambda: an insert checks it once a
/// batch, under a lock a delete of the lambda waits for (the conformance
/// suite's `lambda_deletes`).
pub const SQLITE_ONLY_FOREIGN_KEYS: &[(&str, &str)] = &[
    ("tasks", "lambdas"),
    ("attempts", "tasks"),
    ("journal", "tasks"),
    ("signals", "tasks"),
    ("awaits", "tasks"),
];

/// Every table but sqlx's own bookkeeping, with the triggers, views and
/// rows the database holds.
#[derive(Debug, Default)]
pub struct Schema {
    pub tables: BTreeMap<String, Table>,
    /// Triggers by name, each with its table.
    pub triggers: BTreeMap<String, String>,
    pub views: BTreeSet<String>,
    /// Each table's rows, each rendered as one text, in order.
    pub rows: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Default)]
pub struct Table {
    pub columns: BTreeMap<String, Column>,
    /// The columns' names in the table's order.
    pub order: Vec<String>,
    pub primary_key: Vec<String>,
    /// Unique constraints (not unique indexes), by their columns.
    pub unique: BTreeSet<Vec<String>>,
    /// Check constraints, each [`normalize`]d.
    pub checks: BTreeSet<String>,
    pub foreign_keys: BTreeSet<ForeignKey>,
    /// Indexes created by name, by name.
    pub indexes: BTreeMap<String, Index>,
}

#[derive(Debug)]
pub struct Column {
    /// As the database names it: a declared type in SQLite, a
    /// `information_schema` data type in Postgres.
    pub ty: String,
    /// Primary key columns count as NOT NULL in both (SQLite would take a
    /// NULL in a TEXT primary key; the store never writes one).
    pub nullable: bool,
    /// The default's expression as the database spells it.
    pub default: Option<String>,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ForeignKey {
    pub columns: Vec<String>,
    pub references: String,
    pub referenced: Vec<String>,
    /// `NO ACTION`, `CASCADE`, ...
    pub on_delete: String,
}

#[derive(Debug, PartialEq, Eq)]
pub struct Index {
    pub unique: bool,
    pub columns: Vec<String>,
    /// The partial index's predicate, [`normalize`]d.
    pub predicate: Option<String>,
}

/// One spelling of an expression for both databases: Postgres's `x = ANY
/// (ARRAY['a'::text, ...])` as `x in ('a', ...)`, casts to text dropped,
/// whitespace collapsed, outer parentheses removed, lower case.
pub fn normalize(expression: &str) -> String {
    let mut text = expression
        .replace("::text", "")
        .replace("= ANY (ARRAY[", "IN (")
        .replace("])", ")")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase();
    while let Some(inner) = text.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
        if !balanced(inner) {
            break;
        }
        text = inner.trim().to_owned();
    }
    text
}

/// Whether no closing parenthesis in `text` comes before its opening one.
fn balanced(text: &str) -> bool {
    let mut depth = 0i32;
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' if depth == 0 => return false,
            ')' => depth -= 1,
            _ => {}
        }
    }
    depth == 0
}

/// The text inside the parentheses that open at `open` in `text`.
pub fn parenthesized(text: &str, open: usize) -> &str {
    let mut depth = 0;
    for (at, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..open + at];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced parentheses in {text:?}")
}

/// Every way the SQLite schema differs from the Postgres one, one line each.
pub fn differences(sqlite: &Schema, postgres: &Schema) -> Vec<String> {
    let mut found = Vec::new();
    for name in keys(&sqlite.tables, &postgres.tables) {
        match (sqlite.tables.get(name), postgres.tables.get(name)) {
            (Some(s), Some(p)) => table_differences(name, s, p, &mut found),
            (Some(_), None) => found.push(format!("table {name}: only in SQLite")),
            _ => found.push(format!("table {name}: only in Postgres")),
        }
    }
    for (what, s, p) in [
        (
            "triggers",
            format!("{:?}", sqlite.triggers),
            format!("{:?}", postgres.triggers),
        ),
        (
            "views",
            format!("{:?}", sqlite.views),
            format!("{:?}", postgres.views),
        ),
        (
            "rows",
            format!("{:?}", row_counts(sqlite)),
            format!("{:?}", row_counts(postgres)),
        ),
    ] {
        if s != p {
            found.push(format!("{what}: {s} against {p}"));
        }
    }
    found
}

/// How many rows each table holds: what two dialects can compare of them.
fn row_counts(schema: &Schema) -> BTreeMap<&String, usize> {
    schema
        .rows
        .iter()
        .map(|(t, rows)| (t, rows.len()))
        .collect()
}

/// A SQLite default as Postgres would spell it for a column of type
/// `postgres_type`: a flag's 0 or 1 (or FALSE, TRUE) is a boolean there.
fn sqlite_default(default: &str, postgres_type: &str) -> String {
    let text = normalize(default);
    match (postgres_type, text.as_str()) {
        ("boolean", "0" | "false") => "false".to_owned(),
        ("boolean", "1" | "true") => "true".to_owned(),
        _ => text,
    }
}

fn table_differences(name: &str, sqlite: &Table, postgres: &Table, found: &mut Vec<String>) {
    for column in keys(&sqlite.columns, &postgres.columns) {
        let (s, p) = match (sqlite.columns.get(column), postgres.columns.get(column)) {
            (Some(s), Some(p)) => (s, p),
            (Some(_), None) => {
                found.push(format!("{name}.{column}: only in SQLite"));
                continue;
            }
            _ => {
                found.push(format!("{name}.{column}: only in Postgres"));
                continue;
            }
        };
        if !SAME_TYPE.contains(&(s.ty.as_str(), p.ty.as_str())) {
            found.push(format!("{name}.{column}: {} against {}", s.ty, p.ty));
        }
        if s.nullable != p.nullable {
            found.push(format!(
                "{name}.{column}: nullable {} against {}",
                s.nullable, p.nullable
            ));
        }
        let sqlite_default = s.default.as_deref().map(|d| sqlite_default(d, &p.ty));
        let postgres_default = p.default.as_deref().map(normalize);
        if sqlite_default != postgres_default {
            found.push(format!(
                "{name}.{column}: default {sqlite_default:?} against {postgres_default:?}"
            ));
        }
    }
    if sqlite.order != postgres.order {
        found.push(format!(
            "{name}: columns in the order {:?} against {:?}",
            sqlite.order, postgres.order
        ));
    }
    let mut differ = |what: &str, s: String, p: String| {
        if s != p {
            found.push(format!("{name} {what}: {s} against {p}"));
        }
    };
    differ(
        "primary key",
        format!("{:?}", sqlite.primary_key),
        format!("{:?}", postgres.primary_key),
    );
    differ(
        "unique",
        format!("{:?}", sqlite.unique),
        format!("{:?}", postgres.unique),
    );
    let checks = |table: &Table| format!("{:?}", table.checks);
    differ("checks", checks(sqlite), checks(postgres));
    let shared: BTreeSet<&ForeignKey> = sqlite
        .foreign_keys
        .iter()
        .filter(|key| !SQLITE_ONLY_FOREIGN_KEYS.contains(&(name, key.references.as_str())))
        .collect();
    differ(
        "foreign keys",
        format!("{shared:?}"),
        format!(
            "{:?}",
            postgres.foreign_keys.iter().collect::<BTreeSet<_>>()
        ),
    );
    for index in keys(&sqlite.indexes, &postgres.indexes) {
        let (s, p) = (sqlite.indexes.get(index), postgres.indexes.get(index));
        differ(
            &format!("index {index}"),
            format!("{s:?}"),
            format!("{p:?}"),
        );
    }
}

/// The keys of two maps, each once, in order.
fn keys<'a, V>(a: &'a BTreeMap<String, V>, b: &'a BTreeMap<String, V>) -> BTreeSet<&'a String> {
    a.keys().chain(b.keys()).collect()
}

#[test]
fn postgres_spellings_normalize_to_sqlites() {
    assert_eq!(
        normalize("(status = ANY (ARRAY['new'::text, 'dead'::text]))"),
        normalize("status IN ('new', 'dead')")
    );
    assert_eq!(
        normalize("(next_trigger_at IS NOT NULL)"),
        normalize("next_trigger_at IS NOT NULL")
    );
    assert_eq!(normalize("(a) AND (b)"), "(a) and (b)");
}
